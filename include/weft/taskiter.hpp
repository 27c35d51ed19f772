// weft — taskiter: persistent cyclic task graphs for iterative programs.
//
//   cx.taskiter(n, [&](weft::Context& it) {           // runs once: the tasks it spawns are recorded (and run)
//     for (int b = 1; b < B - 1; ++b)
//       it.spawn([=] { relax(b); }, weft::in(blk[b - 1]), weft::in(blk[b + 1]), weft::inout(blk[b]));
//   }, weft::inout(blk));                             // the taskiter is a task: its accesses order it
//
// The body runs once, on a recording Context: the tasks it spawns become the vertices of a graph with every
// dependency edge of one iteration (none pruned), and they run at once as the first iteration, while the body
// goes on spawning (each starts when its predecessors have finished, as a spawned task does: a body that takes
// long to spawn keeps no worker idle). Cross-iteration edges then close the graph into a cycle: per datum, the
// accesses of the next iteration's first accessors wait for the last accessors of the previous one, exactly as
// if the loop had spawned every iteration's tasks one after the other. The other iterations run from that
// graph: no task is created, no dependency registered, and there is no barrier between iterations (the first
// included) — a task of iteration i+1 starts as soon as its own predecessors (of iteration i+1, and of
// iteration i across the boundary) have finished, so iterations overlap (unless the boundary is made of
// broadcasts: see "Barrier chosen" below). The result is the same as
//
//   for (i = 0; i < n; ++i) body(it);   // with every spawned task run in sequential order
//
// as long as the body spawns the same tasks with the same accesses every iteration (the body itself runs once:
// code in the body outside the tasks does not repeat, and the tasks keep the values they captured at
// recording; see weft::update for bodies that refresh them).
//
// Clauses (after the body, any order):
//   weft::in/out/inout/inoutset/commutative(x)  accesses of the taskiter task itself, ordering the whole loop
//                         with its siblings: siblings spawned before it that conflict finish before the first
//                         iteration starts, later conflicting siblings wait until the last iteration ends.
//                         The recorded tasks should access only data the taskiter declares (as for children of
//                         any task); the declaration orders the loop with its siblings by address, as any
//                         access does, so it names what those siblings name (e.g. the first element of an
//                         array whose elements the recorded tasks access). weak_* accesses are rejected
//                         (weft::taskiter_error).
//   weft::priority(p), weft::label("name")   of the taskiter task.
//   weft::unroll(k)       the body runs k times (iterations 0..k-1) and the k copies form one period of the
//                         cyclic graph: for loops whose task pattern repeats every k iterations (e.g. buffers
//                         swapped on odd and even iterations). n need not be a multiple of k.
//   weft::update          the body runs again for every iteration (with that iteration's index) to refresh
//                         the captured values of the recorded tasks: it must spawn the same number of tasks
//                         with the same accesses (the same start addresses and modes, in the same order; a
//                         region's size is not compared: a datum is its start address), or the loop stops with
//                         weft::taskiter_error naming the first difference (after the iterations before it,
//                         which run to the end). Priorities and labels are refreshed too. No barrier: as a
//                         loop that spawns its tasks runs ahead of them, the body runs for iteration i while
//                         tasks of earlier iterations still run (at most two periods ahead of the oldest
//                         unfinished one), and each refreshed task starts as soon as its predecessors have
//                         finished. So code in the body outside the tasks must not read what the tasks write
//                         (as without taskiter); add weft::replay_barrier to run iterations one at a time
//                         (the body then runs for iteration i once iteration i - 1 has finished). In
//                         taskiter_while, update keeps that barrier (cond() runs between periods).
//   weft::replay_barrier  record once, then run one iteration (one period of k under unroll) at a time, with a
//                         barrier in between (like OpenMP taskgraph or CUDA graphs): for comparison.
//   weft::no_barrier      never a barrier, even where taskiter would choose one (below). Not with
//                         replay_barrier (weft::taskiter_error).
//
// Barrier chosen. Where the boundary between iterations is made of broadcasts, a taskiter (fixed trip count,
// without weft::update) runs as under replay_barrier instead: when the edges from the last writer of a datum to
// the tasks that read it first in the next iteration, counting only data that at least 32 such tasks read,
// are at least as many as the recorded tasks. An all-pairs pattern (N-body: every block's positions are read by
// the tasks of every block pair) has that shape: there each iteration's tasks wait, through their few direct
// predecessors, for nearly all of the previous iteration anyway, and the edges across the boundary (twice the
// tasks) cost more to build and to release than the overlap they allow (N-body, 4 iterations at blocks of 4
// particles: 1.3x the time of a barrier on 2 cores, BENCHMARKS.md section 43). Stencils (a few readers per
// datum) and reductions read by every block (one broadcast datum per dot product) keep the overlap. The
// profile shows the choice: one "replay" phase per iteration, as under replay_barrier, instead of one for the
// whole loop.
//
// The body is callable as body(weft::Context&) or body(weft::Context&, std::uint64_t iteration).
// A taskiter is a task, not a loop statement: cx.taskiter(...) returns once it is spawned, and its iterations run
// after. A body or cond() that captures locals of the spawning function by reference needs a cx.taskwait()
// before that function returns (the root function of Runtime::run too: its locals are gone once it returns,
// while run() still waits for the taskiter).
//
//   cx.taskiter_while(cond, body, clauses...)
// runs `while (cond()) body(it);`: cond() is called before the first iteration and, from a control task, after
// each iteration has finished (every task of it), seeing its effects (after the first period, i.e. the first k
// iterations under unroll(k), the taskiter task makes its k calls once all of them have finished). Under unroll(k) the check is strided: the
// call after iteration i decides iteration i+k, so up to k iterations run concurrently, and up to k-1
// iterations more than the sequential loop may run once cond() turns false (iterations 1..k-1 run when the
// first call returns true); cond() then runs while tasks of the next k-1 iterations may run, so data it reads
// that those tasks write must be synchronised (an atomic, say). cond() runs on a worker, never concurrently
// with itself. With replay_barrier or
// update there is no control task: the driver calls cond() between periods, i.e. before each period of k
// iterations (again at most k-1 iterations beyond the sequential loop).
//
// Semantics and limits:
// * Accesses of recorded tasks: in, out, inout, reduction. inoutset, commutative and weak accesses (weak
//   reductions included) inside a taskiter body throw weft::taskiter_error at the spawn (their concurrent
//   groups cannot be replayed with the ordering guarantees above).
// * Reductions (weft::reduction, see weft/tasks.hpp): members are replayed concurrently and each iteration's
//   group is combined by an internal vertex recorded after them as a writer of the datum, so the combination
//   is ordered by dependencies like any write (no barrier): after that iteration's members, before the later
//   accessors of that iteration and of the next ones. A group ends at the first access that does not join it,
//   else at the end of the body (of each copy under unroll). Children of a replayed member may join its
//   reduction. Not with weft::update (taskiter_error). Combinations do not count in Stats::tasks_executed.
//   If a task of the loop fails, the combinations of the iterations already combined stay, later ones are
//   not made. Several accesses of one task to one datum merge as for spawn.
// * Tasks spawned by recorded tasks while they run (nested tasks) are ordinary tasks: they may differ from
//   iteration to iteration and use the dependency system of their parent.
// * Inside the body, taskwait and taskwait_on throw weft::taskiter_error: the body runs once, to record what every
//   iteration replays, so it cannot wait for its tasks. A taskiter inside a body is recorded like any task (it
//   runs whole at each iteration).
// * Completion events (Context::event, weft/tasks.hpp) and the MPI requests bound to tasks (weft/mpi.hpp):
//   a recorded task takes them anew every time it runs (its body runs every iteration), and each instance
//   completes, releasing that iteration's successors, only once its events are fulfilled: a halo exchange
//   whose receives and sends are recorded tasks is discovered once and posts fresh requests every iteration.
//   The body itself refuses them (weft::taskiter_error: its spawns have not run yet).
// * weft::taskiter_iteration(cx) tells a recorded task (or a task nested in one) which iteration it runs.
// * Exceptions: an exception escaping a recorded task (or cond) stops the loop: from the moment weft catches it
//   (when it leaves the body), no instance is released and no instance's body starts (instances already
//   released finish without running their bodies; a taskiter_while stops at its next check), so the loop ends
//   at once, whatever its trip count. Bodies running on other workers meanwhile finish, and their chains may
//   release a few more instances in the microseconds the exception takes to leave the body. Instances of
//   independent chains run in any order: on one worker, a chain that does not depend on the failing one may
//   run all its iterations before the failing instance runs. The exception then propagates as for a child of
//   the taskiter task: it is rethrown by its
//   parent's next taskwait, or out of Runtime::run. An exception escaping the body during recording or update
//   propagates the same way (tasks of the first iteration spawned before it may have run, as children of a task
//   that throws may; the others skip their bodies).
// * Immediate successor (Options::immediate_successor) applies to replayed tasks as to any task.
// * Statistics: recorded tasks count once in Stats::tasks_created; every replayed body in tasks_executed. The
//   taskiter task itself counts as one task created and executed (a loop of 3 tasks and 10 iterations: 4 and 31).
// * A trip count of 0 (or a taskiter_while whose condition is false at once) never calls the body.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "weft/tasks.hpp"

namespace weft {

/// Thrown for a taskiter that cannot be recorded or replayed: an unsupported access, a body whose tasks change
/// under weft::update, taskwait inside the body, an invalid clause. The message says what and where.
class taskiter_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// The body runs k times to form one period of the cyclic graph (k >= 1).
struct unroll {
  std::uint32_t copies;
  constexpr explicit unroll(std::uint32_t k) : copies(k) {}
};
/// Clause: re-run the body before each iteration to refresh the recorded tasks' captured values.
struct update_t {
  explicit update_t() = default;
};
inline constexpr update_t update{};
/// Clause: barrier between iterations (record once, replay one iteration at a time).
struct replay_barrier_t {
  explicit replay_barrier_t() = default;
};
inline constexpr replay_barrier_t replay_barrier{};
/// Clause: never a barrier between iterations, even where taskiter would choose one (a boundary of broadcasts,
/// see "Barrier chosen" above).
struct no_barrier_t {
  explicit no_barrier_t() = default;
};
inline constexpr no_barrier_t no_barrier{};

/// The iteration (0-based) that the task running `cx` belongs to: for a recorded task, the iteration it is
/// replaying; for a task nested in one, that of its recorded ancestor (the innermost taskiter). Throws
/// taskiter_error if `cx` is not inside a taskiter's recorded task.
std::uint64_t taskiter_iteration(const Context& cx);

namespace detail {

struct IterParams {
  std::uint64_t n = 0;      ///< iterations (taskiter); unused by taskiter_while
  std::uint32_t unroll = 1;
  bool is_while = false;
  bool update = false;
  bool barrier = false;
  bool no_barrier = false;
};

/// What the compiled driver needs from the templated closure.
struct IterSpec {
  IterParams params;
  void* closure;
  void (*body)(void* closure, Context& cx, std::uint64_t iteration);
  bool (*cond)(void* closure);  ///< null for taskiter
};

/// Runs the loop; called as the body of the taskiter task (src/iter).
void run_taskiter(Context& cx, const IterSpec& spec);
/// Rejects invalid taskiter clauses (weak accesses, unroll(0)) before anything is spawned.
void check_taskiter(const IterParams& p, const Access* acc, std::size_t n);
/// Throws weft::taskiter_error inside a cluster of several processes (weft/cluster.hpp), which runs no taskiter.
void refuse_taskiter_in_cluster(const Context& cx);

struct NoCond {};

template <class Body, class Cond>
struct IterClosure {
  Body body;
  Cond cond;
  IterParams params;

  void operator()(Context& cx) {
    IterSpec spec{params, this, &call_body, nullptr};
    if constexpr (!std::is_same_v<Cond, NoCond>) spec.cond = &call_cond;
    run_taskiter(cx, spec);
  }
  static void call_body(void* self, Context& cx, std::uint64_t i) {
    Body& b = static_cast<IterClosure*>(self)->body;
    if constexpr (std::is_invocable_v<Body&, Context&, std::uint64_t>)
      b(cx, i);
    else
      b(cx);
  }
  static bool call_cond(void* self) {
    if constexpr (std::is_same_v<Cond, NoCond>)
      return false;
    else
      return static_cast<bool>(static_cast<IterClosure*>(self)->cond());
  }
};

template <class Body>
constexpr void check_iter_body() {
  static_assert(std::is_invocable_v<Body&, Context&> || std::is_invocable_v<Body&, Context&, std::uint64_t>,
                "weft: a taskiter body must be callable as body(weft::Context&) or "
                "body(weft::Context&, std::uint64_t iteration)");
}

template <class C>
constexpr std::size_t is_iter_option_v = std::is_same_v<std::decay_t<C>, unroll> ||
                                         std::is_same_v<std::decay_t<C>, update_t> ||
                                         std::is_same_v<std::decay_t<C>, replay_barrier_t> ||
                                         std::is_same_v<std::decay_t<C>, no_barrier_t>;

template <class C>
void apply_iter_option(IterParams& p, const C& c) {
  using D = std::decay_t<C>;
  if constexpr (std::is_same_v<D, unroll>)
    p.unroll = c.copies;
  else if constexpr (std::is_same_v<D, update_t>)
    p.update = true;
  else if constexpr (std::is_same_v<D, replay_barrier_t>)
    p.barrier = true;
  else if constexpr (std::is_same_v<D, no_barrier_t>)
    p.no_barrier = true;
}
}  // namespace detail

template <class Closure, class... Clauses>
void Context::spawn_taskiter(Closure&& closure, Clauses&&... clauses) {
  constexpr std::size_t n = (std::size_t{0} + ... + detail::is_access_v<Clauses>);
  static_assert((std::size_t{0} + ... + std::is_same_v<std::decay_t<Clauses>, unroll>) <= 1,
                "weft: at most one weft::unroll clause");
  Access accesses[n == 0 ? 1 : n]{};
  detail::SpawnAttrs attrs;
  [[maybe_unused]] std::size_t i = 0;
  auto clause = [&](auto&& c) {
    if constexpr (detail::is_iter_option_v<decltype(c)>)
      detail::apply_iter_option(closure.params, c);
    else
      add_clause(accesses, i, attrs, std::forward<decltype(c)>(c));
  };
  (clause(std::forward<Clauses>(clauses)), ...);
  (void)clause;  // no clause at all
  detail::check_taskiter(closure.params, accesses, n);
  detail::refuse_taskiter_in_cluster(*this);
  detail::finish_spawn(*this, detail::new_task(*this, std::forward<Closure>(closure)), accesses, n, attrs);
}

template <class Body, class... Clauses>
void Context::taskiter(std::uint64_t n, Body&& body, Clauses&&... clauses) {
  using B = std::decay_t<Body>;
  detail::check_iter_body<B>();
  detail::IterParams p;
  p.n = n;
  spawn_taskiter(detail::IterClosure<B, detail::NoCond>{std::forward<Body>(body), {}, p},
                 std::forward<Clauses>(clauses)...);
}

template <class Cond, class Body, class... Clauses>
void Context::taskiter_while(Cond&& cond, Body&& body, Clauses&&... clauses) {
  using B = std::decay_t<Body>;
  using C = std::decay_t<Cond>;
  detail::check_iter_body<B>();
  static_assert(std::is_invocable_v<C&> && std::is_convertible_v<std::invoke_result_t<C&>, bool>,
                "weft: a taskiter_while condition must be callable as bool cond()");
  detail::IterParams p;
  p.is_while = true;
  spawn_taskiter(detail::IterClosure<B, C>{std::forward<Body>(body), std::forward<Cond>(cond), p},
                 std::forward<Clauses>(clauses)...);
}

}  // namespace weft
