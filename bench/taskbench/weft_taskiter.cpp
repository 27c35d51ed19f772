// taskbench-weft-taskiter: Task Bench on a weft taskiter. A Task Bench graph repeats itself in the timestep:
// away from its edges, task (t, i) has the accesses of task (t + P, i) whenever P is a multiple of the graph's
// dependence-set period (the sets cycle with it) and of the number of output-buffer generations (task (t, i)
// writes generation t mod G of point i and reads generation t-1 of its inputs). So one period of P timesteps
// is recorded once, as weft tasks with in/out accesses on the rotating buffers, and the taskiter replays it for
// every later period: no task creation and no dependency registration per task, and no barrier between
// timesteps. A recorded task learns its timestep from weft::taskiter_iteration.
//
// The timesteps that do not repeat run as plain weft dependency tasks (spawned as taskbench-weft does): t = 0
// (no inputs), and for dom and tree those whose width or offset, or those of the step before, differ from the
// full width at offset 0 (dom's ramp up and down, tree's growth). With -and, every graph's tasks go in the same
// taskiter body, so the graphs run concurrently; the loop covers the timesteps that repeat in every graph at
// once (the intersection of their ranges) and the rest are plain tasks. The simplest order that is correct:
// the plain tasks before the loop, a taskwait, the loop, a taskwait, the plain tasks after it (a graph's steps
// before and after the loop are few: dom's 2 x width, tree's log2(width), one for the others; only graphs of
// different lengths leave more). A final partial period needs nothing special: taskiter's iteration count need
// not be a multiple of the unroll.
#include <weft/weft.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <vector>

#include "core/core.hpp"
#include "weft_runtime.hpp"

namespace {

// One runner per worker, a cache line apart (workers write their runner's vectors).
struct alignas(64) WorkerRunner {
  taskbench::TaskRunner runner;
  explicit WorkerRunner(std::size_t scratch) : runner(scratch) {}
};

// Timesteps [first, end).
struct StepRange {
  long first, end;
};

// The timesteps of `g` whose tasks have the same inputs as every other timestep of the same dependence set:
// t >= 1 with both t and t-1 at full width and offset 0 (dom: [W, S-W], tree: [ceil(log2 W) + 1, S-1],
// the others [1, S-1]). Empty (first == end) if there is none.
StepRange repeating_steps(const taskbench::TaskGraph& g) {
  auto full = [&](long t) { return g.width_at_timestep(t) == g.max_width && g.offset_at_timestep(t) == 0; };
  long first = 1;
  while (first < g.timesteps && !(full(first) && full(first - 1))) ++first;
  long end = first;
  while (end < g.timesteps && full(end)) ++end;
  return {first, end};
}

// The loop's shape: the timesteps it covers, its period (the unroll: timesteps recorded) and the buffer
// generations of the graphs not given -field (those keep theirs, a divisor of the period too).
struct LoopPlan {
  StepRange steps{0, 0};
  long period = 1;
  long generations = 2;
};

LoopPlan plan_loop(const taskbench::App& app) {
  LoopPlan plan;
  plan.steps = {0, app.max_timesteps()};
  for (const auto& g : app.graphs) {
    const StepRange r = repeating_steps(g);
    plan.steps.first = std::max(plan.steps.first, r.first);
    plan.steps.end = std::min(plan.steps.end, r.end);
  }
  const long n = std::max(0L, plan.steps.end - plan.steps.first);
  plan.steps.end = plan.steps.first + n;
  // Period: the lcm of the graphs' dependence-set periods, and even when that is 1 (two buffer generations
  // alternate). Capped at the loop's length: a period that long never wraps around (every timestep is a
  // recorded copy), and the cap keeps the lcm from overflowing.
  // A graph given -field keeps that many generations, so its count is in the lcm too.
  long p = 1;
  for (const auto& g : app.graphs) {
    for (const long k : {g.timestep_period(), g.output_fields(1)}) {
      if (p / std::gcd(p, k) > n / k) {
        p = n;
        break;
      }
      p = std::lcm(p, k);
    }
    if (p == n) break;
  }
  plan.period = std::min(p == 1 ? 2 : p, n);
  // Generations: at least two, so that a step never overwrites what the next one reads, and a divisor of the
  // period, so that the recorded addresses repeat with it: the smallest such. Two generations let a task run
  // only once the readers of its buffer two steps back are done; for the symmetric patterns (stencil, fft,
  // all_to_all, ...) those readers are its own inputs' producers, so this costs no concurrency, and more
  // generations would only lengthen the recorded period.
  plan.generations = 2;
  if (plan.period < n) {
    plan.generations = plan.period;
    for (long d = 2; d * d <= plan.period; ++d)
      if (plan.period % d == 0) {
        plan.generations = d;
        break;
      }
  }
  return plan;
}

// Spawns the tasks of timestep t of every graph (interleaved, as the other implementations run them): each
// reads (weft::in) the buffers of its inputs at t-1 and writes (weft::out) its own at t. make_body(g, b, t, i)
// gives the task's body. Reuses `points` and `accesses`, so it allocates nothing once warm.
template <class MakeBody>
void spawn_timestep(weft::Context& cx, const taskbench::App& app, const std::vector<taskbench::OutputBuffers>& buffers,
                    long t, std::vector<long>& points, std::vector<weft::Access>& accesses, MakeBody&& make_body) {
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
      cx.spawn_accesses(make_body(g, b, t, i), accesses.data(), accesses.size());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  taskbench::App app(argc, argv);
  app.system_name = "weft-taskiter";

  const weft::Options options = taskbench::weft_options(app);
  const LoopPlan plan = plan_loop(app);
  // The recording holds one period's tasks (descriptors and edges) at once, where plain tasks are throttled:
  // refuse a period too large to hold rather than exhaust memory.
  constexpr long kMaxRecorded = 1L << 22;
  long width = 0;
  for (const auto& g : app.graphs) width += g.max_width;
  if (plan.period > kMaxRecorded / width) {
    std::fprintf(stderr,
                 "error: taskbench-weft-taskiter: one period of the graphs (%ld timesteps of %ld points) is more "
                 "than the %ld tasks it can record; use fewer points, or dependence-set periods and -field values "
                 "with a smaller least common multiple\n",
                 plan.period, width, kMaxRecorded);
    return 2;
  }
  weft::Runtime rt = taskbench::make_runtime(options);
  app.display();

  std::size_t scratch = 0;
  std::vector<taskbench::OutputBuffers> buffers;
  for (const auto& g : app.graphs) {
    buffers.emplace_back(g, g.output_fields(plan.generations));
    scratch = std::max(scratch, g.scratch_bytes);
  }
  std::vector<WorkerRunner> runners;
  runners.reserve(static_cast<std::size_t>(app.workers));
  for (int w = 0; w < app.workers; ++w) runners.emplace_back(scratch);
  WorkerRunner* const r = runners.data();

  // Bodies: a plain task knows its timestep; a recorded one computes it from the iteration it replays.
  auto plain = [r](const taskbench::TaskGraph* g, const taskbench::OutputBuffers* b, long t, long i) {
    return [g, b, r, t, i](weft::Context& c) { r[c.worker_id()].runner.run(*g, *b, t, i); };
  };
  const long first = plan.steps.first;
  auto recorded = [r, first](const taskbench::TaskGraph* g, const taskbench::OutputBuffers* b, long, long i) {
    return [g, b, r, first, i](weft::Context& c) {
      r[c.worker_id()].runner.run(*g, *b, first + static_cast<long>(weft::taskiter_iteration(c)), i);
    };
  };

  std::vector<long> points;
  std::vector<weft::Access> accesses;
  taskbench::start_runtime(rt);
  const double t0 = taskbench::now_seconds();
  rt.run([&](weft::Context& cx) {
    const long n = plan.steps.end - first;
    for (long t = 0; t < first; ++t) spawn_timestep(cx, app, buffers, t, points, accesses, plain);
    if (n > 0) {
      cx.taskwait();
      // Copy c of the period records timestep first + c; the taskiter replays copy c at first + c + P, ...
      cx.taskiter(
          static_cast<std::uint64_t>(n),
          [&](weft::Context& it, std::uint64_t c) {
            spawn_timestep(it, app, buffers, first + static_cast<long>(c), points, accesses, recorded);
          },
          weft::unroll(static_cast<std::uint32_t>(plan.period)));
      cx.taskwait();
    }
    for (long t = plan.steps.end, steps = app.max_timesteps(); t < steps; ++t)
      spawn_timestep(cx, app, buffers, t, points, accesses, plain);
  });
  app.report_timing(taskbench::now_seconds() - t0);
  if (app.verbose > 0) {
    // After the summary so that scripts parsing the summary are not disturbed.
    if (plan.steps.end > first)
      std::printf("weft-taskiter: timesteps %ld..%ld replayed with a period of %ld (%ld buffer generations "
                  "unless -field)\n",
                  first, plan.steps.end - 1, plan.period, plan.generations);
    else
      std::printf("weft-taskiter: no timestep repeats in every graph: plain tasks only\n");
    const weft::Stats s = rt.stats();
    std::printf("weft: tasks created %llu, executed %llu, stolen %llu, immediate successor %llu, edges %llu\n",
                static_cast<unsigned long long>(s.tasks_created), static_cast<unsigned long long>(s.tasks_executed),
                static_cast<unsigned long long>(s.tasks_stolen), static_cast<unsigned long long>(s.immediate_successor),
                static_cast<unsigned long long>(s.edges_created));
  }
  return 0;
}
