// weft internal: the keyed table of a flow template task's pending tasks (tasks some but not all of whose inputs
// have arrived), after PaRSEC's hash table as described in the TTG paper (sections III-C, IV-D):
//  * one table per template task; an entry is a detached engine descriptor (detail/task.hpp), linked through
//    its `mark` field, with the top 32 bits of its scrambled hash in `n_edges` and the record (key, inputs) in
//    its body;
//  * per-bucket spin locks: a thread locks the bucket of a key, finds / inserts / removes that key's entry,
//    unlocks;
//  * growth by chaining tables: when a bucket of the main table holds more than kBucketHighWater entries, a
//    table of twice the size becomes the main table; older tables stay in a list and are searched after it (an
//    entry found there moves to the main table) and freed once empty;
//  * the resize is guarded by a reader-biased reader-writer lock (BRAVO): a bucket operation takes it for
//    reading with one atomic exchange on a per-worker flag (its own cache line), a resize takes it for writing
//    and waits for the flags to clear.
// Not part of the public API.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>

#include "weft/detail/task.hpp"


namespace weft::detail::flow {

/// A spin-wait hint to the processor (x86 `pause`), without the intrinsics header in every user file.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Reader-biased reader-writer lock (Dice and Kogan, BRAVO, USENIX ATC'19), one reader flag per worker. A reader
/// publishes its flag, then checks that no writer is present (one exchange: the store must be ordered before
/// the load). A writer raises `writer_`, takes the underlying lock and waits until every flag is clear; readers
/// that arrive meanwhile, and threads that are not workers, use the underlying lock.
class BravoLock {
 public:
  explicit BravoLock(unsigned readers);
  BravoLock(const BravoLock&) = delete;
  BravoLock& operator=(const BravoLock&) = delete;

  /// Returns whether the fast path was taken (pass it to unlock_shared).
  bool lock_shared(unsigned reader) {
    if (reader < n_ && !writer_.load(std::memory_order_relaxed)) {
      std::atomic<std::uint32_t>& f = flags_[reader].active;
      f.exchange(1, std::memory_order_seq_cst);
      if (!writer_.load(std::memory_order_seq_cst)) return true;
      f.store(0, std::memory_order_release);
    }
    underlying_.lock_shared();
    return false;
  }
  void unlock_shared(unsigned reader, bool fast) {
    if (fast)
      flags_[reader].active.store(0, std::memory_order_release);
    else
      underlying_.unlock_shared();
  }
  void lock();
  void unlock();

 private:
  struct alignas(64) Flag {
    std::atomic<std::uint32_t> active{0};
  };
  std::atomic<bool> writer_{false};
  unsigned n_;
  std::unique_ptr<Flag[]> flags_;
  std::shared_mutex underlying_;
};

/// The table. Entries are compared by the caller's predicate (the key lives in the record); `hash` is the
/// key's full hash. Every operation happens inside a Locked scope for that hash.
class TaskTable {
 public:
  static constexpr std::uint32_t kInitialBuckets = 256;
  static constexpr std::uint32_t kBucketHighWater = 16;
  static constexpr unsigned kMaxLog2 = 30;
  /// What an entry keeps of its hash (in its `n_edges` field): the bits that choose its bucket in every table.
  static std::uint32_t tag(std::size_t hash) { return static_cast<std::uint32_t>((hash * 0x9E3779B97F4A7C15ull) >> 32); }

  explicit TaskTable(unsigned workers);
  ~TaskTable();
  TaskTable(const TaskTable&) = delete;
  TaskTable& operator=(const TaskTable&) = delete;

  struct Bucket {
    std::atomic<std::uint32_t> lock{0};
    std::uint32_t size = 0;
    Task* head = nullptr;
  };
  struct Table {
    explicit Table(unsigned log2);
    unsigned shift;  ///< 64 - log2(buckets): index = (hash * golden) >> shift
    std::size_t size;
    std::unique_ptr<Bucket[]> buckets;
    Table* older = nullptr;
    Bucket& bucket(std::size_t hash) { return buckets[(hash * 0x9E3779B97F4A7C15ull) >> shift]; }
  };

  /// The bucket of `hash` in the main table, locked (with the resize lock held for reading) for the scope's
  /// lifetime. find() also searches the older tables and moves a hit into the main table.
  class Locked {
   public:
    Locked(TaskTable& t, std::size_t hash) : t_(t), hash_(hash), reader_(current_worker_index()) {
      fast_ = t.resize_.lock_shared(reader_);
      main_ = t.main_.load(std::memory_order_acquire);
      b_ = &main_->bucket(hash);
      lock_bucket(*b_);
    }
    ~Locked() {
      // Grow when a bucket overflows, unless its entries all have the same hash: a larger table would not
      // split them (a degenerate user hash), and growing again and again would only waste memory.
      const bool grow = b_->size > kBucketHighWater && main_->shift > 64 - kMaxLog2 && !uniform(*b_);
      unlock_bucket(*b_);
      t_.resize_.unlock_shared(reader_, fast_);
      if (grow) t_.grow(main_);
    }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

    template <class Match>
    Task* find(Match&& match) {
      if (Task* hit = unlink_if(*b_, match)) {
        link(*b_, hit);  // most recently used first
        return hit;
      }
      for (Table* o = main_->older; o; o = o->older) {
        Bucket& ob = o->bucket(hash_);
        lock_bucket(ob);
        Task* hit = unlink_if(ob, match);
        unlock_bucket(ob);
        if (hit) {
          link(*b_, hit);
          return hit;
        }
      }
      return nullptr;
    }
    /// Adds an entry (not present: find() returned nullptr).
    void insert(Task* e) {
      e->key_hash = tag(hash_);
      link(*b_, e);
    }
    /// Removes an entry find() returned (it is at the head of the main bucket).
    void erase(Task* e) {
      Task** p = &b_->head;
      while (*p != e) p = &(*p)->table_next;
      *p = (*p)->table_next;
      --b_->size;
    }

   private:
    static bool uniform(const Bucket& b) {
      for (const Task* e = b.head; e; e = e->table_next)
        if (e->key_hash != b.head->key_hash) return false;
      return true;
    }
    template <class Match>
    static Task* unlink_if(Bucket& b, Match& match) {
      for (Task** p = &b.head; *p; p = &(*p)->table_next)
        if (match(*p)) {
          Task* e = *p;
          *p = e->table_next;
          --b.size;
          return e;
        }
      return nullptr;
    }
    static void link(Bucket& b, Task* e) {
      e->table_next = b.head;
      b.head = e;
      ++b.size;
    }
    TaskTable& t_;
    std::size_t hash_;
    unsigned reader_;
    bool fast_;
    Table* main_;
    Bucket* b_;
  };

  /// Quiescent use only (no concurrent operation): calls f(Task*) for every entry and empties the table.
  template <class F>
  void drain(F&& f) {
    for (Table* t = main_.load(std::memory_order_relaxed); t; t = t->older)
      for (std::size_t i = 0; i < t->size; ++i) {
        Bucket& b = t->buckets[i];
        while (Task* e = b.head) {
          b.head = e->table_next;
          --b.size;
          f(e);
        }
      }
    shrink_chain();
  }
  /// Quiescent use only: number of entries.
  std::size_t count() const;
  /// Quiescent use only: frees older tables that are empty.
  void shrink_chain();
  /// Number of chained tables (1 = only the main table); for tests.
  std::size_t tables() const;

 private:
  static void lock_bucket(Bucket& b) {
    while (b.lock.exchange(1, std::memory_order_acquire)) {
      do {
        cpu_relax();
      } while (b.lock.load(std::memory_order_relaxed));
    }
  }
  static void unlock_bucket(Bucket& b) { b.lock.store(0, std::memory_order_release); }
  void grow(Table* seen);

  BravoLock resize_;
  std::atomic<Table*> main_;
};

}  // namespace weft::detail::flow
