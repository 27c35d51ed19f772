// weft — runtime: worker threads, configuration, statistics.
//
//   weft::Runtime rt;                       // configured from the environment (see Options::from_environment)
//   rt.run([&](weft::Context& cx) { ... }); // the calling thread becomes worker 0 until every task is done
//
// A Runtime owns num_threads workers: the thread that calls run() plus num_threads-1 background threads, which
// sleep between runs. run() calls may come one after another from any thread; concurrent run() calls on the same
// Runtime are serialised; run() called from inside a task throws std::logic_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace weft {

class Context;
struct Profile;
struct ClusterStats;
namespace detail {
class Engine;
}

/// Thrown for an invalid configuration (Options or an environment variable). The message names the setting,
/// the bad value and what is accepted.
class config_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Default bound on unfinished children of one task (see Options::max_tasks). Small on purpose: the window of
/// spawned-but-unfinished tasks (descriptors, dependency records, data) then stays in the caches (BENCHMARKS.md,
/// section 3: 4096 -> 256 cut the chain from 53 to 46 ns per task and Task Bench's METG on one core by half).
inline constexpr std::size_t kDefaultMaxTasks = 256;
/// Largest accepted values.
inline constexpr unsigned kMaxThreads = 4096;
inline constexpr std::size_t kMaxMaxTasks = std::size_t{1} << 24;
/// Default and largest Options::steal_batch.
inline constexpr unsigned kDefaultStealBatch = 32;
inline constexpr unsigned kMaxStealBatch = 1024;
/// Largest Options::idle_pauses.
inline constexpr unsigned kMaxIdlePauses = 65536;
/// Largest Options::lfq_buffer.
inline constexpr unsigned kMaxLfqBuffer = 1u << 16;
/// Trace events each worker can hold (ProfileOptions::trace_buffer): default and largest accepted value.
inline constexpr std::size_t kDefaultTraceBuffer = std::size_t{1} << 20;
inline constexpr std::size_t kMaxTraceBuffer = std::size_t{1} << 28;

/// Observability (see weft/profile.hpp for what is measured and the file formats). Everything is off by
/// default; when it is off the engine pays one predictable branch per instrumentation point.
struct ProfileOptions {
  /// Measure every run: per-worker work / overhead / idle time, counters, discovery time, per-label
  /// durations; Runtime::profile() returns the last run's. Implied by each field below.
  bool enabled = false;
  /// Print the profile of each run to stderr when it ends. Environment: WEFT_PROFILE=1.
  bool print = false;
  /// Write the profiles as JSON to this file: {"runs": [...]}, one entry appended per run, the file valid
  /// after each run. Environment: WEFT_PROFILE=json:FILE (FILE.r<rank>.json in a job of several processes: see
  /// weft::rank_file_name in profile.hpp; a name set here is used as given). The file is created anew by each
  /// Runtime: a program with several Runtimes (a flow graph built with graph(tts...) makes its own) keeps only
  /// the last one's runs unless each Runtime is given its own file (set this field).
  std::string json_file;
  /// Write a Chrome / Perfetto trace-event file when the Runtime is destroyed, covering every run.
  /// Environment: WEFT_TRACE=FILE (per rank, as json_file). As for json_file, each Runtime writes the whole
  /// file: with several Runtimes, give each its own file (or build flow graphs on one Runtime: graph(rt, tts...)).
  std::string trace_file;
  /// Also record dependency edges (flow arrows in the trace). Environment: WEFT_TRACE_EDGES=1|0 (default 0).
  bool trace_edges = false;
  /// Events each worker's trace buffer holds (preallocated, one per task span, discovery span or edge).
  /// When one fills, tracing stops with one warning; the file keeps what came before.
  /// Environment: WEFT_TRACE_BUFFER (default kDefaultTraceBuffer, 1..kMaxTraceBuffer).
  std::size_t trace_buffer = kDefaultTraceBuffer;

  /// Whether any of the above asks for measurement.
  bool active() const { return enabled || print || !json_file.empty() || !trace_file.empty(); }
};

/// Who drives the communication of a job of several processes (Options::comm_thread).
enum class CommThread : unsigned char {
  automatic,  ///< `on` when a core is spare for it, `off` otherwise
  on,         ///< a thread of its own
  off,        ///< the workers
};

/// How ready tasks are queued and found (Options::scheduler).
enum class Scheduler : unsigned char {
  /// Local LIFO with priorities (the default): per worker, a work-stealing deque for default-priority tasks and
  /// lock-free sorted lists for prioritised ones; idle workers steal batches from the others.
  llp,
  /// PaRSEC's local flat queues, for comparison (the TTG paper, section III-B): per worker, a bounded buffer
  /// (Options::lfq_buffer slots) that keeps the highest-priority tasks; what does not fit goes to one FIFO shared
  /// by all workers behind one lock. A worker takes the best task of its own buffer, else steals one from another
  /// worker's buffer, else takes the oldest task of the FIFO.
  lfq,
};

/// Which process runs an offloadable task of a cluster (Options::offload_policy; see weft/cluster.hpp).
enum class OffloadPolicy : unsigned char {
  locality,     ///< the process that holds most of the bytes its accesses name (what it updates counting twice;
                ///< ties stay where it was spawned); for data not written yet, the data's affinity
                ///< (weft::dmalloc's distribution); with no data at all, round robin
  round_robin,  ///< each process in turn
  random,       ///< uniformly at random (seeded per process: for tests)
};

/// Largest reservation for the common address space of a cluster (Options::cluster_memory).
inline constexpr std::size_t kMaxClusterMemory = std::size_t{1} << 46;

struct Options {
  /// Workers, the run() caller included. 1 in a default-constructed Options; from_environment() (and Runtime())
  /// take WEFT_NUM_THREADS, or all hardware threads when it is unset.
  unsigned num_threads = 1;
  /// Pin worker i to core i mod cores. Environment: WEFT_BIND=cores|none (default none).
  bool bind_to_cores = false;
  /// Throttling: a task that already has this many unfinished children (ready or not) runs ready tasks before
  /// it spawns the next one, until only half as many remain; so a producer spawning 10^8 tasks runs in bounded
  /// memory. Environment: WEFT_MAX_TASKS (default kDefaultMaxTasks, 1..2^24).
  std::size_t max_tasks = kDefaultMaxTasks;
  /// Immediate successor: when a finishing task makes successors ready, the worker runs the highest-priority one
  /// next without going through a queue (unless its queue holds a task of higher priority).
  /// Environment: WEFT_IMMEDIATE_SUCCESSOR=1|0 (default 1).
  bool immediate_successor = true;
  /// Work stealing: a worker that finds its queues empty takes the oldest task of another worker and, with it,
  /// up to this many more (at most half of that worker's queue), which it queues as its own: idle workers then
  /// spread work among themselves instead of all polling one producer. 1: one task per steal.
  /// Environment: WEFT_STEAL_BATCH (default kDefaultStealBatch, 1..kMaxStealBatch).
  unsigned steal_batch = kDefaultStealBatch;
  /// Idle polling: pause instructions between two looks of an idle worker at the other workers' queues. Fewer
  /// find a newly queued task sooner; more disturb busy workers less (every look reads their queues' cache
  /// lines). 0: automatic, 4 (n - 1)^3 for n workers, at most 1024 (4 with two workers, 1024 from eight on;
  /// BENCHMARKS.md section 38: with 1024 instead of 64 pauses at 16 workers, one producer of fine-grained
  /// tasks ran 1.5x faster, a Task Bench stencil of 16 us tasks about 9% slower).
  /// Environment: WEFT_IDLE_PAUSES (default 0, 0..kMaxIdlePauses).
  unsigned idle_pauses = 0;
  /// Ablation switches (paper comparisons; leave them on): each turns one of the engine's contention measures
  /// off, to measure what it contributes.
  /// local_counts: workers count finished (and newly readied) children in per-worker batches and touch a
  /// parent's counter once per batch (thread-local termination counting); off: one atomic per child.
  /// Environment: WEFT_LOCAL_COUNTS=1|0 (default 1).
  bool local_counts = true;
  /// biased_lock: a flow graph's keyed task tables guard their resizing with a reader-biased lock (BRAVO: a
  /// lookup writes only its worker's flag); off: every lookup takes a shared std::shared_mutex.
  /// Environment: WEFT_BIASED_LOCK=1|0 (default 1).
  bool biased_lock = true;
  /// scheduler: the engine's ready queues (see Scheduler): the default llp, or PaRSEC's lfq for comparison
  /// (an ablation: slower, its shared FIFO is the point). Immediate successors bypass the queues under both.
  /// Environment: WEFT_SCHEDULER=llp|lfq (default llp).
  Scheduler scheduler = Scheduler::llp;
  /// Scheduler::lfq: slots of each worker's bounded buffer; 0: 4 x num_threads, PaRSEC's own size.
  /// Environment: WEFT_LFQ_BUFFER (1..kMaxLfqBuffer; default 0).
  unsigned lfq_buffer = 0;
  /// Profiling and tracing (off by default). Environment: WEFT_PROFILE, WEFT_TRACE, WEFT_TRACE_EDGES,
  /// WEFT_TRACE_BUFFER (see ProfileOptions).
  ProfileOptions profile;
  /// No-progress watchdog, seconds; 0: off. Environment: WEFT_WATCHDOG=seconds (default 0, at most 10^6).
  ///  * A run (Runtime::run; one process or several) in which, for this long, every worker waits for work while
  ///    the run has not ended ends the process with status 1 and a line saying what the run's function waits
  ///    for (its unfinished tasks, the completion events not fulfilled): nothing is left to run, so the run waits
  ///    for a weft::Event that nothing fulfils, for something outside weft, or for a task with weak accesses
  ///    that waits inside a wait for its own weak predecessor (README, Known limits). A task that runs for long does not
  ///    count (its worker is not waiting); an event that a foreign thread fulfils later than this, while no task
  ///    runs, does: set it above the longest such wait. Not during the fences and runs below, which watch
  ///    themselves (nor while weft/mpi.hpp requests are in flight).
  ///  * Several processes (a flow graph across MPI ranks, or a cluster's run): a fence()/wait() (a run) in which
  ///    this rank sees no progress (no message received or sent, no task of the graph or cluster finished) for
  ///    this many seconds prints every rank's view (tasks pending, messages per epoch, outstanding operations,
  ///    messages held) and ends the job with a line naming the ranks that did not answer within a second (a rank
  ///    whose only worker is stuck). Set it above the longest task.
  ///  * The variable (not this field: MPI is set up before the Options reach it) also bounds how long an
  ///    MPI_Init_thread that weft calls waits for processes that never call it (at least 10 s): then this
  ///    process ends with status 1.
  double watchdog_seconds = 0;
  /// Several processes: who makes MPI progress while a fence()/wait() runs.
  ///   off: the workers poll MPI between tasks and when idle (no thread of its own: right when every core runs
  ///        a worker, where a thread that spins or sleeps costs microseconds to milliseconds per message).
  ///   on:  one more thread per process polls MPI without pause and hands the tasks that messages make ready
  ///        to the workers, which never call MPI; worth it when a core is free for it.
  ///   automatic: on when a core is spare, that is when this process may use at least num_threads + 1 cores
  ///        (its CPU affinity mask; a mask of the whole machine is shared with the other processes of the job
  ///        on this node, as the launcher reports them: OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS), off
  ///        otherwise, and off for a single process.
  /// Environment: WEFT_COMM_THREAD=auto|on|off (default auto).
  CommThread comm_thread = CommThread::automatic;
  /// A cluster (weft/cluster.hpp): in a job of several processes, the program's run() executes on process 0
  /// and offloadable tasks run on every process; constructing the Runtime is then collective. In a job of one
  /// process it changes nothing. Environment: WEFT_CLUSTER=1|0 (default 0).
  bool cluster = false;
  /// Cluster: which process runs a task spawned with weft::offload. Environment:
  /// WEFT_OFFLOAD_POLICY=locality|round-robin|random (default locality).
  OffloadPolicy offload_policy = OffloadPolicy::locality;
  /// Cluster: send a task's input data with the task when the process that offloads it holds the data (eager),
  /// instead of letting the executing process fetch it when the task is ready (lazy); for a weak access, with
  /// the message that tells the task its data is ready (its children then find it there). Environment:
  /// WEFT_EAGER=1|0 (default 1).
  bool eager_transfers = true;
  /// Cluster: a task whose predecessor runs on a third process (neither the one that spawns the task nor the
  /// one the task goes to) is sent when it is spawned, and the predecessor's process reports the predecessor's
  /// end straight to the task's process, with the data when eager (paper 004's satisfiability message), instead
  /// of through the spawning process. Off: such a task waits on the spawning process and is sent when it is
  /// ready. Environment: WEFT_DIRECT_SATISFY=1|0 (default 1).
  bool direct_satisfy = true;
  /// Cluster: bytes of virtual address space reserved on every process at the same address for weft::dmalloc
  /// (half) and weft::lmalloc (the other half, split among the processes). Only what is touched takes memory.
  /// Environment: WEFT_CLUSTER_MEMORY=bytes, with an optional K, M, G or T suffix (default 64G; 1M ..
  /// kMaxClusterMemory).
  std::size_t cluster_memory = std::size_t{64} << 30;
  /// Cluster, a testing aid: processes below this rank have a bit each in the sets of processes that hold a
  /// datum; the others are tracked one at a time (as in jobs of more than 63 processes, see README). Lower it to
  /// run a job of a few processes through the paths of large jobs. Every process must use the same value.
  /// Environment: WEFT_CLUSTER_HOLDER_BITS=1..63 (default 63).
  unsigned cluster_holder_bits = 63;

  /// Options read from the WEFT_* variables above; unset variables keep their defaults.
  /// Throws config_error naming the variable for a malformed or out-of-range value.
  static Options from_environment();
  /// Throws config_error if a field is out of range.
  void validate() const;
};

/// Counters summed over all workers since construction or the last reset_stats(). They are exact once run()
/// has returned.
struct Stats {
  std::uint64_t tasks_created = 0;       ///< user tasks spawned (internal nodes not included)
  std::uint64_t tasks_executed = 0;      ///< user task bodies run
  std::uint64_t tasks_cancelled = 0;     ///< bodies skipped because a predecessor failed
  std::uint64_t tasks_stolen = 0;        ///< tasks a worker took from another worker's queue
  std::uint64_t immediate_successor = 0; ///< tasks run as immediate successor, bypassing the queues (internal
                                         ///< tasks too, e.g. taskiter control tasks, which tasks_executed omits)
  std::uint64_t edges_created = 0;       ///< dependency edges linked
  std::uint64_t edges_pruned_finished = 0;  ///< edges not created: the predecessor had already finished
  std::uint64_t edges_pruned_duplicate = 0; ///< edges not created: the same edge already existed
  std::uint64_t edges_saved_inoutset = 0;   ///< sum of m*n - (m+n) over join nodes (groups of m, n later links)
  std::uint64_t internal_nodes = 0;      ///< join nodes created (inoutset/commutative groups, reader sets, weak links)
  std::uint64_t throttle_stalls = 0;     ///< times a producer hit max_tasks and ran tasks instead of spawning
  std::uint64_t exceptions_dropped = 0;  ///< exceptions not rethrown because an earlier one was pending
};

/// Every counter of Stats with its name (as in profiles' JSON), in declaration order: the one list that
/// sums, differences and profile output iterate. A counter added to Stats is added here too.
struct StatsField {
  const char* name;
  std::uint64_t Stats::*member;
};
inline constexpr StatsField kStatsFields[] = {
    {"tasks_created", &Stats::tasks_created},
    {"tasks_executed", &Stats::tasks_executed},
    {"tasks_cancelled", &Stats::tasks_cancelled},
    {"tasks_stolen", &Stats::tasks_stolen},
    {"immediate_successor", &Stats::immediate_successor},
    {"edges_created", &Stats::edges_created},
    {"edges_pruned_finished", &Stats::edges_pruned_finished},
    {"edges_pruned_duplicate", &Stats::edges_pruned_duplicate},
    {"edges_saved_inoutset", &Stats::edges_saved_inoutset},
    {"internal_nodes", &Stats::internal_nodes},
    {"throttle_stalls", &Stats::throttle_stalls},
    {"exceptions_dropped", &Stats::exceptions_dropped},
};
static_assert(sizeof(Stats) == sizeof(kStatsFields) / sizeof(kStatsFields[0]) * sizeof(std::uint64_t),
              "weft: a Stats counter is missing from kStatsFields");


class Runtime {
 public:
  /// Configured from the environment. A malformed WEFT_* variable (or a profile / trace file that cannot be
  /// created) prints one line naming it to stderr and exits the process with status 2 (a deployment error;
  /// use Runtime(Options) to handle it yourself).
  Runtime();
  /// Throws config_error for invalid options, or when ProfileOptions::json_file / trace_file cannot be
  /// created (both are opened, and truncated, here).
  explicit Runtime(const Options& options);
  /// Writes the trace file (ProfileOptions::trace_file), if any.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Runs f(Context&) as the root task on the calling thread (worker 0) and returns when f and every task it
  /// spawned, transitively, have finished. The first exception thrown by a task and not rethrown by a
  /// taskwait inside the program is rethrown here.
  template <class F>
  void run(F&& f) {
    auto call = [](void* p, Context& cx) { (*static_cast<std::remove_reference_t<F>*>(p))(cx); };
    run_root(call, const_cast<void*>(static_cast<const void*>(std::addressof(f))));
  }

  unsigned num_workers() const;
  const Options& options() const;
  Stats stats() const;
  void reset_stats();
  /// The profile of the last run that returned (or threw); `valid` is false when profiling is off
  /// (ProfileOptions::active()) or no run has ended yet. Declared in weft/profile.hpp.
  Profile profile() const;
  /// This process's counters of a cluster Runtime (Options::cluster; declared in weft/cluster.hpp): all zero
  /// in a job of one process.
  ClusterStats cluster_stats() const;

 private:
  void run_root(void (*call)(void*, Context&), void* arg);
  std::unique_ptr<detail::Engine> engine_;
};

}  // namespace weft
