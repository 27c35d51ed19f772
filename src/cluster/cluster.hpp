// A cluster: one program's dependency tasks on the processes of an MPI job (weft/cluster.hpp). See cluster.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "weft/cluster.hpp"
#include "weft/tasks.hpp"

namespace weft::detail {

class Engine;

/// Starts the cluster of a Runtime whose Options::cluster is set (the Runtime's constructor; collective in a
/// job of several processes). In a job of one process it only reserves nothing and returns.
void start_cluster(Engine& e);
/// Runtime::run on a cluster of several processes (returns true), or false when the engine has none (the caller
/// runs as usual).
bool cluster_run(Engine& e, void (*call)(void*, Context&), void* arg);
/// The counters of e's cluster (zero without one).
ClusterStats cluster_stats(const Engine& e);

/// Where the latest version of a datum is: the processes that hold it (or are about to: a transfer in flight,
/// see Cluster::Incoming), a bit per rank below 63, or one process of any rank ("Holder sets" in cluster.cpp).
using Holders = std::uint64_t;
/// Which version of a datum: the number of writes it has seen (mod 2^32). The writes of a datum are ordered
/// (sequential semantics), each writer knowing the version it replaces, so every process numbers them alike
/// without coordination.
using Version = std::uint32_t;
/// Where the latest version of a datum is, as the children of one task see it: its number and the ranks
/// holding it. The two change together only when a writer ends, which its readers' dependencies order; between
/// writes only `holders` grows (readers that brought a copy).
struct Location {
  std::atomic<Holders> holders{0};
  std::atomic<Version> version{0};
};

/// Whether a datum's cell is in its task's flush list (ClusterTask::touched), and whether a child accessed it
/// since the task's last wait of either kind (the end of rank 0's run brings only those). Owner thread only.
struct FlushMark {
  bool listed = false;
  bool since_wait = false;
};

/// One access of a task of a cluster (see cluster.cpp for who reads and writes which field when).
struct ClusterAccess {
  const void* address = nullptr;
  std::size_t bytes = 0;
  AccessMode mode = AccessMode::in;
  FlushMark touched;                         ///< its cell in the task's flush list (owner thread)
  Location* where = nullptr;                 ///< the parent's location of this datum (null on a received task)
  Location loc;                              ///< the version this task sees, and its children's location of it
  std::atomic<std::uint8_t> weak_state{0};   ///< weak access: kSatisfied | kSent (offloaded), kReleased
  Task* weak_node = nullptr;                 ///< received weak access: the node its children wait on
};

/// On an executor: a task received later that waits here for this one (its access `succ_access` to `address`),
/// linked by its creator to this predecessor (see Cluster::executor_at_spawn). Guarded by Cluster::received_m_.
struct LocalSuccessor {
  Task* succ;
  std::uint32_t succ_access;
  const void* address;
};

/// On an executor: a task on another rank that waits for this one (its access `succ_access` to `address`), which
/// this rank tells directly when this task ends (a link satisfy message: paper 004's satisfiability from the
/// predecessor's rank to the successor's), named by the task's creator in a connect message (see
/// Cluster::executor_at_spawn). Guarded by Cluster::received_m_.
struct RemoteSuccessor {
  int dest;
  std::uint64_t succ_seq;
  std::uint32_t succ_access;
  AccessMode mode;
  const void* address;
  std::size_t bytes;
  /// The creator's view when it linked them: the successor's rank holds version `dest_version` already. No
  /// eager copy of that version then (views elsewhere are partial: the predecessor's rank may not know).
  bool dest_holds;
  std::uint32_t dest_version;
};

/// What a task of a cluster keeps (Task::cluster): its accesses, where its data is, its children's data.
struct ClusterTask {
  enum class Role : std::uint8_t { local, offloaded, received };
  Role role = Role::local;
  bool data_ready = false;   ///< the data of its strong accesses is here (or the task was cancelled)
  bool reading = false;      ///< counted among the readers of its strong in/inout data here (Cluster::readers_)
  int node = -2;             ///< -2: not offloadable; -1: the policy picks; else that rank
  const OffloadOps* ops = nullptr;
  bool sent_at_spawn = false;  ///< offloaded by the spawning thread (Cluster::executor_at_spawn)
  int executor = -1;
  std::uint64_t seq = 0;          ///< offloaded or received: the creator's number for the task message
  int creator = -1;               ///< received: the rank that offloaded it ...
  std::uint64_t creator_id = 0;   ///< ... and its descriptor there (named by the done message)
  std::vector<LocalSuccessor> local_successors;  ///< received: see LocalSuccessor
  std::vector<RemoteSuccessor> remote_successors;  ///< received: see RemoteSuccessor
  std::vector<Task*> watchers;    ///< the nodes that release its weak accesses (Cluster::watch_releases)
  std::atomic<int> missing{0};    ///< transfers it waits for before it runs
  std::uint32_t n_acc = 0;
  std::unique_ptr<ClusterAccess[]> acc;
  /// The cells of data its children access that it did not declare itself (the root's, mostly).
  struct Cell {
    Location loc;
    std::size_t bytes = 0;
    FlushMark touched;
  };
  std::unordered_map<const void*, std::unique_ptr<Cell>> cells;
  /// The cells its children accessed since its last flushing wait (taskwait brings them), each once: address,
  /// cell, its size (a cell of `cells` grows with the largest access), mark.
  struct Touched {
    const void* address;
    Location* cell;
    const std::size_t* bytes;
    FlushMark* mark;
  };
  std::vector<Touched> touched;
  bool ending_run = false;  ///< the root, at the end of rank 0's run: its wait brings only what has since_wait
  std::string error;  ///< received: what its body threw (reported to the creator)
  std::chrono::steady_clock::time_point parked_at{};  ///< when it began to wait for its data (if it did)
};

}  // namespace weft::detail
