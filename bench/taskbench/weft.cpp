// taskbench-weft: one weft dependency task per (graph, t, i). Task (t, i) reads (weft::in) the output buffers
// of its inputs at t-1 and writes (weft::out) its own buffer; each point rotates over several generations of
// buffers, so a write waits (write-after-read, as weft orders it) only for the readers of the output that many
// steps back, which have almost always finished. The graphs of -and are spawned interleaved by timestep, so they run
// concurrently. The producer (the root task) allocates nothing per task: the input lists are looked up in a
// per-graph cache, the access array is reused, and each body (three pointers and two integers) fits the task
// descriptor.
#include <weft/weft.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/core.hpp"
#include "weft_runtime.hpp"

namespace {

// Generations of output buffers per point. Throttling keeps at most max_tasks spawned tasks unfinished, so with
// enough generations that the tasks that many steps back have almost always finished, the write-after-read
// edges of a task are pruned at spawn (fewer edges: cheaper spawns and no edge-list allocation). The cost is
// about max_tasks output buffers in all (a few hundred KiB); at least 3 generations so that consecutive steps
// never share a buffer. -field overrides it (weft orders a rewrite after the reads of the output it replaces,
// so any depth of 2 or more is correct).
long generations(const taskbench::App& app, std::size_t max_tasks) {
  long width = 0;
  for (const auto& g : app.graphs) width += g.max_width;
  return std::max(3L, static_cast<long>(max_tasks) / width + 2);
}

// The input points of every task of a graph whose previous timestep has all its points live (every timestep
// but the first few of dom and tree), per dependence set: looked up instead of walking the dependence formulas
// at each spawn. Built on first use; graphs whose lists would be large (all_to_all at large widths) are not
// cached and ask the graph at each spawn.
class InputCache {
 public:
  explicit InputCache(const taskbench::TaskGraph& g) : g_(&g), sets_(static_cast<std::size_t>(g.max_dependence_sets())) {
    // Size of the cache, estimated as timestep 1's input count times the number of sets.
    long per_set = 0;
    for (long i = 0; i < g.max_width && per_set <= kMaxPoints; ++i) per_set += g.num_inputs(1, i);
    enabled_ = per_set * g.max_dependence_sets() <= kMaxPoints;
  }
  struct Set {
    std::vector<long> points;
    std::vector<std::size_t> start;  // inputs of point i: points[start[i] .. start[i + 1])
  };
  /// The input lists of timestep t's tasks, or null when the cache cannot answer (then ask the graph).
  const Set* at_timestep(long t) {
    if (!enabled_ || t <= 0 || t >= g_->timesteps || g_->offset_at_timestep(t - 1) != 0 ||
        g_->width_at_timestep(t - 1) != g_->max_width)
      return nullptr;
    Set& s = sets_[static_cast<std::size_t>(g_->dependence_set_at_timestep(t))];
    if (s.start.empty()) build(s, t);
    return &s;
  }

 private:
  static constexpr long kMaxPoints = 1L << 22;
  // Timestep t (its previous timestep full) stands for every such timestep of its dependence set.
  void build(Set& s, long t) {
    std::vector<long> one;
    s.start.push_back(0);
    for (long i = 0; i < g_->max_width; ++i) {
      g_->inputs_of(t, i, one);
      s.points.insert(s.points.end(), one.begin(), one.end());
      s.start.push_back(s.points.size());
    }
  }
  const taskbench::TaskGraph* g_;
  std::vector<Set> sets_;
  bool enabled_ = false;
};

// One runner per worker, a cache line apart (workers write their runner's vectors).
struct alignas(64) WorkerRunner {
  taskbench::TaskRunner runner;
  explicit WorkerRunner(std::size_t scratch) : runner(scratch) {}
};

}  // namespace

int main(int argc, char** argv) {
  taskbench::App app(argc, argv);
  app.system_name = "weft";

  const weft::Options options = taskbench::weft_options(app);
  weft::Runtime rt = taskbench::make_runtime(options);
  app.display();

  std::size_t scratch = 0;
  std::vector<taskbench::OutputBuffers> buffers;
  for (const auto& g : app.graphs) {
    buffers.emplace_back(g, g.output_fields(generations(app, options.max_tasks)));
    scratch = std::max(scratch, g.scratch_bytes);
  }
  std::vector<WorkerRunner> runners;
  runners.reserve(static_cast<std::size_t>(app.workers));
  for (int w = 0; w < app.workers; ++w) runners.emplace_back(scratch);

  std::vector<InputCache> inputs;
  std::size_t max_accesses = 1;
  for (const auto& g : app.graphs) {
    inputs.emplace_back(g);
    for (long i = 0; i < g.max_width; ++i)
      max_accesses = std::max(max_accesses, static_cast<std::size_t>(g.num_inputs(1, i)) + 1);
  }
  std::vector<long> points;
  std::vector<weft::Access> accesses(max_accesses);
  taskbench::start_runtime(rt);
  const double t0 = taskbench::now_seconds();
  rt.run([&](weft::Context& cx) {
    WorkerRunner* const r = runners.data();
    for (long t = 0, steps = app.max_timesteps(); t < steps; ++t) {
      for (std::size_t k = 0; k < app.graphs.size(); ++k) {
        const taskbench::TaskGraph* g = &app.graphs[k];
        const taskbench::OutputBuffers* b = &buffers[k];
        const std::size_t bytes = g->output_bytes, stride = b->point_stride();
        const long o = g->offset_at_timestep(t), w = g->width_at_timestep(t);
        if (w == 0) continue;
        // Generation t-1 and t of point 0: every other point's buffer is a multiple of the stride away.
        const char* const prev = t > 0 ? b->get(t - 1, 0) : nullptr;
        char* const cur = b->get(t, 0);
        const InputCache::Set* cached = inputs[k].at_timestep(t);
        for (long i = o; i < o + w; ++i) {
          std::size_t n;
          const long* in;
          if (cached) {
            const std::size_t first = cached->start[static_cast<std::size_t>(i)];
            n = cached->start[static_cast<std::size_t>(i) + 1] - first;
            in = cached->points.data() + first;
          } else {
            g->inputs_of(t, i, points);
            n = points.size();
            in = points.data();
          }
          if (n + 1 > accesses.size()) accesses.resize(n + 1);  // a timestep with more inputs than t = 1
          weft::Access* a = accesses.data();
          for (std::size_t j = 0; j < n; ++j)
            a[j] = weft::in(prev + static_cast<std::size_t>(in[j]) * stride, bytes);
          a[n] = weft::out(cur + static_cast<std::size_t>(i) * stride, bytes);
          cx.spawn_accesses([g, b, r, t, i](weft::Context& c) { r[c.worker_id()].runner.run(*g, *b, t, i); }, a,
                            n + 1);
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
