// What the kinds of task share (src/engine/engine.hpp: TaskKind): the steps their run and complete functions
// are made of. Inline: they are the hot paths of every kind.
#pragma once

#include <vector>

#include "engine/engine.hpp"
#include "trace/hooks.hpp"

namespace weft::detail {

/// Runs t's body once (then destroys it) on w, unless t was cancelled (then only destroys it). An exception
/// escaping the body fails t: its successors are cancelled and its parent records the exception. Inline, as
/// the next two: the kinds' hot paths are made of them. kTraced false: the caller knows that w traces nothing.
template <bool kTraced = true>
inline void run_body(Worker& w, Task* t) {
  if (t->cancelled.load(std::memory_order_relaxed)) [[unlikely]] {
    t->body_ops->destroy(t);
    ++w.counters.tasks_cancelled;
    return;
  }
  Context cx = ContextAccess::make(t, &w);
  if constexpr (kTraced) trace::on_body_begin(w, t);
  try {
    t->body_ops->run_once(t, cx);
  } catch (...) {
    t->cancelled.store(true, std::memory_order_relaxed);  // poisons the successors
    record_error(w, t->parent, std::current_exception());
  }
  if constexpr (kTraced) trace::on_body_end(w, t);
  ++w.counters.tasks_executed;
}
/// Completes t (see TaskKind::complete), then, transitively, the join nodes and parents that completes; the best
/// task readied becomes w's immediate successor.
void complete(Worker& w, Task* t);
/// A complete step (TaskKind::complete).
using CompleteStep = bool (*)(Worker&, Task*, Task*&, std::vector<Task*>&);
/// complete(w, t) for a task whose kind's complete step is `Step`, inlined into the kind's run function: the
/// usual outcome (no join node readied, the finished child counted in the worker's batch, or none owed) costs no
/// call; any other continues out of line (complete_rest), exactly as complete() would. Returns the best task
/// readied in the usual outcome, not yet settled (the caller settles it: settle_best, or runs it in place),
/// else null (settled); with kSettle, settles it and returns null. kReadiesNodes: the step may push to its
/// `todo` (false: it never does, and the test is left out).
template <CompleteStep Step, bool kReadiesNodes, bool kSettle>
[[gnu::always_inline]] inline Task* complete_as(Worker& w, Task* t) {
  std::vector<Task*>& todo = w.completing;
  const std::size_t base = kReadiesNodes ? todo.size() : 0;
  Task* const parent = t->parent;  // read first: once completed, t may be recycled
  Task* best = nullptr;
  Task* const owed = Step(w, t, best, todo) ? parent : nullptr;
  if (!kReadiesNodes || todo.size() == base) [[likely]] {
    if constexpr (kSettle) {  // (two settles: the compiler keeps the usual case straight)
      if (!owed) return settle_best(w, best), nullptr;
      if (count_child_in_batch(w, owed)) [[likely]]
        return settle_best(w, best), nullptr;
    } else if (!owed || count_child_in_batch(w, owed)) [[likely]] {
      return best;
    }
  }
  complete_rest(w, owed, best, kReadiesNodes ? base : todo.size(), w.completed_children.size());
  return nullptr;
}
/// t's body has returned: publishes the children it spawned, and completes t if nothing else is pending, with
/// complete_now(w, t) when nothing else ever was (the usual case; its result is returned), else with complete()
/// (then a value-initialised result: null).
template <class CompleteNow>
[[gnu::always_inline]] inline auto end_body_then(Worker& w, Task* t, CompleteNow complete_now)
    -> decltype(complete_now(w, t)) {
  if (w.counted_parent == t) flush_completions(w);
  if (t->unpublished == 0 && t->alive.load(std::memory_order_acquire) == kAliveGuard)
    return complete_now(w, t);  // no child or weak node left: nobody else touches `alive`
  const std::int64_t delta = static_cast<std::int64_t>(t->unpublished) - kAliveGuard;
  t->unpublished = 0;
  const std::int64_t after = t->alive.fetch_add(delta, std::memory_order_acq_rel) + delta;
  WEFT_ASSERT(after >= 0);
  if (after == 0) complete(w, t);
  return decltype(complete_now(w, t))();
}
/// t's body has returned: publishes the children it spawned, and completes t if nothing else is pending.
inline void end_body(Worker& w, Task* t) {
  end_body_then(w, t, [](Worker& w, Task* t) { complete(w, t); });
}
/// The run function of a kind whose task is its body, completed through its kind (TaskKind::run).
inline void run_plain(Worker& w, Task* t) {
  run_body(w, t);
  end_body(w, t);
}
/// end_body for a task whose kind's complete step is `Step`, inlined (complete_as).
template <CompleteStep Step, bool kReadiesNodes = true>
[[gnu::always_inline]] inline void end_body_as(Worker& w, Task* t) {
  end_body_then(w, t, [](Worker& w, Task* t) { complete_as<Step, kReadiesNodes, /*kSettle=*/true>(w, t); });
}
/// The same, returning the best task t's completion readied, unsettled, or null (see complete_as).
template <CompleteStep Step, bool kReadiesNodes = true>
[[gnu::always_inline]] inline Task* end_body_as_unsettled(Worker& w, Task* t) {
  return end_body_then(w, t, [](Worker& w, Task* t) { return complete_as<Step, kReadiesNodes, false>(w, t); });
}
/// Adds t's unpublished children to its `alive` count (before a wait, or at the end of the body).
void publish_children(Task* t);
/// Adds edge node e (of a successor: e->succ set) to p's successor list, unless p has completed. Returns false
/// if p has completed (then nothing was added, and p's completion and effects are visible to the caller).
inline bool push_edge(Task* p, EdgeNode* e) {
  // Acquire on every read of the head: seeing kClosed orders p's completion (and its effects) before the caller.
  std::uintptr_t head = p->succ_head.load(std::memory_order_acquire);
  while (head != kClosed) {
    e->next = reinterpret_cast<EdgeNode*>(head);
    // Release: the finishing predecessor acquires the node (and the successor's pending count) with its exchange.
    if (p->succ_head.compare_exchange_weak(head, reinterpret_cast<std::uintptr_t>(e), std::memory_order_release,
                                           std::memory_order_acquire))
      return true;
  }
  return false;
}
/// Closes t's successor list and releases each successor (cancelled too when `poison`): ready tasks are offered
/// (best), ready join nodes pushed to `todo`. After the close, t belongs to its producer (it may be recycled).
/// The list holds the successors in reverse order of linking: kFirstLinkedFirst makes the one linked first (the
/// first spawned) the immediate successor between equal priorities, and queues the others so that they are
/// taken in the order they were linked.
template <bool kFirstLinkedFirst = false>
inline void release_successors(Worker& w, Task* t, bool poison, Task*& best, std::vector<Task*>& todo) {
  // Close the successor list. From here on `t` belongs to its producer, which may recycle it.
  EdgeNode* e = reinterpret_cast<EdgeNode*>(t->succ_head.exchange(kClosed, std::memory_order_acq_rel));
  WEFT_ASSERT(reinterpret_cast<std::uintptr_t>(e) != kClosed);  // completed once
  while (e) {
    Task* s = e->succ;
    EdgeNode* nx = e->next;  // read before releasing s: s may run, finish and be recycled right after
    if (poison) s->cancelled.store(true, std::memory_order_relaxed);
    WEFT_ASSERT(s->pending.load(std::memory_order_relaxed) >= 1 && s->n_edges >= 1);
    // A successor with a single predecessor needs no atomic: no one else decrements its count.
    if (s->n_edges == 1 || s->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (s->kind->node)
        todo.push_back(s);
      else
        offer<kFirstLinkedFirst>(w, s, best);
    }
    e = nx;
  }
}
/// The body of t ended without rethrowing a child's exception: t fails with it (cancelled; the exception goes
/// to t's parent).
void fail_with_child_error(Worker& w, Task* t);
}  // namespace weft::detail
