// weft-bench-micro — the weft and oneTBB kernels (the OpenMP ones are in omp_kernels.hpp).
// Same benchmarks, same checks: see omp_kernels.hpp for what each one does.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common.hpp"

namespace weft {
class Runtime;
}

namespace wbench::weftk {
/// The weft runtime with `workers` workers (other options from the WEFT_* environment variables), created on
/// first use (outside the timed regions) and kept: its threads sleep between runs.
weft::Runtime& runtime(int workers);
/// on: runtime() gives runtimes with Options::scheduler = lfq (kept beside the others) until set_lfq(false).
void set_lfq(bool on);
/// The slots of each worker's buffer in an lfq runtime: "4 x workers" (the default) or WEFT_LFQ_BUFFER's.
std::string lfq_buffer_description();
/// Options::num_threads = 1 (other options from the WEFT_* environment variables).
Result chain(int deps, long long n);
Result tree(int height, std::uint64_t cycles, int workers);
Result independent(long long n, int workers);
/// As independent, task i with weft::priority(task_priority(i, levels)).
Result priority(long long n, int levels, int workers);
std::string describe();
/// Wakes runtime(workers)'s workers (one task per worker, each waiting until all have started), so that the
/// timed run that follows does not include a sleeping worker's wake-up. Also serves the flow graphs, which run
/// on runtime(workers).
void wake(int workers);

/// Ping-pong between 2 workers: hop i spawns hop i + 1 and spins until it has started, so every hop crosses
/// workers (a steal). `gap_us`: busy time before each spawn (long enough for the other worker to fall asleep).
/// Returns the median ns from a hop's spawn to its start.
double pingpong(long long hops, int gap_us);
/// Context switches per second {voluntary, involuntary} of an idle worker (worker 1 of 2) while worker 0 runs
/// a busy root body for `seconds`; {-1, -1} if worker 1's thread id could not be found.
std::pair<double, double> idle_switches(double seconds);
/// Voluntary and involuntary context switches per second of worker 0 while it waits (taskwait) for a child that
/// worker 1 runs for `seconds`.
std::pair<double, double> waiting_switches(double seconds);

/// The replay benchmark: a loop of `iters` iterations, each of `m` tasks that increment a counter.
///   chain: every task inout on one counter (one executing worker); wide: task j inout on its own counter
///   (independent tasks; each counter on its own cache line).
/// Modes: tasks = the loop spawns every iteration's tasks (no taskiter); taskiter = recorded once, replayed;
/// barrier = taskiter with weft::replay_barrier. Check: every counter reached its count.
enum class ReplayGraph { chain, wide };
enum class ReplayMode { tasks, taskiter, barrier };
Result replay(ReplayGraph g, ReplayMode mode, long long m, long long iters, int workers);
}  // namespace wbench::weftk

namespace wbench::flowk {
/// weft flow graph: chain of n tasks, each receiving `flows` ints (0: a control edge) from its predecessor,
/// sent as lvalues (`copy`) or rvalues; one worker.
Result chain(int flows, long long n, bool copy);
/// weft flow graph: binary tree, key k sends to 2k and 2k + 1; every task busy-waits `cycles` TSC ticks.
Result tree(int height, std::uint64_t cycles, int workers);
}  // namespace wbench::flowk

namespace wbench::tbbk {
/// A tbb::flow::graph of continue_nodes, one per task, each linked to the previous one by make_edge, run in a
/// task_arena of one thread. Built and run in blocks of `block` nodes (build block, try_put, wait_for_all,
/// destroy) so that memory stays bounded; node construction and destruction are inside the timed region.
Result chain(int deps, long long n, long long block);
/// tbb::task_group: each inner task runs two children and waits; task_arena of `workers` threads.
Result tree(int height, std::uint64_t cycles, int workers);
/// One task_group, n x run() from one producer, then wait(); task_arena of `workers` threads.
Result independent(long long n, int workers);
/// Wakes the task_arena of `workers` threads: one task per thread, each waiting until all have started.
void wake(int workers);
std::string describe();
}  // namespace wbench::tbbk
