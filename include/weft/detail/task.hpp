// weft internal: the task descriptor shared by the templated front end and the compiled engine.
// Not part of the public API; layout may change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>

namespace weft {
class Context;
namespace detail {

struct Task;
struct Domain;
struct Worker;
struct CommLock;
struct WeakLink;
struct IterNode;

/// One dependency edge, stored in the *successor* (so a predecessor's list never outlives the nodes in it).
struct EdgeNode {
  Task* succ;
  EdgeNode* next;
};

/// A task's successor list head: a pointer to the first EdgeNode, or kClosed once the task has completed
/// (after which no edge can be added and the descriptor may be recycled by the domain that owns it).
inline constexpr std::uintptr_t kClosed = 1;

enum TaskFlags : std::uint8_t {
  kNode = 1,         ///< internal join node: no body, completes as soon as its predecessors have
  kWeakNode = 2,     ///< a node standing for a weak access of its parent (owned by the parent, not a domain)
  kHasComm = 4,      ///< holds commutative locks
  kDetached = 8,     ///< a flow task (see below): no successor list, no children; freed when it completes
  kPersistent = 16,  ///< a vertex of a taskiter graph: runs once per iteration, body kept (src/iter)
  kRecorder = 32,    ///< the private task of a taskiter's recording Context: its spawns are recorded
};

inline constexpr std::size_t kInlineBody = 48;  // the descriptor's last cache line also holds trace_tag and the taskiter link
inline constexpr std::size_t kInlineEdges = 2;

struct alignas(64) Task {
  // --- written concurrently (by predecessors / children / the finishing worker) ---
  std::atomic<std::uintptr_t> succ_head;  ///< EdgeNode* or kClosed
  std::atomic<std::int32_t> pending;      ///< unfinished predecessors
  std::atomic<bool> cancelled;            ///< failed, or a predecessor failed (then the body is skipped)
  std::uint8_t flags;                     ///< TaskFlags; fixed once the task is visible to other threads
  std::uint16_t owner;                    ///< worker whose pool holds this descriptor
  /// (weak nodes not done) << 32  +  kAliveGuard (while the body runs)  +  published children - finished children.
  std::atomic<std::int64_t> alive;

  // --- set once at spawn ---
  Task* parent;
  std::int32_t priority;
  std::uint32_t trace_id;                 ///< profiling / tracing only: id in the trace (wraps after 2^32)
  const char* label;
  void (*invoke)(Task*, Context&);        ///< runs and destroys the body; null for internal nodes
  void (*destroy)(Task*);                 ///< destroys the body without running it

  // --- owned by the thread that runs this task's body (its children's producer) ---
  std::uint32_t unpublished;              ///< children spawned but not yet added to `alive`
  std::uint32_t retired_count;
  Task* retired_head;                     ///< children no longer named by any record, oldest first
  Task* retired_tail;
  Domain* domain;                         ///< children's dependency records (lazily created)
  WeakLink* weak;                         ///< links for children to this task's weak accesses (rare)
  CommLock** comm;                        ///< commutative locks to hold while running (rare)
  std::exception_ptr error;               ///< first exception of a child, until rethrown (rare; has_error)

  // --- owned by the producer that spawned this task (the parent's body thread) ---
  std::int32_t record_refs;               ///< records of the parent's domain that name this task
  std::uint32_t n_edges;                  ///< predecessors linked (edge nodes in use: inline, then `extra_edges`)
  Task* mark;                             ///< last successor linked to this task (duplicate-edge test)
  Task* retired_next;
  EdgeNode* extra_edges;                  ///< edge nodes for tasks with > kInlineEdges predecessors
  std::uint8_t n_comm;
  std::uint8_t n_weak;
  /// `error` holds an exception (set under the engine's error mutex, release; tested with acquire). In place,
  /// so that recording a child's exception allocates nothing.
  std::atomic<bool> has_error;
  std::uint32_t joined;                   ///< join nodes: members joined (for Stats::edges_saved_inoutset)

  /// Edge nodes of the predecessors linked to this task (inline, then `extra_edges`). Once `pending` has reached
  /// zero no predecessor reads them again, so a ready task parked on a busy commutative lock links the lock's
  /// wait list through edges[0].succ.
  EdgeNode edges[kInlineEdges];
  alignas(16) unsigned char body[kInlineBody];
  std::uint64_t trace_tag;                ///< tracing only: iteration, key, ... (see src/trace/hooks.hpp)
  IterNode* iter;                         ///< kPersistent: its taskiter vertex (null in the free state)
};

inline constexpr std::int64_t kAliveGuard = std::int64_t{1} << 30;
inline constexpr std::int64_t kWeakUnit = std::int64_t{1} << 32;
static_assert(sizeof(Task) == 256, "the inline body fills the descriptor's last cache line");

// --- Detached tasks: the entry points of the flow front end (weft/flow.hpp) -------------------------------
// A detached task is counted as an unfinished child of an anchor task (the root of the Runtime::run that
// executes a flow graph), so the anchor's wait covers it and its exception goes to the anchor, but it is
// not named by any dependency record: it has no successor list, and its descriptor returns to its pool as
// soon as it completes. Its anchor is the one of the run that submits it, not of the run that allocated it: a
// task may wait for its inputs across runs (whose roots are different descriptors). Before it is submitted
// the front end may use these fields freely: `mark` (link in a keyed task table), `n_edges` (hash bits) and
// `pending` (inputs still missing). All entry points must be called on a worker of the runtime, inside a
// run.

/// A descriptor from the calling worker's pool, initialised as a detached task (no anchor yet); the caller
/// installs the body (invoke/destroy, body[]) and then either submits or discards it.
Task* detached_allocate(const char* label, std::int32_t priority);
/// A copy of `name` that lives as long as the process (one per distinct name): labels of tasks whose names
/// belong to front-end objects, since profiles and traces read labels after those objects may be gone.
const char* intern_label(const char* name);
/// t is ready. Makes it a child of `anchor` (the root of the current run), counts it in the anchor's unfinished
/// children (from a per-worker credit, so that usually no atomic operation on the anchor is needed) and queues
/// it where other workers can take it while the submitting body still runs (the worker pops its own queue LIFO
/// after the body). On a single worker, the first task a running task submits becomes its immediate successor
/// instead (it runs next, unless a queued task has higher priority).
void detached_submit(Task* t, Task* anchor);
/// Returns a descriptor that was allocated but never submitted (its body already destroyed), possibly in an
/// earlier run.
void detached_discard(Task* t);
/// Index of the calling worker (0 .. workers-1), or kNotAWorker for a thread that is not running a task.
inline constexpr unsigned kNotAWorker = ~0u;
unsigned current_worker_index() noexcept;
/// Identifies the runtime whose worker the calling thread is (nullptr for a thread that is not running a task).
const void* current_engine() noexcept;

}  // namespace detail
}  // namespace weft
