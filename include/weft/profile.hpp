// weft — profiles and traces: where the time of a run went.
//
//   weft::Options o = weft::Options::from_environment();
//   o.profile.enabled = true;                       // or WEFT_PROFILE=1 (also prints), WEFT_PROFILE=json:FILE
//   weft::Runtime rt(o);
//   rt.run([&](weft::Context& cx) { ... });
//   weft::Profile p = rt.profile();                 // the last run's
//   std::fputs(weft::to_text(p).c_str(), stderr);   // the table WEFT_PROFILE=1 prints
//
// Environment (read by weft::Runtime() / Options::from_environment(), see ProfileOptions in runtime.hpp):
//   WEFT_PROFILE=1            print this profile to stderr at the end of every run
//   WEFT_PROFILE=json:FILE    write the profiles as JSON to FILE ({"runs": [...]}, one entry per run)
//   WEFT_PROFILE=0            off (the default when unset; an empty value is refused, as for every WEFT_*)
//   WEFT_TRACE=FILE.json      write a Chrome / Perfetto trace-event file when the Runtime is destroyed
//                             (only then: the Runtime's construction checks that FILE can be written but
//                             leaves it as it was, so a process that ends without destroying the Runtime,
//                             by exit() or a crash, writes no trace and keeps an older FILE; FILE must not
//                             be the profile's file)
//   WEFT_TRACE_EDGES=1        also record dependency edges (flow arrows in the trace; each takes a buffer
//                             slot, recorded when the successor is spawned)
//   WEFT_TRACE_BUFFER=N       trace events per worker (default 2^20, preallocated; tracing stops, with one
//                             warning, when a worker's buffer is full)
// In a job of several processes (MPI ranks, see process_rank()), the files of WEFT_PROFILE=json:FILE and
// WEFT_TRACE=FILE are per rank: FILE.json -> FILE.r<rank>.json on every rank (rank_file_name()).
// `tools/weft-gantt FILE.json -o out.png` draws a trace as a Gantt chart (rows = workers, colour = label);
// given the ranks' files, one group of rows per rank.
//
// Time breakdown (paper 003, section 2.3.1), per worker, over the wall time of the run:
//   work      inside task bodies: from the body's first instruction to its return, minus the time the body
//             spends in the runtime (spawn, taskwait, taskwait_on). The root function of run() is a body.
//   overhead  in the runtime while this worker has, or is about to get, a task: spawning (dependency
//             registration and queueing of the new task, throttling, recycling finished children; the few
//             instructions that take a descriptor from the worker's pool count as the spawner's work),
//             completing a task (releasing successors, freeing children), taking a task from a queue, a
//             successful steal.
//   idle      the rest: from the first failed search for work until the worker takes a task again (the
//             failed searches, the backoff, the sleep), plus the time a background worker takes to join
//             the run. idle = wall - work - overhead (a background worker's last moments after the run's end,
//             before it notices it, are clipped).
// Tasks run inline while a body waits (taskwait, throttling) count as their own work, not the waiter's.
//
// Profile file: {"weft_profile": 1, "rank": R, "ranks": N, "runs": [to_json(run), ...]}; a run's "counters"
// holds its CounterSections as {"section": {"counter": value}} (a name ending in "_s" is seconds). Rewritten
// at the end of every run, and valid JSON after each: when a run's profile cannot be written (a full disk),
// the file keeps the runs before it, no later run is written, and the process exits with status 2 at its end.
// Labels: a task's weft::label need only outlive its run (the trace keeps a copy of each name); both files
// are UTF-8, a label's bytes that are not well-formed UTF-8 becoming U+FFFD.
//
// Trace file (Chrome trace-event JSON; open it in https://ui.perfetto.dev or chrome://tracing):
//   * the process: pid = rank + 1 (1 for a single process), named "weft", or "rank R" in a job of several.
//   * one track per worker (tid = worker index): one complete event ("ph":"X", "cat":"task") per
//     executed task body, name = its weft::label or "task", args {id, priority, tag}; the root function of
//     each run is an X event of cat "root". A span contains another on the same track only when the inner
//     task ran inline while the outer one waited; spans on one track never partially overlap.
//   * one discovery track per producing worker (tid = kMaxThreads + worker): an X event of cat "discovery"
//     per task body that spawned children, from its first spawn to the end of its last, args {id, children}.
//   * runs and front-end phases (e.g. recording / replaying an iteration) as async events (cat "run",
//     "phase"); with WEFT_TRACE_EDGES=1, flow events ("s"/"f", cat "dep") from each predecessor's span to
//     its successor's (edges through weft's internal join nodes are drawn to the tasks behind them). Only
//     dependency-task edges: a flow graph's sends (weft/flow.hpp) draw no arrows.
//   * MPI requests bound to tasks (weft/mpi.hpp) as async events (cat "mpi", args {task, peer, bytes}), on
//     the track of the worker that completed them, or with a communication thread on its own track (tid =
//     number of workers, named "communication thread").
//   * A task that threw has its span like any other (the exception is not marked); a cancelled task (a
//     failed predecessor's dependent) runs no body and has no span.
//   * "otherData": {"weft_trace": 1, "workers": N, "rank": R, "ranks": N, "origin_unix_ns": wall-clock time of
//     ts 0 (lines up the traces of several ranks), "truncated": bool, "dropped_after_us": t}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/runtime.hpp"

namespace weft {

/// One worker's share of a run. Seconds are wall-clock; work + overhead + idle = Profile::wall_seconds.
struct WorkerProfile {
  double work_seconds = 0;
  double overhead_seconds = 0;
  double idle_seconds = 0;
  std::uint64_t tasks_created = 0;        ///< spawned by task bodies running on this worker
  std::uint64_t tasks_executed = 0;       ///< bodies run on this worker
  std::uint64_t tasks_stolen = 0;         ///< taken from another worker's queue by this worker
  std::uint64_t immediate_successor = 0;  ///< run as immediate successor on this worker
  std::uint64_t throttle_stalls = 0;
};

/// Tasks with one weft::label (all unlabelled tasks share the label "(unlabelled)"). Durations are work
/// time: the body's own time, without the time it spent in the runtime or running other tasks inline.
struct LabelProfile {
  std::string label;
  std::uint64_t count = 0;
  double total_seconds = 0;
  double mean_seconds = 0;
  double max_seconds = 0;
};

/// One counter of a component that registered a section of counters with the profile (e.g. the MPI
/// transport's "messages_sent"). In a Profile: its change during the run.
struct Counter {
  std::string name;
  bool is_time = false;      ///< a duration in seconds (`seconds`), not a count (`count`)
  std::uint64_t count = 0;
  double seconds = 0;
};

/// A component's counters, e.g. "transport" (messages and bytes sent and received, time in poll(): every
/// message of the transport, the termination detector's control messages included, and each message's header
/// and payload bytes) or "termination" (the distributed termination detector's waves and control messages).
/// Counters of several instances of one component (two transports) are summed by name. A flow graph's fence()
/// and wait() are each a run of their own, with a profile of their own.
struct CounterSection {
  std::string name;
  std::vector<Counter> counters;
};

/// A span a front end reported (e.g. recording or replaying iteration `tag` of a persistent task graph).
struct PhaseProfile {
  std::string name;
  std::uint64_t tag = 0;
  double begin_seconds = 0;  ///< since the start of the run
  double seconds = 0;
};

struct Profile {
  bool valid = false;        ///< false: profiling off, or no run ended yet
  std::uint64_t run = 0;     ///< runs of this Runtime so far, this one included (1 for the first)
  double wall_seconds = 0;   ///< run() from entry to return
  std::vector<WorkerProfile> workers;
  WorkerProfile total;       ///< sums over workers
  Stats stats;               ///< this run's counters (Runtime::stats() counts since construction)
  /// Discovery: the root function's first spawn to the end of its last spawn (0 if it spawned nothing);
  /// the time the producer took to unroll the graph, throttling stalls included.
  double discovery_seconds = 0;
  std::uint64_t root_children = 0;       ///< tasks the root function spawned
  std::uint64_t spawning_tasks = 0;      ///< task bodies (root excluded) that spawned children
  double nested_discovery_seconds = 0;   ///< sum of their first-to-last-spawn spans
  std::vector<LabelProfile> labels;      ///< by decreasing total work time
  std::vector<PhaseProfile> phases;      ///< by begin time; empty unless a front end reports phases
  std::uint64_t trace_events = 0;        ///< events recorded in the trace buffers during this run
  bool trace_truncated = false;          ///< a trace buffer filled up (during this run or before)
  /// What registered components counted during this run (e.g. communication between ranks), by the order
  /// in which their sections first appeared in the process; empty when none ever registered. A component
  /// destroyed during the run still counts: its last values are kept (see src/trace/counters.hpp).
  std::vector<CounterSection> counters;
  int rank = 0;   ///< this process's rank (process_rank()); 0 for a single process
  int ranks = 1;  ///< processes in the job (process_rank().size; 0: several, the launcher did not say how many)
};

/// Where this process stands in a job of several processes (an MPI job), as its launcher's environment says:
/// OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI), PMI_RANK / PMI_SIZE (MPICH, Intel MPI), PMIX_RANK
/// (size unknown). Read without MPI; under MPI it is the rank in MPI_COMM_WORLD.
struct ProcessRank {
  int rank = 0;
  int size = 1;  ///< 1: a single process (no launcher); 0: several, how many is unknown
  /// Processes of the job on this node, as the launcher says (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS); 0:
  /// unknown. 1 for a single process.
  int local_size = 1;
  bool several() const { return size != 1; }
};
ProcessRank process_rank();

/// The per-rank name of a profile or trace file: unchanged for a single process; with several, ".r<rank>"
/// before the extension of the file name ("prof.json" -> "prof.r1.json", rank 0 too: "prof.r0.json"; "trace"
/// -> "trace.r1"). A path naming a device or a pipe (/dev/null) is kept as it is. WEFT_PROFILE=json:FILE and
/// WEFT_TRACE=FILE go through it (Options::from_environment()); file names set in Options are used as given.
std::string rank_file_name(const std::string& path, const ProcessRank& r = process_rank());

/// The table WEFT_PROFILE=1 prints (several lines, ends with a newline).
std::string to_text(const Profile& p);
/// The JSON object WEFT_PROFILE=json:FILE writes for one run.
std::string to_json(const Profile& p);

}  // namespace weft
