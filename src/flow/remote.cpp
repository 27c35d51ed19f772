// Flow graphs across processes: each key's task runs on the rank its keymap names; a send to a key owned by
// another rank becomes one message there (weft::comm::Transport), and each fence()/wait() is one epoch of a
// distributed termination detector (weft::comm::TerminationDetector: Mattern's four counters), so that it
// returns on every rank only once the whole graph has terminated on all of them.
//
// Messages. One message kind per graph, registered through the detector (counted, stamped with the epoch); its
// format is in include/weft/detail/flow_wire.hpp (groups of a WireHeader naming a template task, its input and
// the number of keys, then the keys; the value as the payload, once for all the groups' keys). The template-task
// id is the task's index in the graph (GraphBase collects the tasks in an order that depends only on the
// program's construction order, so it agrees across ranks). The kind's name carries a hash of the graph's shape (names and
// edges of its template tasks, in order): Transport::check_consistency() at construction then refuses ranks that
// built different graphs. The owner's handler delivers the value exactly as local sends would
// (TTBase::deliver_remote). A large payload (above the transport's rendezvous threshold) is received straight
// into the shared copy its tasks will read (TTBase::place_remote), and sent from the sender's shared copy when
// it has one: no copy but MPI's.
//
// Failures. A task that throws on a rank of a distributed graph ends the job with a line naming the rank, the
// task and the exception (RemoteBase::fail): the other ranks would otherwise wait for it forever. So does a
// message that cannot be delivered (a handler error).
//
// Termination, per fence. begin_epoch() makes this rank active; it becomes passive when the run's root has no
// unfinished task (every task of the graph is a detached child of the root; workers' credits only make the
// count larger, so zero is exact) and active again when a message arrives (the handler, before it delivers).
// Both run under the progress token (handlers always do; the passive check waits for it), so a
// message cannot be delivered between the check of the count and set_passive(): a rank reported passive has no
// task. A sender is active (it runs a task, or the seeds), as the detector requires. The detector's waves run
// inside Transport::poll(), which the engine's workers call through the progress hook (ProgressSource) when
// their queues are empty, when idle, and every few tasks they run; or, with a communication thread
// (Options::comm_thread), that thread alone, back to back (the engine hands it the source). The fence's own
// worker never sleeps while it waits (it yields between polls); the others sleep in timed slices while the
// fence runs, and not at all while operations are in flight (ProgressDemand). Messages of epoch e + 1 from a
// faster rank arriving while this rank is still in e are kept by the detector and delivered when this rank
// begins e + 1 (its next fence): no barrier between fences.
#include "flow/remote.hpp"

#ifdef WEFT_HAVE_MPI

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <unordered_map>

#include "comm/mpi_env.hpp"
#include "comm/termination.hpp"
#include "comm/transport.hpp"
#include "comm/watchdog.hpp"
#include "engine/engine.hpp"
#include "weft/profile.hpp"

namespace weft::flow::detail {

namespace {

namespace wd = weft::detail;

/// A hash of the graph's shape, the same on every rank that built the same graph.
std::string graph_signature(const GraphState& g) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  for (const auto& t : g.tts) {
    mix(t->name().data(), t->name().size());
    const std::size_t ne = t->edges().size();
    mix(&ne, sizeof ne);
    for (const EdgeBase* e : t->edges()) mix(e->name.data(), e->name.size());
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "weft.flow/%zu/%016llx", g.tts.size(), static_cast<unsigned long long>(h));
  return buf;
}

/// The graph's shape in words, for the message of ranks whose graphs differ: each rank prints its own.
std::string graph_description(const GraphState& g) {
  std::string d = std::to_string(g.tts.size()) + (g.tts.size() == 1 ? " template task: " : " template tasks: ");
  for (std::size_t i = 0; i < g.tts.size(); ++i) {
    const auto& t = g.tts[i];
    const std::size_t ne = t->edges().size();
    d += (i ? ", '" : "'") + t->name() + "' (" + std::to_string(ne) + (ne == 1 ? " edge" : " edges");
    for (std::size_t k = 0; k < t->edges().size(); ++k) {
      const std::string& en = t->edges()[k]->name;
      d += (k ? ", " : ": ") + (en.empty() ? std::string("unnamed") : "'" + en + "'");
    }
    d += ")";
  }
  return d;
}

class Remote final : public RemoteBase {
 public:
  explicit Remote(GraphState& g) : g_(g), td_(transport_) {
    rank = transport_.rank();
    size = transport_.size();
    max_header = transport_.config().max_header;
    large = transport_.config().rendezvous_threshold;
    kind_ = td_.register_kind(graph_signature(g), {.deliver = [this](const comm::Message& m) { on_message(m); },
                                                  .place = [this](const comm::Message& m) { return on_place(m); }});
    // The watchdog's request for this rank's view (not counted: it is no work of the graph).
    watchdog_views_ =
        std::make_unique<comm::WatchdogViews>(transport_, "weft.flow.watchdog", [this] { return view(); });
    watchdog_ = g.rt->options().watchdog_seconds;
    try {
      transport_.check_consistency();
    } catch (const comm::comm_error& e) {
      // Every rank throws: each message describes that rank's graph, so the job's output shows the difference.
      throw error("weft::flow::graph: the ranks did not build the same graph (same template task names, edges "
                  "and order, as graph() collects them): rank " + std::to_string(rank) + " built " +
                  graph_description(g) + " [" + e.what() + "]");
    }
    source_ = {&poll_source, &source_demand, this};
  }

  // Before the members' collective end (the transport's): a rank still in a fence that needs this one ends the
  // job instead of both waiting (MpiEnv::check_departures).
  ~Remote() override { comm::MpiEnv::get().announce_teardown(comm::MpiEnv::Teardown::flow_graph); }

  void send(int dest, std::span<const std::byte> header, std::span<const std::byte> payload,
            std::function<void()> done) override {
    if (done)
      td_.counted_send(dest, kind_, header, payload, std::move(done));
    else
      td_.counted_send(dest, kind_, header, payload);
    progress_.fetch_add(1, std::memory_order_relaxed);
    // The message waits in the aggregation buffer until a poll: this worker polls as soon as its task ends,
    // rather than after the next tasks (a local successor would otherwise run first, and the ranks would take
    // turns instead of working at once).
    // (With a communication thread, that thread flushes it at its next poll.)
    if (wd::Worker* w = wd::tls_worker; w && !w->engine->progress_worker) {
      w->last_busy_poll = {};
      w->progress_countdown.store(1, std::memory_order_relaxed);
    }
  }

  [[noreturn]] void fail(const std::string& what) noexcept override { comm::abort_job(what); }

  std::uint64_t sum(std::uint64_t value) override { return transport_.sum_over_ranks(value); }

  void execute(weft::Context& cx, void (*seeds)(void*), void* arg) {
    wd::Worker& w = *wd::tls_worker;
    wd::Task* const root = wd::ContextAccess::task(cx);
    wd::Engine& engine = *w.engine;
    const std::uint32_t e = td_.begin_epoch();  // active
    active_.store(true, std::memory_order_relaxed);
    root_.store(root, std::memory_order_release);
    last_progress_ = {~std::uint64_t{0}, -1};
    last_change_ = std::chrono::steady_clock::now();
    running_.store(true, std::memory_order_release);
    const comm::MpiEnv::RunAcrossRanks in_run(comm::MpiEnv::get());  // an exit() meanwhile ends the job
    across_run_ = in_run.index();
    engine.attach_progress(&source_);
    struct Detach {
      wd::Engine& e;
      ~Detach() { e.detach_progress(s); }
      const wd::ProgressSource* s;
    } detach{engine, &source_};
    std::exception_ptr seed_error;
    try {
      seeds(arg);
    } catch (...) {
      seed_error = std::current_exception();  // still take part in the epoch: the other ranks wait for it
    }
    // This worker drives the communication until the epoch ends (or, with a communication thread, watches for
    // the tasks it hands over and for the end of the epoch): it never sleeps (a message's latency would be a
    // sleep slice), it yields between polls; the other workers sleep as usual (in slices) when idle.
    wd::wait_until(w, [&] { return quiet(w, root, e); }, nullptr, /*keep_polling=*/true);
    // What this rank still owes its peers once the epoch has ended: the end of the epoch forwarded down the
    // detector's tree, sends not completed. (Messages of the next epoch are kept by the detector meanwhile.)
    while (transport_.outstanding() != 0)
      if (transport_.poll() == 0) std::this_thread::yield();
    running_.store(false, std::memory_order_release);
    root_.store(nullptr, std::memory_order_release);
    if (seed_error) std::rethrow_exception(seed_error);
  }

 private:
  // The fence's wait condition (on worker 0): the epoch has ended; meanwhile, report this rank passive when
  // it has no task left (see the top of this file).
  bool quiet(wd::Worker& w, wd::Task* root, std::uint32_t e) {
    if (td_.terminated(e)) return true;
    if (watchdog_ > 0) [[unlikely]]
      check_progress(w, root);
    comm::MpiEnv::check_departures_sometimes(departure_calls_, across_run_);  // a rank that ended its program
    if (active_.load(std::memory_order_relaxed) && wd::unfinished_children(w, root) == 0) {
      // Waits for the token (pollers step aside): a communication thread polling back to back would leave a
      // try-lock no chance.
      comm::TokenScope hold(comm::MpiEnv::get().token());
      if (wd::unfinished_children(w, root) == 0) {
        active_.store(false, std::memory_order_relaxed);
        td_.set_passive();
      }
    }
    return false;
  }

  // --- the watchdog (Options::watchdog_seconds) ------------------------------------------------------------------
  // Progress, as this rank sees it: messages of the graph sent or received, tasks of the graph finished. A fence
  // that sees none of it for watchdog_ seconds asks every other rank for its view, prints its own, gives the
  // others a moment to print theirs, and ends the job.
  void check_progress(wd::Worker& w, wd::Task* root) {
    const std::pair<std::uint64_t, std::int64_t> now_at{progress_.load(std::memory_order_relaxed),
                                                        wd::unfinished_children(w, root)};
    const auto now = std::chrono::steady_clock::now();
    if (now_at != last_progress_) {
      last_progress_ = now_at;
      last_change_ = now;
      return;
    }
    if (std::chrono::duration<double>(now - last_change_).count() < watchdog_) return;
    char what[160];
    std::snprintf(what, sizeof what,
                  "weft::flow: watchdog: no progress on this rank for %g s in fence() (WEFT_WATCHDOG)", watchdog_);
    watchdog_views_->fire(what);
  }

  /// This rank's view of the graph's execution, one line.
  std::string view() {
    const comm::TerminationStats d = td_.stats();
    std::string s = "weft: rank " + std::to_string(rank) + ": watchdog view: epoch " + std::to_string(d.epoch) +
                    (d.terminated >= d.epoch ? " (terminated)" : d.active ? " (active)" : " (passive)");
    wd::Task* root = root_.load(std::memory_order_acquire);
    if (root && wd::tls_worker)
      s += ", tasks unfinished (at most) " + std::to_string(wd::unfinished_children(*wd::tls_worker, root));
    else
      s += ", not in a fence";
    std::size_t pending = 0;
    for (const auto& t : g_.tts) pending += t->pending();
    s += ", tasks waiting for inputs " + std::to_string(pending) + ", messages of this epoch sent " +
         std::to_string(d.epoch_sent) + " received " + std::to_string(d.epoch_received) +
         ", operations outstanding " + std::to_string(transport_.outstanding()) + ", messages held for a later epoch " +
         std::to_string(d.early_messages) + " (so far), termination waves " + std::to_string(d.waves);
    return s;
  }

  /// The WireHeader at the start of `bytes` (a group of a message's header), checked against the graph.
  static WireHeader group_header(std::span<const std::byte> bytes, const GraphState& g) {
    WireHeader h;
    if (bytes.size() < sizeof h) throw error("weft::flow: a malformed message from another process");
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.tt >= g.tts.size())
      throw error("weft::flow: a message names an unknown template task (did every rank build the same graph?)");
    return h;
  }

  // Rendezvous: where a large payload goes (under the progress token). The template task may place it into the
  // value's final storage (a shared copy), remembered here until the message is delivered.
  std::span<std::byte> on_place(const comm::Message& m) {
    try {
      const WireHeader h = group_header(m.header(), g_);
      void* handle = nullptr;
      std::span<std::byte> dst = g_.tts[h.tt]->place_remote(h, m.payload_size(), handle);
      Placed p{handle, {}};
      if (dst.empty()) {
        p.bytes = buffers.take();
        // At least 16 bytes of capacity: the bytes are on the heap, where moving p leaves them (its key).
        p.bytes.reserve(std::max<std::size_t>(m.payload_size(), 16));
        if (p.bytes.size() < m.payload_size()) p.bytes.resize(m.payload_size());
        dst = {reinterpret_cast<std::byte*>(p.bytes.data()), m.payload_size()};
      }
      placed_.emplace(dst.data(), std::move(p));
      return dst;
    } catch (const std::exception& x) {
      comm::abort_job(std::string("weft::flow: a message from rank ") + std::to_string(m.source()) +
                      " cannot be received: " + x.what());
    }
  }

  // Handler (under the progress token, on a worker executing the graph: only they poll during a fence).
  void on_message(const comm::Message& m) {
    progress_.fetch_add(1, std::memory_order_relaxed);
    active_.store(true, std::memory_order_relaxed);
    td_.set_active();
    try {
      const WireHeader first = group_header(m.header(), g_);
      // The value's shared copy, if any (placed, or made by the first group), with the message's reference:
      // released once every group has its own, also when a group fails.
      struct Held {
        void* handle = nullptr;
        TTBase* tt = nullptr;
        std::uint16_t input = 0;
        ~Held() {
          if (handle) tt->release_remote(input, handle);
        }
      } held{nullptr, g_.tts[first.tt].get(), first.input};
      MessageBuffers::Lease bytes(buffers, {});  // a placed buffer of ours: kept again once delivered
      if (!placed_.empty() && !m.payload().empty()) {
        if (auto it = placed_.find(m.payload().data()); it != placed_.end()) {
          held.handle = it->second.handle;
          bytes.bytes = std::move(it->second.bytes);
          placed_.erase(it);
        }
      }
      // The groups, in order: each names a template task, its input and its keys (flow_wire.hpp). A group after
      // the first must name an input of the first one's value type (they share its copy).
      WireHeader h = first;
      std::span<const std::byte> rest = m.header().subspan(sizeof h);
      for (;;) {
        rest = rest.subspan(g_.tts[h.tt]->deliver_remote(h, rest, m.payload(), held.handle));
        if (rest.empty()) break;
        h = group_header(rest, g_);
        rest = rest.subspan(sizeof h);
        if (g_.tts[h.tt]->input_type(h.input) != held.tt->input_type(first.input))
          throw error("weft::flow: a message for '" + g_.tts[h.tt]->name() + "', input " + std::to_string(h.input) +
                      ", carries a value of another type than its other keys (did every rank build the same graph?)");
      }
    } catch (const std::exception& x) {
      // The sender cannot be told; its peers would wait for this rank forever: end the job, naming the error.
      comm::abort_job(std::string("weft::flow: a message from rank ") + std::to_string(m.source()) +
                      " cannot be delivered: " + x.what());
    }
  }

  static std::size_t poll_source(void* self) noexcept {
    try {
      return static_cast<Remote*>(self)->transport_.poll();
    } catch (const std::exception& x) {
      comm::abort_job(std::string("weft::flow: progress failed: ") + x.what());
    }
  }
  // While a fence runs, work may come from any rank (timed sleeps at least); operations in flight (a
  // rendezvous, an aggregated buffer not sent) move only when someone polls: idle workers keep polling then.
  static wd::ProgressDemand source_demand(void* self) noexcept {
    auto* r = static_cast<Remote*>(self);
    if (r->transport_.outstanding() != 0) return wd::ProgressDemand::polling;
    return r->running_.load(std::memory_order_acquire) ? wd::ProgressDemand::timed : wd::ProgressDemand::none;
  }

  GraphState& g_;
  /// The watchdog's exchange of views. Before the transport, whose handlers use it: destroyed after it.
  std::unique_ptr<comm::WatchdogViews> watchdog_views_;
  comm::Transport transport_;  // collective (MPI_Comm_dup); destroyed last, collectively
  comm::TerminationDetector td_;
  comm::Kind kind_ = 0;
  wd::ProgressSource source_{};
  std::atomic<bool> active_{false};   // this rank's view of the detector's active flag (under the token)
  std::atomic<bool> running_{false};  // a fence is executing
  struct Placed {
    void* handle;                        // what place_remote returned, for deliver_remote
    WireBytes bytes;                     // or a buffer of ours (MessageBuffers)
  };
  std::unordered_map<const std::byte*, Placed> placed_;  // under the progress token
  // The watchdog.
  double watchdog_ = 0;
  std::uint64_t across_run_ = 0;  ///< the epoch's RunAcrossRanks::index (fence's thread only)
  std::uint32_t departure_calls_ = 0;  ///< (fence's thread only; see check_departures_sometimes)
  std::atomic<std::uint64_t> progress_{0};  // messages of the graph sent and received here
  std::atomic<wd::Task*> root_{nullptr};    // the fence's root task, while one runs
  std::pair<std::uint64_t, std::int64_t> last_progress_{};  // on the fence's waiting worker only
  std::chrono::steady_clock::time_point last_change_{};
};

/// The job has several processes: MPI already says so, or the launcher's environment does (so that a program
/// started without mpirun never initialises MPI).
bool several_processes() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) return false;
  if (init) {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n > 1;
  }
  return weft::process_rank().several();
}

}  // namespace

std::pair<int, int> processes() {
  if (!several_processes()) return {1, 0};
  try {
    const comm::MpiEnv& env = comm::MpiEnv::get();
    return {env.size(), env.rank()};
  } catch (const comm::comm_error& e) {
    throw error(std::string("weft::flow: cannot run across processes: ") + e.what());
  }
}

std::unique_ptr<RemoteBase> make_remote(GraphState& g) {
  if (!several_processes()) return nullptr;
  try {
    return std::make_unique<Remote>(g);
  } catch (const comm::comm_error& e) {
    throw error(std::string("weft::flow::graph: cannot run across processes: ") + e.what());
  }
}

void execute_distributed(RemoteBase& r, weft::Context& cx, void (*seeds)(void*), void* arg) {
  static_cast<Remote&>(r).execute(cx, seeds, arg);
}

}  // namespace weft::flow::detail

#else  // without MPI: always one process

namespace weft::flow::detail {
std::pair<int, int> processes() { return {1, 0}; }
std::unique_ptr<RemoteBase> make_remote(GraphState&) { return nullptr; }
void execute_distributed(RemoteBase&, weft::Context&, void (*)(void*), void*) {}
}  // namespace weft::flow::detail

#endif

namespace weft::flow {
int num_processes() { return detail::processes().first; }
int process_id() { return detail::processes().second; }
}  // namespace weft::flow
