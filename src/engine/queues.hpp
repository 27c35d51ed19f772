// Per-worker ready queues: a Chase-Lev work-stealing deque for default-priority tasks (the hot path: no lock,
// no read-modify-write on push, one fence on pop) and sorted lock-free lists for prioritised tasks (touched
// only when such tasks exist). And, for comparison only (Options::scheduler = Scheduler::lfq), PaRSEC's local
// flat queues: a bounded buffer per worker and one shared overflow FIFO behind a lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
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
  [[gnu::always_inline]] bool has_above(std::int32_t p) const {
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

/// A worker's bounded buffer of PaRSEC's LFQ scheduler (Scheduler::lfq; PaRSEC's hbbuffer): a fixed array of
/// slots, filled only by the owning worker, emptied by any worker. Lock-free, like PaRSEC's: a task is put in a
/// slot with one release store (only the owner makes a slot non-empty, so a slot it sees empty stays so until it
/// fills it), and taken with one CAS of the slot to empty, acquire (it pairs with the store that put the task
/// there: the task's contents are visible to the taker). If a slot was emptied and refilled with the same
/// descriptor in between, the CAS takes the task it holds now, which is as ready as the one seen.
///
/// Each slot keeps its task's rank (the priority, then the push order) and parent beside it. So a worker
/// choosing a task never reads a descriptor that another worker may have taken and recycled meanwhile; what it
/// reads with a slot's task may be stale (only the choice suffers: the CAS decides). Among equal priorities the
/// newest task is taken first and the oldest overflows first (PaRSEC leaves ties to slot order), as the default
/// scheduler's LIFO does: a worker in a taskwait then mostly runs its own children, where slot order would
/// have it run unrelated tasks inside the wait, nested (see kLfqFreeNesting).
/// Every operation scans the slots: the buffer is small (PaRSEC: 4 x cores).
class BoundedTaskBuffer {
 public:
  /// capacity: slots, at least 1 (allocated here; the default scheduler never calls this).
  void reset(std::size_t capacity) {
    slots_ = std::make_unique<Slot[]>(capacity);
    n_ = capacity;
  }

  /// Owner only. Puts t in a free slot and returns null; when every slot is full, keeps the highest-priority
  /// tasks: returns the one that does not fit (t if its priority is below every queued one's, else the oldest
  /// of the lowest priority, which t replaces), for the caller to queue elsewhere.
  Task* push(Task* t) {
    const std::uint64_t key = rank(t->priority, ++pushed_);
    for (;;) {
      std::size_t lowest = 0;
      Task* low = nullptr;
      std::uint64_t low_key = 0;
      for (std::size_t i = 0; i < n_; ++i) {
        Task* q = slots_[i].task.load(std::memory_order_relaxed);
        if (!q) {
          slots_[i].key.store(key, std::memory_order_relaxed);
          slots_[i].parent.store(t->parent, std::memory_order_relaxed);
          slots_[i].task.store(t, std::memory_order_release);  // publishes t, its rank and parent (see above)
          return nullptr;
        }
        const std::uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
        if (!low || k < low_key) {
          lowest = i;
          low = q;
          low_key = k;
        }
      }
      if (key >> 32 < low_key >> 32) return t;  // a lower priority than every queued task
      // Written before the CAS: a worker that reads them with the old task only chooses less well.
      slots_[lowest].key.store(key, std::memory_order_relaxed);
      slots_[lowest].parent.store(t->parent, std::memory_order_relaxed);
      // acq_rel: takes `low` as a pop would, and publishes t as a push does. On failure another worker emptied
      // the slot: look again (it is free now).
      if (slots_[lowest].task.compare_exchange_strong(low, t, std::memory_order_acq_rel, std::memory_order_relaxed))
        return low;
    }
  }

  /// Any worker: takes the queued task of highest priority (the newest among equals); null if none.
  /// `parent`: only a task that the slot names as a child of `parent` (which the caller checks on the task it
  /// gets: a slot refilled as it was read may name another's parent).
  Task* pop_best(const Task* parent = nullptr) {
    for (;;) {
      std::size_t best = 0;
      Task* seen = nullptr;
      std::uint64_t best_key = 0;
      for (std::size_t i = 0; i < n_; ++i) {
        Task* q = slots_[i].task.load(std::memory_order_relaxed);
        if (!q || (parent && slots_[i].parent.load(std::memory_order_relaxed) != parent)) continue;
        const std::uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
        if (!seen || k > best_key) {
          best = i;
          seen = q;
          best_key = k;
        }
      }
      if (!seen) return nullptr;
      // Acquire: pairs with the release that put the task there (see above). On failure another worker took
      // it (or the owner replaced it): choose again.
      if (slots_[best].task.compare_exchange_strong(seen, nullptr, std::memory_order_acquire,
                                                    std::memory_order_relaxed))
        return seen;
    }
  }

  /// Relaxed hints, like StealDeque::maybe_nonempty (the idle path's re-check; the owner's priority guard of
  /// its immediate successor).
  bool maybe_nonempty() const {
    for (std::size_t i = 0; i < n_; ++i)
      if (slots_[i].task.load(std::memory_order_relaxed)) return true;
    return false;
  }
  bool has_above(std::int32_t p) const {
    const std::uint64_t above = rank(p, 0xffffffffu);
    for (std::size_t i = 0; i < n_; ++i)
      if (slots_[i].task.load(std::memory_order_relaxed) && slots_[i].key.load(std::memory_order_relaxed) > above)
        return true;
    return false;
  }

 private:
  // The priority (offset to compare as unsigned) above the low 32 bits of the push count: one load and one
  // comparison order two slots. The count wraps after 2^32 pushes: ties are then misordered once, harmlessly.
  static std::uint64_t rank(std::int32_t priority, std::uint64_t order) {
    return (std::uint64_t{static_cast<std::uint32_t>(priority) ^ 0x80000000u} << 32) | (order & 0xffffffffu);
  }
  struct Slot {
    std::atomic<Task*> task{nullptr};
    std::atomic<std::uint64_t> key{0};
    std::atomic<const Task*> parent{nullptr};
  };
  std::unique_ptr<Slot[]> slots_;
  std::size_t n_ = 0;
  std::uint64_t pushed_ = 0;  // owner only
};

/// The overflow queue of PaRSEC's LFQ scheduler: one FIFO shared by all workers behind one std::mutex, as
/// PaRSEC's system queue (a locked dequeue): the lock that every push to it and every pop from it takes is what
/// the comparison with the default scheduler measures. Intrusive (linked through a queued task's edges[0].succ,
/// free once the task is ready, as for PriorityQueue): a push allocates nothing.
class alignas(64) OverflowQueue {  // its own cache lines: every worker that uses it writes its lock
 public:
  void push(Task* t) {
    next(t) = nullptr;
    std::lock_guard<std::mutex> g(m_);
    if (tail_)
      next(tail_) = t;
    else
      head_ = t;
    tail_ = t;
    size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  /// The oldest task; null if none. An empty queue is seen without the lock.
  Task* pop() {
    if (!maybe_nonempty()) return nullptr;
    std::lock_guard<std::mutex> g(m_);
    Task* t = head_;
    if (!t) return nullptr;
    head_ = next(t);
    if (!head_) tail_ = nullptr;
    size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return t;
  }
  /// The oldest child of `parent`; null if none.
  Task* pop_child(const Task* parent) {
    if (!maybe_nonempty()) return nullptr;
    std::lock_guard<std::mutex> g(m_);
    Task* prev = nullptr;
    for (Task* t = head_; t; prev = t, t = next(t)) {
      if (t->parent != parent) continue;
      (prev ? next(prev) : head_) = next(t);
      if (tail_ == t) tail_ = prev;
      size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
      return t;
    }
    return nullptr;
  }
  /// Relaxed hint (written under the lock, read without it), like StealDeque::maybe_nonempty.
  bool maybe_nonempty() const { return size_.load(std::memory_order_relaxed) != 0; }

 private:
  static Task*& next(Task* t) { return t->edges[0].succ; }
  std::mutex m_;
  Task* head_ = nullptr;
  Task* tail_ = nullptr;
  std::atomic<std::size_t> size_{0};
};

}  // namespace weft::detail
