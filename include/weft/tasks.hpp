// weft — dependency tasks with sequential semantics (OpenMP / OmpSs-2 style).
//
//   rt.run([&](weft::Context& cx) {
//     cx.spawn([&] { a = f(); }, weft::out(a));
//     cx.spawn([&] { b = g(a); }, weft::in(a), weft::out(b), weft::priority(2), weft::label("g"));
//     cx.taskwait();
//   });
//
// Semantics
// ---------
// * Sibling tasks (children of the same task) that access the same datum run in the order they were spawned,
//   as if the program ran sequentially, with these relaxations:
//     in           reads: readers between two writers run concurrently.
//     out, inout   writes: waits for the previous writer and every reader since; later accesses wait for it.
//     inoutset     a set of consecutive inoutset writers runs concurrently (each waits for what came before
//                  the set); any later access waits for all of them (OpenMP 5.1 inoutset).
//     commutative  like inoutset, but the bodies of members of the set never run at the same time (any order;
//                  the exclusion covers the body, not the task's children).
//     weak_in, weak_out, weak_inout
//                  for a task whose children do the accessing (OmpSs-2): the access does not delay the task
//                  itself, but children accessing the datum wait for what the task would have waited for;
//                  later siblings wait for the whole task (children included).
//     reduction(x, op), weak_reduction(x, op)
//                  see "Reductions" below.
// * A datum is named by its start address: in(x) names the object x, in(p, n) the region of n elements at p.
//   Two accesses conflict iff they name the same start address; overlapping regions with different starts are
//   NOT ordered (name array blocks by their first element, as OpenMP does). On one process the size plays no
//   part (it is what moves between processes in a cluster): in(p, 0) and a null address are datums like any
//   other, named by that address.
// * A task's accesses are released when its body has returned and all its children have finished. (On a
//   cluster of several processes, weft/cluster.hpp, a weak access is released on its own, when the body has
//   returned and the children on that datum have finished.)
//   Children should access only data their parent declared (strongly or weakly), and no more strongly (a
//   child writing what its parent only reads races with the parent's sibling readers); neither is checked,
//   and other data is not ordered with the parent's siblings.
// * Several accesses of one task to the same datum merge into one: the same mode twice stays that mode; two
//   weak ones give weak_in if both only read, else weak_inout; any other pair gives in if both only read
//   (in, weak_in), else inout (so in + out, in + inoutset and commutative + inoutset are inout, weak_in + in
//   is in). A reduction must be a task's only access to its datum (std::invalid_argument).
// * The body is any callable taking () or (weft::Context&); it is moved into the task, so by-value captures
//   behave like firstprivate. The Context& argument spawns the task's own children.
// * priority(p): a worker takes its highest-priority ready task first (default 0; larger runs earlier), the
//   most recently queued first among equal priorities. The order is per worker (a thief takes its victim's
//   positive priorities, then its oldest default-priority task, then its negative priorities), and a
//   preference, not a dependency: README.md (`weft::priority`) lists what a program may rely on.
// * label("name"): a name for profiles and traces; the string must outlive the run (a literal is simplest;
//   the trace, written when the Runtime goes, keeps a copy).
// * Exceptions: an exception escaping a body is captured; tasks that depend on the failed task, directly or
//   transitively, are cancelled (bodies skipped, counted in Stats::tasks_cancelled); independent tasks run.
//   The first exception is rethrown by the parent's next taskwait()/taskwait_on(); if the parent's body ends
//   without one, the parent counts as failed and the exception moves up, finally out of Runtime::run.
//   Later exceptions of the same parent are dropped (Stats::exceptions_dropped). The runtime stays usable.
//   Cancellation does not depend on timing: a task spawned after a task it depends on has failed is cancelled
//   too (a datum written by a failed task stays "failed" for its later accessors until the parent's next
//   taskwait, which rethrows the exception, or its end; children spawned after that taskwait start afresh,
//   while a taskwait_on, after which other children may still run, does not end it).
//   Weak accesses: a task whose weak access follows a failed (or cancelled) task runs its body, as a weak access
//   never delays it; its children accessing that datum are cancelled, and so are its own successors. (A task of
//   a cluster, weft/cluster.hpp, is cancelled instead when the failure is known before its body starts.)
// * A spawn that throws (the body's copy or move, or std::bad_alloc) leaves nothing behind: no task, no
//   dependency, no descriptor; the exception propagates from spawn.
// * Memory: the records and descriptors a task keeps for its children are bounded by its unfinished children
//   (throttled by Options::max_tasks): finished readers, group members and records are recycled as the
//   producer goes on, and all of them at a taskwait.
// * Completion events (OpenMP `detach` / omp_fulfill_event): inside a body, `weft::Event ev = cx.event();`
//   makes the task wait for something outside its body, such as an asynchronous operation it starts. Its
//   accesses are released (successors run, the parent's taskwait and Runtime::run return) only once its body has
//   returned, its children have finished AND every event taken from it has been fulfilled:
//     cx.spawn([&](weft::Context& cx) {
//       weft::Event ev = cx.event();
//       start_async_read(buf, [ev = std::move(ev)]() mutable { ev.fulfill(); });  // any thread, any time
//     }, weft::out(buf));
//     cx.spawn([&] { use(buf); }, weft::in(buf));  // runs after the callback's fulfill()
//   (Named event() rather than OpenMP's detach: a task may take several, taken one at a time wherever the
//   body learns it needs them; nothing about the task itself changes.)
//   - An Event is a move-only handle (like std::promise): ev.fulfill() (or ev.fail(e)) consumes it, so an
//     event is fulfilled exactly once. Calling either on an empty handle (already fulfilled, moved from, or
//     default-constructed) throws std::logic_error and changes nothing. fulfill() and fail() may be called from
//     any thread: another task, a thread weft does not know, a callback; before or after the body returns.
//     Callbacks that must be copyable (std::function) hold it through a std::shared_ptr<weft::Event>.
//   - A task may take any number of events. Taking one costs two atomic operations; a task that takes none pays
//     nothing. An event is a phantom child of the task, counted beside its children: it is no child for
//     taskwait (the task's own taskwait does not wait for its events) nor for throttling. Throttling
//     (Options::max_tasks) does not count, among a parent's unfinished children, one per event they hold: what
//     they wait for may be a task the parent has yet to spawn (a receive whose send comes later), so the
//     parent never waits for them there; they are bounded by the events the program takes.
//   - ev.fail(std::exception_ptr) fulfils the event as failed: the task fails as if its body had thrown (its
//     dependents are cancelled, the exception is rethrown by the parent's next taskwait/taskwait_on, or by
//     Runtime::run), once it completes. An exception escaping the body takes precedence over its events'
//     failures (only the first exception of a parent is kept; the later ones are counted in
//     Stats::exceptions_dropped). A failure reported while the body still runs is rethrown by the body's own
//     next taskwait/taskwait_on, as a child's exception would be (the body may catch it; the task then does
//     not fail).
//   - Destroying (or assigning over) an Event that holds an unfulfilled event fails the task with a
//     std::logic_error ("destroyed without being fulfilled"), like std::promise's broken_promise: the task
//     completes, nothing waits forever and nothing is silent. (An exception that unwinds the body past its
//     Event is reported first, as above.)
//   - Where: dependency tasks (Context::spawn, commutative ones too, at any nesting depth), the tasks a
//     taskiter recorded (a fresh event every iteration: see weft/taskiter.hpp) and their children, and the root
//     function of Runtime::run (run returns once its events are fulfilled). A taskiter body itself refuses it
//     (weft::taskiter_error); flow tasks have no Context, so cannot take one.
//   - A fulfill() from a thread that is not a worker of the task's runtime (a plain std::thread, another
//     Runtime's worker, the communication thread) only decrements the count; the completion it may trigger
//     is handed to the workers (polled where they look for work, and a sleeping worker is woken), so that
//     successors never run on a foreign thread. The Event must not outlive its run: once the task is fulfilled
//     the run may end, and the handle is empty.
//   - What fulfils an event must not wait for the task itself (a successor of the task, or code that runs only
//     after the parent's taskwait): the task would never complete. An event that is never fulfilled (nor
//     destroyed) keeps Runtime::run waiting; Options::watchdog_seconds (WEFT_WATCHDOG) ends such a run, with a
//     message, once every worker has waited that long for work.
// * Reductions (OpenMP task_reduction / in_reduction, OmpSs-2 reduction / weakreduction):
//     cx.spawn([&](weft::Context& t) { t.local(sum) += f(i); }, weft::reduction(sum, weft::sum));
//   - Operators: weft::sum, product, minimum, maximum, bit_and, bit_or, bit_xor, logical_and, logical_or (for
//     arithmetic types), or weft::reducer(identity, combine) for any copyable T, with combine either
//     void(T& into, const T& from) or T(const T&, const T&). Operators must be associative and commutative:
//     copies are combined in an unspecified order.
//   - Private copies: inside the body, t.local(x) is the executing worker's copy of the reduction on x,
//     created on first use and initialised to the identity. Tasks of one reduction that run on the same worker
//     share that worker's copy (as in OpenMP), so keep the reference only within the body. A reducing task never
//     touches x itself; local() throws std::logic_error in a task that declares no reduction on x (or one on
//     another type).
//   - Grouping: consecutive reduction accesses of siblings to one datum with the same operator (same C++ type
//     of operator and same T; weak ones included) form a group that runs concurrently, like inoutset: each
//     member waits for what came before the group. The copies are combined into x exactly once, after every
//     member has finished (children included) and before any later accessor of x runs: the next access that
//     does not join the group (in, out, ..., or a reduction with another operator, which starts a new group
//     ordered after the combination). A group still open is combined at the parent's taskwait(), at its
//     taskwait_on(x) (which waits for the combination), and at the parent's end (before its own accesses are
//     released). A user-defined group keeps a copy of its first member's operator (identity and combiner).
//   - Nesting: the children of a task that reduces on x (weak_reduction, or reduction) may access x only by
//     reductions with the same operator: they join the parent's reduction (the same private copies, combined
//     once with the parent's group), at any depth. weak_reduction does not delay the task itself; its
//     children wait for what it would have waited for. Any other access of such a child to x makes the spawn
//     throw std::logic_error. A reduction must be its task's only clause on its datum (else the spawn throws
//     std::invalid_argument), and AccessMode::reduction in an Access built by hand (spawn_accesses) is refused
//     the same way: the operator comes only with weft::reduction / weak_reduction.
//   - Exceptions: if a member of a group fails or is cancelled, nothing of the group is combined: x keeps its
//     value from before the group (deterministically, whatever the contributions made before the failure), and
//     the later accessors of x are cancelled as after a failed writer; the exception is rethrown by the
//     parent's next taskwait as usual. (A failing child of a reducing task fails that task, unless the task
//     catches it at a taskwait: then the child's contribution so far stays in the copies.) A combiner that
//     throws fails the reduction the same way; x may then hold a partly combined value.
//   - taskiter (weft/taskiter.hpp): recorded tasks may have reduction clauses (not weak ones); each
//     iteration's group is combined by a vertex of the replayed graph, ordered by dependencies (no barrier):
//     after the iteration's members, before the next accessor of x in that iteration or the next one. A group
//     ends at the first recorded access that does not join it, else at the end of the body (so consecutive
//     iterations never share a group). weft::update refuses them (weft::taskiter_error).
//   - Cost: a spawn without reduction clauses pays nothing for them. A group costs its state (two
//     allocations), one copy per worker that asks for one, and one internal node; a reducing task one small
//     allocation for its links. The copies and the state are freed at the combination, the links when the
//     task completes: memory stays bounded by the unfinished tasks, as for the other modes.
// * Waiting (taskwait, throttling) never blocks a worker: it runs other ready tasks meanwhile.
//   Known limit: a task with weak accesses that waits (taskwait, or throttling at Options::max_tasks
//   children), run inline on a worker that is itself waiting for that task's weak predecessor, can wait
//   forever on one worker; avoid waiting in weakly-accessing tasks (children already synchronise through
//   their accesses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "weft/detail/task.hpp"

namespace weft {

enum class AccessMode : std::uint8_t {
  in, out, inout, inoutset, commutative, weak_in, weak_out, weak_inout,
  reduction, weak_reduction  ///< only through weft::reduction / weft::weak_reduction clauses (they carry the operator)
};

/// The clause's name ("in", "weak_inout", ...), for messages.
constexpr const char* to_string(AccessMode m) {
  switch (m) {
    case AccessMode::in: return "in";
    case AccessMode::out: return "out";
    case AccessMode::inout: return "inout";
    case AccessMode::inoutset: return "inoutset";
    case AccessMode::commutative: return "commutative";
    case AccessMode::weak_in: return "weak_in";
    case AccessMode::weak_out: return "weak_out";
    case AccessMode::weak_inout: return "weak_inout";
    case AccessMode::reduction: return "reduction";
    case AccessMode::weak_reduction: return "weak_reduction";
  }
  return "?";
}

/// A datum accessed by a task: start address (the identity used for ordering), size in bytes, mode.
struct Access {
  const void* address;
  std::size_t bytes;
  AccessMode mode;
};

namespace detail {
/// Throws std::invalid_argument: access `index` of a spawn_accesses array has a mode that is no AccessMode.
[[noreturn]] void bad_access_mode(std::size_t index, unsigned mode);

template <class T>
constexpr void check_not_pointer() {
  static_assert(!std::is_pointer_v<T>,
                "weft: in(p)/out(p) on a pointer names the pointer variable itself; write in(*p) for the "
                "object it points to or in(p, n) for the n elements starting at p");
}
}  // namespace detail

namespace detail {
template <AccessMode M, class T>
constexpr Access access_to(const T& object) {
  check_not_pointer<T>();
  return {std::addressof(object), sizeof(T), M};
}
template <AccessMode M, class T>
constexpr Access access_to(const T* first, std::size_t count) {
  return {first, count * sizeof(T), M};
}
}  // namespace detail

/// Access clauses: mode(object) names the object, mode(first, count) the count elements starting at first.
template <class T>
constexpr Access in(const T& object) { return detail::access_to<AccessMode::in>(object); }
template <class T>
constexpr Access in(const T* first, std::size_t count) { return detail::access_to<AccessMode::in>(first, count); }
template <class T>
constexpr Access out(const T& object) { return detail::access_to<AccessMode::out>(object); }
template <class T>
constexpr Access out(const T* first, std::size_t count) { return detail::access_to<AccessMode::out>(first, count); }
template <class T>
constexpr Access inout(const T& object) { return detail::access_to<AccessMode::inout>(object); }
template <class T>
constexpr Access inout(const T* first, std::size_t count) { return detail::access_to<AccessMode::inout>(first, count); }
template <class T>
constexpr Access inoutset(const T& object) { return detail::access_to<AccessMode::inoutset>(object); }
template <class T>
constexpr Access inoutset(const T* first, std::size_t count) { return detail::access_to<AccessMode::inoutset>(first, count); }
template <class T>
constexpr Access commutative(const T& object) { return detail::access_to<AccessMode::commutative>(object); }
template <class T>
constexpr Access commutative(const T* first, std::size_t count) { return detail::access_to<AccessMode::commutative>(first, count); }
template <class T>
constexpr Access weak_in(const T& object) { return detail::access_to<AccessMode::weak_in>(object); }
template <class T>
constexpr Access weak_in(const T* first, std::size_t count) { return detail::access_to<AccessMode::weak_in>(first, count); }
template <class T>
constexpr Access weak_out(const T& object) { return detail::access_to<AccessMode::weak_out>(object); }
template <class T>
constexpr Access weak_out(const T* first, std::size_t count) { return detail::access_to<AccessMode::weak_out>(first, count); }
template <class T>
constexpr Access weak_inout(const T& object) { return detail::access_to<AccessMode::weak_inout>(object); }
template <class T>
constexpr Access weak_inout(const T* first, std::size_t count) { return detail::access_to<AccessMode::weak_inout>(first, count); }

// --- Reductions (see "Reductions" at the top of this file) ---------------------------------------------------

namespace detail {
/// The operations of one reduction operator on one type T (one static table per (T, operator type)); the
/// runtime keeps private copies and combines them through it without knowing T. `reducer` is the operator
/// object (the group's copy of it; ignored by stateless operators).
struct ReducerOps {
  std::size_t size;
  std::size_t align;
  const void* type;                                               ///< identifies T (Context::local checks it)
  void (*init)(void* dst, const void* reducer);                   ///< constructs the identity at dst
  void (*combine)(void* into, const void* from, const void* reducer);  ///< *into = *into (op) *from
  void (*destroy)(void* p) noexcept;                              ///< destroys a private copy
  void* (*clone)(const void* reducer);                            ///< the group's copy of the operator (null: stateless)
  void (*drop)(void* reducer) noexcept;                           ///< frees what clone returned
};
/// A reduction clause as the runtime sees it: the datum, its operator's table and the operator object (which
/// must live until the spawn returns: the group copies it).
struct ReductionSpec {
  const void* address;
  const ReducerOps* ops;
  const void* reducer;
};
template <class T>
inline constexpr char type_tag = 0;  // its address names T

/// Base of the built-in operators (stateless: identity<T>() and combine(a, b) are static).
struct BuiltinOp {};
template <class Op, class T>
concept builtin_reducer = std::is_base_of_v<BuiltinOp, Op>;
}  // namespace detail

/// Built-in reduction operators, for arithmetic types (any T the expression in the comment compiles for).
/// Identities: 0, 1, the largest / lowest value (infinities for floating point), ~0, 0, 0, true, false.
struct sum_t : detail::BuiltinOp {
  template <class T> static T identity() { return T(0); }
  template <class T> static void combine(T& a, const T& b) { a = a + b; }
};
struct product_t : detail::BuiltinOp {
  template <class T> static T identity() { return T(1); }
  template <class T> static void combine(T& a, const T& b) { a = a * b; }
};
struct minimum_t : detail::BuiltinOp {
  template <class T> static T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::max();
  }
  template <class T> static void combine(T& a, const T& b) { if (b < a) a = b; }
};
struct maximum_t : detail::BuiltinOp {
  template <class T> static T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::lowest();
  }
  template <class T> static void combine(T& a, const T& b) { if (a < b) a = b; }
};
struct bit_and_t : detail::BuiltinOp {
  template <class T> static T identity() { return static_cast<T>(~T(0)); }
  template <class T> static void combine(T& a, const T& b) { a = static_cast<T>(a & b); }
};
struct bit_or_t : detail::BuiltinOp {
  template <class T> static T identity() { return T(0); }
  template <class T> static void combine(T& a, const T& b) { a = static_cast<T>(a | b); }
};
struct bit_xor_t : detail::BuiltinOp {
  template <class T> static T identity() { return T(0); }
  template <class T> static void combine(T& a, const T& b) { a = static_cast<T>(a ^ b); }
};
struct logical_and_t : detail::BuiltinOp {
  template <class T> static T identity() { return T(true); }
  template <class T> static void combine(T& a, const T& b) { a = static_cast<T>(a && b); }
};
struct logical_or_t : detail::BuiltinOp {
  template <class T> static T identity() { return T(false); }
  template <class T> static void combine(T& a, const T& b) { a = static_cast<T>(a || b); }
};
inline constexpr sum_t sum{};
inline constexpr product_t product{};
inline constexpr minimum_t minimum{};
inline constexpr maximum_t maximum{};
inline constexpr bit_and_t bit_and{};
inline constexpr bit_or_t bit_or{};
inline constexpr bit_xor_t bit_xor{};
inline constexpr logical_and_t logical_and{};
inline constexpr logical_or_t logical_or{};

/// A user-defined reduction operator on T: an identity value and a combiner, either `void(T& into, const T&
/// from)` (into = into op from) or `T(const T&, const T&)`. It must be associative and commutative: the private
/// copies are combined in an unspecified order. Made by weft::reducer(identity, combine).
template <class T, class Combine>
struct Reducer {
  T identity;
  Combine combine;
};
template <class T, class Combine>
Reducer<T, std::decay_t<Combine>> reducer(T identity, Combine&& combine) {
  static_assert(std::is_copy_constructible_v<T>, "weft::reducer: T must be copyable");
  return {std::move(identity), std::forward<Combine>(combine)};
}

namespace detail {
template <class T, class Op>
struct ReducerOpsFor {
  static void init(void* dst, const void* r) {
    if constexpr (builtin_reducer<Op, T>) {
      (void)r;
      ::new (dst) T(Op::template identity<T>());
    } else {
      ::new (dst) T(static_cast<const Op*>(r)->identity);
    }
  }
  static void combine(void* into, const void* from, const void* r) {
    T& a = *static_cast<T*>(into);
    const T& b = *static_cast<const T*>(from);
    if constexpr (builtin_reducer<Op, T>) {
      (void)r;
      Op::combine(a, b);
    } else {
      auto& f = static_cast<const Op*>(r)->combine;
      if constexpr (std::is_invocable_v<decltype(f), T&, const T&> &&
                    std::is_void_v<std::invoke_result_t<decltype(f), T&, const T&>>)
        f(a, b);
      else
        a = f(std::as_const(a), b);
    }
  }
  static void destroy(void* p) noexcept { static_cast<T*>(p)->~T(); }
  static void* clone(const void* r) {
    if constexpr (builtin_reducer<Op, T>) {
      (void)r;
      return nullptr;
    } else {
      return new Op(*static_cast<const Op*>(r));
    }
  }
  static void drop(void* r) noexcept {
    if constexpr (!builtin_reducer<Op, T>) delete static_cast<Op*>(r);
  }
  static constexpr ReducerOps ops{sizeof(T), alignof(T), &type_tag<T>, &init, &combine, &destroy, &clone, &drop};
};

/// Whether the clause can be made (its operations are instantiated only then: a failed assertion is the only error).
template <class T, class Op>
constexpr bool check_reducer() {
  check_not_pointer<T>();
  static_assert(!std::is_const_v<T>, "weft::reduction: the datum must be modifiable");
  if constexpr (!builtin_reducer<Op, T>) {
    constexpr bool user_op = requires(const Op& o) { o.identity; o.combine; };
    static_assert(user_op,
                  "weft::reduction: the operator is weft::sum, product, minimum, maximum, bit_and, bit_or, "
                  "bit_xor, logical_and, logical_or or a weft::reducer(identity, combine)");
    return !std::is_const_v<T> && user_op;
  } else {
    return !std::is_const_v<T>;
  }
}
}  // namespace detail

/// A reduction clause (weft::reduction / weft::weak_reduction). Keep it within the spawn expression that makes
/// it: it points to its operator object, which must live until the spawn returns.
struct ReductionAccess {
  Access access;
  detail::ReductionSpec spec;
};

/// reduction(x, op): the task contributes to x through a private copy (Context::local(x)); consecutive
/// reductions of siblings on x with the same operator run concurrently and are combined into x once, before
/// any later access to x. weak_reduction(x, op): the task's children do the reducing (they join the same
/// reduction), the task itself is not delayed (OmpSs-2 weakreduction).
template <class T, class Op>
ReductionAccess reduction(T& object, const Op& op) {
  if constexpr (!detail::check_reducer<T, Op>())
    return {};
  else
    return {{std::addressof(object), sizeof(T), AccessMode::reduction},
            {std::addressof(object), &detail::ReducerOpsFor<T, Op>::ops, std::addressof(op)}};
}
template <class T, class Op>
ReductionAccess weak_reduction(T& object, const Op& op) {
  if constexpr (!detail::check_reducer<T, Op>())
    return {};
  else
    return {{std::addressof(object), sizeof(T), AccessMode::weak_reduction},
            {std::addressof(object), &detail::ReducerOpsFor<T, Op>::ops, std::addressof(op)}};
}

/// Scheduling priority of a task (larger runs earlier among ready tasks of a worker; the most recently queued
/// first among equal priorities).
struct priority {
  std::int32_t value;
  constexpr explicit priority(std::int32_t v) : value(v) {}
};
/// A name for profiles and traces. The string must outlive the run (use a string literal).
struct label {
  const char* text;
  constexpr explicit label(const char* t) : text(t) {}
};

/// Offloading (a job of several processes running one cluster Runtime: see weft/cluster.hpp). `weft::offload`
/// lets the runtime's policy pick the process that runs the task; `weft::node(n)` names it (0 ..
/// weft::num_nodes() - 1). Either makes the task offloadable, which the body must allow: it is copied as bytes
/// to the other process, so its type must be trivially copyable (checked at compile time), and what it captures
/// must mean the same there: values, and pointers into weft::dmalloc / weft::lmalloc memory only (never a
/// capture by reference: a pointer to this process's stack; one that points into the spawning thread's stack is
/// refused at run time with std::invalid_argument, but the stacks of other threads, e.g. the main thread's
/// locals captured by a task spawned from a child task, and heap pointers are not detected: such a task fails on
/// the other process, usually with a segmentation fault there that ends the job; nor is any pointer in a
/// closure with padding bytes if the compiler cannot clear them, as Clang 16 cannot: GCC can). In a job of one
/// process both clauses change nothing, but weft::node(n) still needs n < weft::num_nodes() (write
/// weft::node(i % weft::num_nodes()) for a program meant for any job size).
struct offload_t {
  explicit constexpr offload_t() = default;
};
inline constexpr offload_t offload{};
struct node {
  int rank;
  constexpr explicit node(int r) : rank(r) {}
};

/// A completion event of a task (Context::event; see the top of this file): the task completes only once it
/// is fulfilled. Move-only; fulfill() or fail() consumes it.
class Event {
 public:
  /// An empty handle: fulfill() and fail() throw, destruction does nothing.
  Event() noexcept = default;
  Event(Event&& o) noexcept : task_(o.task_), engine_(o.engine_) { o.task_ = nullptr; }
  /// Abandons the event *this holds, if any (the task fails, as on destruction), then takes o's.
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (task_) abandon();
      task_ = o.task_;
      engine_ = o.engine_;
      o.task_ = nullptr;
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// Holding an unfulfilled event: the task fails with std::logic_error (see the top of this file).
  ~Event() {
    if (task_) abandon();
  }

  /// The event happened: the task may complete (once its body has returned and its children finished). Any
  /// thread. Throws std::logic_error if the handle is empty (fulfilled already, moved from, default).
  void fulfill();
  /// The event failed with `error` (non-null): the task fails with it when it completes. Any thread. Throws
  /// std::logic_error if the handle is empty or `error` is null (the handle is then left as it was).
  void fail(std::exception_ptr error);
  /// Holds an event not fulfilled yet.
  bool pending() const noexcept { return task_ != nullptr; }
  explicit operator bool() const noexcept { return task_ != nullptr; }

 private:
  friend struct detail::ContextAccess;
  Event(detail::Task* t, detail::Engine* e) noexcept : task_(t), engine_(e) {}
  void abandon() noexcept;
  detail::Task* task_ = nullptr;
  detail::Engine* engine_ = nullptr;
};

namespace detail {
struct SpawnAttrs {
  std::int32_t priority = 0;
  const char* label = nullptr;
};

/// How a cluster runs an offloadable body elsewhere (one static table per body type): the closure is copied as
/// `size` bytes, and `invoke` (identified across processes by its place in the executable) calls it.
struct OffloadOps {
  std::size_t size;
  std::size_t align;
  bool inline_stored;                        ///< the closure lies in Task::body (else a pointer to it does)
  bool no_padding;                           ///< every byte of the stored closure is a member's (or zero)
  void (*invoke)(void* closure, Context& cx);
};
struct OffloadSpec {
  const OffloadOps* ops;
  int node;  ///< -1: the cluster's policy picks
};

// Compiled engine entry points (src/engine, src/deps).
Task* begin_spawn(Context& cx);                                     // throttle, then allocate
/// Registers and queues t; if registration throws, t (body included) is discarded and the exception goes on.
void finish_spawn(Context& cx, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs);
/// finish_spawn for a task with reduction clauses: specs[0 .. nr) give the operators of its reduction accesses.
void finish_spawn_reductions(Context& cx, Task* t, const Access* acc, std::size_t n, const ReductionSpec* specs,
                             std::size_t nr, const SpawnAttrs& attrs);
/// finish_spawn for an offloadable task (weft::offload, weft::node).
void finish_spawn_offload(Context& cx, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs,
                          const OffloadSpec& spec);
/// The calling task's private copy of the reduction on `address` (Context::local).
void* reduction_local(const Context& cx, const void* address, const void* type);
/// Returns a descriptor from begin_spawn whose body was never installed (its installation threw).
void discard_spawn(Context& cx, Task* t) noexcept;
void* allocate_large_body(std::size_t bytes, std::size_t align);
void free_large_body(void* p, std::size_t bytes, std::size_t align);

template <class F>
void invoke_body(F& f, Context& cx) {
  if constexpr (std::is_invocable_v<F&, Context&>)
    f(cx);
  else
    f();
}

// The body operations of a body type: kept in the descriptor (inline) when it fits, else on the heap.
template <class Fn>
struct InlineBody {
  static Fn* get(Task* t) { return std::launder(reinterpret_cast<Fn*>(t->body)); }
  static void run(Task* t, Context& cx) { invoke_body(*get(t), cx); }
  static void run_once(Task* t, Context& cx) {
    struct Destroy {
      Fn* p;
      ~Destroy() { p->~Fn(); }
    } guard{get(t)};  // destroyed even when the body throws
    invoke_body(*guard.p, cx);
  }
  static void destroy(Task* t) { get(t)->~Fn(); }
  static constexpr BodyOps ops{&run_once, &run, &destroy};
};
template <class Fn>
struct HeapBody {
  static Fn* get(Task* t) { return static_cast<Fn*>(*reinterpret_cast<void**>(t->body)); }
  static void run(Task* t, Context& cx) { invoke_body(*get(t), cx); }
  static void free(Fn* p) {
    p->~Fn();
    free_large_body(p, sizeof(Fn), alignof(Fn));
  }
  static void run_once(Task* t, Context& cx) {
    struct Destroy {
      Fn* p;
      ~Destroy() { free(p); }
    } guard{get(t)};
    invoke_body(*guard.p, cx);
  }
  static void destroy(Task* t) { free(get(t)); }
  static constexpr BodyOps ops{&run_once, &run, &destroy};
};

template <class F>
void install_body(Task* t, F&& f) {
  using Fn = std::decay_t<F>;
  static_assert(std::is_invocable_v<Fn&, Context&> || std::is_invocable_v<Fn&>,
                "weft: a task body must be callable as body() or body(weft::Context&)");
  if constexpr (sizeof(Fn) <= kInlineBody && alignof(Fn) <= 16) {
    ::new (static_cast<void*>(t->body)) Fn(std::forward<F>(f));
    t->body_ops = &InlineBody<Fn>::ops;
  } else {
    void* mem = allocate_large_body(sizeof(Fn), alignof(Fn));
    try {
      ::new (mem) Fn(std::forward<F>(f));
    } catch (...) {
      free_large_body(mem, sizeof(Fn), alignof(Fn));
      throw;
    }
    *reinterpret_cast<void**>(t->body) = mem;
    t->body_ops = &HeapBody<Fn>::ops;
  }
}

/// begin_spawn + install_body: a descriptor holding the body. If the body's copy or move (or the allocation
/// of a large body) throws, the descriptor goes back to its pool and the exception goes on.
template <class F>
Task* new_task(Context& cx, F&& f) {
  Task* t = begin_spawn(cx);
  using Fn = std::decay_t<F>;
  if constexpr (sizeof(Fn) <= kInlineBody && alignof(Fn) <= 16 && std::is_nothrow_constructible_v<Fn, F&&>) {
    install_body(t, std::forward<F>(f));
  } else {
    try {
      install_body(t, std::forward<F>(f));
    } catch (...) {
      discard_spawn(cx, t);
      throw;
    }
  }
  return t;
}

template <class C>
constexpr std::size_t is_access_v = std::is_same_v<std::decay_t<C>, Access> ? 1 : 0;
template <class C>
constexpr std::size_t is_offload_v =
    std::is_same_v<std::decay_t<C>, offload_t> || std::is_same_v<std::decay_t<C>, node> ? 1 : 0;
inline constexpr int kBadNode = -1000000;  // weft::node(r) with r < 0
template <class C>
constexpr int node_of(const C& c) {
  if constexpr (std::is_same_v<std::decay_t<C>, node>)
    return c.rank < 0 ? kBadNode : c.rank;  // -1 means weft::offload
  else
    return -1;
}

#if defined(__has_builtin)
#if __has_builtin(__builtin_clear_padding)
#define WEFT_DETAIL_CLEAR_PADDING 1
#endif
#endif
template <class Fn>
struct OffloadBody {
  static constexpr bool kInline = sizeof(Fn) <= kInlineBody && alignof(Fn) <= 16;
  static void invoke(void* closure, Context& cx) { invoke_body(*static_cast<Fn*>(closure), cx); }
  /// Zeroes the padding of the closure stored in t (GCC): the cluster reads the closure's words to refuse
  /// pointers into the spawning stack, and sends its bytes; a padding byte could hold a stale stack address.
  static Task* clear_padding(Task* t) noexcept {
#ifdef WEFT_DETAIL_CLEAR_PADDING
    __builtin_clear_padding(kInline ? InlineBody<Fn>::get(t) : HeapBody<Fn>::get(t));
#endif
    return t;
  }
#ifdef WEFT_DETAIL_CLEAR_PADDING
  static constexpr bool kNoPadding = true;
#else
  static constexpr bool kNoPadding = std::has_unique_object_representations_v<Fn>;
#endif
  static constexpr OffloadOps ops{sizeof(Fn), alignof(Fn), kInline, kNoPadding, &invoke};
};
template <class Fn>
constexpr bool check_offloadable() {  // (the spawn goes on only if it holds: its message is then the only error)
  static_assert(std::is_trivially_copyable_v<Fn>,
                "weft::offload / weft::node: an offloaded body is copied as bytes to another process, so it must be "
                "trivially copyable: capture values and pointers into weft::dmalloc/lmalloc memory, not "
                "std::vector, std::string, std::function or other owning objects");
  return std::is_trivially_copyable_v<Fn>;
}
template <class C>
constexpr std::size_t is_reduction_v = std::is_same_v<std::decay_t<C>, ReductionAccess> ? 1 : 0;
}  // namespace detail

/// The handle through which a running task (or the root function of Runtime::run) spawns and waits for its
/// children. It is valid only inside that task's body and only on the thread running it.
class Context {
 public:
  /// Spawns a child task running `body` after the earlier-spawned siblings it conflicts with (see top of
  /// file). Clauses: any number of weft::in/out/inout/inoutset/commutative/weak_*/reduction/weak_reduction
  /// accesses, at most one weft::priority and one weft::label, in any order.
  template <class F, class... Clauses>
  void spawn(F&& body, Clauses&&... clauses) {
    constexpr std::size_t nr = (std::size_t{0} + ... + detail::is_reduction_v<Clauses>);
    constexpr std::size_t n = (std::size_t{0} + ... + detail::is_access_v<Clauses>) + nr;
    Access accesses[n == 0 ? 1 : n];
    detail::SpawnAttrs attrs;
    [[maybe_unused]] std::size_t i = 0;
    constexpr std::size_t no = (std::size_t{0} + ... + detail::is_offload_v<Clauses>);
    static_assert(no <= 1, "weft: at most one weft::offload or weft::node clause");
    static_assert(no == 0 || nr == 0, "weft: a task with reduction clauses cannot be offloaded");
    if constexpr (nr == 0 && no == 0) {  // the usual spawn: reductions and offloading cost it nothing
      (add_clause(accesses, i, attrs, std::forward<Clauses>(clauses)), ...);
      detail::finish_spawn(*this, detail::new_task(*this, std::forward<F>(body)), accesses, n, attrs);
    } else if constexpr (no != 0 && nr == 0) {
      using Fn = std::decay_t<F>;
      if constexpr (detail::check_offloadable<Fn>()) {
        (add_clause(accesses, i, attrs, std::forward<Clauses>(clauses)), ...);
        const detail::OffloadSpec spec{&detail::OffloadBody<Fn>::ops, (-1 + ... + (detail::node_of(clauses) + 1))};
        detail::Task* t = detail::OffloadBody<Fn>::clear_padding(detail::new_task(*this, std::forward<F>(body)));
        detail::finish_spawn_offload(*this, t, accesses, n, attrs, spec);
      }
    } else if constexpr (no == 0) {
      detail::ReductionSpec specs[nr];
      std::size_t k = 0;
      auto clause = [&](auto&& c) {
        if constexpr (detail::is_reduction_v<decltype(c)>) {
          accesses[i++] = c.access;
          specs[k++] = c.spec;
        } else {
          add_clause(accesses, i, attrs, std::forward<decltype(c)>(c));
        }
      };
      (clause(std::forward<Clauses>(clauses)), ...);
      detail::finish_spawn_reductions(*this, detail::new_task(*this, std::forward<F>(body)), accesses, n, specs, nr,
                                      attrs);
    }
  }

  /// Inside a task with a reduction (or weak_reduction) clause on x: this worker's private copy of the reduction,
  /// created on first use and initialised to the operator's identity. Tasks of the same reduction running on one
  /// worker share its copy; the copies are combined into x after the last of them. Throws std::logic_error if
  /// the task declares no reduction on x (or one on another type).
  template <class T>
  T& local(T& x) const {
    detail::check_not_pointer<T>();
    return *static_cast<T*>(detail::reduction_local(*this, std::addressof(x), &detail::type_tag<T>));
  }

  /// Like spawn, for accesses whose number is known only at run time (e.g. one weft::in per input of a graph
  /// node): accesses[0 .. n) (read during the call only), plus at most one weft::priority and one weft::label.
  ///   std::vector<weft::Access> acc;  // reuse it from spawn to spawn
  ///   for (auto* p : inputs) acc.push_back(weft::in(*p));
  ///   acc.push_back(weft::out(result));
  ///   cx.spawn_accesses([&] { ... }, acc.data(), acc.size());
  template <class F, class... Clauses>
  void spawn_accesses(F&& body, const Access* accesses, std::size_t n, Clauses&&... clauses) {
    static_assert((std::size_t{0} + ... + detail::is_access_v<Clauses>) == 0,
                  "weft: spawn_accesses takes its accesses as an array; other clauses are priority, label, "
                  "weft::offload and weft::node");
    constexpr std::size_t no = (std::size_t{0} + ... + detail::is_offload_v<Clauses>);
    static_assert(no <= 1, "weft: at most one weft::offload or weft::node clause");
    detail::SpawnAttrs attrs;
    [[maybe_unused]] std::size_t i = 0;
    (add_clause(static_cast<Access*>(nullptr), i, attrs, std::forward<Clauses>(clauses)), ...);
    for (std::size_t k = 0; k < n; ++k)  // an Access built by hand: its mode must be one of AccessMode's
      if (static_cast<unsigned>(accesses[k].mode) > static_cast<unsigned>(AccessMode::weak_reduction)) [[unlikely]]
        detail::bad_access_mode(k, static_cast<unsigned>(accesses[k].mode));
    if constexpr (no != 0) {
      using Fn = std::decay_t<F>;
      if constexpr (detail::check_offloadable<Fn>()) {
        const detail::OffloadSpec spec{&detail::OffloadBody<Fn>::ops, (-1 + ... + (detail::node_of(clauses) + 1))};
        detail::Task* t = detail::OffloadBody<Fn>::clear_padding(detail::new_task(*this, std::forward<F>(body)));
        detail::finish_spawn_offload(*this, t, accesses, n, attrs, spec);
      }
    } else {
      detail::finish_spawn(*this, detail::new_task(*this, std::forward<F>(body)), accesses, n, attrs);
    }
  }

  /// Waits until every child spawned so far by this task has finished (running other ready tasks meanwhile),
  /// then rethrows the first exception a child threw, if any. Running them inline nests their frames on this
  /// thread's stack: a chain of tasks each waiting for its child takes a few hundred bytes per level, so with
  /// 8 MiB stacks (the usual `ulimit -s`, which worker threads get too) somewhere beyond ~20,000 levels it
  /// overflows the stack (a crash, not an error); raise `ulimit -s`, or recurse in a loop of tasks instead.
  void taskwait();
  /// In a job of several processes (a cluster Runtime, weft/cluster.hpp), taskwait() also brings the data the
  /// children accessed since this task's previous taskwait() to this process (a flush); taskwait_noflush()
  /// waits without moving any data (the results stay where they were computed until a task or a later
  /// taskwait() needs them). In one process the two are the same.
  void taskwait_noflush();
  /// Waits only for the earlier siblings that write the datum starting at `address` (the tasks an `in` access
  /// to it would wait for), then rethrows a pending child exception, if any.
  void taskwait_on(const void* address);
  template <class T>
  void taskwait_on(const T& object) {
    static_assert(!std::is_pointer_v<T>,
                  "weft: taskwait_on(p) on a pointer would name the pointer variable itself; write taskwait_on(*p) "
                  "for the object it points to, or pass the datum's start address as a const void*: "
                  "taskwait_on(static_cast<const void*>(p)) (a datum that is itself a pointer: its address)");
    taskwait_on(static_cast<const void*>(std::addressof(object)));
  }

  /// Persistent cyclic task graphs: runs body once to record its tasks, then replays them for n iterations
  /// (see weft/taskiter.hpp). The taskiter is itself a child task ordered by its access clauses.
  template <class Body, class... Clauses>
  void taskiter(std::uint64_t n, Body&& body, Clauses&&... clauses);
  /// Like taskiter, while cond() holds (see weft/taskiter.hpp).
  template <class Cond, class Body, class... Clauses>
  void taskiter_while(Cond&& cond, Body&& body, Clauses&&... clauses);

  /// A completion event of this task: the task completes only once the event is fulfilled (as well as its body
  /// returned and its children finished). See "Completion events" at the top of this file. Throws
  /// weft::taskiter_error in a taskiter body itself (the recorder); the tasks it spawns, replayed every
  /// iteration, may take events (a fresh one each iteration).
  Event event();

  /// Index of the worker running this task, 0 .. num_workers()-1.
  unsigned worker_id() const;
  unsigned num_workers() const;

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  friend struct detail::ContextAccess;  // the runtime creates Contexts and reads what they stand for
  Context(detail::Task* task, detail::Worker* worker) : task_(task), worker_(worker) {}

  template <class C>
  static void add_clause(Access* acc, std::size_t& i, detail::SpawnAttrs& attrs, C&& c) {
    using D = std::decay_t<C>;
    if constexpr (std::is_same_v<D, Access>)
      acc[i++] = c;
    else if constexpr (std::is_same_v<D, priority>)
      attrs.priority = c.value;
    else if constexpr (std::is_same_v<D, label>)
      attrs.label = c.text;
    else if constexpr (std::is_same_v<D, ReductionAccess>)
      static_assert(sizeof(D) == 0, "weft: reduction clauses are accepted by Context::spawn only");
    else if constexpr (std::is_same_v<D, offload_t> || std::is_same_v<D, node>)
      (void)c;  // read by spawn (OffloadSpec)
    else
      static_assert(sizeof(D) == 0,
                    "weft: spawn clauses are accesses (weft::in, ...), weft::priority, weft::label, weft::offload, "
                    "weft::node");
  }

  template <class Closure, class... Clauses>
  void spawn_taskiter(Closure&& closure, Clauses&&... clauses);

  detail::Task* task_;
  detail::Worker* worker_;
};

namespace detail {
/// The runtime's access to a Context (not part of the API).
struct ContextAccess {
  static Context make(Task* t, Worker* w) { return Context(t, w); }
  static Task* task(const Context& cx) { return cx.task_; }
  static Worker* worker(const Context& cx) { return cx.worker_; }
  static Event make_event(Task* t, Engine* e) { return Event(t, e); }
  static Task* event_task(const Event& ev) { return ev.task_; }
};
}  // namespace detail

}  // namespace weft

#include "weft/taskiter.hpp"  // defines Context::taskiter / taskiter_while
