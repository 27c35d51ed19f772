// The profiler's clock: the time-stamp counter where it is invariant (x86-64: a few nanoseconds per read,
// no system call), else CLOCK_MONOTONIC. Ticks are converted to nanoseconds by a calibration against
// std::chrono::steady_clock taken over the whole life of the recorder, so it needs no start-up delay.
// Read only when profiling is on.
#pragma once

#include <time.h>

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace weft::detail::trace {

using Ticks = std::uint64_t;

class Clock {
 public:
  Clock();
  Ticks now() const {
#if defined(__x86_64__)
    if (tsc_) return __rdtsc();
#endif
    return monotonic_ns();
  }
  static Ticks monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<Ticks>(ts.tv_sec) * 1000000000u + static_cast<Ticks>(ts.tv_nsec);
  }
  /// Refreshes the ticks-to-nanoseconds ratio (spins until at least 2 ms have passed since construction,
  /// so the ratio is accurate to about 1e-5 even for a very short first run).
  void calibrate();
  /// Nanoseconds from the recorder's origin to tick `t` (valid after calibrate()).
  double to_ns(Ticks t) const { return (static_cast<double>(t) - static_cast<double>(origin_)) * ns_per_tick_; }
  double seconds(Ticks d) const { return static_cast<double>(d) * ns_per_tick_ * 1e-9; }
  bool uses_tsc() const { return tsc_; }
  /// The origin as wall-clock time (nanoseconds since the Unix epoch): what lines up the traces of several
  /// processes (exactly on one host up to the reads' skew; across hosts as well as their clocks agree).
  std::int64_t origin_unix_ns() const;

 private:
  /// A (ticks, steady_clock nanoseconds) pair taken at one instant (see clock.cpp).
  void pair(Ticks& t, std::int64_t& ns) const;

  bool tsc_;
  Ticks origin_;
  std::int64_t origin_ns_;
  double ns_per_tick_ = 1.0;
};

}  // namespace weft::detail::trace
