// The engine: workers, descriptor pools, spawning, scheduling (immediate successor, per-worker queues,
// stealing), completion and termination.
//
// Counting (see detail/task.hpp):
//  * pending  - unfinished predecessors. Set by the producer before the first edge is published, decremented
//               by each finishing predecessor; whoever brings it to 0 makes the task ready.
//  * alive    - kAliveGuard while the body runs, plus children published minus children finished, plus
//               kWeakUnit per unfinished weak node. The producer publishes its children in batches (at a
//               taskwait, at the throttling bound, at the end of the body), so spawning costs no atomic on the
//               parent. Whoever brings it to 0 completes the task: frees its children, releases successors, and
//               decrements its own parent.
//  * succ_head - successor list, closed (kClosed) by one exchange when the task completes. After that exchange
//               the completing thread never touches the descriptor again, so the producer may recycle it as soon
//               as it sees kClosed and no record names it.
#include "cluster/cluster.hpp"
#include "engine/kind.hpp"
#include "trace/hooks.hpp"
#include "trace/recorder.hpp"
#include "weft/profile.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

namespace weft::detail {

thread_local Worker* tls_worker = nullptr;

void internal_check_failed(const char* cond, const char* file, int line) noexcept {
  std::fprintf(stderr, "weft: internal check failed: %s (%s:%d)\n", cond, file, line);
  std::abort();
}

namespace {
constexpr std::uint32_t kChunkTasks = 64;
}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------------------

Counters operator-(const Counters& a, const Counters& b) {
  Counters d;
  for (const StatsField& f : kStatsFields) d.*f.member = a.*f.member - b.*f.member;  // modulo 2^64: see Counters
  return d;
}

Stats sum_stats(const Counters* cs, std::size_t n) {
  Stats s;
  for (std::size_t i = 0; i < n; ++i)
    for (const StatsField& f : kStatsFields) s.*f.member += cs[i].*f.member;
  if (static_cast<std::int64_t>(s.edges_saved_inoutset) < 0) s.edges_saved_inoutset = 0;
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------------------------

Worker::~Worker() {
  if (spare_edges) free_edges(*this, spare_edges);
  for (unsigned c = 0; c < kEdgeClasses; ++c)
    while (EdgeNode* e = edge_pool[c]) {
      edge_pool[c] = e[-1].next;
      delete[] (e - 1);
    }
  for (void* c : chunks) ::operator delete(c, std::align_val_t{alignof(Task)});
}

// Edge arrays (tasks with 3 or more predecessors: Task Bench's stencils, every Cholesky update) were a new[]
// and a delete[] per task. An array is one node longer than its capacity: the node before it holds the
// capacity (in `succ`) and, while pooled, the next free array of its class (in `next`).
namespace {
constexpr std::size_t kSmallestEdgeClass = 4;
constexpr std::size_t kLargestEdgeClass = kSmallestEdgeClass << (Worker::kEdgeClasses - 1);  // 64
unsigned edge_class(std::size_t capacity) {  // capacity: a power of two from 4 to 64
  return static_cast<unsigned>(std::countr_zero(capacity) - std::countr_zero(kSmallestEdgeClass));
}
}  // namespace

std::size_t edges_capacity(const EdgeNode* e) { return reinterpret_cast<std::uintptr_t>(e[-1].succ); }

EdgeNode* alloc_edges(Worker& w, std::size_t n) {
  std::size_t cap = std::max(n, kSmallestEdgeClass);
  if (cap <= kLargestEdgeClass) {
    cap = std::bit_ceil(cap);
    const unsigned c = edge_class(cap);
    if (EdgeNode* e = w.edge_pool[c]) {
      w.edge_pool[c] = e[-1].next;
      --w.edge_pool_size[c];
      return e;
    }
  }
  EdgeNode* block = new EdgeNode[cap + 1];
  block[0].succ = reinterpret_cast<Task*>(static_cast<std::uintptr_t>(cap));
  return block + 1;
}

void free_edges(Worker& w, EdgeNode* e) {
  const std::size_t cap = edges_capacity(e);
  if (cap <= kLargestEdgeClass) {
    const unsigned c = edge_class(cap);
    if (w.edge_pool_size[c] < Worker::kEdgePoolDepth) {
      e[-1].next = w.edge_pool[c];
      w.edge_pool[c] = e;
      ++w.edge_pool_size[c];
      return;
    }
  }
  delete[] (e - 1);
}

void Worker::refill() {
  free_list = remote_free.exchange(nullptr, std::memory_order_acquire);
  if (free_list) return;
  reserve_one_more(chunks);  // first: the push below cannot throw and lose the chunk
  void* mem = ::operator new(sizeof(Task) * kChunkTasks, std::align_val_t{alignof(Task)});
  chunks.push_back(mem);
  Task* block = static_cast<Task*>(mem);
  for (std::uint32_t i = 0; i < kChunkTasks; ++i) {
    Task* t = ::new (static_cast<void*>(block + i)) Task{};  // the free-state invariants: zero fields
    t->owner = static_cast<std::uint16_t>(id);
    free_local(t);
  }
}

// Other workers' descriptors go back to their owner's remote list (release: the owner's exchange in refill
// acquires the descriptors' last state).
void free_remote(Worker& w, Task* t) {
  Worker& o = *w.engine->workers[t->owner];
  Task* head = o.remote_free.load(std::memory_order_relaxed);
  do {
    t->retired_next = head;
  } while (!o.remote_free.compare_exchange_weak(head, t, std::memory_order_release, std::memory_order_relaxed));
}

// ---------------------------------------------------------------------------------------------------------
// Scheduling
// ---------------------------------------------------------------------------------------------------------

namespace {
// Scheduler::lfq: the task that w, nested too deep in waits, may run only children of (kLfqFreeNesting); null:
// any task.
const Task* lfq_only_children_of(const Worker& w) {
  return w.lfq_depth > kLfqFreeNesting ? w.lfq_waiter : nullptr;
}

// Scheduler::lfq: the best task of b (`parent`: a child of it only).
Task* pop_buffer(Worker& w, BoundedTaskBuffer& b, const Task* parent) {
  for (;;) {
    Task* t = b.pop_best(parent);
    if (!t || !parent || t->parent == parent) return t;
    w.engine->overflow.push(t);  // its slot was refilled as it was read: not a child after all
  }
}

// w's own queues, best first: its positive priorities, its default-priority deque, its negative priorities
// (Scheduler::lfq: the best task of its bounded buffer).
Task* pop_own(Worker& w) {
  if (w.lfq) return pop_buffer(w, w.lfq_buffer, lfq_only_children_of(w));
  if (Task* t = w.prioritized.pop(1)) return t;
  if (Task* t = w.deque.pop()) return t;
  return w.prioritized.pop(INT32_MIN);
}

// w's own queues were empty: poll the progress source (which may make tasks ready on w: a message's handler
// submits its task to the polling worker), then look again.
[[gnu::noinline]] Task* poll_for_work(Worker& w) {
  w.idle_polling = true;
  const std::size_t n = w.engine->poll_progress();
  w.idle_polling = false;
  // This poll is the one a send asked for (Worker::progress_countdown at 1: flush as soon as the sending task
  // has ended): without the reset, the next task would start with another poll, one pass of MPI's progress
  // engine on every hop's path (a flow hop across ranks 0.41 -> 0.57 us when the poll between tasks moved in
  // front of the body).
  if (w.progress_countdown.load(std::memory_order_relaxed) != 0)
    w.progress_countdown.store(kProgressPollEvery, std::memory_order_relaxed);
  if (n == 0) return nullptr;
  if (Task* t = w.next) {  // a single worker: detached_submit uses the immediate-successor slot
    w.next = nullptr;
    return t;
  }
  return pop_own(w);
}

// Foreign threads fulfilled the last events of some tasks: complete them here (which may ready successors on
// w), then look again.
[[gnu::noinline]] Task* inbox_for_work(Worker& w) {
  if (!drain_inbox(w)) return nullptr;
  if (Task* t = w.next) {
    w.next = nullptr;
    return t;
  }
  return pop_own(w);
}

// Scheduler::lfq, PaRSEC's order: the best task of w's own buffer; else (after the progress sources and the
// inbox, as below) one task from another worker's buffer, the next workers first (PaRSEC's order on a machine
// without a hierarchy); else the oldest task of the shared FIFO.
[[gnu::noinline]] Task* find_lfq_work(Worker& w) {
  const Task* const only = lfq_only_children_of(w);
  if (Task* t = pop_buffer(w, w.lfq_buffer, only)) return t;
  Engine& e = *w.engine;
  if (e.has_progress()) [[unlikely]]
    if (Task* t = poll_for_work(w)) return t;
  if (e.inbox_nonempty()) [[unlikely]]
    if (Task* t = inbox_for_work(w)) return t;
  auto& ws = e.workers;
  const std::size_t n = ws.size();
  for (std::size_t k = 1; k < n; ++k) {
    Worker& v = *ws[(w.id + k) % n];
    if (Task* t = pop_buffer(w, v.lfq_buffer, only)) {
      ++w.counters.tasks_stolen;
      trace::on_steal(w);
      if (v.lfq_buffer.maybe_nonempty() || e.overflow.maybe_nonempty()) e.wake_one();  // as find_queued_work
      return t;
    }
  }
  if (Task* t = only ? e.overflow.pop_child(only) : e.overflow.pop()) {
    if (e.overflow.maybe_nonempty()) e.wake_one();
    return t;
  }
  return nullptr;
}
}  // namespace

// Scheduler::lfq: the task goes to a free slot of w's bounded buffer; when the buffer is full, the task of
// lowest priority (t or one it replaces) goes to the shared FIFO.
void schedule_lfq(Worker& w, Task* t) {
  if (Task* spilled = w.lfq_buffer.push(t)) w.engine->overflow.push(spilled);
  w.engine->wake_one();
}

Task* find_queued_work(Worker& w) {
  if (w.lfq) [[unlikely]]
    return find_lfq_work(w);
  if (Task* t = w.prioritized.pop(1)) return t;
  if (Task* t = w.deque.pop()) return t;
  if (Task* t = w.prioritized.pop(INT32_MIN)) return t;
  if (w.engine->has_progress()) [[unlikely]]  // before stealing: a message is work that only a poll finds
    if (Task* t = poll_for_work(w)) return t;
  if (w.engine->inbox_nonempty()) [[unlikely]]  // tasks that events fulfilled on foreign threads let complete
    if (Task* t = inbox_for_work(w)) return t;
  auto& ws = w.engine->workers;
  const std::size_t n = ws.size();
  if (n > 1) {
    w.rng ^= w.rng << 13;
    w.rng ^= w.rng >> 7;
    w.rng ^= w.rng << 17;
    std::size_t start = static_cast<std::size_t>(w.rng % n);
    for (std::size_t k = 0; k < n; ++k) {
      Worker& v = *ws[(start + k) % n];
      if (&v == &w) continue;
      // The victim's own order: its positive priorities, its default-priority deque, then its negative ones.
      // Default-priority tasks come in a batch (Options::steal_batch), queued here where our own idle
      // neighbours can take them in turn.
      std::uint32_t moved = 0;
      Task* t = v.prioritized.pop(1, /*owner=*/false);
      if (!t) t = v.deque.steal_batch(w.deque, w.engine->options.steal_batch - 1, moved);
      if (!t) t = v.prioritized.pop(INT32_MIN, /*owner=*/false);
      if (t) {
        w.counters.tasks_stolen += 1 + moved;
        trace::on_steal(w);
        // More where that came from (there, or the batch here): wake a helper.
        if (moved != 0 || v.deque.maybe_nonempty() || !v.prioritized.empty()) w.engine->wake_one();
        return t;
      }
    }
  }
  return nullptr;
}

namespace {
// Read-only re-check of a wait (after Engine::prepare_wait): a task that w may find, or a reason to leave the
// idle loop.
bool idle_recheck(const Worker& w) {
  const Engine& e = *w.engine;
  if (w.next || w.counted || e.idle_interrupted() || e.inbox_nonempty()) return true;
  if (w.lfq) {
    for (const auto& v : e.workers)
      if (v->lfq_buffer.maybe_nonempty()) return true;
    return e.overflow.maybe_nonempty();
  }
  for (const auto& v : e.workers)
    if (v->deque.maybe_nonempty() || !v->prioritized.empty()) return true;
  return false;
}
}  // namespace

// Spin (polling the queues) for some hundreds of microseconds, then yield, then sleep: a worker that finds no
// work between the tasks of a busy program stays responsive, an idle one stops burning its core.
// Rounds are short enough (see Engine::idle_pauses) that, between them, the idle workers together find a
// task pushed by another worker within about a microsecond: at fine grain that latency is paid at every
// dependency that crosses workers.
// The spin yields after every slice of about 256 pauses (Engine::slice_rounds): a thread that shares this
// core waits for one slice, not for the whole spin. The scheduler may well put a woken worker on its waker's
// core: the caller of Runtime::run, whose notify wakes the workers, waited out the whole spin, about 0.5 ms,
// at the start of every other run on a 2-core virtual machine (BENCHMARKS.md, 42). On a core of its own a
// yield returns at once. With a communication thread, work from other ranks comes from that thread, which may
// share this core (WEFT_COMM_THREAD=on without a spare one): the spin is one slice, then yields, or each
// message would wait out the spin (measured: 0.5 ms per 8-byte hop).
bool Engine::idle_round(unsigned r) const {
  const unsigned spin = progress_worker ? slice_rounds : idle_spin_rounds;
  if (r < spin) {
    for (unsigned i = 0; i < idle_pauses; ++i) WEFT_PAUSE();
    if (r % slice_rounds == 0) std::this_thread::yield();
    return true;
  }
  if (r < spin + 256) {
    std::this_thread::yield();
    return true;
  }
  return false;
}

namespace {
// A worker that is created or woken lands where the kernel puts it, and a guest kernel may put it on the CPU of
// the thread that created or woke it even while another CPU idles (measured on a 2-core KVM virtual machine,
// where an idle virtual CPU looks unavailable to the scheduler: the worker then time-shares its waker's CPU for
// 2-4 ms, until the load balancer moves it, and a fine-grained run executes serially; BENCHMARKS.md, 50). A
// worker that finds itself there when it starts or wakes leaves that CPU, by removing it from its mask for a
// moment (which migrates it at once) and then restoring the mask: three system calls, only in that case.
// Worker 0 (the caller of run(), a thread of the program) is left alone.
void move_off_wakers_cpu(Worker& w) {
  Engine& e = *w.engine;
  if (!e.moves_off_wakers_cpu || w.id == 0 || w.progress_only) return;
  const int me = sched_getcpu();
  if (me < 0 || me != e.waker_cpu.load(std::memory_order_relaxed)) return;
  cpu_set_t mine, others;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return;
  others = mine;
  CPU_CLR(me, &others);
  if (CPU_COUNT(&others) == 0) return;
  if (sched_setaffinity(0, sizeof others, &others) != 0) return;
  sched_setaffinity(0, sizeof mine, &mine);  // free to go anywhere again: the kernel leaves it where it now is
}
}  // namespace

void idle_backoff(Worker& w, const WaitCondition* cond) {
  trace::on_idle(w);
  if (w.counted) {
    // All of it: completing a task counts it in its own parent's batch, and a sleeper must not sit on a count
    // that another worker waits for. Completing may ready an immediate successor: run it first.
    while (w.counted) flush_completions(w);
    if (w.next) return;
  }
  Engine& e = *w.engine;
  if (e.idle_round(++w.idle_rounds)) return;
  const ProgressDemand demand = e.has_progress() ? e.progress_demand() : ProgressDemand::none;
  if (demand == ProgressDemand::polling || (cond && cond->keep_polling)) [[unlikely]] {
    std::this_thread::yield();  // operations in flight, or a waiter that drives them: back to polling
    return;
  }
  // Sleep until a push wakes us, in two phases (Engine::idle_): announce, re-check, sleep only if nothing came
  // meanwhile. A waiter for a task's children also sets kChildWaiter in its `alive` between the phases: a
  // worker that then subtracts finished children wakes everyone (take_counted), and one that did so before
  // the bit was set left a count that the re-check sees. Any other condition is polled every 200 us: it is made
  // true by finishing tasks, which pushes nothing.
  const std::uint64_t ticket = e.prepare_wait();
  // seq_cst: the bit is set before the re-check reads the count, as a completer's read-modify-write of the
  // count is ordered before or after it.
  if (cond && cond->watched) cond->watched->alive.fetch_or(kChildWaiter, std::memory_order_seq_cst);
  if (idle_recheck(w) || (cond && cond->done(cond->ctx))) {
    e.cancel_wait();
    w.idle_rounds = 0;
  } else if (e.commit_wait(ticket, /*timed=*/(cond && !cond->watched) || demand == ProgressDemand::timed)) {
    // (A progress source that expects work from outside: nothing would wake us when it arrives; the timed
    // sleep returns to the polling loop.)
    // Woken because work was pushed: poll again before sleeping. The pusher may well run that task itself
    // before we get here; without a new polling window we would go back to sleep at once and, on a
    // fine-grained program, miss every later task too (one worker doing all the work while the other sleeps).
    w.idle_rounds = 0;
    move_off_wakers_cpu(w);
  }
  if (cond && cond->watched) cond->watched->alive.fetch_and(~kChildWaiter, std::memory_order_relaxed);
}

void wake_child_waiter(Worker& w, Task* p) {
  p->alive.fetch_and(~kChildWaiter, std::memory_order_relaxed);  // one wake-up per sleep
  w.engine->wake_all();
}

// --- the progress sources ------------------------------------------------------------------------------------
// A user announces itself (seq_cst increment) before it reads a source slot (seq_cst); detach clears the slot
// (seq_cst) before it reads the users: in the single total order, either the user's read comes after the clear
// (it sees none) or its increment comes before the detacher's read of the users (which then waits for it).
// With a communication thread the workers never read the slots (worker_sources_ stays 0): the thread is the one
// user, under the same protocol.

void Engine::attach_progress(const ProgressSource* s) {
  {
    std::lock_guard<std::mutex> g(attach_mutex_);
    std::atomic<const ProgressSource*>* free_slot = nullptr;
    for (auto& slot : sources_) {
      const ProgressSource* cur = slot.load(std::memory_order_relaxed);
      if (cur == s) throw std::logic_error("weft: this progress source is already attached to the runtime");
      if (!cur && !free_slot) free_slot = &slot;
    }
    if (!free_slot) throw std::logic_error("weft: too many progress sources attached to one runtime");
    free_slot->store(s, std::memory_order_seq_cst);
    attached_.fetch_add(1, std::memory_order_seq_cst);
    if (!progress_worker) worker_sources_.fetch_add(1, std::memory_order_seq_cst);
  }
  if (!progress_worker)
    for (auto& w : workers) w->progress_countdown.store(kProgressPollEvery, std::memory_order_relaxed);
  // Sleepers re-evaluate with the source (it may demand polling already); the communication thread, asleep
  // while no source is attached, starts polling.
  wake_all();
}

void Engine::detach_progress(const ProgressSource* s) noexcept {
  {
    std::lock_guard<std::mutex> g(attach_mutex_);
    for (auto& slot : sources_) {
      if (slot.load(std::memory_order_relaxed) != s) continue;
      slot.store(nullptr, std::memory_order_seq_cst);
      attached_.fetch_sub(1, std::memory_order_seq_cst);
      if (!progress_worker) worker_sources_.fetch_sub(1, std::memory_order_seq_cst);
      break;
    }
  }
  while (progress_users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

std::size_t Engine::poll_progress() noexcept {
  progress_users_.fetch_add(1, std::memory_order_seq_cst);
  std::size_t n = 0;
  for (auto& slot : sources_)
    if (const ProgressSource* s = slot.load(std::memory_order_seq_cst)) n += s->poll(s->ctx);
  progress_users_.fetch_sub(1, std::memory_order_release);
  return n;
}

// The communication thread (Options::comm_thread): while a source is attached it polls the sources back to
// back; the tasks that messages make ready go to its worker's queues (detached_submit, schedule), whence the
// workers, woken by the push, steal them. It returns the credits it took on the anchor's count after every
// poll, so that a fence waiting for the count to reach zero is not held up by them. While none is attached
// it sleeps.
void Engine::progress_main() {
  Worker& w = *progress_worker;
  tls_worker = &w;
  unsigned empty = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    if (attached_.load(std::memory_order_acquire) == 0) {
      std::unique_lock<std::mutex> lk(sleep_mutex);
      sleep_cv.wait(lk, [&] {
        return stop_.load(std::memory_order_relaxed) || attached_.load(std::memory_order_relaxed) != 0;
      });
      continue;
    }
    const std::size_t n = poll_progress();
    if (w.counted) flush_completions(w);
    // Spin between empty polls for a few microseconds, then yield after each one: on a core of its own a
    // yield returns at once (a syscall, about a microsecond), and on a core shared with a worker (=on without
    // a spare core) it lets the worker run the tasks this thread handed over; spinning longer there costs a
    // scheduler slice per message (measured: an 8-byte hop of 0.5 ms after 1024 spins, BENCHMARKS.md).
    if (n != 0) {
      empty = 0;
    } else if (++empty < 32) {
      WEFT_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  tls_worker = nullptr;
}

ProgressDemand Engine::progress_demand() noexcept {
  progress_users_.fetch_add(1, std::memory_order_seq_cst);
  ProgressDemand d = ProgressDemand::none;
  for (auto& slot : sources_)
    if (const ProgressSource* s = slot.load(std::memory_order_seq_cst)) d = std::max(d, s->demand(s->ctx));
  progress_users_.fetch_sub(1, std::memory_order_release);
  return d;
}

// Memory orderings of the event count: see Engine::idle_.
std::uint64_t Engine::prepare_wait() {
#if WEFT_TSAN
  const std::uint64_t s = idle_.fetch_add(kWaiter, std::memory_order_seq_cst);
#else
  const std::uint64_t s = idle_.fetch_add(kWaiter, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the announcement before the re-check's reads
#endif
  return s / kEpoch;
}

void Engine::cancel_wait() { leave_wait(); }

bool Engine::commit_wait(std::uint64_t ticket, bool timed) {
  bool woken = true;
  {
    std::unique_lock<std::mutex> lk(sleep_mutex);
    // A waker advances the epoch before it takes the mutex (wake_slow), so it is read here, under the mutex,
    // either before the waker's notify (we are then asleep when it comes) or with the new epoch.
    auto come = [&] { return idle_.load(std::memory_order_relaxed) / kEpoch != ticket; };
    if (timed)
      woken = sleep_cv.wait_for(lk, std::chrono::microseconds(200), come);
    else
      sleep_cv.wait(lk, come);
  }
  leave_wait();
  return woken;
}

// One waiter fewer, and no wake-up in flight any more: whoever it was for, we poll next (at worst another
// waiter is woken for nothing later). A pusher that saw kWaking skipped its wake-up: the clear is ordered before
// our next reads of the queues as the announcement is in prepare_wait, so we see its task.
void Engine::leave_wait() {
  std::uint64_t s = idle_.load(std::memory_order_relaxed);
#if WEFT_TSAN
  while (!idle_.compare_exchange_weak(s, (s - kWaiter) & ~kWaking, std::memory_order_seq_cst,
                                      std::memory_order_relaxed)) {
  }
#else
  while (!idle_.compare_exchange_weak(s, (s - kWaiter) & ~kWaking, std::memory_order_relaxed,
                                      std::memory_order_relaxed)) {
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void Engine::wake_slow() {
  std::uint64_t s = idle_.load(std::memory_order_relaxed);
  do {
    if ((s & kWaiterMask) == 0 || (s & kWaking)) return;  // nobody waits any more, or a wake-up is on its way
  } while (!idle_.compare_exchange_weak(s, (s | kWaking) + kEpoch, std::memory_order_relaxed,
                                        std::memory_order_relaxed));
  waker_cpu.store(sched_getcpu(), std::memory_order_relaxed);  // (see move_off_wakers_cpu)
  // A waiter that read the old epoch under the mutex is asleep once we get the mutex: the notify reaches it.
  { std::lock_guard<std::mutex> g(sleep_mutex); }
  sleep_cv.notify_one();
}

// Release: a waiter that reads the new epoch (or, in its re-check, after a fence) sees what the caller wrote
// before (running_ or stop_).
void Engine::wake_all() {
  waker_cpu.store(sched_getcpu(), std::memory_order_relaxed);  // (see move_off_wakers_cpu)
  idle_.fetch_add(kEpoch, std::memory_order_seq_cst);
  { std::lock_guard<std::mutex> g(sleep_mutex); }
  sleep_cv.notify_all();
}

// ---------------------------------------------------------------------------------------------------------
// Completion
// ---------------------------------------------------------------------------------------------------------

namespace {
constexpr std::uint32_t kCountBatch = 64;  // completions per batch (Worker::count_batch)
}  // namespace

Task* take_counted(Worker& w) {
  Task* p = w.counted_parent;
  const std::int64_t c = w.counted;
  w.counted_parent = nullptr;
  w.counted = 0;
  const std::int64_t before = p->alive.fetch_sub(c, std::memory_order_acq_rel);
  WEFT_ASSERT(before >= c);  // never more finished children than counted ones
  if (before & kChildWaiter) [[unlikely]]
    wake_child_waiter(w, p);  // (the bit is set only while p's body runs: `before == c` cannot hold then)
  return before == c ? p : nullptr;
}

namespace {

// Counts a finished child of p in the worker's batch; a parent that this completes goes to `todo`.
inline void count_finished_child(Worker& w, Task* p, std::vector<Task*>& todo) {
  if (p == w.counted_parent) {
    if (++w.counted >= w.count_batch)
      if (Task* q = take_counted(w)) todo.push_back(q);
  } else {
    if (w.counted)
      if (Task* q = take_counted(w)) todo.push_back(q);
    w.counted_parent = p;
    w.counted = 1;
  }
}

}  // namespace

// The flag, not only the successors' poison: a successor linked after the list is closed finds t finished and
// reads `cancelled` (the closing exchange publishes it), so it is cancelled whatever the timing.
void fail_with_child_error(Worker& w, Task* t) {
  std::exception_ptr e = take_child_error(w, t);
  t->cancelled.store(true, std::memory_order_relaxed);
  if (t->parent && e) record_error(w, t->parent, std::move(e));
}


// Completes tasks whose body (if any), children and weak nodes are all done; then, transitively, the join
// nodes they ready and the parents whose last child they were. Iterative: no recursion along node chains.
// Order matters: a task's parent is decremented only after every join node it readied has completed, since a
// parent that completes frees its domain, join nodes included (nodes are not counted in `alive`).
void complete(Worker& w, Task* t) {
  std::vector<Task*>& todo = w.completing;
  const std::size_t base = todo.size(), done_base = w.completed_children.size();
  Task* best = nullptr;
  Task* const parent = t->parent;  // read first: once completed, t may be recycled
  WEFT_ASSERT(t->kind->complete);
  const bool owed = t->kind->complete(w, t, best, todo);
  complete_rest(w, owed ? parent : nullptr, best, base, done_base);
}

void complete_rest(Worker& w, Task* owed, Task* best, std::size_t base, std::size_t done_base) {
  std::vector<Task*>& todo = w.completing;
  std::vector<Task*>& done_children = w.completed_children;
  for (;;) {
    if (owed) {
      if (todo.size() == base && done_children.size() == done_base)
        count_finished_child(w, owed, todo);  // no node readied: count it now
      else
        done_children.push_back(owed);  // counted once the nodes readied above have completed
    }
    while (todo.size() == base && done_children.size() > done_base) {
      Task* p = done_children.back();
      done_children.pop_back();
      count_finished_child(w, p, todo);
    }
    if (todo.size() == base) break;
    Task* const t = todo.back();
    todo.pop_back();
    Task* const parent = t->parent;  // read first: once completed, t may be recycled
    WEFT_ASSERT(t->kind->complete);
    owed = t->kind->complete(w, t, best, todo) ? parent : nullptr;
  }
  settle_best(w, best);
}

void publish_children(Task* t) {
  if (t->unpublished) {
    t->alive.fetch_add(t->unpublished, std::memory_order_release);
    t->unpublished = 0;
  }
}

void flush_completions(Worker& w) {
  if (Task* p = take_counted(w)) complete(w, p);
}

namespace {
// One task fewer before w polls the progress sources (see Worker::progress_countdown).
[[gnu::noinline]] void count_down_progress(Worker& w, std::uint32_t n) {
  if (n > 1) {
    w.progress_countdown.store(n - 1, std::memory_order_relaxed);
    return;
  }
  Engine& e = *w.engine;
  w.progress_countdown.store(e.has_progress() ? kProgressPollEvery : 0, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (now - w.last_busy_poll < kProgressPollInterval) return;
  w.last_busy_poll = now;
  e.poll_progress();
}

}  // namespace

namespace {
// run_task's rare cases, out of line so that its common path needs no stack frame (a tail call).
[[gnu::noinline]] void run_task_slow(Worker& w, Task* t) {
  if (const std::uint32_t n = w.progress_countdown.load(std::memory_order_relaxed)) count_down_progress(w, n);
  if (w.counted && t->parent != w.counted_parent) flush_completions(w);
  t->kind->run(w, t);
}
}  // namespace

void run_task(Worker& w, Task* t) {
  WEFT_ASSERT((t->kind->counts_elsewhere || !finished(t)) && t->kind->run);
  // A worker that always finds work in its own queues would never poll: messages (and the MPI requests tasks
  // wait for) would wait for an idle moment: it polls between tasks too (see kProgressPollInterval). And the
  // batched completions of another parent are not kept during a body.
  if (w.progress_countdown.load(std::memory_order_relaxed) != 0 || (w.counted && t->parent != w.counted_parent))
      [[unlikely]]
    return run_task_slow(w, t);
  t->kind->run(w, t);
}


// Allocates nothing (the slot is in the descriptor): it runs in exception handlers, also for std::bad_alloc.
bool store_error(Engine& e, Task* parent, std::exception_ptr& x) noexcept {
  std::lock_guard<std::mutex> g(e.error_mutex);
  if (parent->has_error.load(std::memory_order_relaxed)) return false;
  parent->error = std::move(x);
  parent->has_error.store(true, std::memory_order_release);  // pairs with the acquire in take_child_error
  return true;
}

void record_error(Worker& w, Task* parent, std::exception_ptr e) noexcept {
  if (!store_error(*w.engine, parent, e)) ++w.counters.exceptions_dropped;
}

std::exception_ptr take_child_error(Worker& w, Task* t) noexcept {
  if (!t->has_error.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> g(w.engine->error_mutex);
  std::exception_ptr e = std::move(t->error);
  t->error = nullptr;
  t->has_error.store(false, std::memory_order_relaxed);
  return e;
}

void rethrow_child_error(Worker& w, Task* t) {
  if (std::exception_ptr e = take_child_error(w, t)) std::rethrow_exception(e);
}

// ---------------------------------------------------------------------------------------------------------
// Completion events (weft::Event)
// ---------------------------------------------------------------------------------------------------------
// An unfulfilled event is a unit (kEventUnit) of its task's `alive`, above the children (so waits and
// throttling, which read the children's bits, ignore it): Context::event adds it (relaxed: the body's guard
// keeps the task from completing meanwhile, and the handle reaches other threads only through a
// synchronisation of the program's own), fulfill_event takes it back. Whoever brings `alive` to zero completes
// the task, as for the body's end, a child's completion or a weak node's (end_body, take_counted,
// complete_weak): a task that never takes an event pays nothing.
//
// A foreign thread (no worker of this engine, or the communication thread, which must not complete tasks) that
// brings the count to zero has no worker to complete the task with: it pushes the task to the engine's inbox and
// wakes a worker. Workers look at the inbox when their own queues are empty (find_queued_work), and the idle
// loop's re-check sees it, so a worker about to sleep either sees the task or is woken by the push's wake_one
// (the same store-buffer protocol as a queue push, see Engine::idle_).

void Engine::inbox_push(Task* t) noexcept {
  Task* head = inbox_.load(std::memory_order_relaxed);
  do {
    t->edges[0].succ = head;  // t has run: no predecessor reads its edges any more
  } while (!inbox_.compare_exchange_weak(head, t, std::memory_order_release, std::memory_order_relaxed));
}

bool drain_inbox(Worker& w) {
  Task* t = w.engine->inbox_take();
  if (!t) return false;
  while (t) {
    Task* const nx = t->edges[0].succ;  // before completing: t may be recycled then
    complete(w, t);
    t = nx;
  }
  return true;
}

namespace {
// One event fewer held by a child of t's parent (see held_events): before t's unit is returned, while t (and so
// its parent) cannot complete. Relaxed: throttling reads it as a hint.
void release_held_event(Task* t) {
  if (Task* p = t->parent) held_events(p).fetch_sub(1, std::memory_order_relaxed);
}
}  // namespace

void fulfill_event(Engine& e, Task* t, std::exception_ptr error) noexcept {
  Worker* const w = tls_worker;
  // The error goes to t's own slot, as a child's would: when t completes it fails with it (fail_with_child_error:
  // its successors are cancelled and its parent gets it), unless its body's own exception reached the parent
  // first. Recorded before the unit is returned (the completer reads it after acquiring the count).
  if (w && w->engine == &e && !w->progress_only) {
    if (error && !store_error(e, t, error)) ++w->counters.exceptions_dropped;
    release_held_event(t);
    // acq_rel: the release publishes what this thread did before fulfilling (the results of the operation the
    // event stood for) to whoever completes t; the acquire, if this completes t, what its body and children did.
    const std::int64_t before = t->alive.fetch_sub(kEventUnit, std::memory_order_acq_rel);
    WEFT_ASSERT((before & kUnitsMask) != 0);
    if (before & kChildWaiter) [[unlikely]]
      wake_child_waiter(*w, t);  // the root of a run waiting for its own events (run_root)
    if (before != kEventUnit) return;
    complete(*w, t);
    // Fulfilled from inside a body (or a poll): what that completion produced must not wait for the body to
    // end: the batched count of finished children (a parent's taskwait may be waiting for it) and the immediate
    // successor (queued where any worker can take it).
    while (w->counted) flush_completions(*w);
    if (Task* n = w->next) {
      w->next = nullptr;
      schedule(*w, n);
    }
    return;
  }
  // seq_cst, before anything else touches t or the engine: see Engine::outside_users (run_root reads it).
  e.outside_users.fetch_add(1, std::memory_order_seq_cst);
  if (error && !store_error(e, t, error)) e.outside_exceptions_dropped.fetch_add(1, std::memory_order_relaxed);
  release_held_event(t);
  const std::int64_t before = t->alive.fetch_sub(kEventUnit, std::memory_order_acq_rel);  // as above
  WEFT_ASSERT((before & kUnitsMask) != 0);
  if (before & kChildWaiter) [[unlikely]]
    e.wake_all();
  if (before == kEventUnit) {
    e.inbox_push(t);  // release: the worker that takes it acquires what we acquired from the count
    e.wake_one();     // after the push (its fence orders the push before the read of the sleepers)
  }
  // release: our accesses to the engine happen before run_root's acquiring read of a zero.
  e.outside_users.fetch_sub(1, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------------------
// Waiting for children
// ---------------------------------------------------------------------------------------------------------

namespace {
// Children that hold completion events wait for something outside the engine, which may well be a task the
// producer has yet to spawn (a receive whose send comes later), and so may their successors: they are not
// counted (held_events), and while any is held the producer stops waiting as soon as it finds nothing to
// run (after a poll of the progress sources), or it could wait for them forever.
std::int64_t counted_children(const Worker& w, Task* p) {
  return unfinished_children(w, p) - held_events(p).load(std::memory_order_relaxed);
}

// Runs tasks instead of spawning until half the bound remains: wait_until's loop, which also ends when it finds
// nothing to run while children hold events.
void throttle_loop(Worker& w, Task* p, std::int64_t limit) {
  ++w.counters.throttle_stalls;
  trace::on_runtime(w);
  struct Check {
    Worker& w;
    Task* p;
    std::int64_t half;
    bool operator()() const {
      return counted_children(w, p) <= half ||
             held_events(p).load(std::memory_order_relaxed) > 0;  // the loop decides (re-check before a sleep)
    }
  } const check{w, p, limit / 2};
  const WaitCondition cond{[](const void* c) { return (*static_cast<const Check*>(c))(); }, &check, p};
  WaitingScope waiting(w, nullptr);  // (for fewer children, not for none)
  while (counted_children(w, p) > limit / 2) {
    if (Task* t = find_work(w)) {
      w.idle_rounds = 0;
      run_task(w, t);
    } else if (held_events(p).load(std::memory_order_relaxed) > 0) {
      break;  // stuck: spawn on
    } else {
      idle_backoff(w, &cond);
    }
  }
  w.idle_rounds = 0;
  if (Task* t = w.next) [[unlikely]] {  // see wait_until
    w.next = nullptr;
    schedule(w, t);
  }
}

// Throttling's slow path (throttle_check): p has max_tasks unfinished children as far as this worker knows.
void throttle_wait(Worker& w, Task* p) {
  const std::int64_t limit = static_cast<std::int64_t>(w.engine->options.max_tasks);
  publish_children(p);
  if (counted_children(w, p) < limit) return;
  if (w.lfq) [[unlikely]] {
    LfqWaitScope nested(w, p);
    throttle_loop(w, p, limit);
    return;
  }
  throttle_loop(w, p, limit);
}
}  // namespace

void throttle_check(Worker& w, Task* p) {
  const std::int64_t limit = static_cast<std::int64_t>(w.engine->options.max_tasks);
  std::int64_t n = unfinished_children(w, p) + p->unpublished;
  if (n >= limit) {
    throttle_wait(w, p);
    n = unfinished_children(w, p) + p->unpublished;
  }
  // This spawn makes n + 1; the spawns after it may go on without a reading until the limit.
  w.throttle_parent = p;
  w.throttle_room = n + 1 < limit ? static_cast<std::uint32_t>(limit - n - 1) : 0;
}

void wait_for_children(Worker& w, Task* p) {
  publish_children(p);
  wait_until(w, [&] { return unfinished_children(w, p) == 0; }, p);
}

// ---------------------------------------------------------------------------------------------------------
// Detached tasks (the flow front end; see detail/task.hpp)
// ---------------------------------------------------------------------------------------------------------

namespace {

constexpr std::uint32_t kReorderMax = 16;  // bounds the work below; beyond, later sends keep LIFO order

[[gnu::noinline]] void first_sent_on_top(Worker& w) {
  const std::uint32_t n = std::exchange(w.detached_queued, 0);
  if (n < 2 || w.lfq) return;  // (Scheduler::lfq: no deque to reorder; its buffer takes the newest first)
  Task* top[kReorderMax];
  std::uint32_t k = 0;
  while (k < n && k < kReorderMax) {
    Task* q = w.deque.pop();
    if (!q) break;
    top[k++] = q;
  }
  for (std::uint32_t i = 0; i < k; ++i) w.deque.push(top[i]);  // popped last first: pushed back first last
}

void run_detached(Worker& w, Task* t);
constexpr TaskKind kDetachedTask{"detached", false, true, &run_detached, nullptr, nullptr, nullptr, nullptr, nullptr};

// A detached task has no children and no successor list: it completes when its body returns; it is counted in
// its anchor and its descriptor is recycled at once. kFast: w traces nothing and its wait lets a chain of the
// anchor's tasks run (run_detached tests both once: neither changes along the chain).
template <bool kFast>
void run_detached_chain(Worker& w, Task* t) {
  for (;;) {
    run_body<!kFast>(w, t);
    // The body's sends went to the deque, where other workers could take them while it ran; the first of them
    // runs next here, as an immediate successor would (LIFO would run the last first: a body that sends its
    // results, then its own continuation, would pile up its results). Reverse what is left of them on top.
    if (w.detached_queued) [[unlikely]]  // never on a single worker (the slot is used)
      first_sent_on_top(w);
    Task* const anchor = t->parent;
    free_task(w, t);
    // A chain of sends on one worker runs here without going back to the worker's loop after each.
    if (count_child_in_batch(w, anchor)) [[likely]] {
      t = take_chained<kFast, /*kBatchIsParents=*/true>(w, &kDetachedTask, anchor);
    } else {
      std::vector<Task*>& todo = w.completing;
      const std::size_t base = todo.size();
      count_finished_child(w, anchor, todo);
      if (todo.size() != base) {  // that completed a parent (the anchor, or the one counted before it)
        Task* p = todo.back();
        todo.pop_back();
        complete(w, p);
        return;  // (the anchor may be gone)
      }
      t = take_chained<kFast>(w, &kDetachedTask, anchor);
    }
    if (!t) return;
  }
}
void run_detached(Worker& w, Task* t) {
  if (!w.trace && !wait_blocks_chain(w, t->parent)) [[likely]]
    return run_detached_chain<true>(w, t);
  run_detached_chain<false>(w, t);
}

}  // namespace

Task* detached_allocate(const char* label, std::int32_t priority) {
  Worker& w = *tls_worker;
  Task* t = w.allocate();
  init_task(w, t, nullptr, &kDetachedTask);  // the anchor is set when it is submitted: it may wait across runs
  t->label = label;
  t->priority = priority;
  return t;
}

namespace {
thread_local unsigned tls_send_throttle_depth = 0;  // throttled sends nested on this thread's stack
constexpr unsigned kMaxSendThrottleDepth = 32;       // beyond, sends are not throttled (bounds the stack)

// Throttling of sends (as of spawns, Options::max_tasks): the anchor has that many submitted, unfinished tasks.
// The sender runs queued tasks until half as many remain, or until it finds none to run: it never waits, since
// what it would wait for may be a task suspended below it on this very stack (another throttled sender).
[[gnu::noinline]] void throttle_sends(Worker& w, Task* a, std::int64_t limit) {
  ++w.counters.throttle_stalls;
  trace::on_runtime(w);
  ++tls_send_throttle_depth;
  // The sends counted so far for the reordering at the end of the body (run_detached) may be run here: forget
  // them (that reordering only chooses which task runs first).
  w.detached_queued = 0;
  WaitingScope waiting(w, nullptr);
  while (unfinished_children(w, a) > limit / 2) {
    Task* t = find_work(w);
    if (!t) break;
    run_task(w, t);
  }
  w.detached_queued = 0;
  --tls_send_throttle_depth;
}

// detached_submit's count of a new child of `a` when w holds none of a's credits (count_new_child takes some):
// the throttle is tested then, about once per credit_batch(w) sends, so the bound is max_tasks +
// credit_batch(w) per worker. (Not on the communication thread, which must not run tasks: it delivers what
// other ranks sent.)
[[gnu::noinline]] void count_send_taking_credits(Worker& w, Task* a) {
  if (tls_send_throttle_depth < kMaxSendThrottleDepth && !w.progress_only) {
    const auto limit = static_cast<std::int64_t>(w.engine->options.max_tasks);
    if (unfinished_children(w, a) >= limit) throttle_sends(w, a, limit);
  }
  count_new_child(w, a);
}
}  // namespace

void detached_submit(Task* t, Task* anchor) {
  Worker& w = *tls_worker;
  Task* const a = anchor;
  t->parent = a;
  // `a` cannot complete meanwhile: t's sender is one of its children, or its body.
  if (!spend_held_credit(w, a)) [[unlikely]]
    count_send_taking_credits(w, a);
  ++w.counters.tasks_created;
  // A task submitted while a body runs must be stealable: the body may go on computing for long after it
  // (send-then-compute), and the private immediate-successor slot would hold the task until it returns. With
  // other workers, queue it: the worker's own queue is popped LIFO after the body, so it still runs next here
  // unless another worker took it meanwhile. Alone, the slot cannot delay anyone: the highest-priority task
  // submitted so far waits there.
  if (w.sends_to_slot && !queued_above</*kLfqOff=*/true>(w, t->priority) &&
      (!w.next || t->priority > w.next->priority)) {
    if (w.next) schedule(w, w.next);
    w.next = t;
  } else {
    if (t->priority == 0) ++w.detached_queued;  // reordered when the body ends (run_detached)
    schedule(w, t);
  }
}

void detached_discard(Task* t) { free_task(*tls_worker, t); }

const char* intern_label(const char* name) {
  static std::mutex m;
  static std::unordered_set<std::string>* names = new std::unordered_set<std::string>;  // never freed: labels
                                                                                       // outlive every Runtime
  std::lock_guard<std::mutex> g(m);
  return names->insert(name).first->c_str();  // node-based: the string never moves
}

unsigned current_worker_index() noexcept { return tls_worker ? tls_worker->id : kNotAWorker; }

const void* current_engine() noexcept { return tls_worker ? tls_worker->engine : nullptr; }

void* allocate_large_body(std::size_t bytes, std::size_t align) {
  return ::operator new(bytes, std::align_val_t{align});
}
void free_large_body(void* p, std::size_t, std::size_t align) { ::operator delete(p, std::align_val_t{align}); }

// ---------------------------------------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------------------------------------

namespace {
// CommThread::automatic: does this process have a core for a communication thread, beside its workers? Only in
// a job of several processes (one process has nothing to communicate). A CPU mask smaller than the machine is
// this process's own (a launcher that binds its ranks); the machine's whole mask is shared with the job's other
// processes on this node, as the launcher counts them (unknown: no core is spare).
bool spare_core(unsigned workers) {
  const ProcessRank job = process_rank();
  if (!job.several()) return false;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return false;
  const long cores = CPU_COUNT(&mask);
  long sharing = 1;
  if (cores >= sysconf(_SC_NPROCESSORS_ONLN)) {
    if (job.local_size < 1) return false;
    sharing = job.local_size;
  }
  return cores >= sharing * (static_cast<long>(workers) + 1);
}
}  // namespace

Engine::Engine(const Options& o) : options(o) {
  options.validate();
  // Completions are counted in per-worker batches of 64 (Options::local_counts off: a batch of one, an atomic
  // per child). With many workers the batches hide more finished children than max_tasks from a producer's
  // throttle check; bounding them by the window was tried and measured: no gain for a producer on 16 workers
  // (where a larger window did not help either), and its smaller credits made a flow tree 3-6x slower there.
  const std::uint32_t batch = options.local_counts ? kCountBatch : 1;
  // Idle workers poll the others' queues every four pauses with two workers, and much less often each the
  // more there are: 4 (n - 1)^3 pauses, at most 1024 (reached at 8 workers). Each poll reads the victims'
  // queue lines, and every push of a producer that n - 1 thieves poll must win its lines back from them: on a
  // 16-core machine, with 1024 pauses instead of 64, a producer of independent tasks ran 1.5x faster and
  // Task Bench's stencil at fine grain 1.4x (BENCHMARKS.md, 38). A pushed task waits little longer: the
  // n - 1 thieves' polls of one victim come n - 1 times as often as each one's. Two workers keep a short
  // round: one thief polling every 1024 pauses doubled the time of a stencil of 16 us tasks.
  // Options::idle_pauses sets it.
  const std::uint64_t others = options.num_threads - 1;
  idle_pauses = options.idle_pauses != 0
                    ? options.idle_pauses
                    : static_cast<unsigned>(std::clamp<std::uint64_t>(4 * others * others * others, 4, 1024));
  idle_spin_rounds = std::max(1u, 4096 * 4 / idle_pauses);
  slice_rounds = std::max(2u, 256 / idle_pauses);
  for (unsigned i = 0; i < options.num_threads; ++i) {
    workers.push_back(std::make_unique<Worker>(*this, i));
    workers.back()->immediate_successor = options.immediate_successor;
    workers.back()->count_batch = batch;
  }
  if (options.comm_thread == CommThread::on ||
      (options.comm_thread == CommThread::automatic && spare_core(options.num_threads))) {
    workers.push_back(std::make_unique<Worker>(*this, options.num_threads));
    progress_worker = workers.back().get();
    progress_worker->progress_only = true;
    progress_worker->immediate_successor = false;  // its ready tasks are for the others: always queued
  }
  if (options.scheduler == Scheduler::lfq) {
    // PaRSEC sizes each buffer 4 x the cores of the process (sched_lfq): small, so that most tasks of a program
    // with more ready tasks than that go through the shared FIFO, which is what the comparison is about.
    const std::size_t slots = options.lfq_buffer ? options.lfq_buffer : 4 * std::size_t{options.num_threads};
    for (auto& w : workers) {
      w->lfq = true;
      w->lfq_buffer.reset(slots);
    }
  }
  workers[0]->sends_to_slot = workers.size() == 1 && workers[0]->immediate_successor && !workers[0]->lfq;
  if (options.profile.active()) {
    recorder = std::make_unique<trace::Recorder>(*this, options.profile, options.num_threads);
    for (unsigned i = 0; i < options.num_threads; ++i) workers[i]->trace = &recorder->log(i);
  }
  {
    cpu_set_t mask;
    moves_off_wakers_cpu = !options.bind_to_cores && options.num_threads >= 2 &&
                           sched_getaffinity(0, sizeof mask, &mask) == 0 &&
                           CPU_COUNT(&mask) >= static_cast<int>(options.num_threads);
  }
  waker_cpu.store(sched_getcpu(), std::memory_order_relaxed);  // the creator (see move_off_wakers_cpu)
  for (unsigned i = 1; i < options.num_threads; ++i) threads_.emplace_back([this, i] { worker_main(i); });
  if (progress_worker) progress_thread_ = std::thread([this] { progress_main(); });
  if (options.watchdog_seconds > 0) watchdog_thread_ = std::thread([this] { watchdog_main(); });
}

// The watchdog of a run (Options::watchdog_seconds): it ends the process when, for that long, every worker has
// been waiting for work (announced in `idle_`) while a run is in progress, and nothing has woken any of them
// (the epoch of `idle_` has not moved): nothing is left to run and only something outside the workers (an
// Event's fulfil, or a foreign thread) could end the run. A worker in a long task is not waiting, so a long
// task never trips it. Not while a progress source is attached (a flow graph's fence, a cluster's run, MPI
// requests in flight): those fronts watch their runs themselves, messages counting as progress. Sampled four
// times per limit (at most once a second): a worker that wakes and sleeps again between two samples moved the
// epoch (any wake-up does), so it restarts the count.
void Engine::watchdog_main() {
  using clock = std::chrono::steady_clock;
  const double limit = options.watchdog_seconds;
  const auto period = std::chrono::duration<double>(std::min(1.0, limit / 4));
  bool stalled = false;
  std::uint64_t epoch = 0;
  clock::time_point since{};
  std::unique_lock<std::mutex> lk(watchdog_mutex_);
  while (!watchdog_cv_.wait_for(lk, period, [&] { return watchdog_stop_; })) {
    const std::uint64_t s = idle_.load(std::memory_order_seq_cst);
    const bool all_wait = running_.load(std::memory_order_seq_cst) && attached_.load(std::memory_order_seq_cst) == 0 &&
                          (s & kWaiterMask) >= options.num_threads && !inbox_nonempty();
    if (!all_wait) {
      stalled = false;
    } else if (!stalled || s / kEpoch != epoch) {
      stalled = true;
      epoch = s / kEpoch;
      since = clock::now();
    } else if (std::chrono::duration<double>(clock::now() - since).count() >= limit) {
      watchdog_fire();
    }
  }
}

void Engine::watchdog_fire() {
  // The root stays a descriptor of worker 0's pool even if the run ended meanwhile (only a foreign thread could
  // end it now): its counts are atomics, read at worst stale, never freed memory.
  std::string what = "the run has not ended";
  if (Task* root = run_root_task_.load(std::memory_order_acquire)) {
    const std::int64_t alive = root->alive.load(std::memory_order_acquire);
    const std::int64_t children = static_cast<std::int64_t>(static_cast<std::uint32_t>(alive)) - kAliveGuard;
    const std::int64_t own_events = (alive & kUnitsMask) >> 32;
    const std::int32_t child_events = held_events(root).load(std::memory_order_relaxed);
    what = "the run's function waits for " + std::to_string(children) +
           " of its tasks (each with its descendants); completion events (weft::Event) not fulfilled: " +
           std::to_string(child_events) + " of those tasks' own, " + std::to_string(own_events) +
           " of the function's (events of tasks nested deeper are not counted here)";
  }
  std::fprintf(stderr,
               "weft: watchdog: no worker has had a task to run for %g s (Options::watchdog_seconds, "
               "WEFT_WATCHDOG) and %s. The run waits for an Event that nothing fulfils, for something outside "
               "weft, or for a task with weak accesses that waits (taskwait, or throttling at max_tasks children) "
               "inside a wait for its own weak predecessor (README, Known limits): ending the process.\n",
               options.watchdog_seconds, what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

Engine::Service& Engine::install_service(std::size_t slot, std::unique_ptr<Service> (*make)(Engine&)) {
  std::lock_guard<std::mutex> g(service_mutex_);
  if (Service* s = services_[slot].load(std::memory_order_relaxed)) return *s;
  Service* s = make(*this).release();
  services_[slot].store(s, std::memory_order_release);  // see service()
  return *s;
}

Engine::~Engine() {
  // A Runtime destroyed while a run is in progress (from one of its own tasks, or while another thread is in
  // run()) would free what the workers use: say so and stop, rather than crash somewhere else later.
  const bool own_task = tls_worker && tls_worker->engine == this;
  if (own_task || !run_mutex_.try_lock()) {
    std::fprintf(stderr, "weft: a Runtime was destroyed %s; destroy it only once every run() has returned\n",
                 own_task ? "from inside one of its own tasks" : "while another thread is in its run()");
    std::fflush(stderr);
    std::abort();
  }
  run_mutex_.unlock();
  if (watchdog_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> g(watchdog_mutex_);
      watchdog_stop_ = true;
    }
    watchdog_cv_.notify_all();
    watchdog_thread_.join();
  }
  // Services first: they may detach progress sources, which needs the engine whole.
  for (auto& s : services_) delete s.exchange(nullptr, std::memory_order_acquire);
  stop_.store(true, std::memory_order_release);
  wake_all();  // idle sleepers and workers between runs, and the communication thread
  for (auto& t : threads_) t.join();
  if (progress_thread_.joinable()) progress_thread_.join();
  if (recorder) recorder->finish();
}

namespace {
void bind_to_core(unsigned id) {
  cpu_set_t all;
  if (sched_getaffinity(0, sizeof(all), &all) != 0) return;
  const int count = CPU_COUNT(&all);
  if (count <= 0) return;
  int want = static_cast<int>(id % static_cast<unsigned>(count)), seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &all)) continue;
    if (seen++ == want) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      return;
    }
  }
}
}  // namespace

// Between runs a worker polls for the next one as an idle worker polls for work (idle_round) before it
// sleeps: a program that calls run() back to back (a loop of time steps, a benchmark's repetitions) finds its
// workers awake, without a wake-up per run (BENCHMARKS.md, 42). True if a run began or the engine stops.
bool Engine::await_next_run(Worker& w) {
  for (unsigned r = 1;; ++r) {
    if (stop_.load(std::memory_order_relaxed) || running_.load(std::memory_order_relaxed)) {
      w.idle_rounds = 0;
      return true;  // (the caller's loop reads running_ again, with acquire)
    }
    if (!idle_round(r)) return false;
  }
}

void Engine::worker_main(unsigned id) {
  Worker& w = *workers[id];
  tls_worker = &w;
  if (options.bind_to_cores) bind_to_core(id);
  move_off_wakers_cpu(w);
  while (!stop_.load(std::memory_order_acquire)) {
    if (!running_.load(std::memory_order_acquire)) {
      if (w.trace) [[unlikely]]
        trace::leave_run(*w.trace);
      if (await_next_run(w)) continue;
      std::unique_lock<std::mutex> lk(sleep_mutex);
      sleep_cv.wait(lk, [&] {
        return stop_.load(std::memory_order_relaxed) || running_.load(std::memory_order_relaxed);
      });
      lk.unlock();
      w.idle_rounds = 0;  // a new run: poll before sleeping (the last run may have left us in the sleep phase)
      move_off_wakers_cpu(w);
      continue;
    }
    if (w.trace) [[unlikely]]
      if (!trace::enter_run(*w.trace, running_)) continue;  // the run ended meanwhile
    if (Task* t = find_work(w)) {
      w.idle_rounds = 0;
      run_task(w, t);
    } else {
      idle_backoff(w);
    }
  }
  if (w.trace) [[unlikely]]
    trace::leave_run(*w.trace);
  tls_worker = nullptr;
}

void Engine::run_root(const TaskKind* kind, void (*call)(void*, Context&), void* arg) {
  if (tls_worker) throw std::logic_error("weft: Runtime::run called from inside a task (use Context::spawn)");
  std::lock_guard<std::mutex> serial(run_mutex_);
  Worker& w = *workers[0];
  Task* root = w.allocate();  // first: if it throws (no memory) the runtime is left as it was
  tls_worker = &w;
  // The caller is worker 0 for the run; with WEFT_BIND=cores it is pinned for the run only.
  cpu_set_t caller_affinity;
  const bool rebind = options.bind_to_cores && sched_getaffinity(0, sizeof(caller_affinity), &caller_affinity) == 0;
  if (rebind) bind_to_core(0);
  if (recorder) recorder->begin_run(w);
  waker_cpu.store(sched_getcpu(), std::memory_order_relaxed);  // (see move_off_wakers_cpu)
  {
    std::lock_guard<std::mutex> g(sleep_mutex);
    running_.store(true, std::memory_order_release);
  }
  sleep_cv.notify_all();

  init_task(w, root, nullptr, kind);
  run_root_task_.store(root, std::memory_order_release);  // (the watchdog's report)
  trace::on_node(w, root);
  std::exception_ptr body_error;
  {
    Context cx = ContextAccess::make(root, &w);
    trace::on_body_begin(w, root);
    try {
      call(arg, cx);
    } catch (...) {
      body_error = std::current_exception();
    }
    trace::on_body_end(w, root);
  }
  // Implicit taskwait: every task of the run descends from the root.
  wait_for_children(w, root);
  // Events the root itself took (Context::event in the run's function): the run ends once they are fulfilled
  // too. Watched: a fulfil that sees kChildWaiter wakes us (fulfill_event).
  if (root->alive.load(std::memory_order_acquire) & kUnitsMask) [[unlikely]]
    wait_until(w, [&] { return (root->alive.load(std::memory_order_acquire) & kUnitsMask) == 0; }, root);
  if (w.counted) flush_completions(w);
  // The root completes as any task of its kind (which frees what it keeps for its children); it has no
  // successor and no parent. Its children's exception is taken first: it is rethrown from run().
  std::exception_ptr child_error = take_child_error(w, root);
  {
    Task* best = nullptr;
    kind->complete(w, root, best, w.completing);
    WEFT_ASSERT(!best && w.completing.empty());
  }
  run_root_task_.store(nullptr, std::memory_order_relaxed);
  free_task(w, root);
  // A foreign thread that fulfilled an event of this run may still be on its way out of the engine (its inbox
  // push and wake-up): the Runtime must not be destroyed under it. Its announcement happens before the last
  // completions of the run (see Engine::outside_users), so we see it here.
  while (outside_users.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  // seq_cst: without fences (a TSan build), the recorder's end_run relies on it (trace::enter_run).
  running_.store(false, std::memory_order_seq_cst);
  wake_all();  // workers asleep in the run's idle loop leave it (the recorder's end_run waits for them)
  if (recorder) recorder->end_run(w);
  tls_worker = nullptr;
  if (rebind) sched_setaffinity(0, sizeof(caller_affinity), &caller_affinity);
  if (body_error) std::rethrow_exception(body_error);
  if (child_error) std::rethrow_exception(child_error);
}

}  // namespace weft::detail

// ---------------------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------------------

namespace weft {

Runtime::Runtime() {
  try {
    engine_ = std::make_unique<detail::Engine>(Options::from_environment());
  } catch (const config_error& e) {  // also a profile / trace file that cannot be created
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(2);
  }
  if (engine_->options.cluster) detail::start_cluster(*engine_);  // collective across the job's processes
}

Runtime::Runtime(const Options& options) : engine_(std::make_unique<detail::Engine>(options)) {
  if (options.cluster) detail::start_cluster(*engine_);
}
Runtime::~Runtime() = default;

unsigned Runtime::num_workers() const { return engine_->options.num_threads; }
const Options& Runtime::options() const { return engine_->options; }

Stats Runtime::stats() const {
  std::vector<detail::Counters> c;
  for (auto& wp : engine_->workers) c.push_back(wp->counters);
  Stats s = detail::sum_stats(c.data(), c.size());
  s.exceptions_dropped += engine_->outside_exceptions_dropped.load(std::memory_order_relaxed);
  return s;
}

void Event::fulfill() {
  if (!task_) throw std::logic_error("weft::Event::fulfill: the handle holds no event (fulfilled already, moved from, or empty)");
  detail::fulfill_event(*engine_, std::exchange(task_, nullptr), nullptr);
}

void Event::fail(std::exception_ptr error) {
  if (!task_) throw std::logic_error("weft::Event::fail: the handle holds no event (fulfilled already, moved from, or empty)");
  if (!error) throw std::logic_error("weft::Event::fail: null exception_ptr");
  detail::fulfill_event(*engine_, std::exchange(task_, nullptr), std::move(error));
}

void Event::abandon() noexcept {
  detail::fulfill_event(
      *engine_, std::exchange(task_, nullptr),
      std::make_exception_ptr(std::logic_error("weft::Event destroyed without being fulfilled (its task fails)")));
}

ClusterStats Runtime::cluster_stats() const { return detail::cluster_stats(*engine_); }

Profile Runtime::profile() const { return engine_->recorder ? engine_->recorder->last_profile() : Profile{}; }

void Runtime::reset_stats() {
  for (auto& wp : engine_->workers) wp->counters = detail::Counters{};
  engine_->outside_exceptions_dropped.store(0, std::memory_order_relaxed);
}

}  // namespace weft
