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
// Descriptor lifetime: a record holds a reference (record_refs, owner-thread only) to each task it names; a
// task no record names is retired to its producer's list and recycled once finished.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "engine/engine.hpp"
#include "trace/hooks.hpp"

namespace weft::detail {

struct CommLock {
  std::mutex m;
  bool held = false;
  std::vector<Task*> waiters;
};

struct WeakLink {
  const void* address;
  Task* node;
};

namespace {

enum Group : std::uint8_t { kNoGroup = 0, kInoutset = 1, kCommutative = 2 };

struct Record {
  const void* address = nullptr;
  Task* writer = nullptr;         ///< last writer, a join node, or the parent's weak node
  std::vector<Task*> readers;     ///< readers since `writer`
  std::vector<Task*> members;     ///< current group
  Task* group_pred = nullptr;     ///< what every member of the current group waits for
  CommLock* lock = nullptr;       ///< commutative mutual exclusion for this datum
  Group group = kNoGroup;
};

}  // namespace

struct Domain {
  std::vector<Record> records;
  std::vector<std::uint32_t> slots = std::vector<std::uint32_t>(16, 0);  // record index + 1; 0 = empty
  unsigned shift = 64 - 4;
  const void* last_address = nullptr;  // one-entry cache: consecutive tasks often name the same datum
  std::uint32_t last = 0;

  static std::uint64_t hash(const void* a) {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(a)) * 0x9E3779B97F4A7C15ull;
  }

  Record* find(const void* a) {
    if (a == last_address) return &records[last];
    const std::size_t mask = slots.size() - 1;
    for (std::size_t i = hash(a) >> shift;; i = (i + 1) & mask) {
      const std::uint32_t s = slots[i];
      if (s == 0) return nullptr;
      if (records[s - 1].address == a) {
        last_address = a;
        last = s - 1;
        return &records[s - 1];
      }
    }
  }

  Record& get(const void* a, bool& created) {
    created = false;
    if (Record* r = find(a)) return *r;
    created = true;
    if (2 * (records.size() + 1) > slots.size()) grow();
    records.emplace_back();
    records.back().address = a;
    insert_slot(a, static_cast<std::uint32_t>(records.size()));
    last_address = a;
    last = static_cast<std::uint32_t>(records.size() - 1);
    return records.back();
  }

 private:
  void insert_slot(const void* a, std::uint32_t value) {
    const std::size_t mask = slots.size() - 1;
    std::size_t i = hash(a) >> shift;
    while (slots[i] != 0) i = (i + 1) & mask;
    slots[i] = value;
  }
  void grow() {
    slots.assign(slots.size() * 2, 0);
    --shift;
    for (std::uint32_t k = 0; k < records.size(); ++k) insert_slot(records[k].address, k + 1);
  }
};

namespace {


// Weak nodes are owned by the task whose weak access they stand for and freed with it: records name them
// without counting.
inline void add_ref(Task* t) {
  if (!(t->flags & kWeakNode)) ++t->record_refs;
}

inline void release(Task* producer, Task* t) {
  if (t->flags & kWeakNode) return;
  if (--t->record_refs == 0) retire(producer, t);
}

// Links `target` after the candidate predecessors in `cands` (consumed). Returns true if target is ready
// (no unfinished predecessor). Must run before target is visible to any other thread.
// link() for exactly one candidate (the hot path of a task with one access): no buffer, no loops, and a push
// that fails needs no atomic on the pending count, since no other predecessor can touch it.
[[gnu::always_inline]] inline bool link_one(Worker& w, Task* target, Task* p) {
  Counters& c = w.counters;
  target->pending.store(0, std::memory_order_relaxed);
  target->n_edges = 0;
  if (!p || p == target) return true;
  p->mark = target;
  std::uintptr_t head = p->succ_head.load(std::memory_order_acquire);
  if (head != kClosed) {
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
        trace::on_edge(w, p, target);
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
  EdgeNode* nodes = m <= kInlineEdges ? target->edges : (target->extra_edges = new EdgeNode[m]);
  std::int32_t failed = 0;
  for (std::size_t i = 0; i < m; ++i) {
    Task* p = cands[i];
    EdgeNode* e = &nodes[i];
    e->succ = target;
    // Acquire on every read of the head: seeing kClosed orders p's completion (and its effects) before target.
    std::uintptr_t head = p->succ_head.load(std::memory_order_acquire);
    for (;;) {
      if (head == kClosed) {  // finished since we looked
        ++failed;
        ++c.edges_pruned_finished;
        if (poisoned(p)) target->cancelled.store(true, std::memory_order_relaxed);
        break;
      }
      e->next = reinterpret_cast<EdgeNode*>(head);
      // Release: the finishing predecessor acquires the node (and target's pending count) with its exchange.
      if (p->succ_head.compare_exchange_weak(head, reinterpret_cast<std::uintptr_t>(e), std::memory_order_release,
                                             std::memory_order_acquire)) {
        ++c.edges_created;
        trace::on_edge(w, p, target);
        break;
      }
    }
  }
  if (failed == 0) return false;
  return target->pending.fetch_sub(failed, std::memory_order_acq_rel) == failed;
}

// An internal node that finishes when all `preds` have; it stands for them in later accesses.
Task* make_node(Worker& w, Task* producer, const std::vector<Task*>& preds) {
  Task* n = w.allocate();
  init_task(w, n, producer);
  trace::on_node(w, n);
  n->flags = kNode;
  ++w.counters.internal_nodes;
  w.counters.edges_saved_inoutset -= static_cast<std::int64_t>(preds.size());  // n*(m-1) - m in the end
  n->joined = static_cast<std::uint32_t>(preds.size());
  std::vector<Task*> cands(preds);
  if (link(w, n, cands.data(), cands.size())) n->succ_head.store(kClosed, std::memory_order_release);
  return n;
}

void set_writer(Task* producer, Record& r, Task* t) {
  add_ref(t);
  if (r.writer) release(producer, r.writer);
  r.writer = t;
}

// Ends the current group: a join node (or the single member) becomes the writer.
[[gnu::noinline]] void end_group(Worker& w, Task* producer, Record& r) {
  Task* n = r.members.size() == 1 ? r.members[0] : make_node(w, producer, r.members);
  set_writer(producer, r, n);
  for (Task* m : r.members) release(producer, m);
  r.members.clear();
  if (r.group_pred) release(producer, r.group_pred);
  r.group_pred = nullptr;
  r.group = kNoGroup;
}
inline void close_group(Worker& w, Task* producer, Record& r) {
  if (r.group != kNoGroup) [[unlikely]]
    end_group(w, producer, r);
}

// Record update for one access by `accessor`; predecessors of `target` (accessor, or its weak node) are
// appended to `cands`.
[[gnu::always_inline]] inline void access(Worker& w, Task* producer, Record& r, Task* accessor, AccessMode mode, TaskBuffer& cands) {
  switch (mode) {
    case AccessMode::in:
    case AccessMode::weak_in:
      close_group(w, producer, r);
      if (r.writer) cands.push(r.writer);
      r.readers.push_back(accessor);
      add_ref(accessor);
      return;
    case AccessMode::out:
    case AccessMode::inout:
    case AccessMode::weak_out:
    case AccessMode::weak_inout:
      close_group(w, producer, r);
      if (!r.readers.empty()) {
        for (Task* rd : r.readers) {
          cands.push(rd);
          release(producer, rd);
        }
        r.readers.clear();
      } else if (r.writer) {
        cands.push(r.writer);
      }
      set_writer(producer, r, accessor);
      return;
    case AccessMode::inoutset:
    case AccessMode::commutative: {
      const Group g = mode == AccessMode::inoutset ? kInoutset : kCommutative;
      if (r.group != g) {
        close_group(w, producer, r);
        Task* gp = nullptr;
        if (r.readers.size() >= 2)
          gp = make_node(w, producer, r.readers);
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
      if (r.group_pred) cands.push(r.group_pred);
      r.members.push_back(accessor);
      add_ref(accessor);
      if (g == kCommutative) {
        if (!r.lock) r.lock = new CommLock;
        accessor->flags |= kHasComm;
        CommLock** grown = new CommLock*[accessor->n_comm + 1u];
        if (accessor->comm) std::memcpy(grown, accessor->comm, accessor->n_comm * sizeof(CommLock*));
        delete[] accessor->comm;
        grown[accessor->n_comm++] = r.lock;
        accessor->comm = grown;
      }
      return;
    }
  }
}

inline bool is_weak(AccessMode m) {
  return m == AccessMode::weak_in || m == AccessMode::weak_out || m == AccessMode::weak_inout;
}
inline bool reads_only(AccessMode m) { return m == AccessMode::in || m == AccessMode::weak_in; }

AccessMode merge(AccessMode a, AccessMode b) {
  if (a == b) return a;
  const bool ro = reads_only(a) && reads_only(b);
  if (is_weak(a) && is_weak(b)) return ro ? AccessMode::weak_in : AccessMode::weak_inout;
  return ro ? AccessMode::in : AccessMode::inout;
}

}  // namespace

namespace {
// Several accesses of one task to the same datum merge into one (rare; quadratic in n, which is small).
bool has_duplicates(const Access* acc, std::size_t n) {
  for (std::size_t i = 1; i < n; ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (acc[i].address == acc[j].address) return true;
  return false;
}
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
}  // namespace

bool register_accesses(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n) {
  if (n > 1 && has_duplicates(acc, n)) {
    std::vector<Access> merged = merge_duplicates(acc, n);
    return register_accesses(w, parent, t, merged.data(), merged.size());
  }
  if (!parent->domain) parent->domain = new Domain;
  Domain& d = *parent->domain;

  // Hot path: one strong in/out/inout access that waits for at most one task (the last writer).
  if (n == 1 && !parent->weak && acc[0].mode <= AccessMode::inout) {
    bool created;
    Record& r = d.get(acc[0].address, created);
    if (r.group == kNoGroup) {
      Task* pred = r.writer;
      if (acc[0].mode == AccessMode::in) {
        r.readers.push_back(t);
        add_ref(t);
        return link_one(w, t, pred);
      }
      if (r.readers.empty()) {
        set_writer(parent, r, t);
        return link_one(w, t, pred);  // pred stays valid: only this thread recycles it, and not before next spawn
      }
    }
  }

  TaskBuffer& cands = w.scratch;
  cands.clear();
  for (std::size_t i = 0; i < n; ++i) {
    bool created;
    Record& r = d.get(acc[i].address, created);
    if (created && parent->weak) {
      // First access to a datum the parent declared weakly: wait for what the parent would have waited for.
      for (std::uint8_t k = 0; k < parent->n_weak; ++k)
        if (parent->weak[k].address == acc[i].address) {
          r.writer = parent->weak[k].node;
          break;
        }
    }
    if (!is_weak(acc[i].mode)) {
      access(w, parent, r, t, acc[i].mode, cands);
      continue;
    }
    // Weak access: t is recorded as the accessor, but the predecessors gate a node its children will wait on.
    Task* node = w.allocate();
    init_task(w, node, t);
    trace::on_node(w, node);
    node->flags = kNode | kWeakNode;
    ++w.counters.internal_nodes;
    TaskBuffer& wc = w.weak_scratch;
    wc.clear();
    access(w, parent, r, t, acc[i].mode, wc);
    WeakLink* grown = new WeakLink[t->n_weak + 1u];
    if (t->weak) std::copy(t->weak, t->weak + t->n_weak, grown);
    delete[] t->weak;
    grown[t->n_weak++] = WeakLink{acc[i].address, node};
    t->weak = grown;
    // The node counts in t's `alive` until it finishes, so t completes only after its weak predecessors.
    t->alive.fetch_add(kWeakUnit, std::memory_order_relaxed);
    if (link(w, node, wc.data(), wc.size())) {
      node->succ_head.store(kClosed, std::memory_order_release);
      t->alive.fetch_sub(kWeakUnit, std::memory_order_relaxed);
    }
  }
  if (t->n_comm > 1)
    std::sort(t->comm, t->comm + t->n_comm);  // one global order: no deadlock between overlapping sets
  return link(w, t, cands.data(), cands.size());
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

void destroy_domain(Worker& w, Task* t) {
  Domain* d = t->domain;
  auto drop = [&](Task* x) {
    if (!x || (x->flags & kWeakNode)) return;
    if (--x->record_refs == 0) free_task(w, x);  // every child has finished
  };
  for (Record& r : d->records) {
    drop(r.writer);
    for (Task* x : r.readers) drop(x);
    for (Task* x : r.members) drop(x);
    drop(r.group_pred);
    delete r.lock;
  }
  delete d;
  t->domain = nullptr;
}

void destroy_weak_links(Worker& w, Task* t) {
  for (std::uint8_t k = 0; k < t->n_weak; ++k) free_task(w, t->weak[k].node);
  delete[] t->weak;
  t->weak = nullptr;
  t->n_weak = 0;
}

namespace {
void unlock(Worker& w, CommLock* l) {
  std::vector<Task*> woken;
  {
    std::lock_guard<std::mutex> g(l->m);
    l->held = false;
    woken.swap(l->waiters);
  }
  for (Task* x : woken) schedule(w, x);  // they retry their locks when run
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
    l->waiters.push_back(t);  // rescheduled by the holder's release
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
