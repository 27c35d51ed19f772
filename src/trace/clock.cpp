#include "trace/clock.hpp"

#include <chrono>

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

Clock::Clock() : tsc_(invariant_tsc()) {
  origin_ns_ = steady_ns();
  origin_ = now();
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
    // The counter read between two clock reads: the pair's skew is half their distance at most.
    const std::int64_t a = steady_ns();
    t = now();
    const std::int64_t b = steady_ns();
    ns = a + (b - a) / 2;
  } while (ns - origin_ns_ < kMinSpan);
  ns_per_tick_ = static_cast<double>(ns - origin_ns_) / static_cast<double>(t - origin_);
}

}  // namespace weft::detail::trace
