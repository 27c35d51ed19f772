// weft-bench-micro — the OpenMP peer's kernels. omp_kernels.cpp is compiled twice: by the project compiler
// (GCC, -fopenmp: libgomp) into the driver, and by clang++-16 (-fopenmp=libomp: LLVM OpenMP) into the
// separate executable weft-bench-micro-libomp, which the driver runs as a subprocess (omp_server.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "common.hpp"

namespace wbench::omp {

/// How the chain's single executing thread is set up.
enum class ChainMode : int {
  one_thread = 1,   ///< parallel num_threads(1) + single: the runtime may run tasks undeferred
  two_threads = 2,  ///< parallel num_threads(2); thread 0 produces and executes, thread 1 is held asleep
};

/// N tasks, each `inout` on the same `deps` addresses (1..6), so each is ordered after the previous one.
Result chain(int deps, long long n, ChainMode mode);
/// Binary tree of the given height (2^height leaves, 2^(height+1)-1 tasks), each inner task spawns two
/// children and waits for them; every task first busy-waits `cycles` TSC ticks. `workers` threads.
Result tree(int height, std::uint64_t cycles, int workers);
/// n independent tasks spawned by one producer, `workers` threads.
Result independent(long long n, int workers);
/// As independent, task i with priority(task_priority(i, levels)) (warns if OMP_MAX_TASK_PRIORITY is lower).
Result priority(long long n, int levels, int workers);

/// A parallel region of `workers` threads that all reach a barrier: the team's threads are awake (and spin, for
/// the runtime's spin time) when the timed region that follows starts.
void wake(int workers);

/// "<compiler> <version>, OpenMP <_OPENMP>".
std::string describe();

}  // namespace wbench::omp
