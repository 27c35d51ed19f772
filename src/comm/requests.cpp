// MPI inside tasks (include/weft/mpi.hpp): the requests tasks are bound to, tested by the workers.
//
// One poller per runtime (an engine service, created by the first bind), attached to the engine as a progress
// source for the runtime's life. Binding takes a completion event of the task and appends {request, event,
// status} to a short list under a spin lock; a poll (one thread at a time: a try-lock) moves that list into its
// own arrays, tests a window of at most kBatch requests with one MPI_Testsome, and fulfils the events of those
// that completed after it has let go of the arrays (fulfilling may complete the task and ready its successors).
// The window moves on at every poll, so every request is tested within a few polls however many are pending.
//
// Thread levels: under MPI_THREAD_SERIALIZED every MPI call of weft's (the wrappers' posts, the polls' tests)
// runs under the process-wide progress token (comm/sync.hpp), as the transport's do; under
// MPI_THREAD_MULTIPLE none does.
#include <weft/mpi.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <atomic>
#include <climits>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/mpi_env.hpp"
#include "comm/sync.hpp"
#include "engine/engine.hpp"
#include "trace/counters.hpp"
#include "trace/hooks.hpp"

namespace weft::mpi {
namespace {

namespace wd = weft::detail;

constexpr std::size_t kServiceMpiRequests = 0;  // Engine service slot
static_assert(kServiceMpiRequests < wd::Engine::kServiceSlots);
constexpr int kBatch = 64;  // requests tested by one poll: bounds a poll's time (MPI_Testsome is linear)

// Stats of the process (relaxed: counters); times in nanoseconds.
std::atomic<std::uint64_t> g_bound{0}, g_completed{0}, g_polls{0}, g_mpi_ns{0}, g_outstanding_ns{0},
    g_worker_ns{0}, g_idle_ns{0};

using Clock = std::chrono::steady_clock;
std::uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// Adds to a process total and to one poller's own (the profile's section sums the pollers of several runtimes).
void bump(std::atomic<std::uint64_t>& total, std::atomic<std::uint64_t>& mine, std::uint64_t v) {
  total.fetch_add(v, std::memory_order_relaxed);
  mine.fetch_add(v, std::memory_order_relaxed);
}

// The idle streak of this thread's last idle poll (see RequestPoller::account_idle).
struct IdleStamp {
  const void* poller = nullptr;
  std::uint64_t interval = 0;  // the poller's communication interval (see RequestPoller::interval_)
  unsigned round = 0;
  Clock::time_point at{};
};
thread_local IdleStamp tls_idle;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

// The environment, with the thread-level check turned into this API's error.
comm::MpiEnv& env() {
  try {
    return comm::MpiEnv::get();
  } catch (const comm::comm_error& e) {
    throw error(e.what());
  }
}

// Holds the progress token under MPI_THREAD_SERIALIZED.
class SerialScope {
 public:
  explicit SerialScope(comm::MpiEnv& e) {
    if (e.thread_level() < MPI_THREAD_MULTIPLE) scope_.emplace(e.token());
  }

 private:
  std::optional<comm::TokenScope> scope_;
};

// What the trace shows of a request (trace/hooks.hpp, record_operation): stamped only while tracing.
struct Traced {
  const char* op = "MPI request";  // the call that posted it ("MPI request" for one the program posted)
  wd::trace::Ticks posted = 0;      // 0: not traced
  std::uint32_t task = 0;
  std::int32_t peer = -1;
  std::uint64_t bytes = 0;
};

struct Entry {
  Event event;
  MPI_Status* status;
  Traced traced;
};

class RequestPoller final : public wd::Engine::Service {
 public:
  explicit RequestPoller(wd::Engine& e)
      : engine_(e),
        serialized_(env().thread_level() < MPI_THREAD_MULTIPLE),
        workers_(e.progress_worker ? 0 : e.options.num_threads),
        threads_(e.workers.size()),
        thread_mpi_ns_(std::make_unique<std::atomic<std::uint64_t>[]>(threads_)) {
    source_ = {&poll_source, &source_demand, this};
    engine_.attach_progress(&source_);
    counters_id_ = wd::trace::add_counter_source("mpi_requests", [this](std::vector<weft::Counter>& out) {
      auto count = [&](const char* name, const std::atomic<std::uint64_t>& v) {
        out.push_back({name, false, v.load(std::memory_order_relaxed), 0});
      };
      auto seconds = [&](const char* name, const std::atomic<std::uint64_t>& v) {
        out.push_back({name, true, 0, 1e-9 * static_cast<double>(v.load(std::memory_order_relaxed))});
      };
      // The names of weft::mpi::Stats's fields, seconds as "_s" (the profile's rule).
      count("requests_bound", bound_);
      count("requests_completed", completed_);
      count("polls", polls_);
      seconds("mpi_s", mpi_ns_);
      seconds("outstanding_s", outstanding_ns_);
      seconds("worker_s", worker_ns_);
      seconds("idle_s", idle_ns_);
      // Per thread: worker i, and the communication thread (the last, when there is one).
      for (std::size_t i = 0; i < threads_; ++i)
        seconds(i < engine_.options.num_threads ? ("mpi_s.worker" + std::to_string(i)).c_str()
                                                : "mpi_s.comm_thread",
                thread_mpi_ns_[i]);
    });
  }
  ~RequestPoller() override {
    engine_.detach_progress(&source_);
    wd::trace::remove_counter_source(counters_id_);
  }

  /// Time spent in an MPI call of weft's (a post).
  void count_mpi(Clock::time_point begin) { count_mpi_ns(ns_between(begin, Clock::now())); }

  static RequestPoller& of(wd::Engine& e) {
    if (wd::Engine::Service* s = e.service(kServiceMpiRequests)) return static_cast<RequestPoller&>(*s);
    return static_cast<RequestPoller&>(e.install_service(
        kServiceMpiRequests, [](wd::Engine& en) -> std::unique_ptr<wd::Engine::Service> {
          return std::make_unique<RequestPoller>(en);
        }));
  }

  void add(MPI_Request r, MPI_Status* status, Event ev, const Traced& traced) {
    {
      std::lock_guard<comm::SpinLock> g(pending_lock_);
      pending_requests_.push_back(r);
      pending_.push_back({std::move(ev), status, traced});
    }
    // After the push: a poller that sees the count finds the entry (both under or after pending_lock_).
    // Relaxed: a hint for demand() and the empty poll; the lock orders the entry itself.
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    bump(g_bound, bound_, 1);
  }

 private:
  // Time in an MPI call of weft's, by the calling thread (one of this engine's: posts run in its tasks, polls
  // on its workers or its communication thread).
  void count_mpi_ns(std::uint64_t ns) {
    bump(g_mpi_ns, mpi_ns_, ns);
    const wd::Worker* w = wd::tls_worker;
    if (w && w->engine == &engine_ && w->id < threads_) thread_mpi_ns_[w->id].fetch_add(ns, std::memory_order_relaxed);
  }

  static std::size_t poll_source(void* ctx) noexcept { return static_cast<RequestPoller*>(ctx)->poll(); }
  static wd::ProgressDemand source_demand(void* ctx) noexcept {
    // While requests are outstanding idle workers keep polling: nothing else would move them.
    return static_cast<RequestPoller*>(ctx)->outstanding_.load(std::memory_order_relaxed) != 0
               ? wd::ProgressDemand::polling
               : wd::ProgressDemand::none;
  }

  // A worker polling for want of work while requests are outstanding is idle since its previous such poll, if
  // that one was in the same idle streak (its round count went up by one: it ran no task in between). The first
  // interval of a streak is not counted (a few spins).
  void account_idle(Clock::time_point now) {
    const wd::Worker* w = wd::tls_worker;
    if (!w || !w->idle_polling) return;
    const std::uint64_t interval = interval_.load(std::memory_order_relaxed);
    if (tls_idle.poller == this && tls_idle.interval == interval && (interval & 1) && w->idle_rounds >= 1 &&
        w->idle_rounds == tls_idle.round + 1)
      bump(g_idle_ns, idle_ns_, ns_between(tls_idle.at, now));
    tls_idle = {this, interval, w->idle_rounds, now};
  }

  std::size_t poll() noexcept {
    if (outstanding_.load(std::memory_order_relaxed) == 0) {
      tls_idle.poller = nullptr;
      return 0;
    }
    const Clock::time_point now = Clock::now();
    if (workers_ != 0) account_idle(now);
    if (!polling_.try_lock()) return 0;  // another worker is at it
    if (serialized_ && !comm::MpiEnv::get().token().try_acquire()) {
      polling_.unlock();
      return 0;
    }
    {
      std::lock_guard<comm::SpinLock> g(pending_lock_);
      requests_.insert(requests_.end(), pending_requests_.begin(), pending_requests_.end());
      for (Entry& e : pending_) entries_.push_back(std::move(e));
      pending_requests_.clear();
      pending_.clear();
    }
    std::array<Entry, kBatch> done;
    std::array<int, kBatch> failed{};  // MPI error code of done[i], 0 when it succeeded
    int ndone = 0;
    const std::size_t total = requests_.size();
    if (total != 0) {
      if (cursor_ >= total) cursor_ = 0;
      const int n = static_cast<int>(std::min<std::size_t>(kBatch, total - cursor_));
      std::array<int, kBatch> index;
      std::array<MPI_Status, kBatch> status;
      // MPI sets MPI_ERROR only under MPI_ERR_IN_STATUS; some implementations also set it when they
      // return MPI_SUCCESS for a request that completed with an error: start from success and read it always.
      for (int i = 0; i < n; ++i) status[i].MPI_ERROR = MPI_SUCCESS;
      int outcount = 0;
      const int rc = MPI_Testsome(n, requests_.data() + cursor_, &outcount, index.data(), status.data());
      const Clock::time_point after = Clock::now();
      count_mpi_ns(ns_between(now, after));
      bump(g_polls, polls_, 1);
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        // The test itself failed (not one request): fail every request of the window, which MPI may have
        // left in any state; weft cannot tell which completed.
        outcount = n;
        for (int i = 0; i < n; ++i) {
          index[i] = i;
          status[i].MPI_ERROR = rc;
        }
      }
      if (outcount != MPI_UNDEFINED && outcount > 0) {
        // Take the completed ones out, highest index first, so that each move from the back brings an entry
        // that is either outside the window or not completed.
        std::array<int, kBatch> order;
        for (int k = 0; k < outcount; ++k) order[k] = k;
        std::sort(order.begin(), order.begin() + outcount, [&](int a, int b) { return index[a] > index[b]; });
        for (int j = 0; j < outcount; ++j) {
          const int k = order[j];
          const std::size_t at = cursor_ + static_cast<std::size_t>(index[k]);
          Entry& e = entries_[at];
          const int err = status[k].MPI_ERROR;
          if (e.status != MPI_STATUS_IGNORE) *e.status = status[k];
          failed[ndone] = err;
          done[ndone++] = std::move(e);
          entries_[at] = std::move(entries_.back());
          requests_[at] = requests_.back();
          entries_.pop_back();
          requests_.pop_back();
        }
      }
      cursor_ += static_cast<std::size_t>(n);
    }
    // Communication time: from poll to poll while requests are outstanding (polls follow each other within
    // kProgressPollInterval on busy workers, back to back on idle ones).
    if (last_outstanding_) {
      const std::uint64_t dt = ns_between(last_poll_, now);
      bump(g_outstanding_ns, outstanding_ns_, dt);
      bump(g_worker_ns, worker_ns_, dt * workers_);
    }
    last_poll_ = now;
    const bool outstanding = !requests_.empty();
    // Communication intervals: odd while one runs (from this poll on, as the time above). Idle time is counted
    // only within one running interval, like the time itself.
    if (last_outstanding_ != outstanding) interval_.fetch_add(1, std::memory_order_relaxed);
    last_outstanding_ = outstanding;
    if (serialized_) comm::MpiEnv::get().token().release();
    polling_.unlock();
    if (ndone == 0) return 0;
    // Release: the counts are hints, but a thread reading 0 after this must not see the entries again.
    outstanding_.fetch_sub(static_cast<std::size_t>(ndone), std::memory_order_release);
    bump(g_completed, completed_, static_cast<std::uint64_t>(ndone));
    // The completion reaches the successors through the task's count (fulfill_event): the receive buffer and
    // the status written above happen before it.
    wd::Worker* const w = wd::tls_worker;
    for (int i = 0; i < ndone; ++i) {
      const Traced& t = done[i].traced;
      if (w) wd::trace::record_operation(*w, t.op, t.task, t.posted, t.peer, t.bytes);
      if (failed[i] == MPI_SUCCESS) {
        done[i].event.fulfill();
      } else {
        done[i].event.fail(std::make_exception_ptr(
            error("weft: an MPI request bound to a task failed: " + mpi_error_text(failed[i]))));
      }
    }
    return static_cast<std::size_t>(ndone);
  }

  wd::Engine& engine_;
  const bool serialized_;
  const unsigned workers_;  // workers that poll (0 with a communication thread: idle time is not measured)
  const std::size_t threads_;  // the engine's threads: workers, then the communication thread if any
  std::unique_ptr<std::atomic<std::uint64_t>[]> thread_mpi_ns_;  // time in MPI per thread (relaxed counters)
  std::uint64_t counters_id_ = 0;
  std::atomic<std::uint64_t> bound_{0}, completed_{0}, polls_{0}, mpi_ns_{0}, outstanding_ns_{0}, worker_ns_{0},
      idle_ns_{0};
  Clock::time_point last_poll_{};  // under polling_
  // Communication intervals started and ended so far: odd while one runs (relaxed: a worker reading an old
  // value counts a stretch of idle time of one poll less or more).
  std::atomic<std::uint64_t> interval_{0};
  bool last_outstanding_ = false;
  wd::ProgressSource source_{};
  alignas(64) std::atomic<std::size_t> outstanding_{0};
  comm::SpinLock pending_lock_;
  std::vector<MPI_Request> pending_requests_;  // bound since the last poll (under pending_lock_)
  std::vector<Entry> pending_;
  alignas(64) comm::SpinLock polling_;  // the poller's arrays below belong to whoever holds it
  std::vector<MPI_Request> requests_;
  std::vector<Entry> entries_;
  std::size_t cursor_ = 0;  // start of the next poll's window
};

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw error(std::string("weft: ") + call + " failed: " + mpi_error_text(rc));
}

// The calling task's poller (and the check that MPI runs at a level weft can use).
RequestPoller& poller(Context& cx) {
  (void)env();
  return RequestPoller::of(*wd::ContextAccess::worker(cx)->engine);
}

// The trace's record of an operation the calling task starts now (nothing unless its worker records a trace).
Traced traced(Context& cx, const char* op, int peer, int count, MPI_Datatype type) {
  Traced t;
  wd::Worker& w = *wd::ContextAccess::worker(cx);
  if (!w.trace) [[likely]]
    return t;
  t.op = op;
  t.posted = wd::trace::now(w);
  t.task = wd::ContextAccess::task(cx)->trace_id;
  t.peer = peer;
  int size = 0;
  if (count > 0 && MPI_Type_size(type, &size) == MPI_SUCCESS && size > 0)
    t.bytes = static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(size);
  return t;
}

}  // namespace

void bind(Context& cx, MPI_Request request, MPI_Status* status) {
  RequestPoller& p = poller(cx);
  if (request == MPI_REQUEST_NULL) {
    if (status != MPI_STATUS_IGNORE) {
      // What MPI_Test reports for a null request: an empty status.
      MPI_Status empty{};
      empty.MPI_SOURCE = MPI_ANY_SOURCE;
      empty.MPI_TAG = MPI_ANY_TAG;
      empty.MPI_ERROR = MPI_SUCCESS;
      *status = empty;
    }
    return;
  }
  p.add(request, status, cx.event(), traced(cx, "MPI request", -1, 0, MPI_DATATYPE_NULL));
}

void bind(Context& cx, std::span<const MPI_Request> requests, std::span<MPI_Status> statuses) {
  if (!statuses.empty() && statuses.size() != requests.size())
    throw std::invalid_argument("weft::mpi::bind: give one status per request, or none");
  for (std::size_t i = 0; i < requests.size(); ++i)
    bind(cx, requests[i], statuses.empty() ? MPI_STATUS_IGNORE : &statuses[i]);
}

namespace {
// Posts one operation (`start` makes the MPI call that fills in the request) and binds it to the calling task.
// The event is taken first: where none can be taken (a taskiter body), nothing is posted.
template <class Start>
void post(Context& cx, const char* call, MPI_Status* status, int peer, int count, MPI_Datatype type,
          Start&& start) {
  RequestPoller& p = poller(cx);
  Event ev = cx.event();
  const Traced t = traced(cx, call, peer, count, type);
  MPI_Request r;
  const Clock::time_point begin = Clock::now();
  {
    SerialScope s(comm::MpiEnv::get());
    check(start(&r), call);
  }
  p.count_mpi(begin);
  p.add(r, status, std::move(ev), t);
}
}  // namespace

void isend(Context& cx, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  post(cx, "MPI_Isend", MPI_STATUS_IGNORE, dest, count, type,
       [&](MPI_Request* r) { return MPI_Isend(buf, count, type, dest, tag, comm, r); });
}

void irecv(Context& cx, void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
           MPI_Status* status) {
  post(cx, "MPI_Irecv", status, source, count, type,
       [&](MPI_Request* r) { return MPI_Irecv(buf, count, type, source, tag, comm, r); });
}

void iallreduce(Context& cx, const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                MPI_Comm comm) {
  post(cx, "MPI_Iallreduce", MPI_STATUS_IGNORE, -1, count, type,
       [&](MPI_Request* r) { return MPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, r); });
}

void ibcast(Context& cx, void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  post(cx, "MPI_Ibcast", MPI_STATUS_IGNORE, root, count, type,
       [&](MPI_Request* r) { return MPI_Ibcast(buf, count, type, root, comm, r); });
}

void ibarrier(Context& cx, MPI_Comm comm) {
  post(cx, "MPI_Ibarrier", MPI_STATUS_IGNORE, -1, 0, MPI_DATATYPE_NULL,
       [&](MPI_Request* r) { return MPI_Ibarrier(comm, r); });
}

Stats stats() noexcept {
  auto sec = [](const std::atomic<std::uint64_t>& v) { return 1e-9 * static_cast<double>(v.load(std::memory_order_relaxed)); };
  Stats s;
  s.requests_bound = g_bound.load(std::memory_order_relaxed);
  s.requests_completed = g_completed.load(std::memory_order_relaxed);
  s.polls = g_polls.load(std::memory_order_relaxed);
  s.mpi_seconds = sec(g_mpi_ns);
  s.outstanding_seconds = sec(g_outstanding_ns);
  s.worker_seconds = sec(g_worker_ns);
  s.idle_seconds = sec(g_idle_ns);
  return s;
}

namespace detail {
int checked_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw error("weft: " + std::to_string(n) + " elements do not fit an MPI count (at most INT_MAX)");
  return static_cast<int>(n);
}

bool lock_serialized() {
  comm::MpiEnv& e = env();
  if (e.thread_level() >= MPI_THREAD_MULTIPLE || e.token().held_by_this_thread()) return false;
  e.token().acquire();
  return true;
}

void unlock_serialized(bool took) noexcept {
  if (took) comm::MpiEnv::get().token().release();
}
}  // namespace detail

}  // namespace weft::mpi
