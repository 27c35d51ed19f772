// The dependency front end's internal interface (src/deps): its task kinds, access registration and the
// recycling of a parent's children. A client of the engine (src/engine/engine.hpp), which never calls it but
// through the kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/kind.hpp"

namespace weft::detail {

/// A task spawned by Context::spawn (and the root of a run): runs its body, and when it completes frees what
/// it keeps for its own children and releases its successors.
extern const TaskKind kDependencyTask;
/// A dependency task with commutative accesses: holds their locks while its body runs.
extern const TaskKind kCommutativeTask;
/// An internal node that stands for a group of tasks (inoutset or commutative members, readers) in later
/// accesses: m + n edges instead of m * n.
extern const TaskKind kJoinNode;
/// The node of a weak access of a task: the task's children accessing that datum wait on it, and the task
/// completes only after it (it counts in the task's `alive`). Owned by the task, not by a domain.
extern const TaskKind kWeakNode;
/// The same for a task whose kind reports weak accesses becoming ready (TaskKind::weak_ready: a task of a
/// cluster). The node, not the task, says so: a task's kind may change while it is registered (commutative,
/// reduction), when a predecessor may already complete the node; a node's kind is set before it is linked.
extern const TaskKind kReportedWeakNode;
inline bool is_weak_node(const Task* t) { return t->kind == &kWeakNode || t->kind == &kReportedWeakNode; }

/// The run function of kDependencyTask (its complete step, complete_dependency, is below), for kinds built on it
/// (src/cluster): only for kinds whose complete step is complete_dependency, which it inlines.
void run_dependency(Worker& w, Task* t);
/// A dependency task of a job of several processes (src/cluster): run here or on another process.
extern const TaskKind kClusterTask;

/// A weak access of a task (Task::weak): the node its children accessing the datum wait on.
struct WeakLink {
  const void* address;
  Task* node;
  /// A task of a cluster: the node that stands for this access in its parent's domain (see kAccessRelease).
  Task* release = nullptr;
};
/// The node that stands for a weak access of a task of a cluster (TaskKind::weak_ready) in its parent's domain:
/// later accesses to the datum wait on it, not on the task, so that the access can be released on its own, when
/// the task's body has returned and its children on the datum have finished (paper 004's release of an access).
/// It finishes when its task's kind fires it (release_access), at the latest when the task completes. Named by
/// records like a join node (counted), not counted in its producer's children.
extern const TaskKind kAccessRelease;
/// Fires r (a kAccessRelease node), cancelled too when `poison`: if nothing else holds it, it completes now, on
/// this thread (its successors released, the ready ones offered to `best` or pushed to `todo`).
void release_access(Worker& w, Task* r, bool poison, Task*& best, std::vector<Task*>& todo);

/// A task with reduction accesses (see reduction.cpp): frees its reduction links when it completes.
extern const TaskKind kReductionTask;
/// An internal node that closes a reduction group: it waits for the members, then combines their private
/// copies into the datum (in its completion) and stands for the group in later accesses.
extern const TaskKind kReduceNode;

/// The state of one reduction group: its datum, operator and the workers' private copies. Owned by the record
/// of the domain that started the group; combined and freed by the node that closes it (or by the owner at a
/// taskwait or at its end).
struct ReductionGroup {
  void* target;
  const ReducerOps* ops;
  void* reducer;                 ///< the group's copy of the operator (null: stateless)
  ReductionGroup* held_next;     ///< phase 1 of a registration: groups to free if it fails
  std::uint32_t n_slots;
  void** slots;                  ///< per worker: its private copy, or null. Slot i is touched only by worker i
                                 ///< until the group is combined (after every member finished).
};
struct ReductionLink {
  const void* address;
  ReductionGroup* group;
};
/// The reductions of a task (Task::reductions): its children's reductions on these data join these groups.
struct ReductionLinks {
  std::vector<ReductionLink> links;
};
/// The replayed tasks of taskiter (src/iter), and the same in the first period, run as they are recorded: a
/// recorded task with reductions keeps its links in its vertex.
extern const TaskKind kReplayedTask;
extern const TaskKind kFirstRunTask;
extern const TaskKind kUpdatedTask;  ///< a replayed task of a pipelined weft::update loop (no reductions)
/// An instance of a task recorded by a taskiter: its first run, a replayed one, or one of a pipelined update.
inline bool is_taskiter_instance(const Task* t) {
  return t->kind == &kReplayedTask || t->kind == &kFirstRunTask || t->kind == &kUpdatedTask;
}
const ReductionLinks* replayed_reduction_links(const Task* t);
/// The reductions of a running task t (null if it has none): its children's reductions join them.
inline const ReductionLinks* reduction_links(const Task* t) {
  if (t->kind == &kReductionTask) return t->reductions;
  if (t->kind == &kReplayedTask || t->kind == &kFirstRunTask) [[unlikely]]
    return replayed_reduction_links(t);
  return nullptr;
}
/// Combines g's copies into its datum and frees them, leaving g empty for the next iteration (the combine
/// vertex of a taskiter). Rethrows the first exception of the combiner, having freed every copy.
void combine_and_reset(ReductionGroup* g);
/// A new group for `spec` (may throw: phase 1).
ReductionGroup* new_reduction_group(Worker& w, const ReductionSpec& spec);
/// Combines g's private copies into its datum (unless `discard`) and frees g. An exception of the combiner is
/// recorded as a child error of `error_to`; returns false then.
bool finish_reduction_group(Worker& w, ReductionGroup* g, bool discard, Task* error_to) noexcept;
/// The closing node n of a group: combines (unless n was cancelled: a member failed) and frees its group.
void finish_reduce_node(Worker& w, Task* n) noexcept;
/// Closes t's open reduction groups (all members finished: after a taskwait), combining them now.
void settle_reductions(Worker& w, Task* t);
/// Closes the open reduction group of t's children on `address`, if any, with a node (before taskwait_on).
void close_reduction(Worker& w, Task* t, const void* address);

/// The usual spawn of t, a child of p (finish_spawn without the parent's diversion): registers its accesses,
/// then queues it if it is ready. If registration throws, t is discarded (body included; Task::iter, which a
/// kind may have used, is cleared first) and the exception goes on.
void register_and_schedule(Worker& w, Task* p, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs);
/// Registers t's accesses (n >= 1) in the domain of its parent; links t after its predecessors. Returns true if t
/// is ready now. Throws (only std::bad_alloc) having registered nothing.
bool register_accesses(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n);
/// Collects into w.scratch the tasks an `in` access to `address` would wait for.
void writers_of(Worker& w, Task* parent, const void* address);
/// The unfinished tasks an access of `mode` to `address`, spawned now by `parent`, would wait for (appended to
/// `out`). False where that is not a plain list of tasks: a group (inoutset, commutative, reduction) or a join
/// node, the parent's weak node, or a finished predecessor that failed (the accessor would be cancelled). The
/// thread running parent's body (the domain's owner).
bool pending_predecessors(Task* parent, const void* address, AccessMode mode, std::vector<Task*>& out);
/// A node of `kind` (producer `parent`, `tag` in its body storage) linked after every unfinished task or node
/// that a later access to `address` by a child of `parent` would have to follow, whatever its mode: the record's
/// writer, readers, group and its predecessor, or, without a record, the parent's weak node for it. Sets `ready`
/// when there was nothing to follow (the caller completes it). The thread running parent's body.
Task* follow_accessors(Worker& w, Task* parent, const void* address, const TaskKind* kind, std::uint32_t tag,
                       bool& ready);
/// Whether a child of `parent` has accessed `address` and is still named by its record (the thread running
/// parent's body).
bool children_accessed(Task* parent, const void* address);
/// Frees the records of t's domain and the children they name (all finished).
void destroy_domain(Worker& w, Task* t);
/// Drops the records of t's domain that name only finished tasks (owner thread), not failed ones unless
/// `failed_too` (a taskwait: the failure has been delivered, later children start afresh).
void sweep_domain(Worker& w, Task* t, bool failed_too = false);
/// Frees the weak nodes of t (called when t itself is freed).
void destroy_weak_links(Worker& w, Task* t);
/// Commutative mutual exclusion: take every lock of t, or park t on a busy one (it is rescheduled when the lock
/// is released) and return false.
bool acquire_commutative(Worker& w, Task* t);
void release_commutative(Worker& w, Task* t);

/// t is no longer named by a record of producer's domain: appended to the producer's retired list, recycled once
/// finished (producer thread only). Inline: called for nearly every task by the domain code.
inline void retire(Task* producer, Task* t) {
  WEFT_ASSERT(t->record_refs == 0 && t->parent == producer);
  t->retired_next = nullptr;
  if (producer->retired_tail)
    producer->retired_tail->retired_next = t;
  else
    producer->retired_head = t;
  producer->retired_tail = t;
  ++producer->retired_count;
}
/// Frees what hangs off a descriptor of this front end: edge arrays, weak links, lock arrays.
void free_extras(Worker& w, Task* t);
/// Frees a descriptor created by this front end, with what hangs off it.
inline void free_dependency_task(Worker& w, Task* t) {
  if (t->extra_edges || t->weak || t->comm) [[unlikely]]
    free_extras(w, t);
  free_task(w, t);
}
/// Frees the finished children on p's retired list: the oldest ones, or all of them (`full`).
void sweep_retired(Worker& w, Task* p, bool full);
/// The first step of completing a task that may have had children (a dependency task, a replayed task): frees
/// its children's records and descriptors, and fails it with a child's exception its body did not rethrow.
/// Returns true if t failed (its successors are cancelled).
void free_children(Worker& w, Task* t);  ///< its retired list and its domain (all finished)
/// end_children's rare case: children to free, or weak accesses (a weak predecessor that failed cancels t's
/// successors: its body ran, as weak accesses never delay it, whatever the timing of the failure).
void end_children_rest(Worker& w, Task* t);
/// kWeak false: t's kind never has weak accesses (a taskiter instance).
template <bool kWeak = true>
inline bool end_children(Worker& w, Task* t) {
  // One test for the three (or-ed): the usual case, no child's record and no weak access, is on every
  // dependency task's path.
  if (reinterpret_cast<std::uintptr_t>(t->retired_head) | reinterpret_cast<std::uintptr_t>(t->domain) |
      (kWeak ? reinterpret_cast<std::uintptr_t>(t->weak) : 0)) [[unlikely]]
    end_children_rest(w, t);
  if (t->has_error.load(std::memory_order_acquire)) [[unlikely]]
    fail_with_child_error(w, t);
  return t->cancelled.load(std::memory_order_relaxed);
}

/// The complete step of a dependency task (TaskKind::complete): inline, as run_dependency completes its tasks
/// with it (end_body_as<complete_dependency>).
[[gnu::always_inline]] inline bool complete_dependency(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  release_successors(w, t, end_children(w, t), best, todo);
  return true;  // a finished child of its parent
}

}  // namespace weft::detail
