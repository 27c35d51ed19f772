// Per-worker ready queues: a Chase-Lev work-stealing deque for default-priority tasks (the hot path: no lock,
// no read-modify-write on push, one fence on pop) and sorted lock-free lists for prioritised tasks (touched
// only when such tasks exist).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/check.hpp"
#include "weft/detail/task.hpp"

// ThreadSanitizer does not model std::atomic_thread_fence (GCC warns, -Wtsan), so it could neither check the
// deque's fence-based synchronisation nor vouch for it. In a TSan build the fence and the accesses it orders are
// written as seq_cst accesses instead (the C11 formulation's equivalent; slower, but TSan understands it).
#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif
#ifndef WEFT_TSAN
#define WEFT_TSAN 0
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WEFT_PAUSE() _mm_pause()
#else
#define WEFT_PAUSE() ((void)0)
#endif

namespace weft::detail {

/// Chase-Lev deque (Le, Pop, Cohen, Zappa Nardelli, PPoPP'13, C11 formulation). The owner pushes and pops at
/// the bottom (LIFO: depth first, cache warm); thieves take from the top (oldest: large pieces of work).
class StealDeque {
 public:
  StealDeque() { arrays_.push_back(std::make_unique<Array>(1024)); array_.store(arrays_.back().get()); }

  void push(Task* t) {
    std::int64_t b = bottom_.load(std::memory_order_relaxed);
    Array* a = array_.load(std::memory_order_relaxed);
    if (b - top_seen_ > a->mask) {
      // Thieves only raise `top_`: re-read it (a shared line) only when the array looks full.
      top_seen_ = top_.load(std::memory_order_acquire);
      if (b - top_seen_ > a->mask) a = grow(a, top_seen_, b);
    }
    a->put(b, t);
    // Release publishes the slot and the task's contents to thieves that acquire `bottom_`.
    bottom_.store(b + 1, std::memory_order_release);
  }

  Task* pop() {
    std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
    Array* a = array_.load(std::memory_order_relaxed);
    // The one full fence of the deque: the owner's claim on slot b (the store below) must be visible before it
    // reads `top_`, or a thief and the owner could both take the last task. x86 needs a locked instruction here
    // whatever we write.
#if WEFT_TSAN
    bottom_.store(b, std::memory_order_seq_cst);
    std::int64_t t = top_.load(std::memory_order_seq_cst);
#else
    bottom_.store(b, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::int64_t t = top_.load(std::memory_order_relaxed);
#endif
    if (t > b) {  // empty
      bottom_.store(b + 1, std::memory_order_relaxed);
      return nullptr;
    }
    Task* x = a->get(b);
    WEFT_ASSERT(x != nullptr);
    if (t == b) {  // last element: race with thieves for it
      if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) x = nullptr;
      bottom_.store(b + 1, std::memory_order_relaxed);
    }
    return x;
  }

  /// The thief's side: takes the oldest task and up to `max_more` further tasks (0: that one alone), at most half
  /// of what the deque held; the others go to `into` (the calling thief's own deque, oldest first, so that its
  /// own thieves take them in the victim's order). Returns the first task (null if none was taken); `moved`
  /// counts the others. A thief with a batch stops coming back for more and is itself a victim.
  /// One CAS of `top_` per task, each a complete steal: a single CAS over several slots would race with the
  /// owner's pop, which takes the slots below `top_` without a CAS while it sees more than one left. Each step
  /// re-reads `bottom_` after a full fence (the thief's side of pop's fence); `top_` need not be re-read: the
  /// previous CAS wrote it, and the next CAS fails if anyone moved it since.
  Task* steal_batch(StealDeque& into, std::uint32_t max_more, std::uint32_t& moved) {
    moved = 0;
    // The thief's side of pop's fence: `top_` is read before `bottom_`.
#if WEFT_TSAN
    std::int64_t t = top_.load(std::memory_order_seq_cst);
    std::int64_t b = bottom_.load(std::memory_order_seq_cst);
#else
    std::int64_t t = top_.load(std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::int64_t b = bottom_.load(std::memory_order_acquire);
#endif
    if (t >= b) return nullptr;
    Task* first = array_.load(std::memory_order_acquire)->get(t);
    if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) return nullptr;
    const std::int64_t more = std::min<std::int64_t>(max_more, (b - t) / 2);
    for (std::int64_t i = 1; i <= more; ++i) {
      std::int64_t k = t + i;
#if WEFT_TSAN
      b = bottom_.load(std::memory_order_seq_cst);
#else
      std::atomic_thread_fence(std::memory_order_seq_cst);
      b = bottom_.load(std::memory_order_acquire);
#endif
      if (k >= b) break;
      Task* x = array_.load(std::memory_order_acquire)->get(k);
      if (!top_.compare_exchange_strong(k, k + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) break;
      into.push(x);
      ++moved;
    }
    return first;
  }

  bool maybe_nonempty() const {
    return bottom_.load(std::memory_order_relaxed) > top_.load(std::memory_order_relaxed);
  }

 private:
  struct Array {
    explicit Array(std::int64_t n) : mask(n - 1), slots(new std::atomic<Task*>[static_cast<std::size_t>(n)]) {}
    std::int64_t mask;
    std::unique_ptr<std::atomic<Task*>[]> slots;
    void put(std::int64_t i, Task* t) { slots[static_cast<std::size_t>(i & mask)].store(t, std::memory_order_relaxed); }
    Task* get(std::int64_t i) const { return slots[static_cast<std::size_t>(i & mask)].load(std::memory_order_relaxed); }
  };

  Array* grow(Array* a, std::int64_t top, std::int64_t b) {
    auto bigger = std::make_unique<Array>(2 * (a->mask + 1));
    for (std::int64_t i = top; i < b; ++i) bigger->put(i, a->get(i));
    Array* n = bigger.get();
    arrays_.push_back(std::move(bigger));  // old arrays stay alive: a thief may still read them
    array_.store(n, std::memory_order_release);
    return n;
  }

  alignas(64) std::atomic<std::int64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  std::atomic<Array*> array_{nullptr};
  std::int64_t top_seen_ = 0;                    // owner only: a lower bound of top_
  std::vector<std::unique_ptr<Array>> arrays_;  // owner only
};

/// Tasks whose priority is not 0: a local LIFO with priorities (LLP, after the TTG/PaRSEC scheduler of
/// Schuchart et al., "Pushing the Boundaries of Small Tasks", section IV-C), one list per sign so that
/// "positive before default before negative" costs a load per list. Each list is sorted by descending
/// priority and, among equal priorities, newest first (a task that may consume data still in cache). Only the
/// owning worker pushes; the owner and thieves pop the first task.
///
/// Unlike the paper's single chain, tasks of equal priority form a run, and the first task of each run links to
/// the next run: a push walks past the distinct priorities above its own, not past every queued task (random
/// priorities would make the paper's walk O(queued tasks), a cost its bundles only amortise).
///
/// The list is changed only by the thread that holds it: holding is one CAS of the head word from a list to
/// kHeld; the holder then works on the list privately and hands it back with one release store of the new
/// head. A push is one CAS, the walk to its run, one store (the paper's detach, insert, reattach); a pop is one
/// CAS, one store. No thread waits for another to make progress: a thief that finds the list held moves on to
/// the next victim, as it did with a lock's try_lock; the owner retries for a short while (a thief holds it for
/// a handful of instructions), then, if the holder was descheduled meanwhile, queues the task in its deque or
/// looks for work elsewhere. Nothing read before the CAS but the head's value is used after it, so the list
/// needs no ABA tag: a first task that went away and came back is still the first task of the list the CAS
/// takes.
class PriorityQueue {
 public:
  /// Owner only. False if a thief held the list throughout a short spin: the caller queues t elsewhere.
  bool push(Task* t) { return (t->priority > 0 ? high_ : low_).push(t); }
  /// The highest-priority task if its priority is at least `min_priority` (1: positive ones only; otherwise
  /// any). `owner`: the calling worker owns the queue (it may spin briefly while a thief holds a list).
  Task* pop(std::int32_t min_priority, bool owner = true) {
    if (Task* t = high_.pop(owner)) return t;
    return min_priority > 0 ? nullptr : low_.pop(owner);
  }
  /// No task queued, nor any list held (a holder may hand tasks back). Relaxed: a hint, like
  /// StealDeque::maybe_nonempty, for the idle path's re-check.
  bool empty() const { return high_.empty() && low_.empty(); }
  /// A hint (exact when read by the owner with no thief active).
  std::int32_t top_priority() const { return high_.empty() ? low_.top_priority() : high_.top_priority(); }
  /// top_priority() > p (a hint, as top_priority). One load and test when p >= 0 and no positive priority is
  /// queued: complete() asks it for every task it makes ready.
  bool has_above(std::int32_t p) const {
    if (!high_.empty()) [[unlikely]]
      return high_.top() > p;
    return p < 0 && !low_.empty() && low_.top() > p;
  }

 private:
  class List {
   public:
    bool push(Task* t) {
      WEFT_ASSERT(t->priority != 0);
      std::uintptr_t h;
      if (!hold(h, kOwnerSpins, /*take_empty=*/true)) [[unlikely]]
        return false;
      Task* first = reinterpret_cast<Task*>(h);
      // Find t's run: walk the runs of higher priority (prev: the last of them).
      Task* prev = nullptr;
      Task* run = first;
      while (run && run->priority > t->priority) {
        prev = run;
        run = next_run(run);
      }
      if (run && run->priority == t->priority) {  // t heads its run: newest first among equals
        next(t) = run;
        next_run(t) = next_run(run);
      } else {  // a new run, before the lower ones
        next(t) = nullptr;
        next_run(t) = run;
      }
      if (prev)
        next_run(prev) = t;
      else
        first = t;
      release(first);
      return true;
    }
    Task* pop(bool owner) {
      std::uintptr_t h;
      if (!hold(h, owner ? kOwnerSpins : 0, /*take_empty=*/false)) return nullptr;
      Task* first = reinterpret_cast<Task*>(h);
      Task* rest = next(first);
      if (rest)
        next_run(rest) = next_run(first);  // heads the run now
      else
        rest = next_run(first);
      release(rest);
      return first;
    }
    bool empty() const { return head_.load(std::memory_order_relaxed) == 0; }
    std::int32_t top_priority() const { return empty() ? INT32_MIN : top(); }
    std::int32_t top() const { return top_.load(std::memory_order_relaxed); }

   private:
    static constexpr std::uintptr_t kHeld = 1;
    // The links of a queued task, in its inline edge nodes: free once the task is ready (no predecessor reads
    // them after `pending` reached zero; a task parked on a commutative lock uses edges[0].succ, never while
    // queued). next: the next task of the same priority (older); next_run: for the first task of a run of
    // equal priorities only, the first task of the next run (lower priority).
    static Task*& next(Task* t) { return t->edges[0].succ; }
    static Task*& next_run(Task* t) { return t->edges[1].succ; }

    // Takes the list: h is its first task (0: empty, taken only by a push). `spins`: rounds to wait while
    // another thread holds it. Pop fails on an empty list without writing the head (idle workers poll it).
    bool hold(std::uintptr_t& h, int spins, bool take_empty) {
      h = head_.load(std::memory_order_relaxed);
      for (;;) {
        if (h == kHeld) {
          if (--spins < 0) return false;
          WEFT_PAUSE();
          h = head_.load(std::memory_order_relaxed);
          continue;
        }
        if (h == 0 && !take_empty) return false;
        // Acquire: pairs with the previous holder's release store (release()), so the links it wrote and the
        // contents of the tasks it queued (written by their producer before the push) are visible here.
        // Relaxed on failure: the value read is only compared again.
        if (head_.compare_exchange_weak(h, kHeld, std::memory_order_acquire, std::memory_order_relaxed))
          return true;
      }
    }
    // Hands the list back, first task `first`. Release: the links written while holding, and the pushed
    // task's contents, are visible to the next holder (its acquire CAS reads this store).
    void release(Task* first) {
      // Relaxed: a hint for the owner (top_priority), written while holding, so holders write it in turn.
      top_.store(first ? first->priority : INT32_MIN, std::memory_order_relaxed);
      head_.store(reinterpret_cast<std::uintptr_t>(first), std::memory_order_release);
    }
    static constexpr int kOwnerSpins = 256;

    alignas(64) std::atomic<std::uintptr_t> head_{0};  // 0: empty; kHeld; else the first task
    std::atomic<std::int32_t> top_{INT32_MIN};
  };

  List high_, low_;
};

}  // namespace weft::detail
