// What the peer implementations (taskbench-omp-for-*, taskbench-omp-task-*, taskbench-tbb, taskbench-mpi) share
// beyond the core: output buffers and their depth, one TaskRunner per thread, and (OpenMP) the start of the
// thread pool with a check that the runtime really started the threads asked for. They differ only in how they
// schedule the tasks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/core.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace taskbench::peer {

/// The largest scratch buffer of the graphs (one buffer per thread serves every graph).
inline std::size_t max_scratch_bytes(const App& app) {
  std::size_t bytes = 0;
  for (const TaskGraph& g : app.graphs) bytes = std::max(bytes, g.scratch_bytes);
  return bytes;
}

/// Output generations of a graph whose buffer reuse is ordered by dependencies rather than by a barrier: the
/// graph's -field (the core refuses 1 where tasks have inputs), by default one per timestep, so that no write
/// waits for an older read.
inline long reuse_generations(const TaskGraph& graph) { return graph.output_fields(graph.timesteps); }

/// The output buffers of every graph of the run, `generations(graph)` deep.
template <class Generations>
std::vector<OutputBuffers> make_buffers(const App& app, Generations generations) {
  std::vector<OutputBuffers> buffers;
  buffers.reserve(app.graphs.size());
  for (const TaskGraph& g : app.graphs) buffers.emplace_back(g, generations(g));
  return buffers;
}

/// One TaskRunner per thread, each in its own allocation (no false sharing between threads).
class Runners {
 public:
  explicit Runners(const App& app) {
    const std::size_t scratch = max_scratch_bytes(app);
    for (int k = 0; k < app.workers; ++k) runners_.push_back(std::make_unique<Padded>(scratch));
  }
  TaskRunner& operator[](int thread) { return runners_[static_cast<std::size_t>(thread)]->runner; }

 private:
  struct alignas(64) Padded {
    explicit Padded(std::size_t scratch) : runner(scratch) {}
    TaskRunner runner;
  };
  std::vector<std::unique_ptr<Padded>> runners_;
};

/// Exits 1 when the runtime did not start the number of threads asked with -workers: a measurement on fewer
/// threads than asked would be silently wrong.
inline void require_threads(const char* system, int got, int wanted) {
  if (got != wanted) {
    std::fprintf(stderr, "error: %s: the runtime started %d threads, %d requested with -workers\n", system, got,
                 wanted);
    std::exit(1);
  }
}

#if defined(_OPENMP)
/// Sets the OpenMP thread count to -workers and starts the thread pool before the timer (the timed region
/// measures the run, not the runtime's start-up); exits 1 if the runtime gives fewer threads.
inline void start_openmp(const char* system, int workers) {
  omp_set_dynamic(0);
  omp_set_num_threads(workers);
  int started = 0;
#pragma omp parallel
  {
#pragma omp single
    started = omp_get_num_threads();
  }
  require_threads(system, started, workers);
}
#endif

}  // namespace taskbench::peer
