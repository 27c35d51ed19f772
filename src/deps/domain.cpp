// Dependency tracking: each task owns a domain of records, one per datum its children access. A record keeps
// what the next access must wait for: the last writer, the readers since, or the current inoutset /
// commutative group. Only the thread running the owner's body touches the domain, so it takes no lock.
//
// Edge economy (paper 003's optimisations):
//  * no edge to a finished predecessor (tested when linking, and again by the push itself);
//  * no second edge between the same two tasks: a predecessor remembers the last successor linked to it
//    (`mark`), which catches every duplicate within one registration in O(1);
//  * an inoutset/commutative group of m members followed by n accesses is joined by one internal node:
//    m + n edges instead of m * n; likewise a group that follows several readers waits on one reader node.
//
// Descriptor lifetime: a record holds a reference (record_refs, owner-thread only) to each task it names; a
// task no record names is retired to its producer's list and recycled once finished.
//
// Bounded memory: what a record names matters only while it is unfinished, so
//  * a reader or group-member list that is full is pruned of its finished tasks before it grows;
//  * when the number of records has doubled since the last sweep (and at every taskwait) the domain is swept:
//    records that name only finished tasks are dropped and the table is rebuilt at the size of what is left.
// A producer spawning 10^8 tasks therefore holds records and descriptors only for its unfinished children
// (bounded by throttling). One exception keeps failure semantics exact: a finished task that failed stays
// named (at most one per list, and its record is kept), so that later accessors are still cancelled.
//
// Exception safety: registration has two phases. Phase 1 may throw (it allocates): it creates the records,
// makes room in their lists, sizes the candidate buffers and the task's edge, weak-link and lock arrays, and
// takes the descriptors (with their edge arrays) of the join nodes phase 2 will build. It changes nothing that
// another task can observe (a new record is empty; pruning only forgets finished tasks). Phase 2 links the
// task and allocates nothing, so a spawn that fails leaves no trace but the exception. Three paths keep these
// phases: one plain access (register_accesses), a few plain accesses (register_plain: no plans, no nodes, its
// state in registers: tasks with several accesses are the common case), and the rest (register_general).
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "deps/deps.hpp"
#include "trace/hooks.hpp"

namespace weft::detail {

/// Mutual exclusion of the members of commutative groups on one datum. Parked tasks are ready tasks waiting
/// for the lock, linked through edges[0].succ (see Task::edges): parking allocates nothing.
struct CommLock {
  std::mutex m;
  bool held = false;
  Task* waiters = nullptr;
};

namespace {

enum Group : std::uint8_t { kNoGroup = 0, kInoutset = 1, kCommutative = 2, kReduction = 3 };

/// Lists shorter than this grow without being pruned (pruning a short list saves nothing).
constexpr std::size_t kPruneFrom = 32;
/// Records a domain holds before its first sweep.
constexpr std::size_t kFirstSweep = 256;
constexpr std::uint32_t kNoRecord = ~0u;

/// What only some records need (commutative or reduction groups), out of line: a record stays 96 bytes, which
/// keeps the index arithmetic of the lookup on the spawn path as cheap as it was.
struct RecordExt {
  CommLock* lock = nullptr;       ///< commutative mutual exclusion for this datum
  ReductionGroup* red = nullptr;  ///< the current group's reduction (group == kReduction)
};

struct Record {
  const void* address = nullptr;
  Task* writer = nullptr;         ///< last writer, a join node, or the parent's weak node
  std::vector<Task*> readers;     ///< readers since `writer`
  std::vector<Task*> members;     ///< current group
  Task* group_pred = nullptr;     ///< what every member of the current group waits for
  RecordExt* ext = nullptr;       ///< made by phase 1 where a commutative or reduction group needs it
  std::uint64_t stamp = 0;        ///< the registration that last looked it up (duplicate accesses of one task)
  Group group = kNoGroup;
  /// The reduction is the parent's own (the parent reduces on this datum; see new_record): its children join it,
  /// nothing else may access the datum, and the group is combined in the grandparent's domain, not here.
  bool borrowed = false;

  ReductionGroup* red() const { return ext ? ext->red : nullptr; }
  RecordExt& extension() {  // phase 1 (allocates)
    if (!ext) ext = new RecordExt;
    return *ext;
  }
  /// Frees the extension (the record is dropped: the users of its lock have all finished).
  void drop_extension() {
    if (!ext) return;
    delete ext->lock;
    delete ext;
    ext = nullptr;
  }
};
static_assert(sizeof(Record) == 96, "see RecordExt");

// Weak nodes are owned by the task whose weak access they stand for and freed with it: records name them
// without counting.
inline void add_ref(Task* t) {
  if (!is_weak_node(t)) ++t->record_refs;
}

inline void release(Task* producer, Task* t) {
  if (is_weak_node(t)) return;
  WEFT_ASSERT(t->record_refs > 0);
  if (--t->record_refs == 0) retire(producer, t);
}

/// Drops finished tasks from a list, keeping the first one that failed (enough to cancel later accessors).
void prune(Task* producer, std::vector<Task*>& list) {
  bool failed_kept = false;
  std::size_t k = 0;
  for (Task* x : list) {
    if (finished(x)) {
      if (!poisoned(x) || failed_kept) {
        release(producer, x);
        continue;
      }
      failed_kept = true;
    }
    list[k++] = x;
  }
  list.resize(k);  // shrinks: no allocation
}

/// make_room for a full list.
[[gnu::noinline]] void make_room_in_full(Task* producer, std::vector<Task*>& list) {
  if (list.size() >= kPruneFrom) prune(producer, list);
  reserve_one_more(list, 4);
}
/// Phase 1: room for one more entry in `list` (pruned first when it is full and long). Inline: the usual case,
/// room left, calls nothing (so the registration's state stays in registers).
inline void make_room(Task* producer, std::vector<Task*>& list) {
  if (list.size() == list.capacity()) [[unlikely]]
    make_room_in_full(producer, list);
}

}  // namespace

struct Domain {
  std::vector<Record> records;
  std::vector<std::uint32_t> slots = std::vector<std::uint32_t>(16, 0);  // record index + 1; 0 = empty
  unsigned shift = 64 - 4;
  const void* last_address = nullptr;  // one-entry cache: consecutive tasks often name the same datum
  std::uint32_t last = kNoRecord;      // kNoRecord: the cache is empty (any address, null included, may be named)
  std::size_t sweep_at = kFirstSweep;  // records count beyond which the next creation sweeps first
  std::uint64_t stamp = 0;             // registrations of several accesses (Record::stamp)
  std::uint32_t open_reductions = 0;   // records with an open reduction group of their own (not borrowed)

  static std::uint64_t hash(const void* a) {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(a)) * 0x9E3779B97F4A7C15ull;
  }

  /// The one-entry cache holds a's record (records[last]).
  bool cache_holds(const void* a) const { return a == last_address && last != kNoRecord; }

  Record* find(const void* a) {
    if (cache_holds(a)) return &records[last];
    Record* r = probe(a);
    if (r) {
      last_address = a;
      last = static_cast<std::uint32_t>(r - records.data());
    }
    return r;
  }

  /// find() without the one-entry cache: for tasks with several accesses, which name a different datum each (the
  /// cache would miss, and updating it costs two stores per access).
  Record* probe(const void* a) {
    const std::size_t mask = ~std::uint64_t{0} >> shift;  // slots.size() - 1, from what hash() needs anyway
    for (std::size_t i = hash(a) >> shift;; i = (i + 1) & mask) {
      const std::uint32_t s = slots[i];
      if (s == 0) return nullptr;
      if (records[s - 1].address == a) return &records[s - 1];
    }
  }

  /// Phase 1: afterwards, creating up to k records allocates nothing and moves no record. May sweep, which
  /// invalidates Record pointers: call it before looking records up. Returns whether it swept, moved the records
  /// or rebuilt the slots (else the Record pointers taken before are still valid).
  bool reserve(Worker& w, Task* producer, std::size_t k) {
    bool moved = false;
    if (records.size() + k > sweep_at) {
      sweep(w, producer);
      moved = true;
    }
    if (records.size() + k > records.capacity()) {
      records.reserve(std::max(2 * records.capacity(), records.size() + k));
      moved = true;
    }
    if (2 * (records.size() + k) > slots.size()) {
      std::size_t n = slots.size();
      while (2 * (records.size() + k) > n) n *= 2;
      rehash(n);
      moved = true;
    }
    return moved;
  }

  /// A new, empty record for a (after reserve; not present).
  Record& create(const void* a) {
    records.emplace_back();
    records.back().address = a;
    insert_slot(a, static_cast<std::uint32_t>(records.size()));
    last_address = a;
    last = static_cast<std::uint32_t>(records.size() - 1);
    return records.back();
  }

  /// Drops the records that name only finished tasks (see the top of the file) and prunes the lists of the
  /// others; rebuilds the table at the size of what is left. Owner thread; no Record pointer may be held.
  /// `failed_too`: at a taskwait (every child finished, the failure rethrown): the records of failed tasks go
  /// too, and the children spawned after it start afresh.
  void sweep(Worker& w, Task* producer, bool failed_too = false) {
    // Whether a record may forget t: finished, and not failed (a failed task cancels its later accessors).
    auto gone = [failed_too](const Task* t) { return !t || (finished(t) && (failed_too || !poisoned(t))); };
    auto done = [&](const Record& r) {
      if (r.red() && !r.borrowed) return false;  // an open reduction: combined at its close, taskwait or the end
      if (!gone(r.writer) || !gone(r.group_pred)) return false;
      for (const Task* x : r.readers)
        if (!gone(x)) return false;
      for (const Task* x : r.members)
        if (!gone(x)) return false;
      return true;
    };
    std::size_t kept = 0;
    for (const Record& r : records) kept += done(r) ? 0 : 1;
    std::size_t n = 16;
    while (2 * (kept + 1) > n) n *= 2;
    std::vector<std::uint32_t> fresh(n, 0);  // the only allocation: before anything changes
    std::size_t k = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      Record& r = records[i];
      if (done(r)) {
        forget(w, producer, r);
        continue;
      }
      if (r.readers.size() >= kPruneFrom) prune(producer, r.readers);
      if (r.members.size() >= kPruneFrom) prune(producer, r.members);
      if (k != i) records[k] = std::move(r);
      ++k;
    }
    records.erase(records.begin() + static_cast<std::ptrdiff_t>(k), records.end());
    slots.swap(fresh);
    shift = 64 - static_cast<unsigned>(__builtin_ctzll(slots.size()));
    for (std::uint32_t i = 0; i < records.size(); ++i) insert_slot(records[i].address, i + 1);
    last = kNoRecord;
    sweep_at = std::max(kFirstSweep, 2 * records.size());
    // <=: tasks may have finished between the two passes (done() only ever turns true).
    WEFT_ASSERT(records.size() <= kept && 2 * records.size() <= slots.size());
  }

 private:
  static void forget(Worker&, Task* producer, Record& r) {
    if (r.writer) release(producer, r.writer);
    for (Task* x : r.readers) release(producer, x);
    for (Task* x : r.members) release(producer, x);
    if (r.group_pred) release(producer, r.group_pred);
    r.drop_extension();  // the users of its lock have all finished
    r.readers.clear();
    r.members.clear();
  }
  void insert_slot(const void* a, std::uint32_t value) {
    const std::size_t mask = slots.size() - 1;
    std::size_t i = hash(a) >> shift;
    while (slots[i] != 0) i = (i + 1) & mask;
    slots[i] = value;
  }
  void rehash(std::size_t n) {
    std::vector<std::uint32_t> fresh(n, 0);
    slots.swap(fresh);
    shift = 64 - static_cast<unsigned>(__builtin_ctzll(n));
    for (std::uint32_t k = 0; k < records.size(); ++k) insert_slot(records[k].address, k + 1);
  }
};

namespace {

/// What phase 2 does for one access, prepared by phase 1: the record, and the descriptors of the join nodes
/// it will build (null where none is needed). Phase 2 consumes them (sets them to null).
struct Plan {
  Record* r;
  const Access* access;
  Task* close_node;  ///< joins the group this access closes (groups of 2+ members)
  Task* start_node;  ///< joins the readers a new inoutset/commutative group waits for (2+ readers)
  Task* weak_node;   ///< weak access: the node t's children wait on
  Task* release_node;  ///< weak access of a task of a cluster: what records name for it (kAccessRelease)
  const ReductionSpec* spec;    ///< reduction access: its operator
  ReductionGroup* red_new;      ///< reduction access that starts a group: the group
};

/// Phase 1: a descriptor for a node with at most `preds` predecessors, its edge array included. Held on `held`
/// (through retired_next) until phase 2 takes it, or freed if phase 1 fails.
Task* prepare_node(Worker& w, std::size_t preds, Task*& held) {
  Task* n = w.allocate();
  n->retired_next = held;
  held = n;
  if (preds > kInlineEdges) n->extra_edges = alloc_edges(w, preds);
  return n;
}

// Links `target` after the candidate predecessors in `cands` (consumed). Returns true if target is ready
// (no unfinished predecessor). Must run before target is visible to any other thread. Edge nodes: inline, or
// target->extra_edges, sized by phase 1 for every candidate.
// link() for exactly one candidate (the hot path of a task with one access): no buffer, no loops, and a push
// that fails needs no atomic on the pending count, since no other predecessor can touch it. kTraced = false: for
// a caller that has checked that w records no trace (then the path calls nothing).
template <bool kTraced = true>
[[gnu::always_inline]] inline bool link_one(Worker& w, Task* target, Task* p) {
  Counters& c = w.counters;
  if (!p || p == target) {
    target->pending.store(0, std::memory_order_relaxed);
    target->n_edges = 0;
    return true;
  }
  p->mark = target;
  std::uintptr_t head = p->succ_head.load(std::memory_order_acquire);
  if (head == kClosed) {
    target->pending.store(0, std::memory_order_relaxed);
    target->n_edges = 0;
  } else {
    if (p->joined > 1) c.edges_saved_inoutset += p->joined - 1;
    target->pending.store(1, std::memory_order_relaxed);
    target->n_edges = 1;
    EdgeNode* e = &target->edges[0];
    e->succ = target;
    do {
      e->next = reinterpret_cast<EdgeNode*>(head);
      if (p->succ_head.compare_exchange_weak(head, reinterpret_cast<std::uintptr_t>(e), std::memory_order_release,
                                             std::memory_order_acquire)) {
        ++c.edges_created;
        if constexpr (kTraced) trace::on_edge(w, p, target);
        return false;
      }
    } while (head != kClosed);
    target->pending.store(0, std::memory_order_relaxed);  // finished meanwhile: nobody saw the edge
    target->n_edges = 0;
  }
  ++c.edges_pruned_finished;
  if (poisoned(p)) target->cancelled.store(true, std::memory_order_relaxed);
  return true;
}

[[gnu::always_inline]] inline bool link(Worker& w, Task* target, Task** cands, std::size_t k) {
  Counters& c = w.counters;
  std::size_t m = 0;
  for (std::size_t i = 0; i < k; ++i) {
    Task* p = cands[i];
    if (p == target) continue;
    if (p->mark == target) {  // duplicate (or a recycled descriptor's mark: then p has finished)
      ++c.edges_pruned_duplicate;
      if (finished(p) && poisoned(p)) target->cancelled.store(true, std::memory_order_relaxed);
      continue;
    }
    p->mark = target;
    if (finished(p)) {
      ++c.edges_pruned_finished;
      if (poisoned(p)) target->cancelled.store(true, std::memory_order_relaxed);
      continue;
    }
    if (p->joined > 1) c.edges_saved_inoutset += p->joined - 1;  // a join node of m members: m - 1 saved
    cands[m++] = p;
  }
  target->n_edges = static_cast<std::uint32_t>(m);
  if (m == 0) {
    target->pending.store(0, std::memory_order_relaxed);
    return true;
  }
  // Count first: a predecessor may finish and decrement as soon as its edge is pushed.
  target->pending.store(static_cast<std::int32_t>(m), std::memory_order_relaxed);
  EdgeNode* nodes = target->edges;
  if (m > kInlineEdges) [[unlikely]] {
    if (!target->extra_edges) {  // a task (nodes bring their own): the worker's spare, sized by phase 1
      WEFT_ASSERT(w.spare_edges && w.spare_edges_size >= m);
      target->extra_edges = w.spare_edges;
      w.spare_edges = nullptr;
      w.spare_edges_size = 0;
    }
    nodes = target->extra_edges;
  }
  std::int32_t failed = 0;
  for (std::size_t i = 0; i < m; ++i) {
    Task* p = cands[i];
    EdgeNode* e = &nodes[i];
    e->succ = target;
    if (push_edge(p, e)) {
      ++c.edges_created;
      trace::on_edge(w, p, target);
    } else {  // finished since we looked
      ++failed;
      ++c.edges_pruned_finished;
      if (poisoned(p)) target->cancelled.store(true, std::memory_order_relaxed);
    }
  }
  if (failed == 0) return false;
  return target->pending.fetch_sub(failed, std::memory_order_acq_rel) == failed;
}

// Phase 2: the prepared descriptor `n` becomes an internal node that finishes when all of preds[0 .. k) have; it
// stands for them in later accesses.
Task* make_node(Worker& w, Task* producer, Task*& prepared, Task* const* preds, std::size_t k) {
  WEFT_ASSERT(prepared != nullptr);  // phase 1 foresaw this node
  Task* n = prepared;
  prepared = nullptr;
  init_task(w, n, producer, &kJoinNode);
  trace::on_node(w, n);
  ++w.counters.internal_nodes;
  w.counters.edges_saved_inoutset -= k;  // n*(m-1) - m in the end (modulo 2^64: see Counters)
  n->joined = static_cast<std::uint32_t>(k);
  TaskBuffer& cands = w.node_scratch;  // link() consumes its candidates: a copy (room made by phase 1)
  cands.clear();
  for (std::size_t i = 0; i < k; ++i) cands.push_reserved(preds[i]);
  if (link(w, n, cands.data(), cands.size())) n->succ_head.store(kClosed, std::memory_order_release);
  return n;
}

// Phase 2: the prepared descriptor becomes the node closing reduction group g, after the members preds[0 .. k).
// If they have all finished it combines now, on the producer's thread (their completion is acquired by link()).
Task* make_reduce_node(Worker& w, Task* producer, Task*& prepared, ReductionGroup* g, Task* const* preds,
                       std::size_t k) {
  WEFT_ASSERT(prepared != nullptr);
  Task* n = prepared;
  prepared = nullptr;
  init_task(w, n, producer, &kReduceNode);
  *reinterpret_cast<ReductionGroup**>(n->body) = g;  // a node has no body: its storage holds the group
  trace::on_node(w, n);
  ++w.counters.internal_nodes;
  TaskBuffer& cands = w.node_scratch;
  cands.clear();
  for (std::size_t i = 0; i < k; ++i) cands.push_reserved(preds[i]);
  if (link(w, n, cands.data(), cands.size())) {
    finish_reduce_node(w, n);
    n->succ_head.store(kClosed, std::memory_order_release);
  }
  return n;
}

void set_writer(Task* producer, Record& r, Task* t) {
  add_ref(t);
  if (r.writer) release(producer, r.writer);
  r.writer = t;
}

// Ends the current group: a join node (or the single member) becomes the writer; a reduction group always
// needs its node, which combines.
[[gnu::noinline]] void end_group(Worker& w, Task* producer, Record& r, Task*& close_node) {
  Task* n;
  if (r.group == kReduction) {
    WEFT_ASSERT(!r.borrowed);  // phase 1 refuses what would close a borrowed group
    n = make_reduce_node(w, producer, close_node, r.ext->red, r.members.data(), r.members.size());
    r.ext->red = nullptr;
    --producer->domain->open_reductions;
  } else {
    n = r.members.size() == 1 ? r.members[0]
                              : make_node(w, producer, close_node, r.members.data(), r.members.size());
  }
  set_writer(producer, r, n);
  for (Task* m : r.members) release(producer, m);
  r.members.clear();
  if (r.group_pred) release(producer, r.group_pred);
  r.group_pred = nullptr;
  r.group = kNoGroup;
}
inline void close_group(Worker& w, Task* producer, Record& r, Plan& plan) {
  if (r.group != kNoGroup) [[unlikely]]
    end_group(w, producer, r, plan.close_node);
}

inline Group group_of(AccessMode m) {
  switch (m) {
    case AccessMode::inoutset: return kInoutset;
    case AccessMode::commutative: return kCommutative;
    case AccessMode::reduction:
    case AccessMode::weak_reduction: return kReduction;
    default: return kNoGroup;
  }
}
inline bool is_reduction(AccessMode m) { return m == AccessMode::reduction || m == AccessMode::weak_reduction; }

// Phase 2: a new group of kind g on r: its members wait for the readers since the writer (through a node if
// there are several), else for the writer.
void start_group(Worker& w, Task* producer, Record& r, Plan& plan, Group g) {
  close_group(w, producer, r, plan);
  Task* gp = nullptr;
  if (r.readers.size() >= 2)
    gp = make_node(w, producer, plan.start_node, r.readers.data(), r.readers.size());
  else if (r.readers.size() == 1)
    gp = r.readers[0];
  else
    gp = r.writer;
  if (gp) add_ref(gp);
  for (Task* rd : r.readers) release(producer, rd);
  r.readers.clear();
  r.group_pred = gp;
  r.group = g;
}

// Phase 2, the plain cases: a read waits for the writer and joins the readers; a write waits for the readers
// since the writer, else for the writer, and becomes the writer.
[[gnu::always_inline]] inline void read_access(Record& r, Task* accessor, TaskBuffer& cands) {
  if (r.writer) cands.push_reserved(r.writer);
  r.readers.push_back(accessor);  // room made by phase 1
  add_ref(accessor);
}
[[gnu::always_inline]] inline void write_access(Task* producer, Record& r, Task* accessor, TaskBuffer& cands) {
  if (!r.readers.empty()) {
    for (Task* rd : r.readers) {
      cands.push_reserved(rd);
      release(producer, rd);
    }
    r.readers.clear();
  } else if (r.writer) {
    cands.push_reserved(r.writer);
  }
  set_writer(producer, r, accessor);
}

// Phase 2: record update for one access by `accessor`; predecessors of `target` (accessor, or its weak node)
// are appended to `cands`. Allocates nothing: phase 1 made room in the lists and buffers and prepared the nodes.
[[gnu::always_inline]] inline void access(Worker& w, Task* producer, Record& r, Task* accessor, AccessMode mode,
                                          TaskBuffer& cands, Plan& plan) {
  switch (mode) {
    case AccessMode::in:
    case AccessMode::weak_in:
      close_group(w, producer, r, plan);
      read_access(r, accessor, cands);
      return;
    case AccessMode::out:
    case AccessMode::inout:
    case AccessMode::weak_out:
    case AccessMode::weak_inout:
      close_group(w, producer, r, plan);
      write_access(producer, r, accessor, cands);
      return;
    case AccessMode::reduction:
    case AccessMode::weak_reduction:
      // A group with another operator (or none) ends here: a new one starts after its combination.
      if (r.group != kReduction || r.ext->red->ops != plan.spec->ops) {
        start_group(w, producer, r, plan, kReduction);
        r.ext->red = plan.red_new;  // both made by phase 1
        plan.red_new = nullptr;
        r.borrowed = false;
        ++producer->domain->open_reductions;
      }
      if (r.group_pred) cands.push_reserved(r.group_pred);
      r.members.push_back(accessor);  // room made by phase 1
      add_ref(accessor);
      accessor->reductions->links.push_back(ReductionLink{plan.access->address, r.ext->red});  // reserved by phase 1
      return;
    case AccessMode::inoutset:
    case AccessMode::commutative: {
      const Group g = group_of(mode);
      if (r.group != g) start_group(w, producer, r, plan, g);
      if (r.group_pred) cands.push_reserved(r.group_pred);
      r.members.push_back(accessor);
      add_ref(accessor);
      if (g == kCommutative) {
        accessor->kind = &kCommutativeTask;
        accessor->comm[accessor->n_comm++] = r.ext->lock;  // array and lock made by phase 1
      }
      return;
    }
  }
}

inline bool is_weak(AccessMode m) {
  return m == AccessMode::weak_in || m == AccessMode::weak_out || m == AccessMode::weak_inout ||
         m == AccessMode::weak_reduction;
}
inline bool reads_only(AccessMode m) { return m == AccessMode::in || m == AccessMode::weak_in; }

AccessMode merge(AccessMode a, AccessMode b) {
  if (is_reduction(a) || is_reduction(b)) [[unlikely]]  // before anything is registered (phase 1)
    throw std::invalid_argument(
        "weft: a task names a datum twice and one of the accesses is a reduction; a reduction must be the task's "
        "only access to its datum");
  if (a == b) return a;
  const bool ro = reads_only(a) && reads_only(b);
  if (is_weak(a) && is_weak(b)) return ro ? AccessMode::weak_in : AccessMode::weak_inout;
  return ro ? AccessMode::in : AccessMode::inout;
}

// Several accesses of one task to the same datum merge into one (rare; quadratic in n, which is small).
std::vector<Access> merge_duplicates(const Access* acc, std::size_t n) {
  std::vector<Access> merged;
  for (std::size_t k = 0; k < n; ++k) {
    auto it = std::find_if(merged.begin(), merged.end(), [&](const Access& x) { return x.address == acc[k].address; });
    if (it == merged.end())
      merged.push_back(acc[k]);
    else
      it->mode = merge(it->mode, acc[k].mode);
  }
  return merged;
}

/// A new record for `a` in a reserved domain (for a weakly accessing parent, it starts behind the parent's weak
/// node: children wait for what the parent would have waited for).
[[gnu::noinline]] Record& new_record(Domain& d, Task* parent, const void* a) {
  Record& r = d.create(a);
  for (std::uint8_t k = 0; k < parent->n_weak; ++k)
    if (parent->weak[k].address == a) {
      r.writer = parent->weak[k].node;
      break;
    }
  // A parent that reduces on `a`: its children's reductions on `a` join its group (they contribute to the same
  // private copies, combined once in the grandparent's domain); they wait for what the parent's weak node waits
  // for (a strong reduction parent has already waited).
  if (const ReductionLinks* links = reduction_links(parent)) [[unlikely]]
    for (const ReductionLink& l : links->links)
      if (l.address == a) {
        r.extension().red = l.group;  // first: may throw
        r.group = kReduction;
        r.borrowed = true;
        r.group_pred = r.writer;  // a weak node, or null: not counted (add_ref)
        r.writer = nullptr;
        break;
      }
  return r;
}

/// The record of `a` in a reserved domain: found, or created.
Record& record_of(Domain& d, Task* parent, const void* a) {
  if (Record* r = d.find(a)) return *r;
  return new_record(d, parent, a);
}

bool register_general(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n);

// Accesses of one task that name the same datum: merged, then registered.
[[gnu::noinline]] bool register_merged(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n) {
  std::vector<Access> merged = merge_duplicates(acc, n);
  return register_general(w, parent, t, merged.data(), merged.size());
}

// Phase 1 for an access that is not plain (a group access, one that closes a group, a weak access): its
// list room, lock, and the descriptors of the nodes phase 2 will build. Adds its candidates to the bounds.
[[gnu::noinline]] void prepare_special(Worker& w, Task* parent, Plan& p, Task*& held, std::size_t& strong_cands,
                                       std::size_t& weak_cands, std::size_t& node_preds, std::size_t& n_weak,
                                       std::size_t& n_comm, std::size_t& n_red, ReductionGroup*& held_groups,
                                       bool release_nodes) {
  Record& r = *p.r;
  const AccessMode mode = p.access->mode;
  const Group g = group_of(mode);
  bool joins = r.group == g;  // joins the current group
  if (g == kReduction) {
    p.spec = nullptr;
    for (std::size_t k = 0; k < w.n_red_specs; ++k)
      if (w.red_specs[k].address == p.access->address) p.spec = &w.red_specs[k];
    if (!p.spec)
      throw std::invalid_argument("weft: a reduction access needs its operator: use weft::reduction(x, op) or "
                                  "weft::weak_reduction(x, op) clauses of Context::spawn");
    joins = joins && r.ext->red->ops == p.spec->ops;
    ++n_red;
  }
  if (r.group == kReduction && !joins) {
    if (r.borrowed)
      throw std::logic_error(std::string("weft: a task whose parent declared a reduction on a datum accesses it ") +
                             (g == kReduction ? "by a reduction with another operator or type"
                                              : std::string("with ") + to_string(mode)) +
                             "; children of a reducing task may only join its reduction (same operator)");
    p.close_node = prepare_node(w, r.members.size(), held);  // even for one member: the node combines
    node_preds = std::max(node_preds, r.members.size());
  } else if (r.group != kNoGroup && r.group != g && r.members.size() > 1) {
    p.close_node = prepare_node(w, r.members.size(), held);
    node_preds = std::max(node_preds, r.members.size());
  }
  if (g == kReduction && !joins) {
    r.extension();  // phase 2 sets its group there
    ReductionGroup* fresh = new_reduction_group(w, *p.spec);
    fresh->held_next = held_groups;
    held_groups = fresh;
    p.red_new = fresh;
  }
  // Candidates: the readers (an out after readers), else one task (writer or group predecessor).
  std::size_t cands = std::max<std::size_t>(1, r.readers.size());
  if (g != kNoGroup) {
    if (joins)
      make_room(parent, r.members);  // joins the group
    else if (r.members.capacity() == 0)
      r.members.reserve(4);  // starts one: the list is empty after the close
    if (!joins && r.readers.size() >= 2) {
      p.start_node = prepare_node(w, r.readers.size(), held);
      node_preds = std::max(node_preds, r.readers.size());
    }
    cands = 1;
    if (g == kCommutative) {
      RecordExt& x = r.extension();
      if (!x.lock) x.lock = new CommLock;
      ++n_comm;
    }
  } else if (reads_only(mode)) {
    make_room(parent, r.readers);
    cands = 1;
  }
  if (is_weak(mode)) {
    p.weak_node = prepare_node(w, cands, held);
    if (release_nodes) p.release_node = prepare_node(w, 0, held);
    weak_cands = std::max(weak_cands, cands);
    ++n_weak;
  } else {
    strong_cands += cands;
  }
}

// Phase 1: the worker's spare edge array holds at least `cands` nodes (see link()).
[[gnu::noinline]] void grow_spare_edges(Worker& w, std::size_t cands) {
  EdgeNode* fresh = alloc_edges(w, cands);
  if (w.spare_edges) free_edges(w, w.spare_edges);
  w.spare_edges = fresh;
  w.spare_edges_size = edges_capacity(fresh);
}
inline void reserve_spare_edges(Worker& w, std::size_t cands) {
  if (cands > kInlineEdges && w.spare_edges_size < cands) [[unlikely]]
    grow_spare_edges(w, cands);
}

void free_held(Worker& w, Task*& held, ReductionGroup*& held_groups) {
  while (held) {
    Task* x = held;
    held = x->retired_next;
    free_dependency_task(w, x);
  }
  while (held_groups) {
    ReductionGroup* g = held_groups;
    held_groups = g->held_next;
    finish_reduction_group(w, g, /*discard=*/true, nullptr);
  }
}

// The general path (groups, weak accesses, a datum named twice, more than kPlainMax accesses): phase 1 then
// phase 2.
[[gnu::noinline]] bool register_general(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n) {
  Domain& d = *parent->domain;
  const std::uint64_t stamp = ++d.stamp;
  Plan small[8];
  std::unique_ptr<Plan[]> big;
  Plan* plans = small;
  if (n > 8) {
    big.reset(new Plan[n]);
    plans = big.get();
  }
  Task* held = nullptr;  // node descriptors taken by phase 1, freed if it fails
  ReductionGroup* held_groups = nullptr;  // likewise the groups of reductions it starts
  bool special = false;  // some access needs more than a plain in/out/inout record update
  try {
    // --- phase 1: room for everything ---
    d.reserve(w, parent, n);
    std::size_t strong_cands = 0, weak_cands = 0, node_preds = 0, n_weak = 0, n_comm = 0, n_red = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Record& r = record_of(d, parent, acc[i].address);
      if (r.stamp == stamp) [[unlikely]] {  // a second access to one datum: merge them, start again
        free_held(w, held, held_groups);
        return register_merged(w, parent, t, acc, n);
      }
      r.stamp = stamp;
      Plan& p = plans[i];
      p.r = &r;
      p.access = &acc[i];
      const AccessMode mode = acc[i].mode;
      if (mode <= AccessMode::inout && r.group == kNoGroup) [[likely]] {  // plain: at most the readers
        if (mode == AccessMode::in) {
          make_room(parent, r.readers);
          ++strong_cands;
        } else {
          strong_cands += r.readers.empty() ? 1 : r.readers.size();
        }
        continue;
      }
      special = true;
      p.close_node = p.start_node = p.weak_node = p.release_node = nullptr;
      p.red_new = nullptr;
      prepare_special(w, parent, p, held, strong_cands, weak_cands, node_preds, n_weak, n_comm, n_red, held_groups,
                      t->kind->weak_ready != nullptr);
    }
    if (special)  // the plain accesses' plans, which phase 2's general loop also reads: no nodes
      for (std::size_t i = 0; i < n; ++i)
        if (acc[i].mode <= AccessMode::inout && plans[i].r->group == kNoGroup)
          plans[i].close_node = plans[i].start_node = plans[i].weak_node = nullptr;
    w.scratch.clear();
    w.scratch.reserve(strong_cands);
    if (special) {
      w.weak_scratch.reserve(weak_cands);
      w.node_scratch.reserve(node_preds);
      if (n_weak) t->weak = new WeakLink[n_weak];  // t is new: no weak links yet
      if (n_comm) t->comm = new CommLock*[n_comm];
    }
    // t's edge nodes beyond the inline ones: a spare array, taken by link() only if, after duplicates and
    // finished predecessors are dropped, it needs one (a chain of tasks with 6 accesses has 6 candidates but
    // one predecessor: no allocation).
    reserve_spare_edges(w, strong_cands);
    if (n_red) {  // last: nothing after it throws, so the catch below need not free it
      t->reductions = new ReductionLinks;
      try {
        t->reductions->links.reserve(n_red);
      } catch (...) {
        delete t->reductions;
        t->reductions = nullptr;
        throw;
      }
    }
  } catch (...) {
    free_held(w, held, held_groups);
    throw;  // t's arrays are freed with t by the caller
  }

  // --- phase 2: no allocation ---
  TaskBuffer& cands = w.scratch;
  if (!special) {  // plain in/out/inout accesses, no group open: access() without the group and weak cases
    for (std::size_t i = 0; i < n; ++i) {
      if (plans[i].access->mode == AccessMode::in)
        read_access(*plans[i].r, t, cands);
      else
        write_access(parent, *plans[i].r, t, cands);
    }
    return link(w, t, cands.data(), cands.size());
  }
  for (std::size_t i = 0; i < n; ++i) {
    Plan& p = plans[i];
    const AccessMode mode = p.access->mode;
    if (!is_weak(mode)) {
      access(w, parent, *p.r, t, mode, cands, p);
      continue;
    }
    // Weak access: t is recorded as the accessor, but the predecessors gate a node its children will wait on.
    Task* node = p.weak_node;
    p.weak_node = nullptr;
    // (t's kind is read by the thread registering t, which alone may still change it.)
    init_task(w, node, t, t->kind->weak_ready ? &kReportedWeakNode : &kWeakNode);
    trace::on_node(w, node);
    ++w.counters.internal_nodes;
    // A task of a cluster: later accesses follow its access's release node, not t (they may start before t
    // ends). The node's one pending unit is held by t's kind (release_access).
    Task* accessor = t;
    if (Task* r = p.release_node) {
      p.release_node = nullptr;
      init_task(w, r, parent, &kAccessRelease);
      r->pending.store(1, std::memory_order_relaxed);
      r->n_edges = 2;  // fired with the atomic decrement (never the single-predecessor shortcut)
      trace::on_node(w, r);
      ++w.counters.internal_nodes;
      accessor = r;
    }
    TaskBuffer& wc = w.weak_scratch;
    wc.clear();
    access(w, parent, *p.r, accessor, mode, wc, p);
    t->weak[t->n_weak++] = WeakLink{p.access->address, node, accessor == t ? nullptr : accessor};
    // The node counts in t's `alive` until it finishes, so t completes only after its weak predecessors.
    t->alive.fetch_add(kWeakUnit, std::memory_order_relaxed);
    if (link(w, node, wc.data(), wc.size())) {
      if (node->kind == &kReportedWeakNode) [[unlikely]]  // no predecessor left: as if the node completed
        t->kind->weak_ready(w, t, node);
      // A predecessor that had already failed: a task of a cluster is cancelled, as complete_reported_weak would
      // cancel it had the predecessor finished after this link. Any other task runs its body, as it would had
      // the predecessor failed later: its successors are cancelled when it completes (end_children).
      if (node->cancelled.load(std::memory_order_relaxed) && node->kind == &kReportedWeakNode) [[unlikely]]
        t->cancelled.store(true, std::memory_order_relaxed);
      node->succ_head.store(kClosed, std::memory_order_release);
      t->alive.fetch_sub(kWeakUnit, std::memory_order_relaxed);
    }
  }
  if (t->n_comm > 1)
    std::sort(t->comm, t->comm + t->n_comm);  // one global order: no deadlock between overlapping sets
  // A reducing task frees its links when it completes (and runs its commutative locks, if any, as well).
  if (t->kind != &kClusterTask && t->reductions) t->kind = &kReductionTask;  // (a cluster task: Task::cluster)
  return link(w, t, cands.data(), cands.size());
}

// Tasks with a few plain accesses (in/out/inout, no group open on the datum, no datum named twice): the two
// phases of register_general without its plans, node descriptors and group cases, in a function small enough
// to keep its state in registers. Phase 1 also gathers the candidate predecessors (into the worker's buffer,
// which nothing else reads), so phase 2 only updates the records. Returns false, having registered nothing, for
// any other task (`ready` unset); register_general then starts over (phase 1 here only made room or created
// empty records: nothing to undo).
constexpr std::size_t kPlainMax = 8;

[[gnu::always_inline]] inline bool register_plain(Worker& w, Domain& d, Task* parent, Task* t, const Access* acc,
                                                  std::size_t n, bool& ready) {
  // finish_spawn registers only tasks with accesses: the loops test at their end.
  WEFT_ASSERT(n >= 1 && n <= kPlainMax);
  Record* rs[kPlainMax];
  // What phase 2 does for access i, decided by phase 1: bit i of `reads` for an `in` access, of `after_readers` for
  // a write that follows readers (neither: a write after at most the writer, the usual case).
  unsigned reads = 0, after_readers = 0;
  TaskBuffer& cands = w.scratch;
  bool reserved = false;
again:
  const std::uint64_t stamp = ++d.stamp;
  cands.clear();
  cands.reserve(n);  // one candidate per access; room for more is made where a write meets readers
  // The candidates in locals: stores through Task pointers would otherwise reload the buffer's fields at every
  // access (they may alias any pointer). (Keeping the table's fields in locals too made the loop spill, and
  // chains of 2 and 6 accesses slower in time although it ran fewer instructions.)
  Task** cp = cands.data();
  std::size_t nc = 0;
  // --- phase 1: records, list room, candidates (may throw) ---
  std::size_t i = 0;
  do {
    const AccessMode mode = acc[i].mode;
    if (mode > AccessMode::inout) return false;
    Record* r = d.probe(acc[i].address);
    if (!r) [[unlikely]] {  // a new datum
      if (!reserved) {
        reserved = true;
        if (d.reserve(w, parent, n)) {  // it swept or moved the records: look them all up again
          reads = after_readers = 0;
          goto again;
        }
      }
      r = &new_record(d, parent, acc[i].address);
    }
    // A group, or a datum named twice: the general path.
    if (r->group != kNoGroup || r->stamp == stamp) [[unlikely]] return false;
    r->stamp = stamp;
    rs[i] = r;
    Task* const writer = r->writer;
    if (mode != AccessMode::in) {
      if (!r->readers.empty()) [[unlikely]] {  // a write after readers: it waits for them all
        after_readers |= 1u << i;
        cands.set_size(nc);
        cands.reserve(nc + r->readers.size() + (n - i - 1));
        cp = cands.data();
        for (Task* rd : r->readers) cp[nc++] = rd;
      } else if (writer) {
        cp[nc++] = writer;
      }
    } else {
      reads |= 1u << i;
      make_room(parent, r->readers);
      if (writer) cp[nc++] = writer;
    }
  } while (++i < n);
  cands.set_size(nc);
  reserve_spare_edges(w, nc);
  // --- phase 2: the record updates (no allocation). A released task is only retired, not recycled: the
  // candidates stay valid for link(). ---
  i = 0;
  if ((reads | after_readers) == 0 && !parent->weak) {
    // Writes after at most a writer, which is a task: without a weak access the parent's records name no weak
    // node (new_record), so the reference is dropped without release()'s test.
    do {
      Record& r = *rs[i];
      if (Task* const writer = r.writer) {
        WEFT_ASSERT(!is_weak_node(writer) && writer->record_refs > 0);
        if (--writer->record_refs == 0) retire(parent, writer);
      }
      r.writer = t;
    } while (++i < n);
  } else {
    do {  // (the bits of access i are bit 0 of the two masks)
      Record& r = *rs[i];
      if (reads & 1) {
        r.readers.push_back(t);  // room made by phase 1
      } else {
        if (after_readers & 1) {
          for (Task* rd : r.readers) release(parent, rd);
          r.readers.clear();
        }
        if (r.writer) release(parent, r.writer);
        r.writer = t;
      }
      reads >>= 1;
      after_readers >>= 1;
    } while (++i < n);
  }
  t->record_refs += static_cast<std::int32_t>(n);  // one per record (add_ref: t is a task, not a weak node)
  ready = link(w, t, cp, nc);
  return true;
}

}  // namespace

namespace {
/// Several accesses (or one that register_one cannot take): the plain path, else the general one.
[[gnu::noinline]] bool register_several(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n) {
  if (!parent->domain) parent->domain = new Domain;
  Domain& d = *parent->domain;
  if (n <= kPlainMax) {
    bool ready;
    if (register_plain(w, d, parent, t, acc, n, ready)) return ready;
  }
  return register_general(w, parent, t, acc, n);
}

/// One access that register_accesses' hot case does not take: a new domain or record, a record not cached, an
/// `in` access, a parent with weak accesses, a datum with readers or a group, a recorded trace.
[[gnu::noinline]] bool register_one(Worker& w, Task* parent, Task* t, const Access* acc) {
  if (!parent->domain) parent->domain = new Domain;
  Domain& d = *parent->domain;
  // One strong in/out/inout access that waits for at most one task (the last writer).
  if (!parent->weak && acc[0].mode <= AccessMode::inout) {
    Record* r = d.find(acc[0].address);
    if (!r) [[unlikely]] {
      d.reserve(w, parent, 1);
      r = &new_record(d, parent, acc[0].address);  // no weak link (!parent->weak), maybe a parent's reduction
    }
    if (r->group == kNoGroup) {
      Task* pred = r->writer;
      if (acc[0].mode == AccessMode::in) {
        make_room(parent, r->readers);  // the only allocation, before anything changes
        r->readers.push_back(t);
        add_ref(t);
        return link_one(w, t, pred);
      }
      if (r->readers.empty()) {
        set_writer(parent, *r, t);
        return link_one(w, t, pred);  // pred stays valid: only this thread recycles it, and not before next spawn
      }
    }
  }
  return register_several(w, parent, t, acc, 1);
}
}  // namespace

bool register_accesses(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n) {
  // Hot case: one out/inout access to the datum the previous registration named (the domain's one-entry
  // cache), with no readers or group there, in a parent without weak accesses. Then the record's writer is a
  // task, never a weak node (only the parent's own weak nodes are named), and t is a fresh task: their
  // reference counts change without the weak-node tests. Not while a trace is recorded: the case calls
  // nothing, so it needs no stack frame (an `in` access, whose reader list may grow, takes the next one).
  if (n != 1) return register_several(w, parent, t, acc, n);
  Domain* d = parent->domain;
  if (d && !parent->weak && (acc[0].mode == AccessMode::out || acc[0].mode == AccessMode::inout) &&
      d->cache_holds(acc[0].address) && !w.trace) [[likely]] {
    Record& r = d->records[d->last];
    if (r.group == kNoGroup && r.readers.empty()) {
      Task* pred = r.writer;
      ++t->record_refs;
      if (pred) {
        WEFT_ASSERT(!is_weak_node(pred) && pred->record_refs > 0);
        if (--pred->record_refs == 0) retire(parent, pred);
      }
      r.writer = t;
      return link_one<false>(w, t, pred);  // pred stays valid: only this thread recycles it, not before next spawn
    }
  }
  return register_one(w, parent, t, acc);
}

void sweep_domain(Worker& w, Task* t, bool failed_too) {
  if (t->domain) t->domain->sweep(w, t, failed_too);
}

void writers_of(Worker& w, Task* parent, const void* address) {
  w.scratch.clear();
  if (!parent->domain) return;
  Record* r = parent->domain->find(address);
  if (!r) return;
  if (r->group != kNoGroup)
    for (Task* m : r->members) w.scratch.push(m);
  else if (r->writer)
    w.scratch.push(r->writer);
}

bool pending_predecessors(Task* parent, const void* address, AccessMode mode, std::vector<Task*>& out) {
  // A datum without a record yet: a parent's weak access on it would make its weak node the predecessor.
  for (std::uint8_t k = 0; k < parent->n_weak; ++k)
    if (parent->weak[k].address == address && !finished(parent->weak[k].node)) return false;
  Record* r = parent->domain ? parent->domain->probe(address) : nullptr;
  if (!r) return true;
  if (r->group != kNoGroup) return false;
  // The plain cases of read_access / write_access: a read waits for the writer; a write for the readers since
  // the writer, else for the writer.
  auto take = [&](Task* t) {
    if (finished(t)) return !poisoned(t);  // no edge; a failed one would cancel the accessor here
    if (t->kind == &kJoinNode || is_weak_node(t)) return false;
    out.push_back(t);
    return true;
  };
  const bool read = mode == AccessMode::in || mode == AccessMode::weak_in;
  if (!read && !r->readers.empty()) {
    for (Task* rd : r->readers)
      if (!take(rd)) return false;
    return true;
  }
  return !r->writer || take(r->writer);
}

namespace {
// Closes r's open reduction group (its own, not borrowed) with a node, as a later access would; allocates.
void close_open_reduction(Worker& w, Task* parent, Record& r) {
  WEFT_ASSERT(r.group == kReduction && !r.borrowed);
  Task* held = nullptr;
  Task* node = prepare_node(w, r.members.size(), held);
  w.node_scratch.reserve(r.members.size());  // make_reduce_node copies the members there
  end_group(w, parent, r, node);
}
}  // namespace

void settle_reductions(Worker& w, Task* t) {
  Domain* d = t->domain;
  if (!d || d->open_reductions == 0) return;  // the usual taskwait: one test
  // Every child has finished: each node is ready at once and combines here, on the waiting thread.
  for (Record& r : d->records)
    if (r.group == kReduction && !r.borrowed) close_open_reduction(w, t, r);
  WEFT_ASSERT(d->open_reductions == 0);
}

void close_reduction(Worker& w, Task* t, const void* address) {
  Domain* d = t->domain;
  if (!d || d->open_reductions == 0) return;
  Record* r = d->find(address);
  if (r && r->group == kReduction && !r->borrowed) close_open_reduction(w, t, *r);
}

Task* follow_accessors(Worker& w, Task* parent, const void* address, const TaskKind* kind, std::uint32_t tag,
                       bool& ready) {
  TaskBuffer& cands = w.node_scratch;
  cands.clear();
  auto take = [&](Task* t) {
    if (t) cands.push(t);
  };
  if (Record* r = parent->domain ? parent->domain->probe(address) : nullptr) {
    take(r->writer);
    for (Task* x : r->readers) take(x);
    for (Task* x : r->members) take(x);
    take(r->group_pred);
  } else {
    for (std::uint8_t k = 0; k < parent->n_weak; ++k)
      if (parent->weak[k].address == address) take(parent->weak[k].node);
  }
  Task* n = w.allocate();
  init_task(w, n, parent, kind);
  std::memcpy(n->body, &tag, sizeof tag);  // before it is linked: a predecessor may complete it at once
  if (cands.size() > kInlineEdges) n->extra_edges = alloc_edges(w, cands.size());
  ready = link(w, n, cands.data(), cands.size());
  return n;
}

bool children_accessed(Task* parent, const void* address) {
  return parent->domain && parent->domain->probe(address);
}

void destroy_domain(Worker& w, Task* t) {
  Domain* d = t->domain;
  auto drop = [&](Task* x) {
    if (!x || is_weak_node(x)) return;
    if (--x->record_refs == 0) free_dependency_task(w, x);  // every child has finished
  };
  if (d->open_reductions) [[unlikely]]  // groups still open at the end of their parent: combined now
    for (Record& r : d->records)
      if (r.group == kReduction && !r.borrowed) {
        // A failed member (kept by pruning) or a failed predecessor (its members were cancelled, so they are
        // poisoned too): nothing is combined, as when a node closes the group.
        const bool failed = std::any_of(r.members.begin(), r.members.end(), [](const Task* m) { return poisoned(m); });
        finish_reduction_group(w, r.ext->red, failed, t);  // a combiner's exception fails t
        r.ext->red = nullptr;
      }
  for (Record& r : d->records) {
    drop(r.writer);
    for (Task* x : r.readers) drop(x);
    for (Task* x : r.members) drop(x);
    drop(r.group_pred);
    r.drop_extension();
  }
  delete d;
  t->domain = nullptr;
}

void destroy_weak_links(Worker& w, Task* t) {
  for (std::uint8_t k = 0; k < t->n_weak; ++k) free_dependency_task(w, t->weak[k].node);
  delete[] t->weak;
  t->weak = nullptr;
  t->n_weak = 0;
}

namespace {
void unlock(Worker& w, CommLock* l) {
  Task* woken;
  {
    std::lock_guard<std::mutex> g(l->m);
    l->held = false;
    woken = l->waiters;
    l->waiters = nullptr;
  }
  while (woken) {  // they retry their locks when run
    Task* x = woken;
    woken = x->edges[0].succ;
    schedule(w, x);
  }
}
}  // namespace

bool acquire_commutative(Worker& w, Task* t) {
  for (std::uint8_t i = 0; i < t->n_comm; ++i) {
    CommLock* l = t->comm[i];
    std::unique_lock<std::mutex> g(l->m);
    if (!l->held) {
      l->held = true;
      continue;
    }
    t->edges[0].succ = l->waiters;  // parked: rescheduled by the holder's release
    l->waiters = t;
    g.unlock();
    for (std::uint8_t j = 0; j < i; ++j) unlock(w, t->comm[j]);
    return false;
  }
  return true;
}

void release_commutative(Worker& w, Task* t) {
  for (std::uint8_t i = 0; i < t->n_comm; ++i) unlock(w, t->comm[i]);
}

}  // namespace weft::detail
