// taskbench-weft: one weft dependency task per (graph, t, i). Task (t, i) reads (weft::in) the output buffers
// of its inputs at t-1 and writes (weft::out) its own buffer; each point rotates over several generations of
// buffers, so a write waits (write-after-read, as weft orders it) only for the readers of the output that many
// steps back, which have almost always finished. The graphs of -and are spawned interleaved by timestep, so they run
// concurrently. The producer (the root task) allocates nothing per task: the input list and the access array
// are reused, and each body (three pointers and two integers) fits the task descriptor.
#include <weft/weft.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/core.hpp"

namespace {

// Generations of output buffers per point. Throttling keeps at most max_tasks spawned tasks unfinished, so with
// enough generations that the tasks that many steps back have almost always finished, the write-after-read
// edges of a task are pruned at spawn (fewer edges: cheaper spawns and no edge-list allocation). The cost is
// about max_tasks output buffers in all (a few hundred KiB); at least 3 generations so that consecutive steps
// never share a buffer.
long generations(const taskbench::App& app, std::size_t max_tasks) {
  long width = 0;
  for (const auto& g : app.graphs) width += g.max_width;
  return std::max(3L, static_cast<long>(max_tasks) / width + 2);
}

// One runner per worker, a cache line apart (workers write their runner's vectors).
struct alignas(64) WorkerRunner {
  taskbench::TaskRunner runner;
  explicit WorkerRunner(std::size_t scratch) : runner(scratch) {}
};

}  // namespace

int main(int argc, char** argv) {
  taskbench::App app(argc, argv);
  app.system_name = "weft";

  weft::Options options;
  try {
    options = weft::Options::from_environment();  // WEFT_BIND, WEFT_MAX_TASKS, ...
    options.num_threads = static_cast<unsigned>(app.workers);
    options.validate();
  } catch (const weft::config_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  weft::Runtime rt(options);
  app.display();

  std::size_t scratch = 0;
  std::vector<taskbench::OutputBuffers> buffers;
  for (const auto& g : app.graphs) {
    buffers.emplace_back(g, generations(app, options.max_tasks));
    scratch = std::max(scratch, g.scratch_bytes);
  }
  std::vector<WorkerRunner> runners;
  runners.reserve(static_cast<std::size_t>(app.workers));
  for (int w = 0; w < app.workers; ++w) runners.emplace_back(scratch);

  std::vector<long> points;
  std::vector<weft::Access> accesses;
  const double t0 = taskbench::now_seconds();
  rt.run([&](weft::Context& cx) {
    for (long t = 0, steps = app.max_timesteps(); t < steps; ++t) {
      for (std::size_t k = 0; k < app.graphs.size(); ++k) {
        const taskbench::TaskGraph* g = &app.graphs[k];
        const taskbench::OutputBuffers* b = &buffers[k];
        const std::size_t bytes = g->output_bytes;
        const long o = g->offset_at_timestep(t), w = g->width_at_timestep(t);
        for (long i = o; i < o + w; ++i) {
          g->inputs_of(t, i, points);
          accesses.clear();
          for (long p : points) accesses.push_back(weft::in(b->get(t - 1, p), bytes));
          accesses.push_back(weft::out(b->get(t, i), bytes));
          WorkerRunner* r = runners.data();
          cx.spawn_accesses([g, b, r, t, i](weft::Context& c) { r[c.worker_id()].runner.run(*g, *b, t, i); },
                            accesses.data(), accesses.size());
        }
      }
    }
  });
  app.report_timing(taskbench::now_seconds() - t0);
  if (app.verbose > 0) {
    // The runtime's counters, after the summary so that scripts parsing the summary are not disturbed.
    const weft::Stats s = rt.stats();
    std::printf("weft: tasks %llu, stolen %llu, immediate successor %llu, edges %llu (pruned: %llu finished, "
                "%llu duplicate), throttle stalls %llu\n",
                static_cast<unsigned long long>(s.tasks_executed), static_cast<unsigned long long>(s.tasks_stolen),
                static_cast<unsigned long long>(s.immediate_successor),
                static_cast<unsigned long long>(s.edges_created),
                static_cast<unsigned long long>(s.edges_pruned_finished),
                static_cast<unsigned long long>(s.edges_pruned_duplicate),
                static_cast<unsigned long long>(s.throttle_stalls));
  }
  return 0;
}
