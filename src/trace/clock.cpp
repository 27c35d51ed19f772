#include "trace/clock.hpp"

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace weft::detail::trace {
namespace {

// Invariant TSC: constant rate across frequency changes and deep sleep (CPUID 0x80000007, EDX bit 8).
bool invariant_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  return (d >> 8) & 1u;
#else
  return false;
#endif
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The counter read between two clock reads, so that the pair's skew is at most half their distance; a thread
// preempted between the reads would skew it by the whole preemption, so the pair of the closest reads out of a
// few tries is kept.
void Clock::pair(Ticks& t, std::int64_t& ns) const {
  std::int64_t best_gap = INT64_MAX;
  for (int i = 0; i < 16; ++i) {
    const std::int64_t a = steady_ns();
    const Ticks ti = now();
    const std::int64_t b = steady_ns();
    if (b - a < best_gap) {
      best_gap = b - a;
      t = ti;
      ns = a + (b - a) / 2;
    }
  }
}

Clock::Clock() : tsc_(invariant_tsc()) { pair(origin_, origin_ns_); }

std::int64_t Clock::origin_unix_ns() const {
  // As in pair(): the system clock read between two steady reads, the closest pair of a few tries.
  std::int64_t best_gap = INT64_MAX, offset = 0;
  for (int i = 0; i < 16; ++i) {
    const std::int64_t a = steady_ns();
    const std::int64_t sys =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    const std::int64_t b = steady_ns();
    if (b - a < best_gap) {
      best_gap = b - a;
      offset = sys - (a + (b - a) / 2);
    }
  }
  return origin_ns_ + offset;
}

void Clock::calibrate() {
  if (!tsc_) {  // monotonic nanoseconds already
    ns_per_tick_ = 1.0;
    return;
  }
  constexpr std::int64_t kMinSpan = 2'000'000;
  std::int64_t ns;
  Ticks t;
  do {
    pair(t, ns);
  } while (ns - origin_ns_ < kMinSpan);
  ns_per_tick_ = static_cast<double>(ns - origin_ns_) / static_cast<double>(t - origin_);
}

}  // namespace weft::detail::trace
