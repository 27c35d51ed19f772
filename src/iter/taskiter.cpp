// taskiter: record one period of an iterative loop's tasks, close it into a cyclic graph, replay it.
//
// Recording. The body runs on a private recorder task (kRecorderTask): Context::spawn still allocates a descriptor
// and installs the body, but finish_spawn hands the task here instead of registering it. Per datum we keep the
// state the dependency system would (last writer, readers since) plus the first accessors of the period: the
// readers before the first write (head) and the first writer. Intra-period edges follow the usual rules
// (in after the last writer; out/inout after the readers since the last writer, else after it), none pruned.
//
// The first period runs while it is recorded. A recorded task (kFirstRunTask) is linked at once after its intra
// predecessors through the engine's successor lists, as a spawned task is, and counted as a child of the
// taskiter task; it runs as soon as they have finished. Its vertex exists from then on (NodeStore: fixed
// addresses). When it completes (complete_first) it releases those successors, and its descriptor becomes a
// replayed task for the later periods (its successor list stays closed: replay does not use it).
//
// Closure. Continuing a datum's access stream into the next period: the head readers wait for the last writer,
// and the first writer waits for the tail readers (those after the last write), or, when there are neither tail
// nor head readers, for the last writer. These are the cross edges from period p to period p+1: the graph
// orders every pair of conflicting accesses of the unrolled loop exactly as spawning every iteration would.
// A task none of whose data is written in the period (only reads, or no access) gets a cross edge to itself.
//
// Replay. Each vertex keeps one pending counter per period parity: instance (v, p) waits on pending[p & 1],
// initialised with all its predecessors (intra + cross) for periods 1 and 2. When
// (v, p) completes it re-arms pending[p & 1] for (v, p + 2), then releases its successors: intra edges count
// against period p, cross edges against p + 1. No barrier, no task creation, no registration.
// The graph is closed while period 0 runs, so period 0's cross edges go to period 1 by a handover per vertex
// (IterNode::handover): the driver, once the counters are set, marks each vertex closed, unless its first
// instance has completed already, in which case the driver releases that instance's cross edges itself; an
// instance completing later releases its own. One compare-exchange against one exchange: exactly one of the
// two does it, and (v, 0) has completed before any of its edges is released, so (2) and (3) below hold across
// the boundary too. (With replay_barrier, or update in a while-loop, there are no cross edges: the driver
// releases each period's roots once the previous period has finished. So too when the closure finds a boundary
// of broadcasts: IterLoop::broadcast_boundary.)
//
// Update without a barrier (weft::update, fixed trip count). The body runs again for every period, on the
// driver, while the tasks of the two previous periods may run; its spawns only refresh descriptors (body
// carriers), matched with their vertices. A vertex has two carrier slots, one per parity (task, odd_task), and
// each instance counts the delivery of its carrier as one more predecessor: the driver delivers period p's
// carriers once every instance of period p - 2 has completed (IterLoop::completed, counted by parity), so the
// slot it fills and the counter it decrements are free, as for the other decrements in (3) below. The graph,
// its cross edges and the proof are those of the pipelined loop; the delivery is one more edge into (v, p),
// from an event after (v, p - 2).
//
// Why two parities suffice (a task is never more than one period ahead of what it waits for):
//  (1) Conflict implies order: in the unrolled access stream of one datum with in/out/inout accesses, if a
//      precedes b and one of them writes, b depends transitively on a (induction on the stream: a write waits
//      for the readers since the previous write or for that write, a read for the previous write).
//  (2) Consecutive instances are ordered: (v, p) -> (v, p + 1) by (1) if v writes a datum, through a writer of
//      a datum v reads otherwise, or by the explicit self edge.
//  (3) Let u -> v be any edge of instance (v, p + 2): a conflict on some datum d (or the self edge, u = v,
//      from period p + 1). u's instance is in period p + 1 or p + 2, after (v, p) in d's stream, and conflicts
//      with it: by (1), u's instance depends transitively on (v, p), i.e. starts after (v, p) has completed.
//  So every decrement of pending[p & 1] meant for (v, p + 2) happens after (v, p) completed, hence after the
//  re-arm, which (v, p) performs before releasing anything (release/acquire chains carry it); and no decrement
//  meant for (v, p) can arrive after it, since (v, p) started only when all of them were in. By (2) one instance
//  of v runs at a time, so its plain fields (period, open) need no atomics. The control tasks of while-loops
//  keep (1)-(3): they depend on their copy's leaves and on the previous control, and gate their copy's roots.
//
// taskiter_while (pipelined): one control vertex c_r per copy r of the period. c_r depends on the leaves of
// copy r (so it runs once every task of that iteration has finished) and on the previous control (controls run
// in iteration order); it gates (gate edges, cross) the roots of copy r in the next period and its own next
// instance. Its check decides whether iteration i + k runs: if true it adds that iteration's instances to the
// loop's count and releases its gates; if false (or the loop failed) it releases no gate: nothing of a later
// iteration can become ready, since every task of an iteration is reachable from its roots or gated itself.
//
// Termination. The taskiter task's `alive` counts released instances: an instance is counted when it is made
// ready (by the driver for the roots, else by the completing predecessor, itself still counted, so the count
// cannot touch zero in between; per-worker credits make that an atomic per credit_batch(w) instances), and each
// completion is counted like a finished child (batched per worker by the engine), except that a completing
// instance hands its count to the first instance it releases (a replayed chain counts nothing). The driver, the taskiter
// task's body, waits until none is left, running tasks meanwhile, then frees the graph. A failed loop stops
// releasing instances, so it ends as soon as the ones in flight have finished.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "deps/deps.hpp"
#include "trace/hooks.hpp"
#include "weft/taskiter.hpp"

namespace weft::detail {

// The kinds of task of a taskiter (defined with their functions, below the loop).
extern const TaskKind kReplayedTask;  ///< a recorded task, replayed once per iteration (the vertex's body)
/// The same under a pipelined weft::update: its body carrier is a fresh descriptor every iteration.
extern const TaskKind kUpdatedTask;
extern const TaskKind kControlTask;   ///< a taskiter_while check, one per copy of the body
extern const TaskKind kRecorderTask;  ///< the private task of the recording Context: its spawns are recorded
/// The combination of a recorded reduction group: replayed like a recorded task, but not one of the program's
/// (Stats::tasks_executed does not count it).
extern const TaskKind kCombineTask;
/// The same two in their first instance (period 0), which runs as the body records it: it waits for its
/// predecessors as a spawned task does (the graph is not closed yet), then becomes one of the two above.
extern const TaskKind kFirstRunTask;
extern const TaskKind kFirstCombineTask;

namespace {
enum EdgeKind : std::uint32_t { kIntra = 0, kCross = 1, kGate = 2 };
constexpr std::uint64_t kNoEnd = ~std::uint64_t{0};

}  // namespace

struct IterSucc {
  IterNode* node;
  std::uint32_t kind;
};
struct IterEdge {
  std::uint32_t from, to, kind;
  bool operator<(const IterEdge& o) const {
    return from != o.from ? from < o.from : kind != o.kind ? kind < o.kind : to < o.to;
  }
  bool operator==(const IterEdge& o) const { return from == o.from && to == o.to && kind == o.kind; }
};
struct IterLoop;

/// Who hands a vertex's cross edges to period 1 (IterNode::handover): its first instance, if it completes after
/// the graph is closed, else the driver, when it closes the graph.
enum Handover : std::uint8_t { kFirstRunning = 0, kFirstDone = 1, kGraphClosed = 2 };

struct alignas(64) IterNode {
  std::atomic<std::int32_t> pending[2] = {};  ///< per period parity (from period 1): predecessors not yet finished
  std::int32_t rearm = 0;                     ///< predecessors of an instance (from period 1)
  std::uint32_t n_succ = 0;
  Task* task = nullptr;  ///< body carrier (replaced between periods under update)
  IterLoop* loop = nullptr;
  IterSucc* succ = nullptr;
  std::uint64_t period = 0;  ///< period of the instance to run next (one instance at a time)
  union {
    ReductionLinks* links = nullptr;  ///< the recorded task's reductions (null: none); never under update
    /// Pipelined update: the body carrier of the odd periods (`task`: of the even ones). The driver delivers an
    /// instance's carrier (see deliver_period) while the instance of the other parity may still run.
    Task* odd_task;
  };
  std::uint32_t copy = 0;           ///< which run of the body (0..k-1) recorded it
  bool control = false;
  bool open = false;  ///< control: this instance's check passed, its gates are released
  std::atomic<Handover> handover{kFirstRunning};

  /// The body carrier of this vertex's instance of period q: `task`, but under a pipelined update (`updated`)
  /// odd periods have their own.
  Task*& carrier(std::uint64_t q, bool updated) { return updated && (q & 1) ? odd_task : task; }
};
static_assert(sizeof(IterNode) == 64, "one cache line per vertex");

namespace {

/// The vertices of a loop, at fixed addresses: the first period's tasks run (and read their vertex) while more
/// are recorded. Chunks of kChunk vertices (16 KiB): a lookup is a shift, a mask and two loads (chunks that
/// doubled in size took a bit_width and a multiplication more, at several lookups per recorded task).
class NodeStore {
 public:
  IterNode& operator[](std::uint32_t x) { return chunks_[x / kChunk][x % kChunk]; }
  /// A new vertex at the end (may throw std::bad_alloc).
  IterNode& push() {
    if (size_ % kChunk == 0 && size_ / kChunk == chunks_.size()) {
      reserve_one_more(chunks_);
      chunks_.emplace_back(new IterNode[kChunk]);
    }
    return (*this)[size_++];
  }
  std::uint32_t size() const { return size_; }

 private:
  static constexpr std::uint32_t kChunk = 256;
  std::vector<std::unique_ptr<IterNode[]>> chunks_;
  std::uint32_t size_ = 0;
};

std::string describe(const Access* a, std::size_t n) {
  std::string s;
  char buf[64];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%s(%p)", i ? ", " : "", weft::to_string(a[i].mode), a[i].address);
    s += buf;
  }
  return n ? s : "no access";
}

constexpr std::uint32_t kNoReader = ~0u;
/// An access of a recorded task with many accesses, by address (record_spawn's merge of duplicates).
struct AccessOrder {
  std::uintptr_t address;
  std::uint32_t index;
};

/// A list of readers of a datum (vertices), linked through the loop's reader_links.
struct ReaderLink {
  std::uint32_t vertex, next;
};

struct Datum {
  const void* address = nullptr;
  std::int32_t last_writer = -1, first_writer = -1;
  std::uint32_t readers = kNoReader;       ///< since the last writer (reduction members included)
  std::uint32_t head_readers = kNoReader;  ///< before the first writer
  std::uint32_t n_head_readers = 0;        ///< (counted for IterLoop::broadcast_boundary)
  ReductionGroup* group = nullptr;         ///< an open reduction group of this copy
};

/// The recording's data by address: open addressing (linear probing) over data at fixed addresses. No
/// allocation per datum: a node per datum (std::unordered_map) and the readers' vectors were a third of the
/// instructions of recording a 5-point stencil.
class DataTable {
 public:
  /// The datum of `address`, made if new. References stay valid as the table grows. May throw std::bad_alloc.
  Datum& operator[](const void* address) {
    if (2 * (data_.size() + 1) > slots_.size()) grow();
    for (std::size_t i = slot_of(address);; i = (i + 1) & (slots_.size() - 1)) {
      if (!slots_[i]) {
        Datum& d = data_.emplace_back();
        d.address = address;
        slots_[i] = &d;
        return d;
      }
      if (slots_[i]->address == address) return *slots_[i];
    }
  }
  std::deque<Datum>& all() { return data_; }
  void clear() {
    data_.clear();
    slots_.clear();
    shift_ = 64;
  }

 private:
  std::size_t slot_of(const void* address) const {  // Fibonacci hashing: the top bits of a multiplication
    return static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(address) >> 3) * 0x9E3779B97F4A7C15ull >>
                                    shift_);
  }
  void grow() {
    std::vector<Datum*> old(std::max<std::size_t>(64, 2 * slots_.size()), nullptr);
    old.swap(slots_);
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(slots_.size()));
    for (Datum* d : old) {
      if (!d) continue;
      std::size_t i = slot_of(d->address);
      while (slots_[i]) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = d;
    }
  }
  std::deque<Datum> data_;
  std::vector<Datum*> slots_;  ///< a power of two, at most half full; null: empty
  unsigned shift_ = 64;
};

// The body of a combine vertex: the group's copies into the datum, every iteration.
struct CombineBody {
  ReductionGroup* group;
  void operator()() const { combine_and_reset(group); }
};

}  // namespace

/// One running taskiter: its graph and the state of the loop. Lives in the driver's frame.
struct IterLoop {
  const IterSpec* spec = nullptr;
  Task* owner = nullptr;  ///< the taskiter task
  Task* recorder = nullptr;
  std::uint32_t k = 1;
  bool pipelined = true;
  bool is_while = false;
  /// weft::update without a barrier (fixed trip count): the driver re-runs the body for period p while earlier
  /// periods run, and delivers each vertex's fresh carrier as one more predecessor of its instance.
  bool update_pipelined = false;
  std::uint64_t n_periods = kNoEnd;  ///< fixed trip count: periods; while-loops: no end
  /// Fixed trip count whose last period is partial: the copies that run in it (the others skip it); else ~0u
  /// (every copy runs: one test per replayed instance, as copy < k).
  std::uint32_t partial_from = ~0u;
  std::atomic<bool> failed{false};   ///< an instance or a check failed: skip bodies, stop checks
  bool stopped = false;              ///< while-loops: a check returned false (controls only, in order)
  /// Recording failed half-way (no memory): the graph is incomplete, the loop cannot replay.
  bool broken = false;

  // The graph. A vertex is made when its task is recorded (it owns the descriptor from then on); close() adds
  // the controls and the successor arrays.
  NodeStore nodes;
  std::uint32_t m = 0;       ///< vertices, controls included (after close())
  std::uint32_t m_data = 0;  ///< recorded tasks
  std::vector<IterSucc> succs;
  std::vector<std::uint32_t> copy_size;  ///< recorded tasks per copy

  // Recording.
  struct Rec {
    std::uint32_t copy, acc_begin, acc_end;
  };
  std::vector<Rec> rec;
  std::vector<Access> accs;
  std::vector<IterEdge> edges;
  std::vector<std::uint32_t> mark;  ///< last target linked from each task (duplicate intra edges)
  DataTable data;
  std::vector<ReaderLink> reader_links;  ///< the readers lists of the data (Datum::readers, head_readers)
  std::vector<Access> merge_scratch;     ///< record_spawn's merged accesses
  std::vector<AccessOrder> merge_order;  ///< record_spawn: its accesses sorted by address (many of them)
  std::uint32_t current_copy = 0;
  // Reductions: members are recorded as readers of their datum (they touch only their copies), and the group is
  // closed by a combine vertex recorded as a writer of it (inout): the combination then follows the members and
  // precedes every later accessor, in this iteration and the next ones, by the rules above (so the proof holds
  // as for in/out/inout). A group ends at the first access that does not join it, else at the end of its copy
  // of the body; its state lives as long as the loop, its copies are combined and freed by every instance of
  // its combine vertex (the next instances of its members start only after it: they wait for its datum's
  // writers).
  std::vector<ReductionGroup*> groups;     ///< every group recorded (freed with the loop)
  std::deque<ReductionLinks> links;        ///< of the vertices with reductions (IterNode::links; stable)
  std::vector<const void*> open_groups;    ///< data whose group is open

  // Update: the refreshed descriptors of the period being prepared, by vertex.
  bool updating = false;
  std::uint32_t update_next = 0;
  std::uint64_t update_iteration = 0;
  std::vector<Task*> fresh;

  Worker* worker = nullptr;  ///< the driver's worker (frees the graph)

  /// Pipelined update: instances of period p completed, by parity (complete_instance<true>, complete_first).
  /// The driver delivers period p's carriers only once period p - 2 has completed: each such instance has
  /// re-armed its counter (the delivery counts against it) and left its carrier's slot to the delivery.
  alignas(64) std::atomic<std::uint32_t> completed[2] = {};
  /// An instance of period p has completed (after its re-arm: release, the driver acquires the count); the
  /// last one wakes the driver, which may sleep until the period is complete (a timed sleep otherwise).
  /// `full_known`: m_data is set (the graph is closed), else the count is not compared.
  void count_completed(Worker& w, std::uint64_t p, bool full_known = true) {
    const std::uint32_t n = completed[p & 1].fetch_add(1, std::memory_order_release) + 1;
    if (full_known && n == m_data) w.engine->wake_all();
  }

  // Every instance has finished (the driver waits for them before the loop goes).
  ~IterLoop() {
    Worker& w = *worker;
    for (ReductionGroup* g : groups) finish_reduction_group(w, g, /*discard=*/true, nullptr);
    for (Task* t : fresh)
      if (t) discard(w, t);
    for (std::uint32_t x = 0; x < nodes.size(); ++x) {
      IterNode& v = nodes[x];
      // (a skipped copy's last instance may reuse the carrier of the other parity: see deliver_period)
      if (update_pipelined && v.odd_task && v.odd_task != v.task) release_task(w, v.odd_task, true);
      if (!v.task) continue;
      drop_first_edges(w, v.task);
      release_task(w, v.task, !v.control);
    }
    if (recorder) free_task(w, recorder);
  }

  static void discard(Worker& w, Task* t) {
    t->body_ops->destroy(t);
    free_task(w, t);  // recorded, never registered: nothing hangs off it
  }
  static void release_task(Worker& w, Task* t, bool has_body) {
    if (has_body) t->body_ops->destroy(t);
    t->iter = nullptr;
    free_task(w, t);
  }
  /// The edge array of a recorded task's first instance, if it needed one.
  static void drop_first_edges(Worker& w, Task* t) {
    if (t->extra_edges) {
      free_edges(w, t->extra_edges);
      t->extra_edges = nullptr;
    }
  }

  // --- recording ---
  void add_intra(std::uint32_t from, std::uint32_t to) {
    if (mark[from] == to) return;  // already linked through another datum
    mark[from] = to;
    edges.push_back({from, to, kIntra});
  }

  static const ReductionSpec& spec_of(Worker& w, const void* address) {
    for (std::size_t k = 0; k < w.n_red_specs; ++k)
      if (w.red_specs[k].address == address) return w.red_specs[k];
    throw std::invalid_argument("weft: a reduction access needs its operator: use weft::reduction(x, op)");
  }

  /// Ends the open group of `address` with its combine vertex (a writer of the datum).
  void close_group(Worker& w, const void* address, Datum& d) {
    ReductionGroup* g = d.group;
    d.group = nullptr;
    Task* c = w.allocate();
    init_task(w, c, owner, &kDependencyTask);
    c->priority = 0;
    c->label = "combine";
    install_body(c, CombineBody{g});
    const Access acc{address, 0, AccessMode::inout};
    record(w, c, &acc, 1, /*combine=*/true);
  }
  /// The end of a copy of the body: its open groups are closed.
  void close_groups(Worker& w) {
    for (const void* a : open_groups) {
      Datum& d = data[a];
      if (d.group) close_group(w, a, d);
    }
    open_groups.clear();
  }

  void record(Worker& w, Task* t, const Access* a, std::size_t n, bool combine = false) {
    // One lookup per access: references into the map stay valid while it grows (close_group records more).
    Datum* few[8];
    std::vector<Datum*> many;
    Datum** ds = few;
    if (n > std::size(few)) {
      many.resize(n);
      ds = many.data();
    }
    for (std::size_t i = 0; i < n; ++i) ds[i] = &data[a[i].address];
    // Groups this task does not join end before it: their combinations come first.
    for (std::size_t i = 0; i < n; ++i) {
      Datum& d = *ds[i];
      if (d.group && (a[i].mode != AccessMode::reduction || spec_of(w, a[i].address).ops != d.group->ops))
        close_group(w, a[i].address, d);
    }
    const std::uint32_t x = nodes.size();
    IterNode& v = nodes.push();  // from here on the vertex owns t
    v.task = t;
    v.loop = this;
    v.copy = current_copy;
    try {
      record_vertex(w, v, x, a, n, ds, combine);
    } catch (...) {  // no memory: the graph cannot be completed (t never starts; later spawns are refused)
      broken = true;
      failed.store(true, std::memory_order_relaxed);
      throw;
    }
  }

  void record_vertex(Worker& w, IterNode& v, std::uint32_t x, const Access* a, std::size_t n, Datum* const* ds,
                     bool combine) {
    rec.push_back({current_copy, static_cast<std::uint32_t>(accs.size()), static_cast<std::uint32_t>(accs.size() + n)});
    for (std::size_t i = 0; i < n; ++i) accs.push_back(a[i]);  // (insert() calls memmove even for one access)
    mark.push_back(~0u);
    const std::size_t first_edge = edges.size();
    for (std::size_t i = 0; i < n; ++i) {
      Datum& d = *ds[i];
      if (a[i].mode == AccessMode::reduction) {
        if (!d.group) {
          reserve_one_more(groups);  // no leak if the push below would throw
          d.group = new_reduction_group(w, spec_of(w, a[i].address));
          groups.push_back(d.group);
          open_groups.push_back(a[i].address);
        }
        if (!v.links) v.links = &links.emplace_back();
        v.links->links.push_back(ReductionLink{a[i].address, d.group});
      }
      if (a[i].mode == AccessMode::in || a[i].mode == AccessMode::reduction) {
        if (d.last_writer >= 0) add_intra(static_cast<std::uint32_t>(d.last_writer), x);
        reader_links.push_back({x, d.readers});
        d.readers = static_cast<std::uint32_t>(reader_links.size() - 1);
        if (d.first_writer < 0) {
          reader_links.push_back({x, d.head_readers});
          d.head_readers = static_cast<std::uint32_t>(reader_links.size() - 1);
          ++d.n_head_readers;
        }
      } else {
        if (d.readers != kNoReader) {
          for (std::uint32_t r = d.readers; r != kNoReader; r = reader_links[r].next)
            add_intra(reader_links[r].vertex, x);
          d.readers = kNoReader;
        } else if (d.last_writer >= 0) {
          add_intra(static_cast<std::uint32_t>(d.last_writer), x);
        }
        d.last_writer = static_cast<std::int32_t>(x);
        if (d.first_writer < 0) d.first_writer = static_cast<std::int32_t>(x);
      }
    }
    start_first_instance(w, v, first_edge, combine);
  }

  /// The first period runs while it is recorded: the instance of period 0 waits for its intra predecessors
  /// (the edges from `first_edge` on, all into it) through the engine's successor lists, as a spawned task
  /// does, and completes as one (complete_first). It counts as a child of the taskiter task from now on.
  void start_first_instance(Worker& w, IterNode& v, std::size_t first_edge, bool combine) {
    Task* t = v.task;
    const std::size_t k = edges.size() - first_edge;
    EdgeNode* en = t->edges;
    if (k > kInlineEdges) en = t->extra_edges = alloc_edges(w, k);  // the last thing that may throw
    t->kind = combine ? &kFirstCombineTask : &kFirstRunTask;
    t->iter = &v;
    count_new_child(w, owner);  // before it can complete
    // Count first: a predecessor may finish and release t as soon as its edge is pushed.
    t->n_edges = static_cast<std::uint32_t>(k);
    t->pending.store(static_cast<std::int32_t>(k), std::memory_order_relaxed);
    std::int32_t finished_before = 0;
    for (std::size_t i = 0; i < k; ++i) {
      Task* p = nodes[edges[first_edge + i].from].task;
      EdgeNode* e = &en[i];
      e->succ = t;
      if (push_edge(p, e))
        trace::on_edge(w, p, t);
      else
        ++finished_before;
    }
    if (k == 0 || (finished_before > 0 &&
                   t->pending.fetch_sub(finished_before, std::memory_order_acq_rel) == finished_before))
      schedule(w, t);
  }

  /// Readers of a datum, at least, for its cross edges to count as a broadcast (broadcast_boundary).
  static constexpr std::uint32_t kBroadcastReaders = 32;
  /// The boundary between periods is made of broadcasts: the cross edges from the last writer of a datum to its
  /// head readers (the next period's first accessors of it), counted over the data with at least
  /// kBroadcastReaders of them, are at least as many as the recorded tasks. Then a barrier replaces the cross
  /// edges (taskiter.hpp, "Barrier chosen"): with them each task would still wait, through a few direct
  /// predecessors, for nearly the whole previous period, and there are more of them than tasks, each built
  /// once and decremented every period. Counted before any cross edge is made, from the data's counts of head
  /// readers (walking their lists cost nbody at blocks of 8 about 3% of its run).
  bool broadcast_boundary() {
    std::uint64_t broadcast_edges = 0;
    for (const Datum& d : data.all())
      if (d.first_writer >= 0 && d.n_head_readers >= kBroadcastReaders)  // (only read: no cross edge)
        broadcast_edges += d.n_head_readers;
    return broadcast_edges >= m_data;
  }

  // --- closure: cross edges, controls, successor arrays ---
  // Runs while the first period's instances may still run: it writes only what they do not read before the
  // handover (the counts and successor arrays of their vertices; new control vertices).
  void close(Worker& w) {
    copy_size.assign(k, 0);
    for (const Rec& r : rec) ++copy_size[r.copy];
    if (pipelined && !is_while && !update_pipelined && !spec->params.no_barrier && broadcast_boundary())
      pipelined = false;  // the driver runs the loop as under replay_barrier (run_taskiter reads this after)
    const bool controls = pipelined && is_while;
    m = m_data + (controls ? k : 0);
    if (pipelined) {
      for (const Datum& d : data.all()) {
        if (d.first_writer < 0) continue;  // only read: no order between its accesses
        const auto lw = static_cast<std::uint32_t>(d.last_writer), fw = static_cast<std::uint32_t>(d.first_writer);
        for (std::uint32_t r = d.head_readers; r != kNoReader; r = reader_links[r].next)
          edges.push_back({lw, reader_links[r].vertex, kCross});
        if (d.readers != kNoReader)
          for (std::uint32_t r = d.readers; r != kNoReader; r = reader_links[r].next)
            edges.push_back({reader_links[r].vertex, fw, kCross});
        else if (d.head_readers == kNoReader)
          edges.push_back({lw, fw, kCross});
      }
      for (std::uint32_t x = 0; x < m_data; ++x) {
        bool ordered = false;  // some datum of x is written in the period: (v, p) -> (v, p + 1) is implied
        for (std::uint32_t i = rec[x].acc_begin; i < rec[x].acc_end && !ordered; ++i)
          ordered = data[accs[i].address].first_writer >= 0;
        if (!ordered) edges.push_back({x, x, kCross});
      }
    }
    if (controls) {
      std::vector<char> pred_in_copy(m_data, 0), succ_in_copy(m_data, 0);
      for (const IterEdge& e : edges)
        if (e.kind == kIntra && rec[e.from].copy == rec[e.to].copy) succ_in_copy[e.from] = pred_in_copy[e.to] = 1;
      for (std::uint32_t x = 0; x < m_data; ++x) {
        const std::uint32_t c = m_data + rec[x].copy;
        if (!succ_in_copy[x]) edges.push_back({x, c, kIntra});  // a leaf of its copy
        if (!pred_in_copy[x]) edges.push_back({c, x, kGate});   // a root of its copy
      }
      for (std::uint32_t r = 0; r < k; ++r) {
        const std::uint32_t c = m_data + r;
        edges.push_back({c, c, kGate});
        if (r > 0) edges.push_back({c - 1, c, kIntra});
      }
      if (k > 1) edges.push_back({m_data + k - 1, m_data, kCross});
      for (std::uint32_t r = 0; r < k; ++r) {
        IterNode& v = nodes.push();
        v.loop = this;
        v.control = 1;
        v.copy = r;
        v.task = w.allocate();
        init_task(w, v.task, owner, &kControlTask);
        v.task->iter = &v;
      }
    }
    sort_edges();
    w.counters.edges_created += edges.size();

    succs.resize(edges.size());
    IterNode* from = nullptr;  // the current source (the edges are sorted by source)
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const IterEdge& e = edges[i];
      if (i == 0 || e.from != edges[i - 1].from) {
        from = &nodes[e.from];
        from->succ = &succs[i];
      }
      ++from->n_succ;
      IterNode& to = nodes[e.to];
      succs[i] = {&to, e.kind};
      ++to.rearm;
    }
    if (update_pipelined)  // the delivery of its carrier counts as one more predecessor of every instance
      for (std::uint32_t x = 0; x < m_data; ++x) ++nodes[x].rearm;
    for (std::uint32_t x = 0; x < m; ++x) {
      IterNode& v = nodes[x];
      v.pending[1].store(v.rearm, std::memory_order_relaxed);
      v.pending[0].store(v.rearm, std::memory_order_relaxed);
      if (v.control) v.period = 1;  // the controls of period 0 are made by the driver (open_first_gates)
    }
    data.clear();
    reader_links.clear();
    reader_links.shrink_to_fit();
    mark.clear();
    mark.shrink_to_fit();
  }

  /// Pipelined loops, once the graph is closed: the cross edges of the first instances that have completed
  /// already go to period 1 now; those still to complete hand theirs over themselves (complete_first).
  void hand_over_first_period(Worker& w) {
    for (std::uint32_t x = 0; x < m_data; ++x) {
      Handover h = kFirstRunning;
      // acq_rel: publishes the graph to a first instance that completes later (it reads the successor arrays);
      // acquire on failure: that instance's completion (and period 0's effects it carries) happened before.
      if (!nodes[x].handover.compare_exchange_strong(h, kGraphClosed, std::memory_order_acq_rel,
                                                     std::memory_order_acquire)) {
        Task* ready = nullptr;
        release_into_period_1(w, nodes[x], /*gates=*/false, ready);
        if (ready) schedule(w, ready);
      }
    }
  }

  /// The successors in period 1 of v's instance of period 0 (cross edges; gates too if `gates`): ready ones
  /// are counted as children of the taskiter task and offered to `best` (see offer).
  void release_into_period_1(Worker& w, const IterNode& v, bool gates, Task*& best) {
    WEFT_ASSERT(n_periods > 1);  // the graph is closed only for loops that replay
    if (failed.load(std::memory_order_relaxed)) return;
    for (std::uint32_t i = 0; i < v.n_succ; ++i) {
      const IterSucc& e = v.succ[i];
      if (e.kind == kIntra || (e.kind == kGate && !gates)) continue;
      IterNode& s = *e.node;
      if (s.rearm == 1 || s.pending[1].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        count_new_child(w, owner);  // (the caller keeps the owner from completing meanwhile)
        offer(w, s.carrier(1, update_pipelined), best);
      }
    }
  }

  /// taskiter_while: the checks that the controls of period 0 would have made, once period 0 has finished:
  /// check r decides iteration k + r. All are made before any gate opens, so that cond() never runs
  /// concurrently with itself (the controls of period 1 call it next). Then the controls of period 0 release
  /// their successors in period 1: the next control, and the gates of the checks that passed.
  void open_first_gates(Worker& w) {
    std::uint32_t open = 0;
    while (open < k && !stopped && !failed.load(std::memory_order_relaxed)) {
      bool go = false;
      try {
        go = spec->cond(spec->closure);
      } catch (...) {
        failed.store(true, std::memory_order_relaxed);
        record_error(w, owner, std::current_exception());
      }
      if (go)
        ++open;
      else
        stopped = true;
    }
    for (std::uint32_t r = 0; r < k; ++r) {
      Task* ready = nullptr;
      release_into_period_1(w, nodes[m_data + r], /*gates=*/r < open, ready);
      if (ready) schedule(w, ready);
    }
  }

  /// Orders the edges by source, then kind, then target, without duplicates: the successor arrays are ranges
  /// of it. Two stable counting passes, by (kind, target) then by source: O(E + m) whatever the fan-out (a
  /// comparison sort of the whole list cost about 850 instructions per vertex of a 5-point stencil; sorting
  /// each source's edges after one counting pass, 2.5x these two passes on nbody, whose 256 position writers
  /// have 511 successors each in the next iteration).
  void sort_edges() {
    static_assert(kGate == 2, "three kinds of edge");
    std::vector<IterEdge> by_target(edges.size());
    {
      std::vector<std::uint32_t> at(3 * std::size_t{m} + 1, 0);
      for (const IterEdge& e : edges) ++at[e.kind * std::size_t{m} + e.to + 1];
      for (std::size_t i = 1; i < at.size(); ++i) at[i] += at[i - 1];
      for (const IterEdge& e : edges) by_target[at[e.kind * std::size_t{m} + e.to]++] = e;
    }
    {
      std::vector<std::uint32_t> at(std::size_t{m} + 1, 0);
      for (const IterEdge& e : by_target) ++at[e.from + 1];
      for (std::size_t i = 1; i < at.size(); ++i) at[i] += at[i - 1];
      for (const IterEdge& e : by_target) edges[at[e.from]++] = e;
    }
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());  // (duplicates are adjacent now)
  }

  // --- update: match a refreshed spawn with its vertex ---
  /// The usual case: the next vertex of this copy has exactly these accesses, in this order (validated and
  /// merged when it was recorded). Then t refreshes it, and true.
  bool update_same(Task* t, const Access* a, std::size_t n) {
    const std::uint32_t x = update_next;
    if (x >= m_data || rec[x].copy != current_copy || rec[x].acc_end - rec[x].acc_begin != n) return false;
    const Access* r = accs.data() + rec[x].acc_begin;  // (one past the end for a task without accesses)
    for (std::size_t i = 0; i < n; ++i)
      if (r[i].address != a[i].address || r[i].mode != a[i].mode) return false;
    fresh[x] = t;
    ++update_next;
    return true;
  }
  /// Any other case: the accesses merged as at recording; the same as the vertex's, or taskiter_error.
  void update_spawn(Task* t, const Access* a, std::size_t n) {
    if (update_same(t, a, n)) return;
    const std::uint32_t x = update_next;
    char where[160];  // formatted only here, for the error
    std::snprintf(where, sizeof where, "weft: taskiter update: iteration %llu, task #%u (counting from 0) of the body",
                  static_cast<unsigned long long>(update_iteration), x - first_of_copy(current_copy));
    if (x >= m_data || rec[x].copy != current_copy)
      throw taskiter_error(std::string(where) + ": the body spawns more tasks than it recorded (" +
                           std::to_string(copy_size[current_copy]) + " recorded)");
    throw taskiter_error(std::string(where) + " has accesses " + describe(a, n) + ", recorded: " +
                         describe(accs.data() + rec[x].acc_begin, rec[x].acc_end - rec[x].acc_begin) +
                         " (update refreshes captured values only)");
  }
  std::uint32_t first_of_copy(std::uint32_t c) const {
    std::uint32_t s = 0;
    for (std::uint32_t r = 0; r < c && r < k; ++r) s += copy_size[r];
    return s;
  }
};

namespace {
using Loop = IterLoop;
using Succ = IterSucc;

Loop* loop_of(const Task* recorder) {
  Loop* l;
  std::memcpy(&l, recorder->body, sizeof l);
  return l;
}

// The taskiter task's children are its released instances (see Termination above).
void wait_for_instances(Worker& w, Task* owner) {
  wait_until(w, [&] { return unfinished_children(w, owner) == 0; }, owner);
}

// Loops with a barrier (replay_barrier, update), at the start of a period.
void schedule_roots(Worker& w, Loop& L) {
  for (std::uint32_t x = L.m; x-- > 0;)  // LIFO queue: the first recorded root is taken first
    if (L.nodes[x].rearm == 0) {
      count_new_child(w, L.owner);
      schedule(w, L.nodes[x].task);
    }
}

void run_control(Worker& w, IterNode& c) {
  Loop& L = *c.loop;
  c.open = false;
  if (L.stopped || L.failed.load(std::memory_order_relaxed)) {
    L.stopped = true;
    return;
  }
  bool go = false;
  try {
    go = L.spec->cond(L.spec->closure);
  } catch (...) {
    L.failed.store(true, std::memory_order_relaxed);
    record_error(w, L.owner, std::current_exception());
  }
  if (!go) {
    L.stopped = true;
    return;
  }
  c.open = true;  // the iteration this check decides: its roots and next control are released
}

// The update clause: run the body for the iterations of period p; each spawn is matched with its vertex and
// kept in L.fresh (null for the vertices of copies beyond the trip count, in the last period).
void rerun_body(Loop& L, Context& rcx, std::uint64_t p) {
  const std::uint32_t copies = p + 1 == L.n_periods ? std::min(L.partial_from, L.k) : L.k;
  L.fresh.assign(L.m_data, nullptr);
  L.updating = true;
  L.update_next = 0;
  for (std::uint32_t c = 0; c < copies; ++c) {
    L.current_copy = c;
    L.update_iteration = p * L.k + c;
    L.spec->body(L.spec->closure, rcx, L.update_iteration);
    const std::uint32_t expect = L.first_of_copy(c + 1);
    if (L.update_next != expect)
      throw taskiter_error("weft: taskiter update: iteration " + std::to_string(L.update_iteration) +
                           " spawned " + std::to_string(L.update_next - L.first_of_copy(c)) +
                           " tasks, recorded " + std::to_string(L.copy_size[c]));
  }
  L.updating = false;
}

// With a barrier (every instance has finished): the fresh descriptors replace the vertices' carriers.
void install_fresh(Worker& w, Loop& L) {
  for (std::uint32_t x = 0; x < L.update_next; ++x) {
    IterNode& v = L.nodes[x];
    Loop::release_task(w, v.task, true);
    v.task = L.fresh[x];
    L.fresh[x] = nullptr;
    v.task->kind = &kReplayedTask;
    v.task->iter = &v;
  }
}

// Without a barrier (period p - 2 has completed, later ones may run): each vertex's fresh descriptor goes to
// the carrier slot of p's parity, freeing the carrier of (v, p - 2), and counts as one more predecessor of
// (v, p) (IterLoop::close adds it to every vertex's count): the instance starts once both its predecessors
// have finished and its carrier is here.
void deliver_period(Worker& w, Loop& L, std::uint64_t p) {
  for (std::uint32_t x = L.m_data; x-- > 0;) {  // LIFO queue: the first recorded root is taken first
    IterNode& v = L.nodes[x];
    Task*& slot = v.carrier(p, true);
    if (Task* t = L.fresh[x]) {
      if (slot) Loop::release_task(w, slot, true);
      L.fresh[x] = nullptr;
      t->kind = &kUpdatedTask;
      t->iter = &v;
      slot = t;
    } else if (!slot) {
      // A copy beyond the trip count in period 1, the last: its instance skips its body; the carrier of period
      // 0 serves (that instance has completed before this one starts, as every instance before the next).
      slot = v.task;
    }
    if (v.rearm == 1 || v.pending[p & 1].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      count_new_child(w, L.owner);
      schedule(w, slot);
    }
  }
}

// weft::update without a barrier (fixed trip count): the body runs for period p while periods p - 1 and p - 2
// may still run, as a loop that spawns its tasks runs ahead of them; period p's carriers are delivered once
// period p - 2 has completed (its instances have re-armed their counters and left their carriers). A body
// that throws, or changes the graph, ends the loop after the periods already delivered: period p, without its
// carriers, never starts.
void update_without_barrier(Worker& w, Loop& L, Context& rcx) {
  for (std::uint64_t p = 1; p < L.n_periods; ++p) {
    if (L.failed.load(std::memory_order_relaxed)) return;
    try {
      rerun_body(L, rcx, p);
    } catch (...) {
      L.updating = false;
      wait_for_instances(w, L.owner);
      L.failed.store(true, std::memory_order_relaxed);
      throw;
    }
    if (p >= 2) {
      std::atomic<std::uint32_t>& done = L.completed[p & 1];
      // acquire: the re-arms of period p - 2 (see complete_instance) come before the delivery's decrements.
      wait_until(w, [&] {
        return done.load(std::memory_order_acquire) == L.m_data || L.failed.load(std::memory_order_relaxed);
      });
      if (L.failed.load(std::memory_order_relaxed)) return;
      done.store(0, std::memory_order_relaxed);  // period p counts from here (its instances start after this)
    }
    deliver_period(w, L, p);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// The kinds
// ---------------------------------------------------------------------------------------------------------

namespace {

// Joins access a into `into`, an earlier access of the same task to the same datum: different modes make an
// inout. False if either is a reduction (a reduction must be a task's only access to its datum).
bool join_access(Access& into, const Access& a) {
  if (a.mode == AccessMode::reduction || into.mode == AccessMode::reduction) return false;
  if (into.mode != a.mode) into.mode = AccessMode::inout;
  return true;
}

// merge_accesses for many accesses (spawn_accesses): sorted by address, so that n accesses cost n log n rather
// than n^2. Out of line, and with the C library's qsort: an instantiation of std::sort here makes GCC stop
// inlining the recording's own vector growth (50 more instructions for every recorded task).
[[gnu::noinline]] bool merge_many_accesses(const Access* acc, std::size_t n, std::vector<Access>& merged,
                                           std::vector<AccessOrder>& order) {
  order.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    order[i] = {reinterpret_cast<std::uintptr_t>(acc[i].address), static_cast<std::uint32_t>(i)};
  std::qsort(order.data(), n, sizeof(AccessOrder), [](const void* pa, const void* pb) {
    const auto& a = *static_cast<const AccessOrder*>(pa);
    const auto& b = *static_cast<const AccessOrder*>(pb);
    if (a.address != b.address) return a.address < b.address ? -1 : 1;
    return a.index < b.index ? -1 : a.index > b.index ? 1 : 0;
  });
  // Each datum's first occurrence gathers the modes of the others, which are marked merged away (a mode no
  // access has: record_spawn validated them all); then the survivors close up in index order.
  constexpr auto kMergedAway = static_cast<AccessMode>(0xff);
  merged.assign(acc, acc + n);
  for (std::size_t g = 0; g < n;) {
    const std::uint32_t first = order[g].index;
    std::size_t e = g + 1;
    for (; e < n && order[e].address == order[g].address; ++e) {
      if (!join_access(merged[first], acc[order[e].index])) return false;
      merged[order[e].index].mode = kMergedAway;
    }
    g = e;
  }
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (merged[i].mode != kMergedAway) merged[k++] = merged[i];
  merged.resize(k);
  return true;
}

// The accesses of one recorded task, those to the same datum merged into one, in the order of their first
// occurrence. False if a datum is named twice and one access is a reduction. Few accesses: a search each.
bool merge_accesses(const Access* acc, std::size_t n, std::vector<Access>& merged, std::vector<AccessOrder>& order) {
  constexpr std::size_t kLinear = 16;
  if (n > kLinear) [[unlikely]]
    return merge_many_accesses(acc, n, merged, order);
  merged.clear();
  for (std::size_t i = 0; i < n; ++i) {
    auto it = std::find_if(merged.begin(), merged.end(), [&](const Access& x) { return x.address == acc[i].address; });
    if (it == merged.end())
      merged.push_back(acc[i]);
    else if (!join_access(*it, acc[i]))
      return false;
  }
  return true;
}

void record_spawn(Worker& w, Task* recorder, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs) {
  Loop& L = *loop_of(recorder);
  if (L.updating && L.update_same(t, acc, n)) {  // no merge, no validation: the recording did both
    t->parent = L.owner;
    t->priority = attrs.priority;
    t->label = attrs.label;
    return;
  }
  if (L.broken) [[unlikely]] {
    Loop::discard(w, t);
    throw taskiter_error("weft: taskiter: a spawn after the recording of this loop failed (out of memory); the "
                         "loop cannot run");
  }
  // Validate, then merge several accesses to one datum (as register_accesses does), in the loop's scratch lists
  // (no allocation per spawn; spawns are recorded one at a time, by the thread running the body).
  for (std::size_t i = 0; i < n; ++i) {
    const AccessMode md = acc[i].mode;
    if (md == AccessMode::reduction && L.spec->params.update) {
      Loop::discard(w, t);
      throw taskiter_error("weft: taskiter: a recorded task has a reduction access, which weft::update does not "
                           "support (spawn the reduction from one recorded task instead)");
    }
    if (md != AccessMode::in && md != AccessMode::out && md != AccessMode::inout && md != AccessMode::reduction) {
      Loop::discard(w, t);
      throw taskiter_error(std::string("weft: taskiter: a recorded task has an access ") + weft::to_string(md) +
                           "; tasks spawned by a taskiter body may use in, out, inout and reduction only (spawn "
                           "the concurrent group from one recorded task instead)");
    }
  }
  std::vector<Access>& merged = L.merge_scratch;
  if (!merge_accesses(acc, n, merged, L.merge_order)) {
    Loop::discard(w, t);
    throw std::invalid_argument(
        "weft: a task names a datum twice and one of the accesses is a reduction; a reduction must be the task's "
        "only access to its datum");
  }
  t->parent = L.owner;
  t->priority = attrs.priority;
  t->label = attrs.label;
  if (L.updating) {
    try {
      L.update_spawn(t, merged.data(), merged.size());
    } catch (...) {
      Loop::discard(w, t);
      throw;
    }
    return;
  }
  ++w.counters.tasks_created;
  try {
    L.record(w, t, merged.data(), merged.size());
  } catch (...) {  // an operator missing (or no memory): the task was not recorded, unless its vertex holds it
    if (L.nodes.size() == 0 || L.nodes[L.nodes.size() - 1].task != t) Loop::discard(w, t);
    throw;
  }
}

void check_not_recording(const Task*, const char* what) {
  throw taskiter_error(std::string("weft: ") + what +
                       " inside a taskiter body: the body runs once, to record the tasks that every iteration "
                       "replays, so it cannot wait for them (wait inside a recorded task instead)");
}

// The instance has completed (body and children): re-arms the vertex and releases the successors of that
// iteration (ready ones offered to `best`). `failed`: it or a child failed (stops the loop). Returns true if t's
// count in its taskiter went to a released instance (then t is not counted as a finished child).
// kUpdated: a pipelined update loop (kUpdatedTask): the instance's period is counted complete (the driver may
// then free t, whose carrier slot the next delivery takes), and a successor's carrier is that of its parity.
// kChained: the step of a replayed chain (run_vertex's fast path): t had nothing pending at the end of its body
// (`alive` is still the guard), and w.immediate_successor is known to be on.
template <bool kUpdated, bool kChained = false>
[[gnu::always_inline]] inline bool complete_instance(Worker& w, Task* t, bool failed, Task*& best) {
  IterNode& v = *t->iter;
  Loop& L = *v.loop;
  if constexpr (!kChained) t->alive.store(kAliveGuard, std::memory_order_relaxed);
  if (failed) [[unlikely]]
    L.failed.store(true, std::memory_order_relaxed);
  // A failed loop releases nothing more: the instances already released finish, and the driver's count (of
  // released instances) reaches zero without draining the remaining iterations.
  if (L.failed.load(std::memory_order_relaxed)) [[unlikely]]
    return false;
  const std::uint64_t p = v.period;
  v.period = p + 1;
  // Re-arm this parity for (v, p + 2) before anything is released (see the proof at the top).
  if (v.rearm > 1) v.pending[p & 1].store(v.rearm, std::memory_order_relaxed);
  if constexpr (kUpdated) L.count_completed(w, p);  // the driver may free t from here on: t is not touched
  Task* heir = nullptr;  // the first instance released: it takes over (v, p)'s count, once the loop is done
  for (const Succ *e_it = v.succ, *const e_end = e_it + v.n_succ; e_it != e_end; ++e_it) {
    const Succ& e = *e_it;
    IterNode& s = *e.node;
    std::uint64_t q = p;
    if (e.kind != kIntra) {
      q = p + 1;
      // (v.open is read here, not before the loop: only gate edges need it, and the graph stays until the heir
      // is released, after the loop.)
      if (q >= L.n_periods || (e.kind == kGate && !v.open)) continue;
    }
    // A single predecessor needs no atomic: nobody else counts for that instance.
    if (s.rearm == 1 || s.pending[q & 1].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The others are counted anew ((v, p) is still counted meanwhile: the owner cannot complete).
      Task* const st = s.carrier(q, kUpdated);
      if (heir) {
        count_new_child(w, L.owner);
        offer(w, st, best);
      } else {
        heir = st;
      }
    }
  }
  if (!heir) return false;
  // Last: once the heir can run, (v, p) is no longer counted, and the heir may finish the loop (and free this
  // graph) at once on another worker. Nothing of the loop is touched after this. The heir is preferred as the
  // immediate successor, as if it had been offered first.
  if (!kChained && !w.immediate_successor) {
    schedule(w, heir);
  } else if (!best || heir->priority >= best->priority) {
    if (best) schedule(w, best);
    best = heir;
  } else {
    schedule(w, heir);
  }
  return true;
}

// kChained: as for complete_instance (run_vertex's fast path).
template <bool kChained = false>
[[gnu::always_inline]] inline bool complete_replayed(Worker& w, Task* t, Task*& best, std::vector<Task*>&) {
  const bool failed = end_children</*kWeak=*/false>(w, t);  // a replayed body may spawn children of its own
  return !complete_instance<false, kChained>(w, t, failed, best);
}
bool complete_updated(Worker& w, Task* t, Task*& best, std::vector<Task*>&) {
  const bool failed = end_children</*kWeak=*/false>(w, t);
  return !complete_instance<true>(w, t, failed, best);
}

// An instance of period 0 has completed: it releases its successors of period 0 as a spawned task does, and
// hands its cross edges to period 1 if the graph is closed (else the driver does, when it closes it). The
// descriptor becomes a replayed task: its successor list stays closed (recording may still link to it; replay
// does not use it), its edge array is done with (its predecessors have all released it).
bool complete_first(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  IterNode& v = *t->iter;
  IterLoop& L = *v.loop;
  if (end_children</*kWeak=*/false>(w, t)) [[unlikely]]
    L.failed.store(true, std::memory_order_relaxed);
  t->alive.store(kAliveGuard, std::memory_order_relaxed);  // as a replayed instance leaves it
  IterLoop::drop_first_edges(w, t);
  // Before anything is released: the instance of period 1 follows this one (see the proof at the top).
  v.period = 1;
  t->kind = t->kind == &kFirstCombineTask ? &kCombineTask : L.update_pipelined ? &kUpdatedTask : &kReplayedTask;
  // In recording order, as replay does (succ arrays are sorted): a sweep keeps its memory order (heat at blocks
  // of 8 on one worker: the reverse order cost the first iteration 70%). A failed loop's successors skip their
  // bodies.
  release_successors</*kFirstLinkedFirst=*/true>(w, t, false, best, todo);
  // acq_rel: publishes this completion to the driver if it closes the graph later; acquires the graph if it
  // has closed it already (then this instance hands its own cross edges over).
  const bool closed = v.handover.exchange(kFirstDone, std::memory_order_acq_rel) == kGraphClosed;
  if (closed) L.release_into_period_1(w, v, /*gates=*/false, best);
  // Pipelined update: period 0 is counted as complete_instance<true> counts the later ones (the driver may
  // free t once the count is full: nothing here reads t after it). m_data is known once the graph is closed;
  // before, the driver is not waiting yet (or its timed sleep ends the wait).
  if (L.update_pipelined) L.count_completed(w, 0, closed);
  return true;  // (t is still a counted child: the loop, and its graph, stay until this returns)
}

// How an instance's run ends: through its kind's complete (generic), or with the kind's step inlined, for the
// first instance (complete_first) and for replayed ones (complete_replayed<true>, then the chain of instances).
// `replayed` is the fast path of replay: run_replayed enters it only when chain_enters(w, owner) (nothing
// traced, immediate successors on, the default scheduler, no wait that stops a chain). None of it can change
// along the chain, so it is tested once for it, not once per instance; nor can the owner.
enum class VertexEnd { generic, first, replayed };

template <bool kCounted, VertexEnd kEnd>
inline void run_vertex(Worker& w, Task* t) {
  // Skipped: the loop failed (a chained instance was released after the same test: complete_instance), or this
  // copy lies beyond the trip count in the last period.
  if (t->iter->loop->failed.load(std::memory_order_relaxed)) [[unlikely]]
    return end_body(w, t);
  // The parent of every instance of the chain, read while t is running (t and the loop may be gone once the
  // last instance has completed).
  Task* const owner = t->parent;
  for (;;) {
    IterNode& v = *t->iter;
    Loop& L = *v.loop;
    if (v.copy >= L.partial_from && v.period + 1 == L.n_periods) [[unlikely]]
      return end_body(w, t);
    Context cx = ContextAccess::make(t, &w);
    constexpr bool kTraced = kEnd != VertexEnd::replayed;
    if (kTraced && w.trace) [[unlikely]] {
      t->trace_tag = v.period * L.k + v.copy;  // traces show the iteration each instance ran for
      trace::on_body_begin(w, t);
    }
    try {
      t->body_ops->run(t, cx);  // the body stays: it runs again next iteration
    } catch (...) {
      L.failed.store(true, std::memory_order_relaxed);
      record_error(w, L.owner, std::current_exception());
    }
    if constexpr (kTraced) trace::on_body_end(w, t);
    if constexpr (kCounted) ++w.counters.tasks_executed;  // a combination is not a task of the program
    if constexpr (kEnd == VertexEnd::generic) {
      return end_body(w, t);
    } else if constexpr (kEnd == VertexEnd::first) {
      WEFT_ASSERT(t->kind->complete == &complete_first);
      return end_body_as<&complete_first>(w, t);
    } else {
      WEFT_ASSERT(t->kind == &kReplayedTask);
      Task* const best = end_body_as_unsettled<&complete_replayed</*kChained=*/true>, /*kReadiesNodes=*/false>(w, t);
      // A chain of instances runs here without going back to the worker's loop after each.
      t = settle_or_chain</*kChainEntered=*/true>(w, best, &kReplayedTask, owner);
      if (!t) return;
    }
  }
}
void run_replayed(Worker& w, Task* t) {
  if (!chain_enters(w, t->parent)) [[unlikely]]
    return run_vertex<true, VertexEnd::generic>(w, t);  // completed through complete_replayed, no chain
  run_vertex<true, VertexEnd::replayed>(w, t);
}
void run_first(Worker& w, Task* t) { run_vertex<true, VertexEnd::first>(w, t); }
void run_updated(Worker& w, Task* t) { run_vertex<true, VertexEnd::generic>(w, t); }
void run_combine(Worker& w, Task* t) { run_vertex<false, VertexEnd::generic>(w, t); }

void run_control_task(Worker& w, Task* t) {
  run_control(w, *t->iter);
  end_body(w, t);
}

}  // namespace

const TaskKind kReplayedTask{"replayed", false, true, &run_replayed, &complete_replayed<>, nullptr, nullptr,
                            nullptr, nullptr};
const TaskKind kUpdatedTask{"replayed", false, true, &run_updated, &complete_updated, nullptr, nullptr,
                           nullptr, nullptr};
const TaskKind kCombineTask{"combine", false, true, &run_combine, &complete_replayed<>, nullptr, nullptr,
                            nullptr, nullptr};
const TaskKind kFirstRunTask{"recorded", false, false, &run_first, &complete_first, nullptr, nullptr, nullptr,
                             nullptr};
const TaskKind kFirstCombineTask{"combine", false, false, &run_combine, &complete_first, nullptr, nullptr,
                                 nullptr, nullptr};
const TaskKind kControlTask{"control", false, true, &run_control_task, &complete_replayed<>, nullptr, nullptr,
                            nullptr, nullptr};
const TaskKind kRecorderTask{"recorder", false, false, nullptr, nullptr, &record_spawn, &check_not_recording,
                            nullptr, nullptr};

// ---------------------------------------------------------------------------------------------------------
// The driver: the taskiter task's body
// ---------------------------------------------------------------------------------------------------------

void check_taskiter(const IterParams& p, const Access* acc, std::size_t n) {
  if (p.unroll == 0) throw taskiter_error("weft: taskiter: unroll(0) is invalid: expected unroll(k) with k >= 1");
  if (p.barrier && p.no_barrier)
    throw taskiter_error("weft: taskiter: replay_barrier and no_barrier contradict each other: give one of them");
  for (std::size_t i = 0; i < n; ++i)
    if (acc[i].mode == AccessMode::weak_in || acc[i].mode == AccessMode::weak_out ||
        acc[i].mode == AccessMode::weak_inout)
      throw taskiter_error(std::string("weft: taskiter: the taskiter task cannot have a ") + weft::to_string(acc[i].mode) +
                           " access; declare its data with in, out or inout");
}

void run_taskiter(Context& cx, const IterSpec& spec) {
  Worker& w = *ContextAccess::worker(cx);
  Task* owner = ContextAccess::task(cx);
  const IterParams& P = spec.params;
  if (!P.is_while && P.n == 0) return;
  if (P.is_while && !spec.cond(spec.closure)) return;

  Loop L;
  L.worker = &w;
  L.spec = &spec;
  L.owner = owner;
  L.is_while = P.is_while;
  // update keeps the barrier in a while-loop: cond() runs between periods on the driver, as the body does.
  L.pipelined = !P.barrier && !(P.update && P.is_while);
  L.update_pipelined = L.pipelined && P.update;
  L.k = P.unroll;
  if (!P.is_while) {
    if (L.k > P.n) L.k = static_cast<std::uint32_t>(P.n);
    L.n_periods = (P.n + L.k - 1) / L.k;
    const std::uint64_t last = P.n - (L.n_periods - 1) * L.k;  // copies that run in the last period
    if (last < L.k) L.partial_from = static_cast<std::uint32_t>(last);
  }
  L.recorder = w.allocate();
  init_task(w, L.recorder, owner, &kRecorderTask);
  Loop* self = &L;
  std::memcpy(L.recorder->body, &self, sizeof self);
  Context rcx = ContextAccess::make(L.recorder, &w);

  // Profile phases (WEFT_PROFILE / WEFT_TRACE): "record" = running the body k times and closing the graph (the
  // tasks of the first period run meanwhile, as they are recorded); "replay" = the rest, one phase per period
  // with replay_barrier or update (tag: the period; period 0's is its tail after the recording), one for the
  // whole pipelined loop (tag 0; its iterations overlap).
  const bool replays = P.is_while || L.n_periods > 1;
  const trace::Ticks record_begin = trace::now(w);
  try {
    for (std::uint32_t c = 0; c < L.k; ++c) {
      trace::set_tag(w, c);
      L.current_copy = c;
      spec.body(spec.closure, rcx, c);
      L.close_groups(w);  // a copy's reductions are combined within it (before its control, if any)
    }
    if (L.broken)  // the body caught the exception of a failed recording and went on
      throw taskiter_error("weft: taskiter: the recording of the loop failed (out of memory); the loop cannot run");
    L.m_data = static_cast<std::uint32_t>(L.rec.size());
    if (replays && L.m_data > 0)
      L.close(w);  // counts the graph's edges (Stats::edges_created)
    else
      w.counters.edges_created += L.edges.size();  // a single period: the edges its tasks were linked by
  } catch (...) {
    // The instances already started finish (skipping their bodies) before the loop and its graph go.
    L.failed.store(true, std::memory_order_relaxed);
    wait_for_instances(w, owner);
    throw;
  }
  trace::set_tag(w, 0);
  trace::record_phase(w, "record", record_begin, trace::now(w), 0);
  const trace::Ticks replay_begin = trace::now(w);

  if (L.m_data == 0) {  // the body spawns nothing: only its own code can do anything
    if (!P.update) {
      if (P.is_while)
        throw taskiter_error("weft: taskiter_while: the body spawned no task, so no iteration could change the "
                             "condition (use weft::update to run the body every iteration)");
      return;
    }
    L.updating = true;  // a spawn now is reported as a changed graph
    for (std::uint64_t i = L.k; P.is_while ? spec.cond(spec.closure) : i < P.n; ++i) {
      L.update_iteration = i;
      L.current_copy = static_cast<std::uint32_t>(i % L.k);
      spec.body(spec.closure, rcx, i);
    }
    return;
  }
  if (L.pipelined && replays) {
    // No barrier after the first period either: its instances that have finished hand their cross edges over
    // now, the others when they finish. A while-loop's period 1 waits for period 0's checks, made once it has
    // finished (its roots are gated).
    L.hand_over_first_period(w);
    if (P.is_while) {
      wait_for_instances(w, owner);
      L.open_first_gates(w);
    }
    if (L.update_pipelined) update_without_barrier(w, L, rcx);
  }
  wait_for_instances(w, owner);  // pipelined: every iteration; else the first period
  trace::record_phase(w, "replay", replay_begin, trace::now(w), 0);
  if (L.pipelined || !replays) return;
  for (std::uint64_t p = 1;; ++p) {
    if (L.failed.load(std::memory_order_relaxed)) break;
    if (P.is_while ? !spec.cond(spec.closure) : p >= L.n_periods) break;
    if (P.update) {
      rerun_body(L, rcx, p);
      install_fresh(w, L);
    }
    const trace::Ticks period_begin = trace::now(w);
    schedule_roots(w, L);
    wait_for_instances(w, owner);
    trace::record_phase(w, "replay", period_begin, trace::now(w), p);
  }
}

// Off the replay path (Context::local, a new record of a replayed task's children).
const ReductionLinks* replayed_reduction_links(const Task* t) {
  return t->iter->loop->update_pipelined ? nullptr : t->iter->links;  // (update: no reductions; see odd_task)
}

}  // namespace weft::detail

namespace weft {

std::uint64_t taskiter_iteration(const Context& cx) {
  for (const detail::Task* t = detail::ContextAccess::task(cx); t; t = t->parent)
    if (detail::is_taskiter_instance(t)) {
      const detail::IterNode& v = *t->iter;
      return v.period * v.loop->k + v.copy;
    }
  throw taskiter_error("weft::taskiter_iteration: not called from a task recorded by a taskiter (or one nested "
                       "in it)");
}

}  // namespace weft
