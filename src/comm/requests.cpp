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

namespace weft::mpi {
namespace {

namespace wd = weft::detail;

constexpr std::size_t kServiceMpiRequests = 0;  // Engine service slot
static_assert(kServiceMpiRequests < wd::Engine::kServiceSlots);
constexpr int kBatch = 64;  // requests tested by one poll: bounds a poll's time (MPI_Testsome is linear)

std::atomic<std::uint64_t> g_bound{0}, g_completed{0}, g_polls{0};  // Stats (relaxed: counters)

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

struct Entry {
  Event event;
  MPI_Status* status;
};

class RequestPoller final : public wd::Engine::Service {
 public:
  explicit RequestPoller(wd::Engine& e) : engine_(e), serialized_(env().thread_level() < MPI_THREAD_MULTIPLE) {
    source_ = {&poll_source, &source_demand, this};
    engine_.attach_progress(&source_);
  }
  ~RequestPoller() override { engine_.detach_progress(&source_); }

  static RequestPoller& of(wd::Engine& e) {
    if (wd::Engine::Service* s = e.service(kServiceMpiRequests)) return static_cast<RequestPoller&>(*s);
    return static_cast<RequestPoller&>(e.install_service(
        kServiceMpiRequests, [](wd::Engine& en) -> std::unique_ptr<wd::Engine::Service> {
          return std::make_unique<RequestPoller>(en);
        }));
  }

  void add(MPI_Request r, MPI_Status* status, Event ev) {
    {
      std::lock_guard<comm::SpinLock> g(pending_lock_);
      pending_requests_.push_back(r);
      pending_.push_back({std::move(ev), status});
    }
    // After the push: a poller that sees the count finds the entry (both under or after pending_lock_).
    // Relaxed: a hint for demand() and the empty poll; the lock orders the entry itself.
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    g_bound.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  static std::size_t poll_source(void* ctx) noexcept { return static_cast<RequestPoller*>(ctx)->poll(); }
  static wd::ProgressDemand source_demand(void* ctx) noexcept {
    // While requests are outstanding idle workers keep polling: nothing else would move them.
    return static_cast<RequestPoller*>(ctx)->outstanding_.load(std::memory_order_relaxed) != 0
               ? wd::ProgressDemand::polling
               : wd::ProgressDemand::none;
  }

  std::size_t poll() noexcept {
    if (outstanding_.load(std::memory_order_relaxed) == 0) return 0;
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
      int outcount = 0;
      const int rc = MPI_Testsome(n, requests_.data() + cursor_, &outcount, index.data(), status.data());
      g_polls.fetch_add(1, std::memory_order_relaxed);
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
          // Under MPI_ERR_IN_STATUS each status says; otherwise MPI_Testsome leaves MPI_ERROR unset.
          const int err = rc == MPI_SUCCESS ? MPI_SUCCESS : status[k].MPI_ERROR;
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
    if (serialized_) comm::MpiEnv::get().token().release();
    polling_.unlock();
    if (ndone == 0) return 0;
    // Release: the counts are hints, but a thread reading 0 after this must not see the entries again.
    outstanding_.fetch_sub(static_cast<std::size_t>(ndone), std::memory_order_release);
    g_completed.fetch_add(static_cast<std::uint64_t>(ndone), std::memory_order_relaxed);
    // The completion reaches the successors through the task's count (fulfill_event): the receive buffer and
    // the status written above happen before it.
    for (int i = 0; i < ndone; ++i) {
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
  if (rc != MPI_SUCCESS) throw error(std::string("weft::mpi: ") + call + " failed: " + mpi_error_text(rc));
}

// The calling task's poller (and the check that MPI runs at a level weft can use).
RequestPoller& poller(Context& cx) {
  (void)env();
  return RequestPoller::of(*wd::ContextAccess::worker(cx)->engine);
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
  p.add(request, status, cx.event());
}

void bind(Context& cx, std::span<const MPI_Request> requests, std::span<MPI_Status> statuses) {
  if (!statuses.empty() && statuses.size() != requests.size())
    throw std::invalid_argument("weft::mpi::bind: give one status per request, or none");
  for (std::size_t i = 0; i < requests.size(); ++i)
    bind(cx, requests[i], statuses.empty() ? MPI_STATUS_IGNORE : &statuses[i]);
}

void isend(Context& cx, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  RequestPoller& p = poller(cx);
  Event ev = cx.event();  // first: a refused event (taskiter) leaves no request behind
  MPI_Request r;
  {
    SerialScope s(comm::MpiEnv::get());
    check(MPI_Isend(buf, count, type, dest, tag, comm, &r), "MPI_Isend");
  }
  p.add(r, MPI_STATUS_IGNORE, std::move(ev));
}

void irecv(Context& cx, void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
           MPI_Status* status) {
  RequestPoller& p = poller(cx);
  Event ev = cx.event();
  MPI_Request r;
  {
    SerialScope s(comm::MpiEnv::get());
    check(MPI_Irecv(buf, count, type, source, tag, comm, &r), "MPI_Irecv");
  }
  p.add(r, status, std::move(ev));
}

void iallreduce(Context& cx, const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                MPI_Comm comm) {
  RequestPoller& p = poller(cx);
  Event ev = cx.event();
  MPI_Request r;
  {
    SerialScope s(comm::MpiEnv::get());
    check(MPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, &r), "MPI_Iallreduce");
  }
  p.add(r, MPI_STATUS_IGNORE, std::move(ev));
}

void ibcast(Context& cx, void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  RequestPoller& p = poller(cx);
  Event ev = cx.event();
  MPI_Request r;
  {
    SerialScope s(comm::MpiEnv::get());
    check(MPI_Ibcast(buf, count, type, root, comm, &r), "MPI_Ibcast");
  }
  p.add(r, MPI_STATUS_IGNORE, std::move(ev));
}

void ibarrier(Context& cx, MPI_Comm comm) {
  RequestPoller& p = poller(cx);
  Event ev = cx.event();
  MPI_Request r;
  {
    SerialScope s(comm::MpiEnv::get());
    check(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
  }
  p.add(r, MPI_STATUS_IGNORE, std::move(ev));
}

Stats stats() noexcept {
  return {g_bound.load(std::memory_order_relaxed), g_completed.load(std::memory_order_relaxed),
          g_polls.load(std::memory_order_relaxed)};
}

namespace detail {
int checked_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw error("weft::mpi: " + std::to_string(n) + " elements do not fit an MPI count (at most INT_MAX)");
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
