// weft — one program on many processes (OmpSs-2@Cluster): dependency tasks offloaded to other MPI ranks.
//
//   weft::Options o = weft::Options::from_environment();
//   o.cluster = true;                          // or WEFT_CLUSTER=1
//   weft::Runtime rt(o);                       // collective: every rank constructs it
//   rt.run([&](weft::Context& cx) {            // runs on rank 0; the other ranks serve its tasks
//     double* a = weft::dmalloc<double>(n * nb);               // the same address on every rank
//     for (int b = 0; b < nb; ++b)
//       cx.spawn([=] { init(a + b * n, n); }, weft::out(a + b * n, n), weft::offload);
//     cx.spawn([=] { use(a, n * nb); }, weft::in(a, n * nb));  // here, on rank 0: the blocks come to it
//     cx.taskwait();
//   });
//
// The model
// ---------
// * Launched with `mpirun -np N` and Options::cluster, the N processes form one runtime. Rank 0 calls the
//   function given to Runtime::run; on the other ranks run() calls nothing and serves the tasks offloaded to
//   them until rank 0's run has ended (so every rank calls run() as many times as rank 0 does). With one process
//   (or without mpirun) a cluster Runtime is exactly an ordinary one.
// * A task spawned with weft::offload (the runtime's policy picks the rank: Options::offload_policy) or
//   weft::node(r) may run on another rank; every other task runs where it was spawned. The locality policy
//   picks the rank holding most of the bytes the task accesses, what it updates (inout) counting twice, so that
//   work follows the data it writes; ties stay where the task was spawned. The tasks form one
//   program with sequential semantics: dependencies between tasks on different ranks are honoured as on one
//   process (in, out, inout, weak_in, weak_out, weak_inout, nesting, taskwait, taskwait_on).
// * Data moves only through accesses. Before a task runs, the data its in/inout accesses name is brought to its
//   rank from a rank that holds the latest version (lazily, when the task is ready; or eagerly, with the task,
//   when the offloading rank holds it: Options::eager_transfers; a weak access's data, eagerly, comes with
//   the message that says it is ready). An out access promises that the task writes
//   the whole region: nothing is fetched for it. Results stay where they were written (no write-back) until a
//   task elsewhere or a flushing wait needs them; where each datum is travels with the dependencies.
// * An offloadable task accesses only dmalloc / lmalloc memory (std::invalid_argument otherwise): its data
//   moves to the executing process at the same address. Rank 0's program may initialise freshly allocated
//   memory before any task accesses it, and read between runs what a run flushed to it; otherwise only tasks
//   change the common address space (copies on other ranks stay valid across runs).
// * Full specification: a task must declare every datum it touches (and name a datum always with the same
//   start address and size: regions are identified by their start, as on one process; an access naming a datum
//   with another size than an earlier access of the parent's children, or the parent's own, is refused with
//   std::invalid_argument). A child may only touch what its parent declared (strongly or weakly).
// * Nesting: an offloaded task's children are created on its rank; with weak accesses the parent is offloaded
//   at once, before its data is ready, and spawns its children there while the data is still being produced.
//   A weak access of a task is released on its own, once the body has returned and the children on that datum
//   have ended: later tasks on the datum need not wait for the task's other children (on one process, and for
//   strong accesses, a task's accesses are released when it ends, as weft/tasks.hpp says).
// * Waits: taskwait() brings the data the children accessed since the previous taskwait() to the waiting rank
//   (a taskwait_noflush() in between moves nothing and leaves it to this one); taskwait_noflush() only waits;
//   taskwait_on(x) brings x. A task with a strong out or inout access to a datum may write it itself once a
//   flushing wait has brought it: from then on its rank alone holds the latest version. Rank 0's program (the
//   function run() calls, which declares no access) only reads what a wait brought: a write there would not
//   reach copies on other ranks; write in a task (spawned without weft::offload or weft::node, it runs on rank
//   0). The end of rank 0's run brings what its tasks accessed since the last wait of
//   either kind: after run() returns, rank 0's memory holds their latest values, unless the body ended with
//   taskwait_noflush() (that data stays where it is, for the next run's tasks). Unlike taskwait(), the end of a
//   run does not catch up across a taskwait_noflush(): what was accessed before the body's last wait, and not
//   brought by a taskwait() since, stays where it is. Each run starts afresh.
// * Lifetime: the common address space, and what the cluster knows of the data in it, last as long as the
//   process. A later cluster Runtime (the same job, Options::cluster_memory and cluster_holder_bits: its
//   constructor throws on every process otherwise) finds the data where the earlier one left it. Destroying a
//   cluster Runtime is collective: it publishes the blocks freed since its last run's start (dfree, lfree).
// * Errors: an exception escaping an offloaded task is rethrown on its spawning rank as weft::remote_error
//   ("rank R: <what>"), with the usual semantics (its dependents are cancelled, the parent's next wait rethrows
//   it). A rank that dies ends the job (the MPI launcher's own behaviour), as does one that calls exit() with a
//   non-zero status, or exit(0) during a run (in a task: that run cannot end, so the rank leaves with status 1).
//   weft, when it initialised MPI, then leaves without MPI_Finalize, which would wait, and says so in a
//   rank-tagged line. Every rank ending its main with exit(0) after its runs is an ordinary end; a rank whose
//   program ends (return from main, exit(0)) while another still calls run() makes that rank's run end the job
//   with a line naming the rank that left (weft, when it initialised MPI, sends notices when a rank destroys
//   its cluster Runtime, a collective step, and at exit).
//   Every process must call run() as many times as rank 0 does.
//
// Offloadable bodies (checked at compile time for the type, at run time for stack pointers): trivially copyable
// closures; capture values and pointers into dmalloc/lmalloc memory; never capture by reference. The body's
// code is identified across ranks by its offset inside its executable or shared object: every rank must run the
// same executable with the same shared objects (their names, sizes and build ids are compared when the Runtime is
// constructed: std::runtime_error on every rank otherwise).
//
// Known limits: inoutset, commutative and reduction accesses are refused (std::invalid_argument) in a job of
// several processes; a cluster runs dependency tasks only (no taskiter, no flow graph on a cluster Runtime);
// weft::dmalloc is called on rank 0. Beyond 63 processes, which processes hold a copy of a datum is tracked
// exactly for ranks 0-62 and one process at a time for the others: a read there may move data again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "weft/runtime.hpp"
#include "weft/tasks.hpp"

namespace weft {

/// Processes of the cluster Runtime that exists now (1 without one, or in a job of one process; the job's shape
/// whether or not a cluster Runtime exists: weft::flow::num_processes() / process_id(), weft/flow.hpp).
int num_nodes();
/// This process's rank in it (0 without one).
int node_id();

/// How dmalloc memory is spread over the processes: a hint for the offload policy (where a task whose data has
/// not been written yet, e.g. one that initialises it, runs), never a constraint on where data may live.
struct Distribution {
  enum class Kind : unsigned char { blocked, cyclic, custom };
  Kind kind = Kind::blocked;
  std::size_t block = 0;  ///< cyclic: bytes per block
  /// custom: the rank whose affinity the byte at `offset` (from the allocation's start) has, `bytes` being the
  /// allocation's size and `nodes` the number of processes; must return a value in [0, nodes) and be the same
  /// function on every process (it is identified like a task body).
  int (*rank_of)(std::size_t offset, std::size_t bytes, int nodes) = nullptr;

  /// Contiguous blocks of about bytes / nodes, in rank order (the default).
  static Distribution blocked() { return {}; }
  /// Blocks of `block_bytes`, dealt to the processes in turn.
  static Distribution cyclic(std::size_t block_bytes) { return {Kind::cyclic, block_bytes, nullptr}; }
  static Distribution custom(int (*f)(std::size_t offset, std::size_t bytes, int nodes)) {
    return {Kind::custom, 0, f};
  }
};

/// Memory at the same virtual address on every process of the cluster (page-aligned), for data that tasks on
/// several ranks access. Called by rank 0 (inside or outside run()); its contents are not cleared (a block handed
/// out again after dfree keeps what it held) and are defined only through tasks'
/// accesses (initialise it with tasks: data rank 0's program writes directly is held by rank 0, and the locality
/// policy then runs the tasks on it there, whatever the distribution). Throws std::bad_alloc when the reservation (Options::cluster_memory) is
/// exhausted, std::logic_error on another rank, or in a job of several processes without a cluster Runtime.
void* dmalloc(std::size_t bytes, const Distribution& distribution = Distribution::blocked());
template <class T>
T* dmalloc(std::size_t count, const Distribution& distribution = Distribution::blocked()) {
  return static_cast<T*>(dmalloc(count * sizeof(T), distribution));
}
/// Frees dmalloc memory (rank 0; no task may still access it). The other processes release their pages too. In
/// a job of several processes, dmalloc hands the addresses out again only from the next run on (Runtime::run),
/// once every process has dropped the block (or, after the last run, once the Runtime is destroyed).
void dfree(void* p);
/// Memory of this process inside the common address space (any rank, any thread; 64-byte aligned; std::bad_alloc
/// when this process's part of the reservation is exhausted): a pointer to it means the
/// same on every process, so tasks offloaded elsewhere may access it through their declared accesses. This
/// process may fill it directly before tasks access it (a task elsewhere that names it first fetches it from here).
void* lmalloc(std::size_t bytes);
template <class T>
T* lmalloc(std::size_t count) {
  return static_cast<T*>(lmalloc(count * sizeof(T)));
}
/// Frees lmalloc memory of this process (no task may still access it); the whole pages inside it go back at once. In a job of
/// several processes its addresses come back to lmalloc only once every process has dropped what it knew of the
/// block (copies, locations): rank 0 publishes the free at the start of its next run, or when the Runtime is
/// destroyed (the address space outlives it: a later cluster Runtime allocates the block again).
void lfree(void* p);

/// An exception thrown by a task on another process, rethrown where the task was spawned. what() is
/// "rank R: " followed by the original exception's what() (or by "an exception that is not a std::exception").
/// From a task nested in offloaded tasks, each rank on the way adds its prefix: "rank 1: rank 2: <what>" is what a
/// task on rank 2 threw, reaching its ancestor on rank 1 and then this rank; rank() is then 1.
class remote_error : public std::runtime_error {
 public:
  remote_error(int rank, const std::string& what)
      : std::runtime_error("rank " + std::to_string(rank) + ": " + what), rank_(rank) {}
  /// The rank the task ran on.
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

/// Counters of this process's part of the cluster since the Runtime was constructed (all zero without one).
struct ClusterStats {
  std::uint64_t tasks_offloaded = 0;      ///< tasks spawned here that ran on another process
  /// of which: sent by the spawning thread when they were spawned (their rank known then: weft::node, or the
  /// locality policy), not when they became ready ...
  std::uint64_t tasks_offloaded_at_spawn = 0;
  /// ... and of those: sent before their predecessors had ended, each of which was sent to another process
  /// already (no message through this one between a predecessor's end and the task's start) ...
  std::uint64_t tasks_linked = 0;
  /// ... of which: with a predecessor on a third process, which tells the task's process directly when it ends
  /// (Options::direct_satisfy)
  std::uint64_t tasks_linked_remotely = 0;
  std::uint64_t tasks_received = 0;       ///< tasks other processes offloaded here
  std::uint64_t control_messages = 0;     ///< messages sent that carry no data: the nine kinds below
  std::uint64_t task_messages = 0;        ///< of which: a task sent to its executor
  std::uint64_t done_messages = 0;        ///<   a task reported done to its creator
  std::uint64_t satisfy_messages = 0;     ///<   a weak access's data ready, sent after its task
  /// a weak access of an offloaded task released before the task ended (its body returned, its children on
  /// the datum ended), so that the datum's successors need not wait for the task's other children
  std::uint64_t release_messages = 0;
  /// a weak access of a received task that none of its children touches: its data need not come (paper 004's
  /// "no eager send"; sent only with eager transfers, before the access's satisfy message came)
  std::uint64_t no_eager_messages = 0;
  /// a task linked remotely: its creator asks the process of a predecessor to report the predecessor's end to
  /// the task's process
  std::uint64_t connect_messages = 0;
  /// that report (paper 004's satisfiability message, from the predecessor's process to the successor's; sent
  /// by the creator instead when the predecessor had ended before the connect message came)
  std::uint64_t link_satisfy_messages = 0;
  std::uint64_t fetch_messages = 0;       ///<   a request for data
  std::uint64_t end_messages = 0;         ///<   the begin and the end of a run (rank 0, to each other rank)
  std::uint64_t data_messages = 0;        ///< messages sent carrying data
  std::uint64_t bytes_eager = 0;          ///< data sent with the task (or weak access's satisfy) that needed it
  std::uint64_t bytes_lazy = 0;           ///< data sent because a process asked for it
  std::uint64_t flushes = 0;              ///< data fetched here for a wait (taskwait, taskwait_on)
  double data_wait_seconds = 0;           ///< time tasks here spent ready but waiting for their data (summed)
  double flush_wait_seconds = 0;          ///< time waits here spent bringing data (summed)
};
/// This process's counters (Runtime::cluster_stats is the same for a given Runtime).
ClusterStats cluster_stats(const Runtime& rt);

}  // namespace weft
