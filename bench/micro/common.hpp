// weft-bench-micro — pieces shared by the driver, the weft/TBB kernels and the OpenMP kernels.
//
// This header is compiled by the project compiler (driver, weft and TBB kernels, GCC OpenMP kernels) and by
// clang++-16 (the LLVM OpenMP peer, a separate executable), so it uses only the standard library.
#pragma once

#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <thread>
#include <vector>

namespace wbench {

/// One timed run of one kernel.
struct Result {
  double seconds = 0;  ///< wall time of the timed region
  bool ok = false;     ///< the kernel's own result check passed
  long long got = 0;   ///< the checked value (for the error message)
  long long want = 0;  ///< what it should have been
};

/// A kernel's result: its time and whether `got` (what it computed) equals `want`.
inline Result checked(double seconds, long long got, long long want) { return {seconds, got == want, got, want}; }

/// The counters the chain tasks update: one per address, each on its own cache line.
struct alignas(64) Slot {
  long long v;
};

/// The chain's check: each of the first `deps` slots counted every one of the n tasks.
inline Result chain_result(double seconds, const Slot* slots, int deps, long long n) {
  for (int j = 0; j < deps; ++j)
    if (slots[j].v != n) return checked(seconds, slots[j].v, n);
  return checked(seconds, n, n);
}

/// The independent benchmark's check: every task set its byte.
inline Result independent_result(double seconds, const std::vector<unsigned char>& done) {
  long long got = 0;
  for (unsigned char c : done) got += c;
  return checked(seconds, got, static_cast<long long>(done.size()));
}
inline constexpr int kMaxDeps = 6;

/// The priority benchmark's priority of task i: 1 + a hash of i mod `levels` (the same for every system).
inline int task_priority(long long i, int levels) {
  std::uint64_t x = static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return 1 + static_cast<int>(x % static_cast<std::uint64_t>(levels));
}

/// Busy-waits `cycles` TSC ticks (the tree leaves' work).
inline void busy_cycles(std::uint64_t cycles) {
  if (cycles == 0) return;
  const std::uint64_t t0 = __rdtsc();
  while (__rdtsc() - t0 < cycles) {
  }
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// One of `n` tasks that wake a system's workers before a timed run (each system's wake()): counts itself in
/// `arrived`, then spins until all n have (so that each ran on its own worker) or 1 s has passed (a system that
/// runs them one after the other must not hang the benchmark).
inline void rendezvous(std::atomic<int>& arrived, int n) {
  arrived.fetch_add(1);
  const double give_up = now_s() + 1.0;
  while (arrived.load() < n && now_s() < give_up) std::this_thread::yield();
}

/// Waits until the threads of this process stop using the CPU (idle runtime threads of OpenMP/TBB/weft spin
/// for a while after a parallel region: libomp for KMP_BLOCKTIME = 200 ms by default, libgomp for
/// GOMP_SPINCOUNT, TBB briefly), so that one system's spinning workers do not slow down the next system's run.
/// Idle = less than 10% of one core used during a 10 ms window. Returns false if the process was still busy
/// after `max_s`.
inline bool quiesce(double max_s = 2.0) {
  const double start = now_s();
  double cpu = process_cpu_s();
  while (now_s() - start < max_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double c = process_cpu_s();
    if (c - cpu < 0.001) return true;
    cpu = c;
  }
  return false;
}

}  // namespace wbench
