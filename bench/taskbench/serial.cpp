// taskbench-serial: every task on the calling thread in timestep order, no runtime. The ideal on one core: the
// only per-task cost is the core's own (input gathering and validation).
#include <algorithm>
#include <vector>

#include "core/core.hpp"

int main(int argc, char** argv) {
  taskbench::App app(argc, argv);
  app.require_single_worker("taskbench-serial");
  app.system_name = "serial";
  app.display();

  std::size_t scratch = 0;
  std::vector<taskbench::OutputBuffers> buffers;
  for (const auto& g : app.graphs) {
    // Timestep t-1 is complete before t starts: two generations suffice unless -field asks otherwise.
    buffers.emplace_back(g, g.output_fields(2));
    scratch = std::max(scratch, g.scratch_bytes);
  }
  taskbench::TaskRunner runner(scratch);

  const double t0 = taskbench::now_seconds();
  // Graphs interleaved by timestep, as the parallel implementations spawn them.
  for (long t = 0, steps = app.max_timesteps(); t < steps; ++t) {
    for (std::size_t k = 0; k < app.graphs.size(); ++k) {
      const taskbench::TaskGraph& g = app.graphs[k];
      const long o = g.offset_at_timestep(t), w = g.width_at_timestep(t);
      for (long i = o; i < o + w; ++i) runner.run(g, buffers[k], t, i);
    }
  }
  app.report_timing(taskbench::now_seconds() - t0);
  return 0;
}
