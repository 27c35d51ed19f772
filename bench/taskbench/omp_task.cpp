// taskbench-omp-task-gcc / taskbench-omp-task-clang: Task Bench on OpenMP tasks with `depend`.
//
// One parallel region; one thread (`single`) creates one task per (graph, t, point), timestep by timestep with
// the -and graphs interleaved, and the others run tasks from the start. A task names each output slot it reads
// with depend(in: ...) (the list has a different length for every pattern and timestep: an OpenMP 5
// `iterator` modifier, supported by GCC 12 and clang 16) and its own output slot with depend(out: ...). Output
// slots rotate over the graph's -field generations (default: one per timestep): the runtime orders a write to a slot after
// the reads of the output it held before (write-after-read), so no barrier is needed anywhere.
#include <omp.h>

#include <vector>

#include "core/core.hpp"
#include "peer_common.hpp"

namespace {

#if defined(__clang__)
constexpr const char* kSystem = "omp-task-clang";
#else
constexpr const char* kSystem = "omp-task-gcc";
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace taskbench;
  App app(argc, argv);
  app.system_name = kSystem;
  app.display();

  const int workers = app.workers;
  const std::vector<OutputBuffers> buffers = peer::make_buffers(app, peer::reuse_generations);
  peer::Runners runners(app);
  const long steps = app.max_timesteps();

  peer::start_openmp(kSystem, workers);

  const double t0 = now_seconds();
#pragma omp parallel
#pragma omp single
  {
    std::vector<long> points;
    std::vector<char*> slots;
    for (long t = 0; t < steps; ++t) {
      for (std::size_t g = 0; g < app.graphs.size(); ++g) {
        const TaskGraph* graph = &app.graphs[g];
        const OutputBuffers* outputs = &buffers[g];
        const long offset = graph->offset_at_timestep(t), width = graph->width_at_timestep(t);
        for (long i = offset; i < offset + width; ++i) {
          graph->inputs_of(t, i, points);
          slots.resize(points.size());
          for (std::size_t k = 0; k < points.size(); ++k) slots[k] = outputs->get(t - 1, points[k]);
          const int n_in = static_cast<int>(slots.size());
          // The depend lists are evaluated here, at creation; the body looks its inputs up again itself.
#pragma omp task firstprivate(graph, outputs, t, i) depend(iterator(int k = 0 : n_in), in : slots.data()[k][0]) \
    depend(out : outputs->get(t, i)[0])
          runners[omp_get_thread_num()].run(*graph, *outputs, t, i);
        }
      }
    }
  }  // the implicit barrier of single and parallel waits for every task
  const double elapsed = now_seconds() - t0;
  app.report_timing(elapsed);
  return 0;
}
