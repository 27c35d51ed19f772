// taskbench-omp-for-gcc / taskbench-omp-for-clang: Task Bench on OpenMP worksharing loops.
//
// One parallel region for the whole run (no fork/join per timestep); per timestep one `omp for` over the live
// points of every graph (all -and graphs share the loop, so their tasks balance together), whose implicit
// barrier is the only synchronisation. Outputs alternate between two generations (or -field): timestep t reads
// generation (t-1) mod 2, complete since the barrier closing t-1, and overwrites generation t mod 2, whose
// readers (timestep t-1) also finished at that barrier. Threads: -workers (omp_set_num_threads); thread binding
// follows the standard OMP_PROC_BIND / OMP_PLACES settings.
#include <omp.h>

#include <vector>

#include "core/core.hpp"
#include "peer_common.hpp"

namespace {

#if defined(__clang__)
constexpr const char* kSystem = "omp-for-clang";
#else
constexpr const char* kSystem = "omp-for-gcc";
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace taskbench;
  App app(argc, argv);
  app.system_name = kSystem;
  app.display();

  const int workers = app.workers;
  const std::vector<OutputBuffers> buffers =
      peer::make_buffers(app, [](const TaskGraph& g) { return g.output_fields(2); });
  peer::Runners runners(app);
  const long steps = app.max_timesteps();
  const std::size_t n_graphs = app.graphs.size();

  peer::start_openmp(kSystem, workers);

  const double t0 = now_seconds();
#pragma omp parallel
  {
    TaskRunner& me = runners[omp_get_thread_num()];
    // first[g] .. first[g+1]-1: the flattened indices of graph g's live points at timestep t. Each thread
    // computes its own copy (a few additions) rather than share one, which would cost a second barrier.
    std::vector<long> first(n_graphs + 1, 0);
    for (long t = 0; t < steps; ++t) {
      for (std::size_t g = 0; g < n_graphs; ++g) first[g + 1] = first[g] + app.graphs[g].width_at_timestep(t);
      const long total = first[n_graphs];
#pragma omp for schedule(static)
      for (long k = 0; k < total; ++k) {
        std::size_t g = 0;
        while (k >= first[g + 1]) ++g;
        const TaskGraph& graph = app.graphs[g];
        me.run(graph, buffers[g], t, graph.offset_at_timestep(t) + (k - first[g]));
      }
      // (implicit barrier: timestep t is complete before any thread starts t+1)
    }
  }
  const double elapsed = now_seconds() - t0;
  app.report_timing(elapsed);
  return 0;
}
