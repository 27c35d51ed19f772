#include "comm/mpi_env.hpp"

#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>

#include "weft/detail/task.hpp"
#include "weft/runtime.hpp"
#include "weft/profile.hpp"

namespace weft::comm {
namespace {

int known_rank = -1;  // this process's rank, once MpiEnv has been set up (for messages after MPI_Finalize)

int world_rank_or(int fallback) noexcept {
  if (!MpiEnv::mpi_live()) return known_rank >= 0 ? known_rank : fallback;
  int r = fallback;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Error handler of weft's communicators: an MPI error on weft's path (a truncated message because two ranks
// were configured differently, a broken peer) is not something a rank can recover from alone.
void on_mpi_error(MPI_Comm*, int* code, ...) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(*code, text, &len) != MPI_SUCCESS) len = 0;
  abort_job("MPI error in the communication layer: " + std::string(text, static_cast<std::size_t>(len)));
}

// When stderr is a pipe (the launcher's), waits until the launcher has read what this process wrote to it, for
// at most about a second. MPICH's mpiexec (Hydra) exits as soon as the abort reaches it, and drops the output
// that its proxy has not read from the rank's pipe by then: the line saying why the job ends was lost in a few
// runs in a hundred. Once the proxy has read the line, it forwards it ahead of the abort.
void wait_until_stderr_read() noexcept {
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0 || !S_ISFIFO(st.st_mode)) return;
  for (int i = 0; i < 1000; ++i) {
    int unread = 0;
    if (ioctl(STDERR_FILENO, FIONREAD, &unread) != 0 || unread <= 0) return;
    const timespec one_ms{0, 1000000};
    nanosleep(&one_ms, nullptr);
  }
}

// Watches MPI_Init_thread, which returns only once every process of the job has called it: a process that
// never does (it was given another setting, e.g. WEFT_CLUSTER=1 on some processes only, so it never sets up
// MPI) would leave this one waiting without a word. After 10 s it says why it waits; with WEFT_WATCHDOG=s it
// ends this process after s seconds (at least 10) with status 1, so that the launcher ends the job.
class InitWatch {
 public:
  InitWatch() : rank_(weft::process_rank()) {
    try {
      limit_ = weft::Options::from_environment().watchdog_seconds;
    } catch (...) {
      limit_ = 0;  // a bad variable is reported by the Runtime that reads it
    }
    if (rank_.several()) thread_ = std::thread([this] { watch(); });
  }
  ~InitWatch() {
    {
      std::lock_guard<std::mutex> g(m_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  InitWatch(const InitWatch&) = delete;
  InitWatch& operator=(const InitWatch&) = delete;

 private:
  void watch() {
    constexpr double kHint = 10;
    std::unique_lock<std::mutex> g(m_);
    if (cv_.wait_for(g, std::chrono::duration<double>(kHint), [&] { return done_; })) return;
    std::fprintf(stderr,
                 "weft: rank %d: MPI_Init_thread has waited %g s for the other processes of the job: it returns "
                 "only once every process has called it. A cluster Runtime (Options::cluster, WEFT_CLUSTER=1) or "
                 "a flow graph across processes sets up MPI on every process: give all of them the same setting "
                 "(mpirun -x WEFT_CLUSTER=1)%s\n",
                 rank_.rank, kHint,
                 limit_ > 0 ? "; WEFT_WATCHDOG ends this process if it waits longer" : "; still waiting");
    std::fflush(stderr);
    if (limit_ <= 0) return;
    const double rest = std::max(0.0, limit_ - kHint);
    if (cv_.wait_for(g, std::chrono::duration<double>(rest), [&] { return done_; })) return;
    std::fprintf(stderr,
                 "weft: rank %d: MPI_Init_thread has not returned after %g s (WEFT_WATCHDOG): ending this process "
                 "with status 1\n",
                 rank_.rank, std::max(kHint, limit_));
    std::fflush(stderr);
    wait_until_stderr_read();
    std::_Exit(1);
  }

  weft::ProcessRank rank_;
  double limit_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

void abort_job(const std::string& message) noexcept {
  // One fprintf of the whole line: lines of different ranks and threads do not interleave mid-line.
  std::fprintf(stderr, "weft: rank %d: %s\n", world_rank_or(-1), message.c_str());
  std::fflush(stderr);
  wait_until_stderr_read();
  if (MpiEnv::mpi_live()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; without MPI there is no job to end but this process
}

const char* thread_level_name(int level) noexcept {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown MPI thread level";
  }
}

bool MpiEnv::mpi_live() noexcept {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

MpiEnv& MpiEnv::get() {
  // A function-local static: constructed once, by the first caller (others wait); if the constructor throws,
  // the next call tries again. Destroyed at exit after every object constructed after it (transports made
  // later are gone by then), which is when weft finalises MPI if it initialised it.
  static MpiEnv env;
  // Registered after env's destructor (exit handlers run in reverse order of registration): it runs first.
  [[maybe_unused]] static const bool noted = on_exit(&MpiEnv::note_exit_status, nullptr) == 0;
  return env;
}

void MpiEnv::note_exit_status(int status, void*) {
  exit_status_ = status;
  exit_in_run_ = runs_across_ranks_.load(std::memory_order_relaxed) > 0;
  exit_in_task_ = weft::detail::current_worker_index() != weft::detail::kNotAWorker;
}

MpiEnv::MpiEnv() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) throw comm_error("weft: MPI has been finalised; weft's communication layer cannot start");
  if (!init) {
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_SUCCESS;
    {
      const InitWatch watch;
      rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    }
    if (rc != MPI_SUCCESS) throw comm_error("weft: MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      throw comm_error(std::string("weft: MPI_Init_thread granted ") + thread_level_name(provided) +
                       " (asked for MPI_THREAD_MULTIPLE); weft needs MPI_THREAD_SERIALIZED at least: this MPI "
                       "library was built without thread support");
    }
    owns_mpi_ = true;
    level_ = provided;
  } else {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_SERIALIZED)
      throw comm_error(std::string("weft: MPI was initialised by the program with ") + thread_level_name(level) +
                       "; weft calls MPI from its worker threads and needs MPI_THREAD_SERIALIZED or "
                       "MPI_THREAD_MULTIPLE (MPI_Init_thread)");
    level_ = level;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  known_rank = rank_;
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) max_tag_ = *static_cast<int*>(ub) - 1;  // "below MPI_TAG_UB"
  if (max_tag_ < 32766) max_tag_ = 32766;                  // the standard's minimum for MPI_TAG_UB is 32767
  // MPI_Finalize deletes MPI_COMM_SELF's attributes first (MPI 3.1, 8.7.1): the hook frees weft's
  // communicator when the program finalises MPI itself, before the library goes away.
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &MpiEnv::on_finalize, &finalize_key_, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, finalize_key_, this);
  gone_.assign(static_cast<std::size_t>(size_), Gone{});
}

MPI_Comm MpiEnv::comm() {
  std::call_once(comm_made_, [this] {
    if (!mpi_live()) return;
    // Our own handler on our own communicator (inherited by the transports' duplicates): the program's handler
    // on MPI_COMM_WORLD may be MPI_ERRORS_RETURN, and weft does not check return codes on its fast path.
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_create_errhandler(on_mpi_error, &errhandler_);
    MPI_Comm_set_errhandler(comm_, errhandler_);
  });
  return comm_;
}

// The peers a rank exchanges notices with: rank 0 with every rank, the others with rank 0.
namespace {
template <class F>
void for_each_peer(int rank, int size, F&& f) {
  if (rank == 0)
    for (int d = 1; d < size; ++d) f(d);
  else
    f(0);
}
}  // namespace

void MpiEnv::send_notice(Notice n) {
  if (comm_ == MPI_COMM_NULL) return;  // no step across ranks has made it (see comm()): nothing to announce
  notices_.push_back(n);  // (a deque: the buffers stay where they are until the sends complete)
  for_each_peer(rank_, size_, [&](int d) {
    notice_sends_.emplace_back();
    MPI_Isend(&notices_.back(), kNoticeWords, MPI_UINT64_T, d, kDepartTag, comm_, &notice_sends_.back());
  });
}

void MpiEnv::receive_departures() {
  if (comm_ == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kDepartTag, comm_, &flag, &st);
    if (!flag) return;
    Notice n;
    MPI_Recv(&n, kNoticeWords, MPI_UINT64_T, st.MPI_SOURCE, kDepartTag, comm_, MPI_STATUS_IGNORE);
    Gone& g = gone_[static_cast<std::size_t>(st.MPI_SOURCE)];
    if (n.kind == kExitNotice) {
      g.exited = true;
      g.exit_runs = n.runs;
      g.exit_comms = n.comms;
      g.exit_teardowns = n.teardown;
    } else {
      g.teardown = n.teardown;
      g.teardown_runs = n.runs;
      g.teardown_comms = n.comms;
      g.teardown_what = static_cast<Teardown>(n.kind);
    }
  }
}

std::unique_lock<std::mutex> MpiEnv::take_notices() noexcept {
  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  // relaxed: a rate limit; the mutex orders the checks themselves.
  if (now < next_departure_check_.load(std::memory_order_relaxed)) return {};
  std::unique_lock<std::mutex> g(depart_m_, std::try_to_lock);
  if (!g.owns_lock()) return {};
  const bool held = token_.held_by_this_thread();  // (Transport::shutdown holds it)
  if (!held && !token_.try_acquire()) return {};   // a poll is under way: look next time
  next_departure_check_.store(now + std::chrono::nanoseconds(std::chrono::milliseconds(10)).count(),
                              std::memory_order_relaxed);
  receive_departures();
  if (!held) token_.release();
  return g;
}

void MpiEnv::check_departures(std::uint64_t index) noexcept {
  if (size_ == 1 || index == 0) return;
  const std::unique_lock<std::mutex> g = take_notices();
  if (!g.owns_lock()) return;
  auto fail = [&](int r, const char* doing, std::uint64_t runs) {
    abort_job("rank " + std::to_string(r) + " " + doing + " after " + std::to_string(runs) +
              " run(s) across ranks (cluster runs and flow-graph fences), but this rank is in its run " +
              std::to_string(index) + ", which needs it: every process must take part in the same runs across "
              "ranks (a cluster Runtime's run(), as many times as rank 0; each fence() of a flow graph across "
              "ranks) and destroy those Runtimes and graphs, in the same order");
  };
  for (int r = 0; r < size_; ++r) {
    const Gone& x = gone_[static_cast<std::size_t>(r)];
    if (x.exited && x.exit_runs < index) fail(r, "has ended its program (returned from main or called exit())", x.exit_runs);
    // A teardown this rank has not reached: the other rank waits in it for this one (a collective).
    if (x.teardown > teardowns_ && x.teardown_runs < index)
      fail(r,
           x.teardown_what == Teardown::flow_graph ? "is destroying a flow graph across ranks (a collective step)"
                                                   : "is destroying its cluster Runtime (a collective step)",
           x.teardown_runs);
  }
}

void MpiEnv::check_while_making(std::uint64_t k) noexcept {
  if (size_ == 1) return;
  std::lock_guard<std::mutex> g(depart_m_);
  receive_departures();
  for (int r = 0; r < size_; ++r) {
    const Gone& x = gone_[static_cast<std::size_t>(r)];
    const char* doing = nullptr;
    if (x.exited && x.exit_comms < k)
      doing = "has ended its program (returned from main or called exit())";
    else if (x.teardown > teardowns_ && x.teardown_comms < k)
      doing = x.teardown_what == Teardown::flow_graph ? "is destroying a flow graph across ranks (a collective step)"
                                                      : "is destroying its cluster Runtime (a collective step)";
    if (doing)
      abort_job("rank " + std::to_string(r) + " " + doing + " having made " +
                std::to_string(x.exited ? x.exit_comms : x.teardown_comms) +
                " flow graph(s) across ranks and cluster Runtime(s), but this rank is making its number " +
                std::to_string(k) + ", which rank " + std::to_string(r) +
                " never made: every process must make the same flow graphs (graph()) and cluster Runtimes, and "
                "destroy them, in the same order");
  }
}

void MpiEnv::check_during_teardown() noexcept {
  if (size_ == 1 || !owns_mpi_) return;  // (notices exist only where weft finalises MPI)
  const std::unique_lock<std::mutex> g = take_notices();
  if (!g.owns_lock()) return;
  for (int r = 0; r < size_; ++r) {
    const Gone& x = gone_[static_cast<std::size_t>(r)];
    if (x.exited && x.exit_teardowns < teardowns_)
      abort_job("rank " + std::to_string(r) + " has ended its program (returned from main or called exit()) "
                "having destroyed " + std::to_string(x.exit_teardowns) + " cluster Runtime(s) and flow graph(s) "
                "across ranks, but this rank is destroying its number " + std::to_string(teardowns_) +
                ", a collective step rank " + std::to_string(r) + " never takes part in: every process must "
                "destroy the same cluster Runtimes and flow graphs across ranks, in the same order (or every "
                "process ends with exit(0), leaving them alive)");
  }
}

void MpiEnv::announce_teardown(Teardown what) noexcept {
  if (size_ == 1 || !owns_mpi_ || !mpi_live()) return;  // (as the exit notices: when weft finalises MPI)
  TokenScope hold(token_);
  std::lock_guard<std::mutex> g(depart_m_);
  ++teardowns_;
  send_notice({static_cast<std::uint64_t>(what), teardowns_, runs_begun_.load(std::memory_order_relaxed),
               comms_begun_.load(std::memory_order_relaxed)});
}

void MpiEnv::depart() {
  TokenScope hold(token_);
  std::lock_guard<std::mutex> g(depart_m_);
  // Every rank departs (where weft initialised MPI: all of them, in an SPMD program), so the communicator can
  // be made here when no step across ranks made it.
  if (comm() == MPI_COMM_NULL) return;
  send_notice({kExitNotice, teardowns_, runs_begun_.load(std::memory_order_relaxed),
               comms_begun_.load(std::memory_order_relaxed)});
  // Every rank sends its notices before it enters the barrier: once the barrier completes, the notices still
  // to receive have all been sent, each peer's exit notice after its other ones (MPI keeps their order).
  MPI_Request barrier;
  MPI_Ibarrier(comm_, &barrier);
  for (int done = 0;;) {
    MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
    if (done) break;
    const timespec one_ms{0, 1000000};
    nanosleep(&one_ms, nullptr);
  }
  for_each_peer(rank_, size_, [&](int s) {
    while (!gone_[static_cast<std::size_t>(s)].exited) {
      Notice n;
      MPI_Recv(&n, kNoticeWords, MPI_UINT64_T, s, kDepartTag, comm_, MPI_STATUS_IGNORE);
      if (n.kind == kExitNotice) gone_[static_cast<std::size_t>(s)].exited = true;
    }
  });
  MPI_Waitall(static_cast<int>(notice_sends_.size()), notice_sends_.data(), MPI_STATUSES_IGNORE);
}

int MpiEnv::on_finalize(MPI_Comm, int, void* value, void*) {
  static_cast<MpiEnv*>(value)->release_comm();
  return MPI_SUCCESS;
}

void MpiEnv::release_comm() noexcept {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  if (errhandler_ != MPI_ERRHANDLER_NULL) MPI_Errhandler_free(&errhandler_);
}

MpiEnv::~MpiEnv() {
  if (!mpi_live()) return;  // the program finalised MPI: on_finalize already ran
  if (owns_mpi_ && (exit_status_ != 0 || exit_in_run_ || (exit_in_task_ && size_ > 1))) {
    // A rank that fails (exit(1) in a task, between runs, or a failing main) while the others go on, or that
    // exits in the middle of a run that other ranks take part in (exit(0) in a task): MPI_Finalize would wait
    // for them, and they for this rank's messages, forever. Leave without it: the launcher sees a rank end with
    // a failure status, or without finalising, and ends the job. (Other threads may be inside MPI calls;
    // nothing here waits for them.) An exit(0) in a run is a failure of the job: the run cannot end.
    const int status = exit_status_ != 0 ? exit_status_ : 1;
    if (exit_status_ != 0)
      std::fprintf(stderr,
                   "weft: rank %d: exiting with status %d before MPI_Finalize: leaving without it, so that the "
                   "job ends even if other ranks still wait for this one\n",
                   rank_, exit_status_);
    else
      std::fprintf(stderr,
                   "weft: rank %d: exit(0) %s: %s, so this rank leaves with status 1, without MPI_Finalize, and "
                   "the job ends\n",
                   rank_, exit_in_run_ ? "during a run that other ranks take part in" : "inside a task",
                   exit_in_run_ ? "that run cannot end" : "other ranks may wait for this one's messages");
    std::fflush(nullptr);
    wait_until_stderr_read();
    std::_Exit(status);
  }
  if (owns_mpi_) {
    // A rank whose program ends while the others still run with it: they learn it from the notices (see
    // check_departures) and end the job; here this rank waits for every rank to have left.
    if (size_ > 1) depart();
    // Deleting the attribute runs on_finalize, and MPI_Finalize would run it too: delete it first so that the
    // communicator is freed exactly once, then finalise.
    MPI_Comm_delete_attr(MPI_COMM_SELF, finalize_key_);
    MPI_Comm_free_keyval(&finalize_key_);
    MPI_Finalize();
  }
}

}  // namespace weft::comm
