// weft-bench-micro — the weft and oneTBB kernels (the OpenMP ones are in omp_kernels.hpp).
// Same benchmarks, same checks: see omp_kernels.hpp for what each one does.
#pragma once

#include <cstdint>
#include <string>

#include "common.hpp"

namespace wbench::weftk {
/// Options::num_threads = 1 (other options from the WEFT_* environment variables).
Result chain(int deps, long long n);
Result tree(int height, std::uint64_t cycles, int workers);
Result independent(long long n, int workers);
std::string describe();

/// The replay benchmark: a loop of `iters` iterations, each of `m` tasks that increment a counter.
///   chain: every task inout on one counter (one executing worker); wide: task j inout on its own counter
///   (independent tasks; each counter on its own cache line).
/// Modes: tasks = the loop spawns every iteration's tasks (no taskiter); taskiter = recorded once, replayed;
/// barrier = taskiter with weft::replay_barrier. Check: every counter reached its count.
enum class ReplayGraph { chain, wide };
enum class ReplayMode { tasks, taskiter, barrier };
Result replay(ReplayGraph g, ReplayMode mode, long long m, long long iters, int workers);
}  // namespace wbench::weftk

namespace wbench::tbbk {
/// A tbb::flow::graph of continue_nodes, one per task, each linked to the previous one by make_edge, run in a
/// task_arena of one thread. Built and run in blocks of `block` nodes (build block, try_put, wait_for_all,
/// destroy) so that memory stays bounded; node construction and destruction are inside the timed region.
Result chain(int deps, long long n, long long block);
/// tbb::task_group: each inner task runs two children and waits; task_arena of `workers` threads.
Result tree(int height, std::uint64_t cycles, int workers);
/// One task_group, n x run() from one producer, then wait(); task_arena of `workers` threads.
Result independent(long long n, int workers);
std::string describe();
}  // namespace wbench::tbbk
