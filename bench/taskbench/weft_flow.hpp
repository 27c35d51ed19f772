// taskbench-weft-flow: Task Bench on weft's flow graphs (weft/flow.hpp): the graph and its run, shared by
// weft_flow.cpp (main, one process) and weft_flow_ranks.cpp (several processes). Every task (graph, t, i) is the task
// of key (t, graph, i) of one of two template tasks that share one body:
//   * `point`: tasks with two or more inputs. Its input is an aggregator whose per-key count is the number of live
//     inputs of (t, i); the values arrive in any order, each naming its producer, and the body puts them in
//     inputs_of order by producer before validating them.
//   * `point1`: tasks with one input, or none. A single plain input, so a value sent to it makes a ready task at
//     once, without the pending-task table (no_comm, tree, and the edges of dom). A task without inputs gets an
//     empty start token instead: from invoke() at t = 0 (and wherever its point was not live at t - 1), else
//     from the task of the same point at t - 1 (trivial; nearest with radix 0). That orders such tasks of one
//     point by timestep, as the reference implementations that loop over timesteps do, and keeps the tasks in
//     flight bounded without a generator.
// Outputs of up to 16 bytes (the default -output) are a Packet<16>: 24 bytes, copied to each consumer (send), so
// a task allocates nothing for its output and no consumer touches a reference count that another worker writes
// (on 2 workers, stencil_1d at 0.55 us tasks runs 11% faster than with one shared copy). Larger outputs are
// an Output, sent once to all the consumers of one template task (broadcast: one shared read-only copy, freed by
// the last reader). The graphs of -and are seeded together and run concurrently.
//
// Several processes (mpirun -np N, weft built with MPI): each rank owns a contiguous block of the points of every
// graph, as in Task Bench's MPI implementations (the keymap of both template tasks names the block's rank), seeds
// the tasks it owns, and validates the inputs of the tasks it runs; a value for a task of another rank travels
// there as one message (weft/flow.hpp). Values crossing ranks must be trivially copyable for now, so there the
// output is a Packet<N> (N bytes inline, the smallest of 16, 64, 512 and 4096 that holds -output) instead of an
// Output, sent to each consumer separately. The timer runs from a barrier before the graph starts to a barrier
// after it has terminated on every rank; rank 0 gathers the exactly-once marks, checks them and prints the
// report; a rank whose check fails ends the job (MPI_Abort) with a rank-tagged message. With one process (no
// launcher, or -np 1) none of this applies: MPI is not even initialised, and the program is exactly the
// single-process one.
#pragma once

#include <weft/flow.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/core.hpp"
#include "launcher.hpp"  // mpi::owner_of
#include "weft_runtime.hpp"
#ifdef TASKBENCH_WEFT_FLOW_MPI
#include <mpi.h>

#include "mpi_common.hpp"
#endif

namespace taskbench::weft_flow {

/// The processes of the run: this one's rank and their number (1: a single process).
struct Job {
  int rank = 0, ranks = 1;
  bool several() const { return ranks > 1; }
};

/// A wrong output, on purpose (the tests' check that a rank catches a bad input from another rank): task
/// (t, point) of graph `graph` sends (t, point + 1) as the first record of its output. Only on several
/// processes (set by TASKBENCH_WEFT_FLOW_FAULT=graph:t:point).
struct Fault {
  long graph = -1, t = -1, point = -1;
  bool hits(long g, long step, long p) const { return step == t && p == point && g == graph; }
};

/// The largest -output on several processes (see Packet).
inline constexpr std::size_t kMaxPacket = 4096;

/// run() on several processes, with the smallest Packet that holds the largest -output (weft_flow_ranks.cpp).
int run_on_ranks(taskbench::App& app, const Job& job, const Fault& fault);
/// run() on one process when no graph's -output exceeds 16 bytes, with Packet<16> outputs (weft_flow_small.cpp).
int run_small_outputs(taskbench::App& app, const Job& job, const Fault& fault);

// The rest is local to each file that includes it (an anonymous namespace): GCC then inlines the graph's code as
// it did when all of it was in one file.
namespace {

/// The key of task (graph, t, point). Points and graph indices fit 32 bits (checked at start-up), so the key is
/// 16 bytes and a one-input task's record (key and value) fits the engine's inline task body.
struct PointKey {
  std::int64_t t;
  std::int32_t graph, point;
  friend bool operator==(const PointKey&, const PointKey&) = default;
};

/// A task's output: output_bytes bytes (inline up to kInline bytes, else on the heap) and the point that produced
/// it; a default-constructed Output is a start token (no producer, no bytes). Move-only: a shared output is
/// read in place by every consumer, never copied behind the scenes.
class Output {
 public:
  static constexpr std::size_t kInline = 16;
  Output() noexcept : heap_(nullptr) {}
  Output(long producer, std::size_t bytes)
      : producer_(static_cast<std::int32_t>(producer)), bytes_(static_cast<std::uint32_t>(bytes)) {
    if (bytes_ > kInline) heap_ = new char[bytes_];
  }
  Output(Output&& o) noexcept : producer_(o.producer_), bytes_(o.bytes_) {
    std::memcpy(inline_, o.inline_, kInline);  // the inline bytes or the heap pointer
    o.bytes_ = 0;
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  Output& operator=(Output&&) = delete;
  ~Output() {
    if (bytes_ > kInline) delete[] heap_;
  }
  /// A copy, for an output sent to both template tasks.
  Output clone() const {
    Output o(producer_, bytes_);
    std::memcpy(o.data(), data(), bytes_);
    return o;
  }
  char* data() { return bytes_ > kInline ? heap_ : inline_; }
  const char* data() const { return bytes_ > kInline ? heap_ : inline_; }
  std::size_t bytes() const { return bytes_; }
  long producer() const { return producer_; }

 private:
  union {
    char inline_[kInline];
    char* heap_;
  };
  std::int32_t producer_ = -1;
  std::uint32_t bytes_ = 0;
};

/// A task's output on several processes: the interface of Output with the bytes inline (N of them, at least
/// output_bytes), trivially copyable so that it can cross ranks as it is (N + 8 bytes). Each consumer gets its
/// own copy (send, not broadcast): for the default 16-byte outputs a 24-byte copy costs less than a shared one
/// (its allocation and reference counts: about 200 instructions per task on stencil_1d, callgrind).
template <std::size_t N>
class Packet {
 public:
  static constexpr std::size_t kCapacity = N;
  Packet() noexcept = default;
  Packet(long producer, std::size_t bytes)
      : producer_(static_cast<std::int32_t>(producer)), bytes_(static_cast<std::uint32_t>(bytes)) {}
  Packet clone() const { return *this; }
  char* data() { return buf_; }
  const char* data() const { return buf_; }
  std::size_t bytes() const { return bytes_; }
  long producer() const { return producer_; }

 private:
  std::int32_t producer_ = -1;
  std::uint32_t bytes_ = 0;
  alignas(8) char buf_[N];
};

}  // namespace
}  // namespace taskbench::weft_flow

template <>
struct weft::flow::Hash<taskbench::weft_flow::PointKey> {
  std::size_t operator()(const taskbench::weft_flow::PointKey& k) const {
    // The table scrambles the hash (multiplicative hashing), so a plain mix of the fields spreads well.
    return static_cast<std::size_t>(k.t) * 0x9E3779B97F4A7C15ull ^
           (static_cast<std::size_t>(static_cast<std::uint32_t>(k.graph)) << 32 |
            static_cast<std::uint32_t>(k.point));
  }
};

namespace taskbench::weft_flow {
namespace {

/// num_inputs(t, point) of one graph, from a table where it can be: wherever timesteps t - 1 and t both have
/// every point live, the count depends only on t's dependence set and the point, so one row per dependence set
/// serves them all (every timestep but the first for most types). Routing a task's output asks for the count of
/// each consumer, and the aggregator for its own: a table load instead of walking the dependencies each time.
class InputCounts {
 public:
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 22;  // 16 MiB: else no table (computed each time)

  explicit InputCounts(const taskbench::TaskGraph& g) : g_(&g) {
    const std::size_t sets = static_cast<std::size_t>(g.max_dependence_sets());
    const std::size_t width = static_cast<std::size_t>(g.max_width);
    if (sets == 0 || width > kMaxEntries / sets) return;
    // A timestep whose dependence set is d, with every point live at it and the step before. Widths settle
    // within a few dozen steps (tree), after which the sets repeat with the period: a bounded scan finds
    // every set that has such a timestep (the others, if any, are counted at each look-up).
    std::vector<long> step_of(sets, -1);
    const long scan_end = std::min(g.timesteps, 64 + 2 * g.timestep_period());
    for (long t = 1, left = static_cast<long>(sets); t < scan_end && left > 0; ++t) {
      long& s = step_of[static_cast<std::size_t>(g.dependence_set_at_timestep(t))];
      if (s < 0 && full(t)) {
        s = t;
        --left;
      }
    }
    counts_.assign(sets * width, -1);  // -1: not in the table
    for (std::size_t d = 0; d < sets; ++d)
      if (step_of[d] >= 0)
        for (long x = 0; x < g.max_width; ++x)
          counts_[d * width + static_cast<std::size_t>(x)] = static_cast<std::int32_t>(g.num_inputs(step_of[d], x));
  }

  long operator()(long t, long x) const {
    if (!counts_.empty() && full(t)) {
      const std::size_t d = sets_one() ? 0 : static_cast<std::size_t>(g_->dependence_set_at_timestep(t));
      const std::int32_t n = counts_[d * static_cast<std::size_t>(g_->max_width) + static_cast<std::size_t>(x)];
      if (n >= 0) return n;
    }
    return g_->num_inputs(t, x);
  }

 private:
  bool full(long t) const {
    const long w = g_->max_width;
    return t >= 1 && t < g_->timesteps && g_->width_at_timestep(t) == w && g_->width_at_timestep(t - 1) == w &&
           g_->offset_at_timestep(t) == 0 && g_->offset_at_timestep(t - 1) == 0;
  }
  bool sets_one() const { return counts_.size() == static_cast<std::size_t>(g_->max_width); }

  const taskbench::TaskGraph* g_;
  std::vector<std::int32_t> counts_;  // [dependence set][point]
};

/// What every task reads: the graphs, their input counts and the per-thread state's sizes.
struct Bench {
  const std::vector<taskbench::TaskGraph>* graphs;
  std::vector<InputCounts> counts;  // per graph
  long max_width = 0;
  std::size_t max_scratch = 0;
  Fault fault{};
};

/// Per-thread working storage, reused from task to task (so a task allocates nothing for it once warm).
struct ThreadState {
  std::vector<long> points;             // inputs_of of the running task
  std::vector<std::int32_t> index_of;   // point -> its index in `points` (-1: not an input); max_width entries
  std::vector<const char*> inputs;      // placed inputs, in inputs_of order
  std::vector<std::size_t> sizes;
  std::vector<long> consumers;
  std::vector<PointKey> single, multi;  // consumers with one input (point1), with several (point)
  std::vector<char> scratch;            // prepared scratch buffer (memory_bound kernel)
  bool ready = false;

  void init(const Bench& b) {
    index_of.assign(static_cast<std::size_t>(b.max_width), -1);
    scratch.resize(b.max_scratch);
    taskbench::TaskGraph::prepare_scratch(scratch.data(), scratch.size());
    ready = true;
  }
};

/// The ThreadState of a running body: one per nesting depth on its thread, because a send may run other bodies
/// of the graph before it returns (throttling, WEFT_MAX_TASKS), which must not take the state that the sending
/// body is still iterating over (its consumer lists).
class StateScope {
 public:
  explicit StateScope(const Bench& b) : st_(stack()) {
    s_ = st_.depth == 0 ? &st_.first : st_.nested(st_.depth);
    ++st_.depth;
    if (!s_->ready) [[unlikely]]
      s_->init(b);
  }
  ~StateScope() { --st_.depth; }
  StateScope(const StateScope&) = delete;
  StateScope& operator=(const StateScope&) = delete;
  ThreadState& state() const { return *s_; }

 private:
  struct Stack {
    ThreadState first;  // the usual case: no body runs inside a send
    std::vector<std::unique_ptr<ThreadState>> deeper;
    std::size_t depth = 0;
    [[gnu::noinline]] ThreadState* nested(std::size_t d) {
      while (deeper.size() < d) deeper.push_back(std::make_unique<ThreadState>());
      return deeper[d - 1].get();
    }
  };
  static Stack& stack() {
    thread_local Stack st;
    return st;
  }
  Stack& st_;
  ThreadState* s_;
};

bool live(const taskbench::TaskGraph& g, long t, long point) {
  const long o = g.offset_at_timestep(t);
  return point >= o && point < o + g.width_at_timestep(t);
}

// Output terminals of both template tasks.
constexpr std::size_t kToSingle = 0;  // edge into point1
constexpr std::size_t kToMulti = 1;   // edge into point's aggregator

/// Runs task k with its inputs (in inputs_of order; null where missing, which execute_point reports), then sends
/// its output to its consumers at t + 1, and a start token to the task of the same point at t + 1 if that one
/// has no input.
template <class V, class Out>
void run_point(const Bench& b, ThreadState& s, const PointKey& k, std::size_t n_inputs, Out& out) {
  const taskbench::TaskGraph& g = (*b.graphs)[static_cast<std::size_t>(k.graph)];
  const long t = k.t, x = k.point;
  V result(x, g.output_bytes);
  g.execute_point(t, x, result.data(), result.bytes(), s.inputs.data(), s.sizes.data(), n_inputs,
                  g.scratch_bytes ? s.scratch.data() : nullptr, g.scratch_bytes);
  if constexpr (!std::is_same_v<V, Output>) {  // several processes only: one process pays nothing for it
    if (b.fault.hits(k.graph, k.t, k.point)) [[unlikely]] {
      const std::int64_t wrong[2] = {t, x + 1};
      std::memcpy(result.data(), wrong, sizeof wrong);
    }
  }
  if (t + 1 >= g.timesteps) return;

  const InputCounts& counts = b.counts[static_cast<std::size_t>(k.graph)];
  g.consumers_of(t, x, s.consumers);
  s.single.clear();
  s.multi.clear();
  bool self = false;
  for (long c : s.consumers) {
    (counts(t + 1, c) == 1 ? s.single : s.multi).push_back(PointKey{t + 1, k.graph, static_cast<std::int32_t>(c)});
    self |= c == x;
  }
  if constexpr (!std::is_same_v<V, Output>) {
    for (const PointKey& c : s.single) weft::flow::send<kToSingle>(c, result, out);
    for (const PointKey& c : s.multi) weft::flow::send<kToMulti>(c, result, out);
  } else if (!s.multi.empty()) {
    if (!s.single.empty()) weft::flow::broadcast<kToSingle>(s.single, result.clone(), out);
    weft::flow::broadcast<kToMulti>(s.multi, std::move(result), out);
  } else if (!s.single.empty()) {
    weft::flow::broadcast<kToSingle>(s.single, std::move(result), out);
  }
  if (!self && live(g, t + 1, x) && counts(t + 1, x) == 0)
    weft::flow::send<kToSingle>(PointKey{t + 1, k.graph, static_cast<std::int32_t>(x)}, V(), out);
}

/// Ends the run after an exception out of the graph (a body or the graph's construction): on one process an
/// error line and status 1, on several the failure handler (the other ranks would wait for this one).
int graph_failed(const Job& job, const std::exception& e) {
  if (job.several()) taskbench::fail_run(e.what());
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}

/// Builds, seeds and runs the flow graph of the run with outputs of type V (a Packet, or on one process an Output
/// when some -output exceeds 16 bytes), then reports. Returns the exit status.
template <class V>
int run(taskbench::App& app, const Job& job, const Fault& fault) {
  const weft::Options options = taskbench::weft_options(app);
  weft::Runtime rt = taskbench::make_runtime(options);
  if (job.rank == 0) app.display();

  Bench bench{&app.graphs, {}};
  for (const auto& g : app.graphs) {
    bench.counts.emplace_back(g);
    bench.max_width = std::max(bench.max_width, g.max_width);
    bench.max_scratch = std::max(bench.max_scratch, g.scratch_bytes);
  }
  bench.fault = fault;
  const Bench* b = &bench;

  using weft::flow::Aggregator;
  weft::flow::Edge<PointKey, V> to_single("one input"), to_multi("inputs");
  auto point1 = weft::flow::make_tt<PointKey>(
      [b](const PointKey& k, const V& in, auto& out) {
        const StateScope scope(*b);
        ThreadState& s = scope.state();
        const std::size_t n = in.producer() >= 0 ? 1 : 0;  // a start token carries no input
        s.inputs.assign(1, in.data());
        s.sizes.assign(1, in.bytes());
        run_point<V>(*b, s, k, n, out);
      },
      weft::flow::edges(to_single), weft::flow::edges(to_single, to_multi), "point1");
  auto point = weft::flow::make_tt<PointKey>(
      [b](const PointKey& k, const Aggregator<V>& in, auto& out) {
        const StateScope scope(*b);
        ThreadState& s = scope.state();
        const taskbench::TaskGraph& g = (*b->graphs)[static_cast<std::size_t>(k.graph)];
        // Place the values by producer, in inputs_of order (they arrive in any order).
        g.inputs_of(k.t, k.point, s.points);
        const std::size_t n = s.points.size();
        for (std::size_t i = 0; i < n; ++i) s.index_of[static_cast<std::size_t>(s.points[i])] = static_cast<std::int32_t>(i);
        s.inputs.assign(n, nullptr);
        s.sizes.assign(n, 0);
        for (const V& v : in) {
          const long p = v.producer();
          const std::int32_t i = p >= 0 && p < g.max_width ? s.index_of[static_cast<std::size_t>(p)] : -1;
          if (i >= 0 && s.inputs[static_cast<std::size_t>(i)] == nullptr) {  // else left missing: reported
            s.inputs[static_cast<std::size_t>(i)] = v.data();
            s.sizes[static_cast<std::size_t>(i)] = v.bytes();
          }
        }
        for (long p : s.points) s.index_of[static_cast<std::size_t>(p)] = -1;
        run_point<V>(*b, s, k, n, out);
      },
      weft::flow::edges(weft::flow::make_aggregator(
          to_multi,
          [b](const PointKey& k) {
            return static_cast<std::size_t>(b->counts[static_cast<std::size_t>(k.graph)](k.t, k.point));
          })),
      weft::flow::edges(to_single, to_multi), "point");
  // The rank of a key: the owner of its point's block (on one process no keymap: every key is local, and a
  // keymap would cost a call per new task).
  auto owner = [b, ranks = job.ranks](const PointKey& k) {
    return taskbench::mpi::owner_of(k.point, (*b->graphs)[static_cast<std::size_t>(k.graph)].max_width, ranks);
  };
  if (job.several()) {
    point1->set_keymap(owner);
    point->set_keymap(owner);
  }

  // Start tokens for the tasks without inputs whose point was not live at the previous timestep (all of t = 0);
  // the others get theirs from that point's task at t - 1. Timestep-major, graphs interleaved; each rank seeds
  // the tasks it owns.
  try {
    auto flow = weft::flow::graph(rt, point1, point);  // collective on several processes
    for (long t = 0, steps = app.max_timesteps(); t < steps; ++t) {
      for (std::size_t k = 0; k < app.graphs.size(); ++k) {
        const taskbench::TaskGraph& g = app.graphs[k];
        const long o = g.offset_at_timestep(t), w = g.width_at_timestep(t);
        for (long i = o; i < o + w; ++i) {
          const PointKey key{t, static_cast<std::int32_t>(k), static_cast<std::int32_t>(i)};
          if ((t == 0 || !live(g, t - 1, i)) && g.num_inputs(t, i) == 0 && owner(key) == job.rank)
            flow.invoke(key, V());
        }
      }
    }

    taskbench::start_runtime(rt);
#ifdef TASKBENCH_WEFT_FLOW_MPI
    if (job.several()) MPI_Barrier(MPI_COMM_WORLD);
#endif
    const double t0 = taskbench::now_seconds();
    flow.wait();  // on several processes: returns on every rank once the graph has terminated on all of them
#ifdef TASKBENCH_WEFT_FLOW_MPI
    if (job.several()) MPI_Barrier(MPI_COMM_WORLD);
#endif
    const double elapsed = taskbench::now_seconds() - t0;
#ifdef TASKBENCH_WEFT_FLOW_MPI
    if (job.several()) taskbench::mpi::gather_run_marks(app, job.rank);
#endif
    if (job.rank == 0) app.report_timing(elapsed);
  } catch (const std::exception& e) {
    return graph_failed(job, e);
  }
  if (app.verbose > 0) {
    const weft::Stats s = rt.stats();
    char rank[32] = "";
    if (job.several()) std::snprintf(rank, sizeof rank, " (rank %d)", job.rank);
    std::printf("weft%s: tasks %llu, stolen %llu, immediate successor %llu\n", rank,
                static_cast<unsigned long long>(s.tasks_executed), static_cast<unsigned long long>(s.tasks_stolen),
                static_cast<unsigned long long>(s.immediate_successor));
  }
  return 0;
}

}  // namespace
}  // namespace taskbench::weft_flow
