// Shared helpers for the weft test suite: size scaling, bounded spinning, options shortcuts.
#pragma once

#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace weft_test {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// Size multiplier: WEFT_TEST_SCALE (a positive number), default 1 (0.5 under sanitizers).
inline double scale() {
  static const double s = [] {
    if (const char* e = std::getenv("WEFT_TEST_SCALE")) {
      char* end = nullptr;
      double v = std::strtod(e, &end);
      if (end != e && v > 0) return v;
    }
    return kSanitized ? 0.5 : 1.0;
  }();
  return s;
}

/// n scaled by scale(), at least `at_least`.
inline std::size_t scaled(std::size_t n, std::size_t at_least = 1) {
  double v = static_cast<double>(n) * scale();
  std::size_t r = static_cast<std::size_t>(v);
  return r < at_least ? at_least : r;
}

/// Bound for anything that must happen (a rendezvous, a flag set by another worker): a hang detector, not a
/// timing check, so far above any scheduling delay of a loaded machine, and below the per-test watchdog and
/// ctest timeouts (tests/common/main.cpp, tests/CMakeLists.txt) so that the test's own message says which
/// wait hung.
inline constexpr std::chrono::seconds kLongWait{kSanitized ? 120 : 60};

/// Spins (yielding) until pred() holds or `timeout` elapses; returns the last value of pred().
template <class Pred>
bool spin_until(Pred&& pred, std::chrono::nanoseconds timeout = kLongWait) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::yield();
  }
  return true;
}

/// Busy work for about `us` microseconds (keeps a worker occupied without sleeping).
inline void busy_for_us(int us) {
  auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) std::this_thread::yield();
}

inline void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// Two-party (or n-party) rendezvous: each party arrives, then waits (bounded) for all parties.
/// Returns true iff all parties arrived in time, which is only possible if they ran concurrently.
struct Rendezvous {
  explicit Rendezvous(int parties) : n(parties) {}
  bool arrive_and_wait(std::chrono::nanoseconds timeout = kLongWait) {
    count.fetch_add(1);
    return spin_until([&] { return count.load() >= n; }, timeout);
  }
  int n;
  std::atomic<int> count{0};
};

/// The scheduler the tests run on: WEFT_SCHEDULER=lfq (tests/CMakeLists.txt registers some test executables a
/// second time with it: weft_also_on_lfq), else the default. A value other than lfq means the default here.
inline weft::Scheduler scheduler_under_test() {
  const char* e = std::getenv("WEFT_SCHEDULER");
  return e && std::string(e) == "lfq" ? weft::Scheduler::lfq : weft::Scheduler::llp;
}

inline weft::Options opts(unsigned threads, std::size_t max_tasks = weft::kDefaultMaxTasks,
                          bool immediate_successor = true) {
  weft::Options o;
  o.num_threads = threads;
  o.max_tasks = max_tasks;
  o.immediate_successor = immediate_successor;
  o.scheduler = scheduler_under_test();
  return o;
}

/// Atomic max.
template <class T>
void atomic_max(std::atomic<T>& a, T v) {
  T cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace weft_test

namespace weft_test {
/// Name generator for tests parameterised by a worker count: "w2".
struct WorkersName {
  template <class Info>
  std::string operator()(const Info& info) const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "w%u", static_cast<unsigned>(info.param));
    return buf;
  }
};
}  // namespace weft_test
