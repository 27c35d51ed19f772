// Per-worker ready queues: a Chase-Lev work-stealing deque for default-priority tasks (the hot path: no lock,
// no read-modify-write on push, one fence on pop) and a small heap for prioritised tasks (a lock taken only
// when such tasks exist).
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

  Task* steal() {
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
    Array* a = array_.load(std::memory_order_acquire);
    Task* x = a->get(t);
    if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) return nullptr;
    return x;
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

/// Tasks whose priority is not 0. Rare in most programs; a mutex keeps it simple and obviously correct.
class PriorityQueue {
 public:
  void push(Task* t) {
    std::lock_guard<std::mutex> g(m_);
    heap_.push_back(t);
    std::push_heap(heap_.begin(), heap_.end(), less);
    top_priority_.store(heap_.front()->priority, std::memory_order_relaxed);
    size_.store(heap_.size(), std::memory_order_release);
  }
  /// Highest-priority task if its priority is at least `min_priority`.
  Task* pop(std::int32_t min_priority, bool blocking = true) {
    if (size_.load(std::memory_order_acquire) == 0) return nullptr;
    return pop_locked(min_priority, blocking);
  }
  bool empty() const { return size_.load(std::memory_order_relaxed) == 0; }
  /// A hint (exact when read by the owner with no thief active).
  std::int32_t top_priority() const {
    return empty() ? INT32_MIN : top_priority_.load(std::memory_order_relaxed);
  }

 private:
  [[gnu::noinline]] Task* pop_locked(std::int32_t min_priority, bool blocking) {
    std::unique_lock<std::mutex> g(m_, std::defer_lock);
    if (blocking)
      g.lock();
    else if (!g.try_lock())
      return nullptr;
    if (heap_.empty() || heap_.front()->priority < min_priority) return nullptr;
    std::pop_heap(heap_.begin(), heap_.end(), less);
    Task* t = heap_.back();
    heap_.pop_back();
    top_priority_.store(heap_.empty() ? INT32_MIN : heap_.front()->priority, std::memory_order_relaxed);
    size_.store(heap_.size(), std::memory_order_release);
    return t;
  }

  static bool less(const Task* a, const Task* b) { return a->priority < b->priority; }
  std::mutex m_;
  std::vector<Task*> heap_;
  std::atomic<std::size_t> size_{0};
  std::atomic<std::int32_t> top_priority_{INT32_MIN};
};

}  // namespace weft::detail
