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
  kPersistent = 8,   ///< a vertex of a taskiter graph: runs once per iteration, body kept (src/iter)
  kRecorder = 16,    ///< the private task of a taskiter's recording Context: its spawns are recorded
};

inline constexpr std::size_t kInlineBody = 56;
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
  std::atomic<std::exception_ptr*> error; ///< first exception of a child, until rethrown (rare)

  // --- owned by the producer that spawned this task (the parent's body thread) ---
  std::int32_t record_refs;               ///< records of the parent's domain that name this task
  std::uint32_t n_edges;                  ///< predecessors linked (edge nodes in use: inline, then `extra_edges`)
  Task* mark;                             ///< last successor linked to this task (duplicate-edge test)
  Task* retired_next;
  EdgeNode* extra_edges;                  ///< edge nodes for tasks with > kInlineEdges predecessors
  std::uint8_t n_comm;
  std::uint8_t n_weak;
  std::uint32_t joined;                   ///< join nodes: members joined (for Stats::edges_saved_inoutset)

  EdgeNode edges[kInlineEdges];
  alignas(16) unsigned char body[kInlineBody];
  IterNode* iter;                         ///< kPersistent: its taskiter vertex (null in the free state)
};

inline constexpr std::int64_t kAliveGuard = std::int64_t{1} << 30;
inline constexpr std::int64_t kWeakUnit = std::int64_t{1} << 32;

}  // namespace detail
}  // namespace weft
