// weft engine internals: workers, pools, scheduling, completion. Knows nothing of front ends: a task is a
// pending counter, a priority, a body, a successor list and a kind (TaskKind: what differs between the kinds
// of task, defined by the front ends: src/deps, src/iter, and the detached tasks of src/flow below).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/check.hpp"
#include "engine/queues.hpp"
#include "weft/runtime.hpp"
#include "weft/tasks.hpp"

namespace weft::detail {

class Engine;
namespace trace {
struct Log;
class Recorder;
}  // namespace trace

/// Per-worker counters (the public Stats, see kStatsFields): written only by their worker, summed by
/// Runtime::stats() after a run. One of them is signed at heart: a join node costs edges_saved_inoutset its m
/// edges before it saves any, so a worker's count may go below zero; the fields add modulo 2^64, and only the
/// sum over workers (sum_stats) is read as signed (and clamped at zero).
using Counters = Stats;
/// a - b, field by field (one run's counters: at its end minus at its start).
Counters operator-(const Counters& a, const Counters& b);
/// The public Stats of the sum of n workers' counters.
Stats sum_stats(const Counters* c, std::size_t n);

/// What distinguishes one kind of task from another, in one place. Each front end defines its kinds (src/deps:
/// dependency tasks, commutative tasks, join nodes, weak nodes; src/iter: replayed and control tasks, the
/// recorder; engine.cpp: detached tasks) and sets Task::kind when it creates a descriptor; the engine reads
/// it where kinds differ: running a task, completing it, and (for the front end of its children) spawning and
/// waiting. A remote task is one more kind.
struct TaskKind {
  const char* name;
  /// A join node: it has no body and completes, inside complete(), as soon as its predecessors have.
  bool node;
  /// Its readiness is counted elsewhere than in `pending` (replayed instances: per-parity counters; flow tasks:
  /// their inputs), so schedule() does not check `pending`.
  bool counts_elsewhere;
  /// w took the ready task t (from a queue or its immediate-successor slot): run it and end its body
  /// (end_body), or do what stands for that. Null for nodes.
  void (*run)(Worker& w, Task* t);
  /// Everything t waited for is done (its body, its children, its weak nodes): release its successors, offering
  /// the ready ones to `best` (offer) and pushing the tasks this completes in turn (readied join nodes, a
  /// parent) to `todo`. Returns true if t's parent is owed one finished child (counted by complete() once the
  /// nodes pushed have completed). Null for kinds that complete otherwise (detached tasks).
  bool (*complete)(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo);
  /// For a parent of this kind: its children are not registered but handed to this function (a taskiter
  /// body's spawns are recorded). Null: the usual spawn.
  void (*divert_spawn)(Worker& w, Task* parent, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs);
  /// For a parent of this kind: waits (`what`: "taskwait", ...) are refused; throws. Null: waits are allowed.
  void (*refuse_wait)(const Task* parent, const char* what);
  /// For a parent of this kind: called after each of its waits has waited (taskwait, taskwait_on: `address` is
  /// the datum, null for every child; `flush`: the wait brings the children's data to this process). Null: none.
  void (*after_wait)(Worker& w, Task* parent, const void* address, bool flush);
  /// For a task of this kind: the weak node of its access to `node`'s datum is about to release its successors
  /// (the access's predecessors have finished). Null: nothing to do.
  void (*weak_ready)(Worker& w, Task* t, Task* node);
};

/// Room for one more element in v, growing it geometrically (at least `first` elements): afterwards a push_back
/// does not throw. (A bare reserve(size() + 1) reallocates, and copies every element, on each call: quadratic in
/// the final size.)
template <class Vector>
void reserve_one_more(Vector& v, std::size_t first = 8) {
  if (v.size() == v.capacity()) v.reserve(v.size() < first ? first : 2 * v.size());
}

/// A growable array that keeps its storage across uses (no allocation on the hot path). The capacity is kept
/// beside the count, so that a push compares two fields (no vector size arithmetic) on the spawn path.
class TaskBuffer {
 public:
  void clear() { n_ = 0; }
  void push(Task* t) {
    if (n_ == cap_) [[unlikely]]
      grow();
    data_[n_++] = t;
  }
  /// Room for n entries in all (may allocate): afterwards push_reserved up to n entries allocates nothing.
  void reserve(std::size_t n) {
    if (n > cap_) [[unlikely]] {
      store_.resize(std::max(n, 2 * cap_));  // geometric: callers ask for a little more at a time
      data_ = store_.data();
      cap_ = store_.size();
    }
  }
  void push_reserved(Task* t) { data_[n_++] = t; }
  /// The count of a caller that wrote entries through data() itself (within the room reserved).
  void set_size(std::size_t n) {
    WEFT_ASSERT(n <= cap_);
    n_ = n;
  }
  Task** data() { return data_; }
  std::size_t size() const { return n_; }

 private:
  [[gnu::noinline]] void grow() {
    store_.resize(2 * n_ + 16);
    data_ = store_.data();
    cap_ = store_.size();
  }
  Task** data_ = nullptr;
  std::size_t n_ = 0, cap_ = 0;
  std::vector<Task*> store_;
};

/// The free state of a descriptor (detail/task.hpp): the fields marked (0) are zero, so that allocation sets
/// only what varies (init_task). Checked when a descriptor is freed and when it is allocated.
inline bool in_free_state(const Task* t) {
  return t->unpublished == 0 && t->retired_count == 0 && !t->retired_head && !t->retired_tail && !t->domain &&
         !t->weak && !t->comm && !t->has_error.load(std::memory_order_relaxed) && t->record_refs == 0 &&
         !t->extra_edges && t->n_comm == 0 && t->n_weak == 0 && !t->iter;
}

struct alignas(64) Worker {
  Worker(Engine& e, unsigned i) : engine(&e), id(i), rng(0x9E3779B97F4A7C15ull * (i + 1)) {
    // complete()'s work lists hold the join nodes one completion readies and the parents it completes: room
    // up front, so that completion (which cannot report an error) does not allocate in any usual program.
    completing.reserve(1024);
    completed_children.reserve(1024);
  }
  ~Worker();

  Engine* engine;
  unsigned id;
  StealDeque deque;
  PriorityQueue prioritized;
  Task* next = nullptr;  ///< immediate successor slot
  /// What the innermost wait of this worker waits for (WaitingScope): the task whose children it waits for
  /// until none is left, or &kOtherWait for another condition; null outside waits (the worker's own loop). A
  /// kind may run its immediate successor itself, without going back to the loop that checks the wait's
  /// condition, only where that cannot delay the wait (take_chained: replayed instances, flow tasks).
  const void* waiting_for = nullptr;
  bool immediate_successor = true;  ///< Options::immediate_successor, kept at hand
  /// Options::scheduler is Scheduler::lfq, kept at hand: the one test that the default scheduler's queue
  /// operations pay for the other one (its deque and priority lists then stay empty, and lfq_buffer is used).
  bool lfq = false;
  /// Children finished here but not yet subtracted from their parent's `alive` (batched: one atomic per
  /// count_batch completions instead of one per child). Flushed when the parent changes, before any wait
  /// or idle period, and before running a task of another parent.
  Task* counted_parent = nullptr;
  std::uint32_t counted = 0;
  std::uint32_t count_batch = 64;  ///< 64, or 1 with Options::local_counts off
  std::uint64_t rng;
  /// Throttling (throttle()): spawns that `throttle_parent` may make before its count of unfinished children is
  /// read again. A stale parent (another body ran here since, or the descriptor was recycled) is read again;
  /// a recycled descriptor that starts with stale room has no children yet, so the room cannot take it past
  /// the limit either.
  Task* throttle_parent = nullptr;
  std::uint32_t throttle_room = 0;
  unsigned idle_rounds = 0;  ///< rounds of the current idle streak (0: the worker found work since)
  /// Inside a poll of the progress sources made because the worker found no work (not between tasks): a
  /// source may count that time as the worker's idle time.
  bool idle_polling = false;
  /// The communication thread's worker (Options::comm_thread): it polls the progress source and never runs a
  /// task; the tasks its message handlers make ready wait in its queues, where the other workers steal them.
  bool progress_only = false;
  /// The engine's only worker (one thread, no communication thread: nobody can steal from it), with immediate
  /// successors on and the default scheduler: detached_submit may keep a send in its slot (one test for the
  /// three, on every send).
  bool sends_to_slot = false;
  /// Detached tasks (flow) that detached_submit queued on this worker's deque since the last detached body ended:
  /// run_detached puts the first sent on top.
  std::uint32_t detached_queued = 0;
  // Tasks left before this worker polls the progress sources (run_task); 0: no source attached. Set by
  // attach_progress (relaxed: a worker that sees it late polls later), counted down by the worker itself.
  std::atomic<std::uint32_t> progress_countdown{0};
  std::chrono::steady_clock::time_point last_busy_poll{};  // this worker's last poll between tasks
  Counters counters;
  trace::Log* trace = nullptr;  ///< profiling / tracing recorder of this worker; null when off (src/trace)

  // Pool of task descriptors: a private free list, plus a list other workers return descriptors to.
  Task* free_list = nullptr;
  alignas(64) std::atomic<Task*> remote_free{nullptr};
  std::vector<void*> chunks;

  std::vector<Task*> completing;          ///< work list of complete(): tasks and join nodes to complete
  std::vector<Task*> completed_children;  ///< complete(): parents owed a finished child, applied after nodes

  // --- the dependency front end's per-worker state (src/deps): kept here, at hand on the spawn path ---
  TaskBuffer scratch;       ///< candidate predecessors of the task being registered
  TaskBuffer weak_scratch;  ///< same, for a weak access's node
  TaskBuffer node_scratch;  ///< same, for a join node
  EdgeNode* spare_edges = nullptr;  ///< an edge array for the task being registered, if it needs one
  std::size_t spare_edges_size = 0;
  /// Edge arrays freed on this worker, by size class (alloc_edges): arrays of 4, 8, 16, 32 and 64 nodes,
  /// linked through their header; at most kEdgePoolDepth of each.
  static constexpr unsigned kEdgeClasses = 5;
  static constexpr std::uint32_t kEdgePoolDepth = 1024;
  EdgeNode* edge_pool[kEdgeClasses] = {};
  std::uint32_t edge_pool_size[kEdgeClasses] = {};
  std::uint32_t sweep_next = 64;  ///< recycling of retired children (begin_spawn): the count of the next pass
  /// The reduction clauses of the spawn being registered (finish_spawn_reductions), looked up by address.
  const ReductionSpec* red_specs = nullptr;
  std::size_t n_red_specs = 0;

  BoundedTaskBuffer lfq_buffer;  ///< Scheduler::lfq only: this worker's bounded buffer (no slots otherwise)
  /// Scheduler::lfq only: the waits this worker's stack holds, and the task the innermost one waits for the
  /// children of (null: it waits for something else). See kLfqFreeNesting.
  unsigned lfq_depth = 0;
  Task* lfq_waiter = nullptr;

  Task* allocate() {
    if (!free_list) [[unlikely]]
      refill();
    Task* t = free_list;
    free_list = t->retired_next;
    WEFT_ASSERT(in_free_state(t) && t->owner == id);
    return t;
  }
  void refill();  ///< takes back descriptors other workers freed, or carves a new chunk
  void free_local(Task* t) {
    t->retired_next = free_list;  // the free list reuses the retired-list link
    free_list = t;
  }
};

/// Edge arrays of tasks with more than kInlineEdges predecessors (Task::extra_edges): at least n nodes, from the
/// calling worker's pool (size classes of 4 to 64 nodes; larger arrays come from the heap). Throws
/// std::bad_alloc. An array may be freed on any worker (it joins that worker's pool).
EdgeNode* alloc_edges(Worker& w, std::size_t n);
void free_edges(Worker& w, EdgeNode* e);
/// The nodes an array from alloc_edges holds (at least what was asked).
std::size_t edges_capacity(const EdgeNode* e);

/// What a progress source asks of idle workers (ProgressSource::demand).
enum class ProgressDemand : unsigned char {
  none,     ///< nothing owed: idle workers sleep until a push, as without a source
  timed,    ///< work may arrive from outside (a distributed epoch runs): sleep in timed slices, then poll
  polling,  ///< operations in flight that only polls move (MPI makes no progress by itself): do not sleep
};

/// A source of outside work that the workers drive: the transport of a distributed front end, whose messages
/// make tasks ready, or the poller of MPI requests that tasks wait for. The engine knows nothing else of it (no
/// MPI, no front end). A worker polls the sources when it finds its own queues empty, before it steals (so also
/// in every round of the idle loop, which looks for work first), between tasks at most every
/// kProgressPollInterval (so that a busy worker still answers messages; the clock is read every
/// kProgressPollEvery tasks), and asks what they
/// demands before it sleeps: nothing in the engine would wake a worker when a message arrives (Open MPI makes no
/// asynchronous progress: if every worker slept until a push, no message would move).
struct ProgressSource {
  /// Does a bounded amount of work without blocking; returns how many events it handled (0: nothing to do, or
  /// another thread is progressing it). Called on a worker, by several workers at once; it may make tasks ready
  /// on the calling worker (schedule, detached_submit). Must not throw.
  std::size_t (*poll)(void* ctx) noexcept;
  /// What idle workers must do. Called on a worker, concurrently. Must not throw.
  ProgressDemand (*demand)(void* ctx) noexcept;
  void* ctx;
};
/// A worker running tasks while sources are attached reads the clock every this many tasks, and polls them
/// if kProgressPollInterval has passed since its last such poll: a poll costs about a microsecond (a pass of
/// MPI's progress engine), so at most a few percent of a busy worker's time, and a message waits for a busy
/// worker at most about that interval (or 16 tasks).
inline constexpr std::uint32_t kProgressPollEvery = 16;
inline constexpr std::chrono::microseconds kProgressPollInterval{20};

class Engine {
 public:
  explicit Engine(const Options& o);
  ~Engine();

  /// Runs a root task on the calling thread (worker 0; see Runtime::run): call(arg, the root's Context), then
  /// waits for every task of the run. The root is a task of `kind` (the front end of the run's Context).
  void run_root(const TaskKind* kind, void (*call)(void*, Context&), void* arg);

  Options options;
  std::vector<std::unique_ptr<Worker>> workers;
  /// Scheduler::lfq only: the FIFO shared by all workers that takes what their bounded buffers do not hold.
  OverflowQueue overflow;
  std::unique_ptr<trace::Recorder> recorder;  ///< null unless Options::profile.active()

  std::mutex error_mutex;

  // Idle workers sleep on an event count: a two-phase wait that cannot lose a wake-up.
  //   waiter: ticket = prepare_wait(); re-check the queues (and the run's state); then cancel_wait() if there is
  //           something to do, else commit_wait(ticket), which sleeps unless a wake-up came after the prepare.
  //   pusher: push, then wake_one().
  // Store-buffer race: the pusher writes a queue then reads `idle_`; the waiter writes `idle_` then reads the
  // queues. Each side orders its write before its read with a seq_cst fence (or, in a TSan build, both use
  // read-modify-writes of `idle_`), so at least one sees the other: the pusher sees the waiter and wakes it, or
  // the waiter's re-check sees the task.
  // idle_: bits 0-31 waiters (prepared or asleep); bit 32 a wake-up in flight; bits 33-63 an epoch, advanced by
  // every wake-up: a waiter whose ticket is stale does not sleep.
  static constexpr std::uint64_t kWaiter = 1, kWaiterMask = 0xffffffffu, kWaking = 1ull << 32,
                                 kEpoch = 1ull << 33;

  /// Wakes one sleeping worker, if any. At most one wake-up is in flight at a time (kWaking, cleared by the
  /// waiter that leaves its wait, which then polls), so a producer pushing many tasks makes one system call,
  /// not one per task; a woken worker that steals and sees more wakes the next (find_queued_work), so wake-ups
  /// cascade as fast as work appears. Inline: on every push; the slow path only with sleepers.
  void wake_one() {
#if WEFT_TSAN
    const std::uint64_t s = idle_.fetch_add(0, std::memory_order_seq_cst);
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the push before the read of idle_ (see above)
    const std::uint64_t s = idle_.load(std::memory_order_relaxed);
#endif
    if ((s & kWaiterMask) != 0 && !(s & kWaking)) [[unlikely]]
      wake_slow();
  }
  /// Wakes every sleeping worker (end of a run, shutdown).
  void wake_all();
  /// The two phases of a wait (see idle_). Returns the ticket for commit_wait.
  std::uint64_t prepare_wait();
  void cancel_wait();
  /// Sleeps unless a wake-up came after prepare_wait; `timed`: for at most 200 us. Returns true if woken
  /// (not timed out).
  bool commit_wait(std::uint64_t ticket, bool timed);
  /// An idle worker's r-th polling round since it last found work (r >= 1): pauses, and now and then a yield.
  /// False once it has polled long enough: it should sleep.
  bool idle_round(unsigned r) const;
  /// Between runs: polls for the next run for a while (see engine.cpp). True if one began or the engine stops.
  bool await_next_run(Worker& w);
  /// A worker started, or woken from a sleep, that finds itself on the CPU of the thread that started or woke
  /// it moves to another CPU of its mask (move_off_wakers_cpu, engine.cpp). Set when the workers are not
  /// bound, are at least two and have as many CPUs: there the two would otherwise share one CPU while another
  /// idles.
  bool moves_off_wakers_cpu = false;
  /// The CPU of the thread that last created, woke or started the workers (-1: unknown). Relaxed: a hint.
  std::atomic<int> waker_cpu{-1};

  /// The worker must leave its idle loop: the run ended, or the engine stops.
  bool idle_interrupted() const {
    return stop_.load(std::memory_order_relaxed) || !running_.load(std::memory_order_relaxed);
  }

  std::mutex sleep_mutex;
  std::condition_variable sleep_cv;
  /// An idle worker's polling round: pause instructions per round, and rounds before it yields (idle_backoff).
  unsigned idle_pauses = 4, idle_spin_rounds = 4096;
  /// Rounds of about 256 pauses: a spinning worker yields after each such slice (see idle_backoff); with a
  /// communication thread, which may share a worker's core, the spin is that one slice.
  unsigned slice_rounds = 64;

  /// The communication thread's worker, the last of `workers` (Options::comm_thread), or null: then the workers
  /// poll the progress source themselves. Workers steal from it as from any other; num_workers() omits it.
  Worker* progress_worker = nullptr;

  /// The most progress sources attached at once (a front end's transport, the MPI request poller, ...).
  static constexpr std::size_t kMaxProgressSources = 4;
  /// Attaches a progress source (several may be attached at once, up to kMaxProgressSources; attaching one
  /// twice, or one more, throws std::logic_error). Any thread; `s` must stay valid until detach_progress(s)
  /// has returned. With a communication thread (progress_worker), that thread polls the sources without pause
  /// while any is attached, and the workers never do: for them there is no source (has_progress() is false).
  void attach_progress(const ProgressSource* s);
  /// Detaches `s` (nothing if it is not attached); returns once no worker is inside a source's poll() or
  /// demand() any more. Any thread, also a worker (not from inside a source's own poll()).
  void detach_progress(const ProgressSource* s) noexcept;
  /// Workers poll sources: the one branch the scheduling and idle paths pay (relaxed; a worker that misses a
  /// source just attached sees it at its next round).
  bool has_progress() const noexcept { return worker_sources_.load(std::memory_order_relaxed) != 0; }
  /// Polls every attached source (see ProgressSource::poll); the events handled, 0 if none.
  std::size_t poll_progress() noexcept;
  /// The strongest demand of the attached sources (none if there is none).
  ProgressDemand progress_demand() noexcept;

  // --- per-runtime state of front ends that outlives a run (the MPI request poller) ---
  /// Created on first use, destroyed with the engine (first thing: while the workers still exist).
  struct Service {
    virtual ~Service() = default;
  };
  /// Service slots, one per front end that needs one (numbered by the front ends: kServiceMpiRequests).
  static constexpr std::size_t kServiceSlots = 2;
  /// The service in `slot`, or null. Acquire: pairs with install_service's release (the service is built).
  Service* service(std::size_t slot) const noexcept { return services_[slot].load(std::memory_order_acquire); }
  /// The service in `slot`, created by make(*this) if there is none yet (one thread creates it; make may throw).
  Service& install_service(std::size_t slot, std::unique_ptr<Service> (*make)(Engine&));

  // --- completion events (weft::Event) fulfilled by threads that are not workers of this engine ---
  /// Tasks whose last unit a foreign thread released: they are complete but for complete(), which needs a
  /// worker. A lock-free stack linked through edges[0].succ (free once a task has run: see Task::edges);
  /// pushed with release, drained (exchange) with acquire by a worker looking for work (drain_inbox).
  bool inbox_nonempty() const noexcept { return inbox_.load(std::memory_order_relaxed) != nullptr; }
  void inbox_push(Task* t) noexcept;
  Task* inbox_take() noexcept { return inbox_.exchange(nullptr, std::memory_order_acquire); }
  /// Foreign threads inside Event::fulfill / fail: each announces itself before it touches the task's count
  /// and leaves after its last access to the engine (the inbox push, the wake-up); run_root waits for none to
  /// be left before it returns, so a run cannot end (and the Runtime be destroyed) under such a thread.
  std::atomic<unsigned> outside_users{0};
  /// Exceptions dropped (Stats::exceptions_dropped) by foreign threads, which have no worker counters.
  std::atomic<std::uint64_t> outside_exceptions_dropped{0};

 private:
  [[gnu::noinline]] void wake_slow();
  void leave_wait();
  alignas(64) std::atomic<std::uint64_t> idle_{0};
  // The progress sources and the number of threads inside one of their functions (detach_progress waits for
  // 0). Own line: read by idle workers, written only on attach and detach. worker_sources_ counts the sources
  // the workers poll (all of them without a communication thread, none with one); attached_ counts them all
  // (the communication thread polls while it is not 0). Both change under attach_mutex_.
  alignas(64) std::atomic<unsigned> worker_sources_{0};
  std::atomic<unsigned> attached_{0};
  std::array<std::atomic<const ProgressSource*>, kMaxProgressSources> sources_{};
  std::atomic<unsigned> progress_users_{0};
  std::mutex attach_mutex_;
  std::array<std::atomic<Service*>, kServiceSlots> services_{};  // owned (deleted in ~Engine)
  std::mutex service_mutex_;  // install_service (not attach_mutex_: a service attaches a source as it is built)
  alignas(64) std::atomic<Task*> inbox_{nullptr};  // own line: pushed by foreign threads, read by idle workers
  void progress_main();  // the communication thread
  std::thread progress_thread_;

  void worker_main(unsigned id);
  // The no-progress watchdog of a run (Options::watchdog_seconds > 0): a thread that samples `idle_` (see
  // watchdog_main). run_root_task_: the root of the run in progress, for its report.
  void watchdog_main();
  [[noreturn]] void watchdog_fire();
  std::thread watchdog_thread_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;  // under watchdog_mutex_
  std::atomic<Task*> run_root_task_{nullptr};
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::mutex run_mutex_;
};

extern thread_local Worker* tls_worker;

// --- scheduling and completion (engine.cpp) ---
/// Sets the fields of a descriptor fresh from a pool that vary from task to task (the rest stay zero while it is
/// free; see free_task). Inline: it is on every spawn.
inline void init_task(Worker&, Task* t, Task* parent, const TaskKind* kind) {
  t->succ_head.store(0, std::memory_order_relaxed);
  t->cancelled.store(false, std::memory_order_relaxed);
  t->kind = kind;
  t->alive.store(kAliveGuard, std::memory_order_relaxed);
  t->parent = parent;
  t->priority = 0;
  t->label = nullptr;
  t->mark = nullptr;
  t->joined = 0;
}
/// schedule() under Scheduler::lfq (engine.cpp).
void schedule_lfq(Worker& w, Task* t);
/// t is ready: queue it on w.
inline void schedule(Worker& w, Task* t) {
  WEFT_ASSERT(t->kind && t->kind->run);                                 // a task, not a join node
  // Ready: pending reached 0, or its one predecessor released it without the atomic (n_edges == 1).
  WEFT_ASSERT(t->pending.load(std::memory_order_relaxed) == 0 || t->n_edges == 1 || t->kind->counts_elsewhere);
  // Not finished (a kind counted elsewhere may keep a closed list: a replayed instance's first completion closed it).
  WEFT_ASSERT(t->kind->counts_elsewhere || t->succ_head.load(std::memory_order_relaxed) != kClosed);
  if (w.lfq) [[unlikely]]
    return schedule_lfq(w, t);
  if (t->priority == 0 || !w.prioritized.push(t)) [[likely]]
    w.deque.push(t);  // (a prioritised task only if a descheduled thief holds its list: see PriorityQueue)
  w.engine->wake_one();
}
/// A task queued on w has a priority above p (a hint, as PriorityQueue::has_above). kLfqOff: the caller knows
/// that w.lfq is off.
template <bool kLfqOff = false>
[[gnu::always_inline]] inline bool queued_above(const Worker& w, std::int32_t p) {
  if (!kLfqOff && w.lfq) [[unlikely]]
    return w.lfq_buffer.has_above(p);
  return w.prioritized.has_above(p);
}
/// Offers a ready task to the worker: the best one becomes the immediate successor (set by complete()), the
/// others are queued. Between equal priorities the first offered stays, or with kLaterWinsTies the last.
template <bool kLaterWinsTies = false>
inline void offer(Worker& w, Task* s, Task*& best) {
  if (!w.immediate_successor) {
    schedule(w, s);
  } else if (!best) {
    best = s;
  } else if (kLaterWinsTies ? s->priority >= best->priority : s->priority > best->priority) {
    schedule(w, best);
    best = s;
  } else {
    schedule(w, s);
  }
}
/// Whether a task of priority p readied by a completion may become w's immediate successor: not if one is there
/// already or a queued task goes first by priority (for a negative priority, a task of default priority too;
/// split by sign so that the usual case, p >= 0 with no positive priority queued, is one load and test).
template <bool kLfqOff = false>
[[gnu::always_inline]] inline bool slot_takes(const Worker& w, std::int32_t p) {
  return !w.next &&
         !(p >= 0 ? queued_above<kLfqOff>(w, p) : queued_above<kLfqOff>(w, p) || w.deque.maybe_nonempty());
}
/// The end of a completion: the best task it readied (if any) becomes w's immediate successor if the slot takes
/// it, else it is queued.
[[gnu::always_inline]] inline void settle_best(Worker& w, Task* best) {
  if (!best) return;
  if (slot_takes(w, best->priority))
    w.next = best;
  else
    schedule(w, best);
}
/// complete() (kind.hpp) after its first task's TaskKind::complete step: counts a finished child of `owed`
/// (null: none owed), completes what the step pushed to w.completing above `base` (and, transitively, what
/// those ready), then settles `best`.
void complete_rest(Worker& w, Task* owed, Task* best, std::size_t base, std::size_t done_base);
/// Subtracts the worker's batched completions from their parent; returns the parent if that completed it.
Task* take_counted(Worker& w);
/// Counts a finished child of p in w's batch when that can complete nothing (the batch is p's, and this does not
/// fill it): the hot paths' case of count_finished_child (engine.cpp), which handles the others. False: not
/// counted.
inline bool count_child_in_batch(Worker& w, const Task* p) {
  if (p != w.counted_parent || w.counted + 1 >= w.count_batch) return false;
  ++w.counted;
  return true;
}
void free_remote(Worker& w, Task* t);  ///< free_task for a descriptor of another worker's pool
/// Returns t to its owner's pool. What a front end hangs off a descriptor (edge arrays, weak links...) it frees
/// first: the fields marked (0) in detail/task.hpp must be zero again.
inline void free_task(Worker& w, Task* t) {
  WEFT_ASSERT(in_free_state(t));
  if (t->owner == w.id) [[likely]]
    w.free_local(t);
  else
    free_remote(w, t);
}
Task* find_queued_work(Worker& w);  ///< own queues by priority, then stealing
/// The next task for w: its immediate successor, else queued work.
inline Task* find_work(Worker& w) {
  if (Task* t = w.next) {
    w.next = nullptr;
    ++w.counters.immediate_successor;
    return t;
  }
  return find_queued_work(w);
}
/// A task of `kind` and `parent` that has just completed on w may run w's immediate successor itself, in a loop,
/// without going back to the worker's loop (find_work, run_task), when that successor is of the same kind and
/// parent: this returns it (taken from the slot, counted as find_work counts it), or null. Only while w waits for
/// nothing but `parent`'s children (which cannot all have finished while the successor has not) or for nothing
/// (its own loop), so that no wait's condition goes unchecked, and when nothing is due before a task (run_task's
/// slow path: a poll, a batch of another parent's count). The slot is empty when a task begins, so what it holds
/// was readied by this task (its body or its completion). chain_blocked: w waits for something else, or something
/// is due (the worker's half of the test, shared with settle_or_chain). Its halves: w's wait, which cannot change
/// along a chain (a body that waits restores it before it returns), and what is due before the next task (a
/// poll; a batch of another parent's count), which can.
[[gnu::always_inline]] inline bool wait_blocks_chain(const Worker& w, const Task* parent) {
  return w.waiting_for && w.waiting_for != parent;
}
/// kBatchIsParents: the caller knows that w's batch of counts is parent's (count_child_in_batch(w, parent) has
/// just succeeded), so that only a poll can be due.
template <bool kBatchIsParents = false>
[[gnu::always_inline]] inline bool due_blocks_chain(const Worker& w, const Task* parent) {
  return w.progress_countdown.load(std::memory_order_relaxed) != 0 ||
         (!kBatchIsParents && w.counted && parent != w.counted_parent);
}
[[gnu::always_inline]] inline bool chain_blocked(const Worker& w, const Task* parent) {
  return wait_blocks_chain(w, parent) || due_blocks_chain(w, parent);
}
/// Whether a chain of `parent`'s tasks may run on w with its per-worker tests made once, before it begins
/// (settle_or_chain<true>): nothing traced, immediate successors on, the default scheduler, and a wait that
/// allows chaining. None of it changes along a chain.
[[gnu::always_inline]] inline bool chain_enters(const Worker& w, const Task* parent) {
  return !w.trace && w.immediate_successor && !w.lfq && !wait_blocks_chain(w, parent);
}
/// kWaitTested: the caller tested wait_blocks_chain(w, parent) once, before its chain began; kBatchIsParents:
/// as for due_blocks_chain.
template <bool kWaitTested = false, bool kBatchIsParents = false>
[[gnu::always_inline]] inline Task* take_chained(Worker& w, const TaskKind* kind, const Task* parent) {
  Task* const n = w.next;
  if (!n || n->kind != kind || n->parent != parent || (!kWaitTested && wait_blocks_chain(w, parent)) ||
      due_blocks_chain<kBatchIsParents>(w, parent))
    return nullptr;
  w.next = nullptr;
  ++w.counters.immediate_successor;
  return n;
}
/// settle_best(w, best) then take_chained(w, kind, parent) in one step, for the best task readied by the
/// completion of a task of `kind` and `parent`, not yet settled: returns it when it would have gone to the slot
/// and been taken from there (counted as find_work counts it; the caller runs it), else settles it and returns
/// null. kChainEntered: the caller tested chain_enters(w, parent) once, before its chain began, and every task
/// of `kind` it can ready has `parent` (the instances of one taskiter loop): those tests are left out.
template <bool kChainEntered = false>
[[gnu::always_inline]] inline Task* settle_or_chain(Worker& w, Task* best, const TaskKind* kind,
                                                    const Task* parent) {
  if (best && best->kind == kind && (kChainEntered || best->parent == parent) &&
      slot_takes<kChainEntered>(w, best->priority) &&
      (kChainEntered ? !due_blocks_chain(w, parent) : !chain_blocked(w, parent))) {
    ++w.counters.immediate_successor;
    return best;
  }
  settle_best(w, best);
  return nullptr;
}
/// Credits a worker takes from a parent at once for children it makes ready without spawning them (flow
/// tasks, replayed taskiter instances): each such child consumes one, each completion counted on this worker
/// returns one (count_finished_child), so a worker that releases about as many as it completes touches the
/// parent's counter once per credit_batch(w) children. The parent's `alive` stays >= its true count of unfinished
/// children: it cannot reach zero while a worker still holds credits (returned when the worker idles). Credits
/// are half a completion batch: a worker that completes one child before it readies the next stays within
/// the batch instead of returning all its credits at every completion (32; 1 with Options::local_counts off).
inline std::uint32_t credit_batch(const Worker& w) { return (w.count_batch + 1) / 2; }
/// Counts one more unfinished child of `a`, about to be made ready. The caller must itself keep `a` from
/// completing meanwhile (it is a counted child of `a`, or `a`'s body). Never completes anything, so it may be
/// called from inside complete().
/// count_new_child's usual case, for callers that handle the others out of line: spends one of the credits w
/// holds on `a`. False: w holds none (then nothing is counted).
inline bool spend_held_credit(Worker& w, const Task* a) {
  if (w.counted_parent != a || w.counted == 0) return false;
  --w.counted;
  return true;
}
inline void count_new_child(Worker& w, Task* a) {
  if (spend_held_credit(w, a)) return;
  if (w.counted == 0) {
    const std::uint32_t credits = credit_batch(w);
    a->alive.fetch_add(credits, std::memory_order_relaxed);  // relaxed: `a` is kept alive by the caller
    w.counted_parent = a;
    w.counted = credits - 1;
  } else {
    a->alive.fetch_add(1, std::memory_order_relaxed);  // the batch is owed to another parent: leave it
  }
}
void run_task(Worker& w, Task* t);
/// What a worker waits for (wait_until), for the re-check idle_backoff makes before it sleeps.
struct WaitCondition {
  bool (*done)(const void* ctx);
  const void* ctx;
  /// Non-null: `done` depends only on this task's `alive` count (its unfinished children, or for the root of a
  /// run its unfulfilled events), and the worker sleeps until a completion of one of them (or a fulfil) wakes
  /// it (kChildWaiter). Null: the sleep is timed (the condition is polled).
  Task* watched;
  /// Never sleep: yield between polls (a waiter that drives communication itself, see wait_until).
  bool keep_polling = false;
};
/// The bit of Task::alive that says: the task's body sleeps until a child finishes (weak-node units use bits
/// 32-61). Set and cleared by the waiter (idle_backoff); a worker that subtracts finished children from a count
/// with the bit wakes it (wake_child_waiter).
inline constexpr std::int64_t kChildWaiter = std::int64_t{1} << 62;
void wake_child_waiter(Worker& w, Task* p);
/// No work found: spin, yield, then sleep until a push (or, for a waiter, until its condition may hold).
void idle_backoff(Worker& w, const WaitCondition* cond = nullptr);
/// Conditions waited on count this worker's batched completions themselves (see unfinished_children);
/// the batch is flushed before idling, so other workers' progress is never hidden for long.
/// Subtracts the batched completions from their parent; completes the parent if that was the last thing it
/// waited for.
void flush_completions(Worker& w);
/// Scheduler::lfq: a wait nested inside more than this many others runs only children of the task it waits for
/// (find_lfq_work), as OpenMP's taskwait does. A worker in a wait runs whatever it finds, inside the wait; the
/// shared FIFO hands out the oldest tasks, whose own waits take the next oldest in turn, and a tree of taskwaits
/// would nest thousands deep (measured: 8000 nested waits for a tree of 2^16 leaves on one worker, a stack
/// overflow at 2^18). The default scheduler's LIFO order keeps a waiter on its own descendants.
inline constexpr unsigned kLfqFreeNesting = 64;
/// Scheduler::lfq: w is inside a wait (for `watched`'s children; null: for something else) while this lives.
class LfqWaitScope {
 public:
  LfqWaitScope(Worker& w, Task* watched) : w_(w), outer_(w.lfq_waiter) {
    w.lfq_waiter = watched;
    ++w.lfq_depth;
  }
  ~LfqWaitScope() {
    w_.lfq_waiter = outer_;
    --w_.lfq_depth;
  }
  LfqWaitScope(const LfqWaitScope&) = delete;
  LfqWaitScope& operator=(const LfqWaitScope&) = delete;

 private:
  Worker& w_;
  Task* outer_;
};
/// Worker::waiting_for of a wait for something else than a task's children: its address.
inline constexpr char kOtherWait = 0;
/// w waits for `watched`'s children (null: for another condition) while this lives (Worker::waiting_for).
class WaitingScope {
 public:
  WaitingScope(Worker& w, const Task* watched) : w_(w), outer_(w.waiting_for) {
    w.waiting_for = watched ? static_cast<const void*>(watched) : &kOtherWait;
  }
  ~WaitingScope() { w_.waiting_for = outer_; }
  WaitingScope(const WaitingScope&) = delete;
  WaitingScope& operator=(const WaitingScope&) = delete;

 private:
  Worker& w_;
  const void* outer_;
};
/// The loop of wait_until (inlined: a wait of the default scheduler runs its loop without a call).
template <class Cond>
[[gnu::always_inline]] inline void wait_loop(Worker& w, Cond& done, Task* watched, bool keep_polling) {
  WaitingScope waiting(w, watched);
  for (;;) {
    if (done()) break;
    if (Task* t = find_work(w)) {
      w.idle_rounds = 0;
      run_task(w, t);
    } else {
      // A copy for the re-check: `done` itself never escapes, so the loop above keeps what it reads in registers.
      std::remove_cvref_t<Cond> check = done;
      const WaitCondition cond{[](const void* c) { return (*static_cast<decltype(check)*>(const_cast<void*>(c)))(); },
                               &check, watched, keep_polling};
      idle_backoff(w, &cond);
    }
  }
  w.idle_rounds = 0;
  if (Task* t = w.next) [[unlikely]] {
    w.next = nullptr;
    schedule(w, t);
  }
}
/// wait_until under Scheduler::lfq. Out of line, and `done` by value: the default scheduler's waits keep the
/// loop inlined and the condition in registers.
template <class Cond>
[[gnu::noinline]] void wait_until_lfq(Worker& w, Cond done, Task* watched, bool keep_polling) {
  LfqWaitScope nested(w, watched);
  wait_loop(w, done, watched, keep_polling);
}
/// Runs tasks until done() holds. The waiter then resumes its own code: a successor left in its
/// immediate-successor slot (readied by the last task it ran) goes to its queue, where other workers can take
/// it, instead of waiting there until the waiter's body returns.
/// `watched`: done() depends only on that task's unfinished children (see WaitCondition). `keep_polling`: the
/// waiter never sleeps, it yields between rounds (the progress source's poll and done() run every round).
template <class Cond>
void wait_until(Worker& w, Cond&& done, Task* watched = nullptr, bool keep_polling = false) {
  if (w.lfq) [[unlikely]]
    return wait_until_lfq<std::remove_cvref_t<Cond>>(w, done, watched, keep_polling);
  wait_loop(w, done, watched, keep_polling);
}
/// Records e as the first exception of parent's children (dropped, and counted, if one is pending already).
void record_error(Worker& w, Task* parent, std::exception_ptr e) noexcept;
/// The same from any thread: returns false if e was dropped (the caller counts it).
bool store_error(Engine& e, Task* parent, std::exception_ptr& x) noexcept;
/// Completes the tasks foreign threads left in the engine's inbox (see Engine::inbox_push), on w. Returns
/// whether there were any.
bool drain_inbox(Worker& w);
/// Completion events: a unit of t's `alive` (kEventUnit) per unfulfilled event. Fulfils one of t's events
/// (after recording `error`, if any, as t's own child error): on a worker of `e`, completes t there if that
/// was the last thing it waited for; elsewhere hands t to the workers (the inbox).
void fulfill_event(Engine& e, Task* t, std::exception_ptr error) noexcept;
/// Takes (and clears) the first pending exception of t's children; null if none.
std::exception_ptr take_child_error(Worker& w, Task* t) noexcept;
/// Rethrows (and clears) the first pending exception of t's children.
void rethrow_child_error(Worker& w, Task* t);

/// Published children of p not finished yet, as seen by w (its own batched completions included).
inline std::int64_t unfinished_children(const Worker& w, const Task* p) {
  // The low 32 bits of alive hold kAliveGuard + published - finished (never borrows: see kAliveGuard).
  const std::int64_t n =
      static_cast<std::int64_t>(static_cast<std::uint32_t>(p->alive.load(std::memory_order_acquire))) - kAliveGuard;
  return w.counted_parent == p ? n - w.counted : n;
}
/// Completion events taken by p's children and not fulfilled yet: they live in p's `pending`, which nothing
/// else reads once p runs (its predecessors have all finished), so the count costs no space. Incremented by
/// Context::event, decremented by fulfill_event; zero again before p completes (its children complete first).
inline std::atomic<std::int32_t>& held_events(Task* p) { return p->pending; }
/// Throttling, before p spawns a child: if p has Options::max_tasks unfinished children, runs tasks until half
/// as many remain. Inline: the test is on every spawn. It reads p's `alive` (a line the workers that finish
/// p's children write, a miss on each spawn once many run them) only when the room left by the last reading
/// is used up (Worker::throttle_room): between readings the count only falls, but for p's own spawns, each of
/// which takes one spawn of room. (Children that other threads add to p, as flow tasks, taskiter instances or
/// tasks received from other ranks, count only at the next reading: their own front ends bound them.)
void throttle_check(Worker& w, Task* p);
inline void throttle(Worker& w, Task* p) {
  if (w.throttle_parent == p && w.throttle_room != 0) [[likely]] {
    --w.throttle_room;
    return;
  }
  throttle_check(w, p);
}
/// Waits (running tasks meanwhile) until every child p has spawned so far has finished.
void wait_for_children(Worker& w, Task* p);

/// The task has completed (its successor list is closed). Acquire: its effects are visible to the caller.
inline bool finished(const Task* t) { return t->succ_head.load(std::memory_order_acquire) == kClosed; }

/// The task failed or was cancelled: its successors are cancelled.
inline bool poisoned(const Task* t) { return t->cancelled.load(std::memory_order_relaxed); }

}  // namespace weft::detail
