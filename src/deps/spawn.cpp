// The dependency front end (weft/tasks.hpp) on the engine: its kinds of task, spawning, waiting, and the
// recycling of a parent's children. Registration itself (records, edges, groups) is in domain.cpp.
//
// Descriptor lifetime: a child is named by records of its parent's domain (record_refs); once no record names it,
// it is retired to its parent's list and recycled there once finished, by the parent's body thread only (so the
// records' pointers stay valid while that thread reads them).
#include <stdexcept>
#include <string>
#include <vector>

#include "cluster/cluster.hpp"
#include "deps/deps.hpp"
#include "trace/hooks.hpp"

namespace weft::detail {

namespace {

constexpr std::uint32_t kSweepAt = 64;  // retirements between two recycling passes


// --- the kinds ---

}  // namespace

// For the kinds whose complete step is complete_dependency (kDependencyTask, kClusterTask).
void run_dependency(Worker& w, Task* t) {
  WEFT_ASSERT(t->kind->complete == &complete_dependency);
  run_body(w, t);
  end_body_as<&complete_dependency>(w, t);
}

namespace {

void run_commutative(Worker& w, Task* t) {
  if (!acquire_commutative(w, t)) return;  // parked until a lock is released
  run_body(w, t);
  // The exclusion covers the body only: holding the locks until the children (or the weak predecessors, which
  // may be other members) finish could deadlock.
  release_commutative(w, t);
  end_body(w, t);
}

}  // namespace

namespace {

// A reducing task: its commutative locks, if it has any, as a commutative task; its reduction links live until it
// completes (its children's registrations read them while its body runs).
void run_reduction(Worker& w, Task* t) {
  if (t->n_comm) {
    run_commutative(w, t);
    return;
  }
  run_plain(w, t);
}

bool complete_reduction(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  delete t->reductions;  // before release_successors: t then belongs to its producer
  t->reductions = nullptr;
  return complete_dependency(w, t, best, todo);
}

bool complete_reduce(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  finish_reduce_node(w, t);  // may poison t (a combiner threw)
  release_successors(w, t, t->cancelled.load(std::memory_order_relaxed), best, todo);
  return false;  // not counted in its producer's children
}

bool complete_join(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  release_successors(w, t, t->cancelled.load(std::memory_order_relaxed), best, todo);
  return false;  // not counted in its producer's children
}

bool complete_weak_node(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo, bool cancel_owner);

// A task of a cluster learns where the datum is now, before the children waiting on the node are released.
bool complete_reported_weak(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  t->parent->kind->weak_ready(w, t->parent, t);
  return complete_weak_node(w, t, best, todo, true);
}

// A weak predecessor failed: the node is poisoned, so the owner's children on the datum are cancelled; the
// owner's body is not (a weak access never delays it, so whether it had started would be timing): the owner's
// own successors are cancelled when it completes (end_children_rest). `cancel_owner`: a task of a cluster,
// whose body is skipped if it has not started (see kReportedWeakNode).
bool complete_weak_node(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo, bool cancel_owner) {
  Task* const owner = t->parent;  // the task whose weak access this node stands for; it frees the node
  const bool poison = t->cancelled.load(std::memory_order_relaxed);
  release_successors(w, t, poison, best, todo);
  if (poison && cancel_owner) owner->cancelled.store(true, std::memory_order_relaxed);
  if (owner->alive.fetch_sub(kWeakUnit, std::memory_order_acq_rel) == kWeakUnit) todo.push_back(owner);
  return false;
}

bool complete_weak(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  return complete_weak_node(w, t, best, todo, false);
}

}  // namespace

const TaskKind kDependencyTask{"dependency", false, false, &run_dependency, &complete_dependency, nullptr, nullptr,
                               nullptr, nullptr};
const TaskKind kCommutativeTask{"commutative", false, false, &run_commutative, &complete_dependency, nullptr, nullptr,
                               nullptr, nullptr};
const TaskKind kJoinNode{"join", true, false, nullptr, &complete_join, nullptr, nullptr, nullptr, nullptr};
const TaskKind kWeakNode{"weak", true, false, nullptr, &complete_weak, nullptr, nullptr, nullptr, nullptr};
const TaskKind kReportedWeakNode{"weak", true, false, nullptr, &complete_reported_weak, nullptr, nullptr, nullptr,
                                 nullptr};
const TaskKind kAccessRelease{"release", true, false, nullptr, &complete_join, nullptr, nullptr, nullptr, nullptr};

void release_access(Worker& w, Task* r, bool poison, Task*& best, std::vector<Task*>& todo) {
  WEFT_ASSERT(r->kind == &kAccessRelease);
  if (poison) r->cancelled.store(true, std::memory_order_relaxed);
  // acq_rel: what the access's task and its children wrote happens before the successors run.
  if (r->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) complete_join(w, r, best, todo);
}

const TaskKind kReductionTask{"reduction", false, false, &run_reduction, &complete_reduction, nullptr, nullptr,
                               nullptr, nullptr};
const TaskKind kReduceNode{"combine", true, false, nullptr, &complete_reduce, nullptr, nullptr, nullptr, nullptr};

void free_children(Worker& w, Task* t) {
  for (Task* c = t->retired_head; c;) {
    Task* nx = c->retired_next;
    free_dependency_task(w, c);
    c = nx;
  }
  t->retired_head = t->retired_tail = nullptr;
  t->retired_count = 0;
  if (t->domain) destroy_domain(w, t);
}

void end_children_rest(Worker& w, Task* t) {
  if (t->retired_head || t->domain) free_children(w, t);
  // Every weak node of t has completed (each counts in t's `alive`): their poison is final.
  for (std::uint8_t k = 0; k < t->n_weak; ++k)
    if (t->weak[k].node->cancelled.load(std::memory_order_relaxed)) {
      t->cancelled.store(true, std::memory_order_relaxed);  // poisons t's successors
      break;
    }
}

void free_extras(Worker& w, Task* t) {
  if (t->extra_edges) {
    free_edges(w, t->extra_edges);
    t->extra_edges = nullptr;
  }
  if (t->weak) destroy_weak_links(w, t);
  if (t->comm) {
    delete[] t->comm;
    t->comm = nullptr;
    t->n_comm = 0;
  }
}

// Frees finished retired children: the oldest first (cheap, and enough when children finish in order), and the
// whole list when it has grown well beyond the throttling bound (children finishing out of order).
void sweep_retired(Worker& w, Task* p, bool full) {
  while (p->retired_head && finished(p->retired_head)) {
    Task* t = p->retired_head;
    p->retired_head = t->retired_next;
    --p->retired_count;
    free_dependency_task(w, t);
  }
  if (!p->retired_head) p->retired_tail = nullptr;
  if (!full) return;
  Task* prev = nullptr;
  for (Task* t = p->retired_head; t;) {
    Task* nx = t->retired_next;
    if (finished(t)) {
      (prev ? prev->retired_next : p->retired_head) = nx;
      --p->retired_count;
      free_dependency_task(w, t);
    } else {
      prev = t;
    }
    t = nx;
  }
  p->retired_tail = prev;
}

// ---------------------------------------------------------------------------------------------------------
// Spawning (called from the templated front end)
// ---------------------------------------------------------------------------------------------------------

Task* begin_spawn(Context& cx) {
  Worker& w = *ContextAccess::worker(cx);
  Task* p = ContextAccess::task(cx);
  throttle(w, p);
  // Recycle finished children once kSweepAt more have retired (amortised: one pass frees a batch). Retirements
  // come in bursts (a pruned reader list, a closed group, a domain sweep): a threshold, not a multiple, or
  // bursts would step over it. One threshold per worker: producers that alternate on a worker (nested bodies)
  // share it, which can only advance or delay a pass by a bounded amount (a retired list is itself bounded by
  // the full pass).
  if (p->retired_count >= w.sweep_next) [[unlikely]] {
    trace::on_runtime(w);
    const auto limit = static_cast<std::uint32_t>(w.engine->options.max_tasks);
    sweep_retired(w, p, p->retired_count >= 2 * limit + kSweepAt);
    w.sweep_next = p->retired_count + kSweepAt;
  }
  Task* t = w.allocate();
  init_task(w, t, p, &kDependencyTask);
  trace::on_spawn_begin(w, t);  // before t is published: its trace id
  return t;
}

namespace {
// The spawn path's body, inlined into finish_spawn (the hot path) and register_and_schedule.
[[gnu::always_inline]] inline void register_and_schedule_here(Worker& w, Task* p, Task* t, const Access* acc,
                                                            std::size_t n, const SpawnAttrs& attrs) {
  t->priority = attrs.priority;
  t->label = attrs.label;
  ++p->unpublished;
  ++w.counters.tasks_created;
  bool ready;
  if (n == 0) {
    t->pending.store(0, std::memory_order_relaxed);
    ready = true;
  } else {
    try {
      ready = register_accesses(w, p, t, acc, n);
    } catch (...) {  // nothing was registered (see domain.cpp): the task never existed, nobody waits for it
      --p->unpublished;
      --w.counters.tasks_created;
      t->body_ops->destroy(t);
      t->iter = nullptr;  // a cluster's state (its owner frees it)
      free_dependency_task(w, t);  // discard_spawn, from w: cx need not stay live across the registration
      trace::on_spawn_end(w);
      throw;
    }
  }
  if (t->record_refs == 0) retire(p, t);
  if (ready) schedule(w, t);
  trace::on_spawn_end(w);
}
}  // namespace

void finish_spawn(Context& cx, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs) {
  Worker& w = *ContextAccess::worker(cx);
  Task* p = ContextAccess::task(cx);
  if (p->kind->divert_spawn) [[unlikely]]
    return p->kind->divert_spawn(w, p, t, acc, n, attrs);
  register_and_schedule_here(w, p, t, acc, n, attrs);
}

void register_and_schedule(Worker& w, Task* p, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs) {
  register_and_schedule_here(w, p, t, acc, n, attrs);
}

void finish_spawn_reductions(Context& cx, Task* t, const Access* acc, std::size_t n, const ReductionSpec* specs,
                             std::size_t nr, const SpawnAttrs& attrs) {
  Worker& w = *ContextAccess::worker(cx);
  // The registration looks the operators up by address (phase 1 of register_general): no field of Access, so
  // that spawns without reductions build their clauses exactly as before.
  struct Stash {
    Worker& w;
    ~Stash() {
      w.red_specs = nullptr;
      w.n_red_specs = 0;
    }
  } stash{w};
  w.red_specs = specs;
  w.n_red_specs = nr;
  finish_spawn(cx, t, acc, n, attrs);
}

void bad_access_mode(std::size_t index, unsigned mode) {
  throw std::invalid_argument("weft: spawn_accesses: access " + std::to_string(index) + " has mode " +
                              std::to_string(mode) + ", which is no weft::AccessMode (build accesses with "
                              "weft::in, weft::out, ... or give one of AccessMode's values)");
}

void discard_spawn(Context& cx, Task* t) noexcept {
  Worker& w = *ContextAccess::worker(cx);
  free_dependency_task(w, t);  // registration may have sized weak-link or lock arrays
  trace::on_spawn_end(w);
}

}  // namespace weft::detail

// ---------------------------------------------------------------------------------------------------------
// Public API: the Context of dependency tasks, and the root of a run
// ---------------------------------------------------------------------------------------------------------

namespace weft {

void Runtime::run_root(void (*call)(void*, Context&), void* arg) {
  if (engine_->options.cluster && detail::cluster_run(*engine_, call, arg)) [[unlikely]]
    return;
  engine_->run_root(&detail::kDependencyTask, call, arg);
}

namespace {
void wait_children(Context& cx, detail::Task* t, detail::Worker& w, bool flush) {
  if (t->kind->refuse_wait) t->kind->refuse_wait(t, flush ? "taskwait" : "taskwait_noflush");
  detail::trace::on_wait_begin(w);
  detail::wait_for_children(w, t);
  detail::settle_reductions(w, t);  // open reductions are combined: the taskwait sees their result
  // Every child has finished: what the domain still names can go, failed tasks included (the failure is
  // rethrown below; children spawned after this wait start afresh).
  detail::sweep_domain(w, t, /*failed_too=*/true);
  detail::sweep_retired(w, t, /*full=*/true);
  if (t->kind->after_wait) [[unlikely]]  // a task of a cluster: its children's data comes here (src/cluster)
    t->kind->after_wait(w, t, nullptr, flush);
  detail::trace::on_wait_end(w);
  detail::rethrow_child_error(w, t);
  (void)cx;
}
}  // namespace

void Context::taskwait() { wait_children(*this, task_, *worker_, true); }

void Context::taskwait_noflush() { wait_children(*this, task_, *worker_, false); }

void Context::taskwait_on(const void* address) {
  detail::Worker& w = *worker_;
  if (task_->kind->refuse_wait) task_->kind->refuse_wait(task_, "taskwait_on");
  detail::trace::on_wait_begin(w);
  // An open reduction on the datum is closed here (a node that combines once its members have finished), so
  // that what the wait returns to is the combined value.
  detail::close_reduction(w, task_, address);
  detail::writers_of(w, task_, address);
  std::vector<detail::Task*> preds(w.scratch.data(), w.scratch.data() + w.scratch.size());
  w.scratch.clear();
  detail::publish_children(task_);  // the writers may be unpublished children
  detail::wait_until(w, [&] {
    for (detail::Task* p : preds)
      if (!detail::finished(p)) return false;
    return true;
  });
  if (task_->kind->after_wait) [[unlikely]]  // a task of a cluster: the datum comes here (src/cluster)
    task_->kind->after_wait(w, task_, address, true);
  detail::trace::on_wait_end(w);
  detail::rethrow_child_error(w, task_);
}


// An event of a dependency task, of a replayed taskiter task (its body runs again every iteration and takes its
// events anew; an instance completes, and releases that iteration's successors, only once they are fulfilled),
// or of the root: a unit of its `alive` count (see fulfill_event, engine.cpp). The taskiter body itself (the
// recorder, whose spawns do not run) cannot take one.
Event Context::event() {
  detail::Task* t = task_;
  if (t->kind != &detail::kDependencyTask && t->kind != &detail::kCommutativeTask &&
      !detail::is_taskiter_instance(t) && t->kind != &detail::kReductionTask &&
      t->kind != &detail::kClusterTask) [[unlikely]]
    throw taskiter_error(std::string("weft: Context::event: a ") + t->kind->name +
                         " task (a taskiter body) cannot take a completion event; take it in a task the body "
                         "spawns");
  // relaxed: the body's guard keeps t from completing while it runs; the handle reaches other threads only
  // through a synchronisation of the program's own, which orders this before their fulfil.
  t->alive.fetch_add(detail::kEventUnit, std::memory_order_relaxed);
  // Relaxed: a hint for the parent's throttling (see held_events); t keeps the parent from completing.
  if (detail::Task* p = t->parent) detail::held_events(p).fetch_add(1, std::memory_order_relaxed);
  return detail::ContextAccess::make_event(t, worker_->engine);
}

unsigned Context::worker_id() const { return worker_->id; }
unsigned Context::num_workers() const { return worker_->engine->options.num_threads; }

}  // namespace weft
