// weft's MPI environment: who initialised MPI and at which thread level, weft's private communicator, the
// tag bound, the progress token, and failure (abort_job).
//
// Thread levels (the rule weft applies, MpiEnv::get()):
//   - MPI not initialised: weft calls MPI_Init_thread asking for MPI_THREAD_MULTIPLE (tasks may later call MPI
//     themselves) and finalises MPI at exit; it accepts MPI_THREAD_SERIALIZED if that is all it gets.
//   - MPI initialised by the program: weft queries the level and accepts MPI_THREAD_SERIALIZED or
//     MPI_THREAD_MULTIPLE; it never finalises MPI then. Under MPI_THREAD_SERIALIZED the program must not call MPI
//     itself while weft may progress (while a Transport exists), since weft's calls come from whichever thread
//     polls and MPI would see two threads at once.
//   - MPI_THREAD_SINGLE and MPI_THREAD_FUNNELED are refused (comm_error): weft makes its MPI calls from any
//     worker thread, never only from the main one. Serialised is enough for weft itself because all of its MPI
//     calls are made under one process-wide try-lock (ProgressToken).
//   - MPI already finalised: refused.
// weft duplicates MPI_COMM_WORLD (each Transport duplicates that again; see comm()) and never touches the
// program's communicators. Its communicators abort the job with a rank-tagged line on any MPI error, whatever error
// handler the program set on MPI_COMM_WORLD.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/sync.hpp"

namespace weft::comm {

/// An error of the communication layer that the program can act on: MPI initialised at a thread level weft
/// cannot work with, an invalid configuration, a misused call. One line, starting with "weft: ".
class comm_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Prints "weft: rank R: <message>" as one line on stderr and ends the whole job with MPI_Abort. For failures
/// that leave a rank unable to go on (a handler that threw, an MPI error): the other ranks would otherwise wait
/// for it forever. Without a live MPI (not initialised, or finalised) it exits the process with status 1.
[[noreturn]] void abort_job(const std::string& message) noexcept;

/// Name of an MPI thread level ("MPI_THREAD_SERIALIZED").
const char* thread_level_name(int level) noexcept;

class MpiEnv {
 public:
  /// The environment, set up on first use (thread-safe): initialises MPI when the program has not, checks the
  /// thread level (see the rule above), duplicates MPI_COMM_WORLD. Throws comm_error when the level is too low
  /// or MPI was finalised; a later call checks again.
  static MpiEnv& get();

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// weft's duplicate of MPI_COMM_WORLD (MPI_COMM_NULL once MPI has been finalised). Made by the first call,
  /// which is therefore collective: only steps that every rank takes call it (a Transport's construction, the
  /// departure at exit), under the progress token. Not get(): weft::mpi, which only posts the program's own
  /// operations, sets the environment up from a task on one rank, where a collective would wait for ranks
  /// that never call it.
  MPI_Comm comm();
  /// The thread level MPI granted (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE).
  int thread_level() const noexcept { return level_; }
  /// True when weft called MPI_Init_thread (and so will call MPI_Finalize at exit).
  bool initialised_by_weft() const noexcept { return owns_mpi_; }
  /// Largest tag weft uses: below MPI_TAG_UB of this MPI (at least 32766 by the standard).
  int max_tag() const noexcept { return max_tag_; }
  /// The process-wide progress token (see ProgressToken).
  ProgressToken& token() noexcept { return token_; }

  /// True while MPI is initialised and not finalised.
  static bool mpi_live() noexcept;

  /// Marks a run of this process that other processes take part in (a flow-graph epoch across ranks, a run of
  /// a cluster Runtime), for its lifetime, on jobs of several processes. An exit() during one, whatever its
  /// status, leaves as a failing exit does (see ~MpiEnv): the other ranks would wait for this one forever.
  class RunAcrossRanks {
   public:
    explicit RunAcrossRanks(const MpiEnv& env) noexcept : counted_(env.size() > 1) {
      if (counted_) {
        runs_across_ranks_.fetch_add(1, std::memory_order_relaxed);
        index_ = runs_begun_.fetch_add(1, std::memory_order_relaxed) + 1;
      }
    }
    ~RunAcrossRanks() {
      if (counted_) runs_across_ranks_.fetch_sub(1, std::memory_order_relaxed);
    }
    RunAcrossRanks(const RunAcrossRanks&) = delete;
    RunAcrossRanks& operator=(const RunAcrossRanks&) = delete;
    /// Which of this process's runs across ranks this is: 1, 2, ... in the order they began (0 on one
    /// process). Every rank takes part in the same runs in the same order, so the numbers agree across ranks.
    std::uint64_t index() const noexcept { return index_; }

   private:
    bool counted_;
    std::uint64_t index_ = 0;
  };

  /// A rank that ends its program normally (returns from main, or calls exit(0), outside a run) while others
  /// still run with it would leave them waiting forever: weft finalises MPI at exit when it initialised it,
  /// and there each rank first sends a departure notice (rank 0 to every rank, the others to rank 0) saying
  /// how many runs across ranks it took part in, then waits until every rank has sent its own. Before that, a
  /// rank returning from main destroys its Runtimes and graphs, collectively: it announces each such teardown
  /// the same way (announce_teardown). A rank whose run `index` (RunAcrossRanks::index) waits for a rank that
  /// left, or that is in a teardown this rank has not reached, after fewer runs calls this while it waits: it
  /// then ends the job with a line naming that rank (abort_job), since the run can never end.
  /// It looks for notices at most every 10 ms, and only when it gets the progress token at once; waits call it
  /// through check_departures_sometimes.
  void check_departures(std::uint64_t index) noexcept;
  /// check_departures on one call in 256 (`calls`: the caller's count): a fence's wait tests its condition
  /// between tasks, where reading the clock each time cost a flow graph's tasks on one rank 23 ns each (27 ->
  /// 50 ns in weft-bench-dist's binary tree), and the call itself 5 ns.
  static void check_departures_sometimes(std::uint32_t& calls, std::uint64_t index) noexcept {
    if ((++calls & 255) == 0) [[unlikely]]
      get().check_departures(index);
  }
  /// A Transport is being made (a collective step: a flow graph across ranks, a cluster Runtime): returns its
  /// number on this rank, 1, 2, ..., which the notices carry.
  std::uint64_t begin_transport() noexcept { return comms_begun_.fetch_add(1, std::memory_order_relaxed) + 1; }
  /// While this rank makes its transport number k (its MPI_Comm_idup not complete yet; progress token held):
  /// ends the job with a line naming a rank that has left, or is destroying a graph or cluster Runtime, having
  /// made fewer transports: it will never take part in this one (a rank that made one graph more than the
  /// others would otherwise wait forever).
  void check_while_making(std::uint64_t k) noexcept;
  /// While this rank destroys a cluster Runtime or a flow graph across ranks (after announce_teardown; any
  /// thread, token held or not): ends the job with a line naming a rank that has ended its program without
  /// reaching this teardown, which it will never take part in (one rank calling exit(0) with its Runtime alive
  /// while another destroys its own would otherwise leave both waiting). At most every 10 ms.
  void check_during_teardown() noexcept;
  /// What announce_teardown announces (named in the line of the rank that ends the job).
  enum class Teardown : std::uint64_t { cluster_runtime = 1, flow_graph = 2 };
  /// A cluster Runtime or a flow graph across ranks is being destroyed (a collective step: the other ranks must
  /// do it too, in the same order relative to their runs): tells the peers, so that a rank still in a run that
  /// needs this one ends the job (check_departures) instead of both waiting. Call it before the collective part.
  void announce_teardown(Teardown what) noexcept;

  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

 private:
  MpiEnv();
  ~MpiEnv();
  static int on_finalize(MPI_Comm, int, void*, void*);
  static void note_exit_status(int status, void*);
  void release_comm() noexcept;
  /// The status the process is exiting with (exit(), or main's return), noted before ~MpiEnv runs.
  static inline int exit_status_ = 0;
  /// Whether exit() was called during a RunAcrossRanks (noted with the status).
  static inline bool exit_in_run_ = false;
  /// Whether exit() was called inside a task (by a thread running one): in a job of several processes another
  /// rank may wait for this one's messages (weft::mpi), which it cannot tell.
  static inline bool exit_in_task_ = false;
  /// Runs across ranks begun by this process (see RunAcrossRanks::index).
  static inline std::atomic<std::uint64_t> runs_begun_{0};
  /// RunAcrossRanks in progress in this process. Relaxed: a thread that calls exit() inside a run runs one of
  /// its tasks, scheduled after the increment (the queues' release and acquire carry it), or is the one that
  /// made it.
  static inline std::atomic<int> runs_across_ranks_{0};
  /// Transports this process has begun to make (begin_transport).
  static inline std::atomic<std::uint64_t> comms_begun_{0};

  int rank_ = 0, size_ = 1, level_ = MPI_THREAD_SINGLE, max_tag_ = 32766;
  bool owns_mpi_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::once_flag comm_made_;
  MPI_Errhandler errhandler_ = MPI_ERRHANDLER_NULL;
  int finalize_key_ = MPI_KEYVAL_INVALID;
  ProgressToken token_;

  // Departures (check_departures): notices of a rank's program ending (kExitNotice, at exit) and of its
  // destroying a cluster Runtime or a flow graph across ranks (announce_teardown), each with
  // the count of runs across ranks it has begun. Rank 0 sends its notices to every rank, the others to rank 0.
  static constexpr std::uint64_t kExitNotice = 0;  // else a teardown: its Teardown value
  struct Notice {
    std::uint64_t kind, teardown, runs;  // teardown: its number (1, 2, ...); for an exit, how many there were
    std::uint64_t comms;                 // transports this rank had begun to make (begin_transport)
  };
  static constexpr int kNoticeWords = 4;
  /// What this rank knows of another's notices (under depart_m_).
  struct Gone {
    bool exited = false;
    std::uint64_t exit_runs = 0;
    std::uint64_t teardown = 0, teardown_runs = 0;  // the last teardown announced
    Teardown teardown_what = Teardown::cluster_runtime;
    std::uint64_t exit_comms = 0, teardown_comms = 0;  // Notice::comms of the exit, of the last teardown
    std::uint64_t exit_teardowns = 0;                  // the teardowns it had announced when it exited
  };
  /// Sends n to the peers (token and depart_m_ held); the sends complete in depart().
  void send_notice(Notice n);
  /// Receives the notices that have arrived (token and depart_m_ held).
  void receive_departures();
  /// For the checks: at most every 10 ms, and only if depart_m_ and the progress token are free (or the token
  /// is this thread's), receives the notices and returns depart_m_ held; else an empty lock.
  std::unique_lock<std::mutex> take_notices() noexcept;
  /// At exit (weft finalises MPI): sends this rank's exit notice and waits until every rank has sent its own.
  void depart();
  static constexpr int kDepartTag = 1;
  std::mutex depart_m_;
  std::vector<Gone> gone_;
  std::uint64_t teardowns_ = 0;  ///< this process's teardowns so far (under depart_m_)
  std::deque<Notice> notices_;
  std::vector<MPI_Request> notice_sends_;
  std::atomic<std::int64_t> next_departure_check_{0};  ///< steady clock, ns
};

}  // namespace weft::comm
