// Flow graphs: assembling a graph from its template tasks, executing it inside Runtime::run, reporting and
// discarding tasks whose inputs never all arrived. See weft/flow.hpp.
#include "weft/cluster.hpp"
#include <deque>
#include <exception>
#include <set>
#include <sstream>

#include "flow/remote.hpp"
#include "weft/flow.hpp"

namespace weft::flow {

GraphBase::GraphBase(weft::Runtime* rt, std::unique_ptr<weft::Runtime> owned,
                     std::vector<std::shared_ptr<detail::TTBase>> roots)
    : state_(std::make_unique<detail::GraphState>()) {
  detail::GraphState& g = *state_;
  g.rt = rt;
  g.owned_rt = std::move(owned);
  // Every template task reachable through edges (in either direction) belongs to the graph: a value sent along
  // an edge can reach any of them.
  std::set<detail::TTBase*> seen;
  std::deque<std::shared_ptr<detail::TTBase>> todo(roots.begin(), roots.end());
  while (!todo.empty()) {
    std::shared_ptr<detail::TTBase> t = std::move(todo.front());
    todo.pop_front();
    if (!t) throw error("weft::flow::graph: a template task argument is null");
    if (!seen.insert(t.get()).second) continue;
    if (t->graph()) throw error("weft::flow::graph: template task '" + t->name() + "' already belongs to a graph");
    for (detail::EdgeBase* e : t->edges())
      for (const auto& w : e->tts)
        if (auto other = w.lock()) todo.push_back(std::move(other));
    g.tts.push_back(std::move(t));
  }
  if (rt->options().cluster && weft::num_nodes() > 1)
    throw error("weft::flow::graph: a flow graph cannot run on a cluster Runtime (Options::cluster) of several "
                "processes: give it a Runtime of its own");
  // One reader slot more than workers: a communication thread (Options::comm_thread) delivers messages too.
  // None with Options::biased_lock off: every lookup then takes the tables' shared_mutex.
  const unsigned workers = rt->options().biased_lock ? rt->num_workers() + 1 : 0;
  for (std::size_t i = 0; i < g.tts.size(); ++i) g.tts[i]->set_id(static_cast<std::uint32_t>(i));
  for (auto& t : g.tts) t->attach(&g, workers);
  // On several processes (collective): the transport, and a check that every rank built this same graph.
  try {
    g.remote_owned = detail::make_remote(g);
    if (g.remote_owned) {
      // A template task with the default keymap (a hash) receives values from every rank: its types must be
      // able to cross. (With a keymap of the program's own, a send that would cross throws when it happens.)
      // Every rank has the same types: all of them throw here alike.
      for (const auto& t : g.tts)
        if (const char* what = t->untransferable(); what && !t->has_keymap())
          throw error("weft::flow::graph: template task '" + t->name() + "' runs on several processes with the "
                      "default keymap, but " + what + " cannot cross processes (make it trivially copyable or "
                      "serializable with cereal, or give the task a keymap that keeps its keys where they are "
                      "sent from)");
    }
  } catch (...) {
    g.remote_owned.reset();
    for (auto& t : g.tts) t->attach(nullptr, 0);
    throw;
  }
  g.remote = g.remote_owned.get();
  for (const auto& t : g.tts) {
    t->set_remote(g.remote);
    for (detail::EdgeBase* e : t->edges()) e->remote = g.remote;
  }
}

GraphBase::~GraphBase() {
  if (!state_) return;  // moved from
  detail::GraphState& g = *state_;
  try {
    if (pending() != 0) discard_pending(nullptr);
  } catch (...) {
    // Called from a task of another runtime: the pending tasks' descriptors cannot be returned from here.
  }
  for (auto& t : g.tts) {
    for (detail::EdgeBase* e : t->edges()) e->remote = nullptr;
    t->set_remote(nullptr);
    t->attach(nullptr, 0);
  }
}

std::size_t GraphBase::pending() const {
  std::size_t n = 0;
  for (const auto& t : state_->tts) n += t->pending();
  return n;
}

void GraphBase::discard_pending(std::ostream* report) {
  detail::GraphState& g = *state_;
  auto drain = [&] {
    bool first = true;
    for (auto& t : g.tts) {
      if (t->pending() == 0) continue;
      if (report)
        *report << (first ? "" : "; ") << "'" << t->name() << "' (" << t->pending()
                << " pending; inputs counted from 0): ";
      first = false;
      t->drain(report, 3);
    }
  };
  // Pending tasks are engine descriptors: they go back to the pools of the graph's runtime, from one of its
  // workers.
  if (detail::current_engine() != nullptr && detail::current_engine() == g.engine)
    drain();
  else
    g.rt->run([&](weft::Context&) { drain(); });
}

void GraphBase::fence() {
  detail::GraphState& g = *state_;
  if (detail::current_engine() != nullptr)
    throw std::logic_error("weft::flow: fence()/wait() called from inside a task (it runs the graph with Runtime::run)");
  g.failed.store(false, std::memory_order_relaxed);
  std::exception_ptr failure;
  try {
    g.rt->run([&](weft::Context& cx) {
      g.anchor = weft::detail::ContextAccess::task(cx);
      g.engine = detail::current_engine();
      g.executing.store(true, std::memory_order_release);
      // Seeds queued before the run, in call order (seeds queued by other threads meanwhile are refused: see
      // GraphState::seed).
      auto run_seeds = [](void* p) {
        detail::GraphState& g = *static_cast<detail::GraphState*>(p);
        for (;;) {
          std::vector<std::unique_ptr<detail::GraphState::Seed>> batch;
          {
            std::lock_guard<std::mutex> lk(g.seeds_mutex);
            batch.swap(g.seeds);
          }
          if (batch.empty()) break;
          for (auto& s : batch) {
            try {
              s->run();
            } catch (...) {
              // On several processes this rank alone would leave the fence with the error, the others not:
              // as for a task that throws, end the job with one line.
              if (g.remote)
                g.remote->fail("weft::flow: invoke() on '" + *s->who + "', queued for this fence, threw " +
                               detail::describe_current_exception());
              throw;
            }
          }
        }
      };
      if (g.remote) [[unlikely]]
        detail::execute_distributed(*g.remote, cx, run_seeds, &g);  // until the graph ends on every rank
      else
        run_seeds(&g);
    });
  } catch (...) {
    failure = std::current_exception();
  }
  g.executing.store(false, std::memory_order_release);
  g.anchor = nullptr;
  if (failure) {
    {
      std::lock_guard<std::mutex> lk(g.seeds_mutex);
      g.seeds.clear();
    }
    if (pending() != 0) discard_pending(nullptr);
    std::rethrow_exception(failure);
  }
}

void GraphBase::wait() {
  fence();
  const std::size_t n = pending();
  // Several processes: every rank learns whether any rank has such tasks (and throws alike), each describing
  // its own.
  const std::uint64_t total = state_->remote ? state_->remote->sum(n) : n;
  if (total == 0) return;
  std::ostringstream os;
  os << "weft::flow: wait(): " << total << (total == 1 ? " task" : " tasks") << " never received all inputs";
  if (state_->remote)
    os << " (" << n << " on process " << state_->remote->rank << " of " << state_->remote->size << ")";
  if (n != 0) {
    os << ": ";
    discard_pending(&os);
  }
  // A key is not remembered once its task has run (flow.hpp): a second send to it is a new task.
  os << " (a value sent to a key whose task has already run starts a new task of that key: a duplicate send "
        "shows up here too)";
  throw error(os.str());
}

}  // namespace weft::flow
