// weft-apps — weft drivers: plain tasks (every iteration spawns its tasks), taskiter (the first `period`
// iterations are recorded and the rest replayed as a cyclic graph), replay with a barrier between iterations,
// and taskiter with weft::update (the body runs again every iteration), without and with that barrier.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include <weft/weft.hpp>

#include "drivers.hpp"

#if __has_include(<weft/taskiter.hpp>)
#include <weft/taskiter.hpp>
#define WAPPS_HAVE_TASKITER 1
#else
#define WAPPS_HAVE_TASKITER 0
#endif

namespace wapps {
namespace {

/// Spawns the tasks of apps.hpp as weft tasks (the group protocol is described at wapps::Group).
struct WeftSpawn {
  weft::Context& cx;

  template <class F, class... D>
  void operator()(F&& f, const D&... d) {
    cx.spawn(std::forward<F>(f), access(d)...);
  }
  static weft::Access access(const In& a) { return {a.p, 1, weft::AccessMode::in}; }
  static weft::Access access(const InOut& a) { return {a.p, 1, weft::AccessMode::inout}; }
  static weft::Access access(const GroupWrite& a) { return {&a.g->token, 1, weft::AccessMode::in}; }
  static weft::Access access(const Gather& a) { return {&a.g->token, 1, weft::AccessMode::inout}; }
};

/// One runtime per (workers, immediate successor), created on first use and kept, so that thread start-up is
/// not timed. Other options come from the WEFT_* environment variables.
weft::Runtime& runtime(int workers, bool immediate_successor) {
  static std::map<std::pair<int, bool>, std::unique_ptr<weft::Runtime>> cache;
  auto& rt = cache[{workers, immediate_successor}];
  if (!rt) {
    weft::Options o = weft::Options::from_environment();
    o.num_threads = unsigned(workers);
    o.immediate_successor = immediate_successor;
    rt = std::make_unique<weft::Runtime>(o);
  }
  return *rt;
}

template <class App>
void wait_for_condition(weft::Context& cx, const App& app, int slot) {
  if constexpr (requires { app.condition_datum(slot); }) cx.taskwait_on(app.condition_datum(slot));
}

}  // namespace

bool weft_mode_available(WeftMode mode, std::string* why) {
  if (mode == WeftMode::tasks || WAPPS_HAVE_TASKITER) return true;
  if (why) *why = "this weft has no include/weft/taskiter.hpp";
  return false;
}

template <class App>
RunOutcome run_weft(App& app, const RunConfig& c, WeftMode mode, bool immediate_successor) {
  weft::Runtime& rt = runtime(c.workers, immediate_successor);
  long done = 0;
  const double t0 = wbench::now_s();
  if (mode == WeftMode::tasks) {
    rt.run([&](weft::Context& cx) {
      WeftSpawn s{cx};
      done = run_loop(
          app, c.iters, [&](int slot) { app.iteration(s, slot); },
          [&](int slot) { wait_for_condition(cx, app, slot); });
    });
  } else {
#if WAPPS_HAVE_TASKITER
    const long k = app.period();
    // Recording runs the body for iterations 0..k-1 (unroll(k)); slot = iteration mod k.
    auto body = [&](weft::Context& it, std::uint64_t iteration) {
      WeftSpawn s{it};
      app.iteration(s, int(iteration % std::uint64_t(k)));
    };
    auto loop = [&](weft::Context& cx, auto... how) {
      if constexpr (requires { app.keep_going(0); }) {
        if (app.has_condition()) {
          // cond() runs before the first iteration, then after every iteration j, deciding iteration j + k (the
          // control is strided by unroll(k)): the run_loop rule, so the same iterations run as in every other
          // variant. Under replay_barrier it runs after every period p (iterations pk..pk+k-1) instead, deciding
          // period p+1; then it checks the residual of the period's last iteration. The taskiter is a child task
          // that outlives this scope: cond keeps its state in its own captures.
          const bool per_period = mode != WeftMode::taskiter && mode != WeftMode::overlap;
          auto cond = [&app, &done, k, iters = c.iters, per_period, calls = 0L, stopped = false]() mutable {
            const long j = calls++ - 1;  // -1: the call before the first iteration
            if (j < 0) return true;      // run_app ensures iters >= k
            if (per_period) {
              stopped = stopped || (j + 2) * k > iters || !app.keep_going(int(k - 1));
              if (!stopped) done += k;
            } else {
              stopped = stopped || j + k >= iters || !app.keep_going(int(j % k));
              if (!stopped) ++done;
            }
            return !stopped;
          };
          done = k;
          cx.taskiter_while(std::move(cond), body, weft::unroll(std::uint32_t(k)), how...);
          return;
        }
      }
      cx.taskiter(std::uint64_t(c.iters), body, weft::unroll(std::uint32_t(k)), how...);
      done = c.iters;
    };
    rt.run([&](weft::Context& cx) {
      if (mode == WeftMode::replay)
        loop(cx, weft::replay_barrier);
      else if (mode == WeftMode::update)
        loop(cx, weft::update);
      else if (mode == WeftMode::update_barrier)
        loop(cx, weft::update, weft::replay_barrier);
      else if (mode == WeftMode::overlap)
        loop(cx, weft::no_barrier);
      else
        loop(cx);
    });
#endif
  }
  return {wbench::now_s() - t0, done};
}

std::string weft_describe() {
  const weft::Options o = weft::Options::from_environment();
  return std::string("weft (max_tasks ") + std::to_string(o.max_tasks) + (o.bind_to_cores ? ", bound" : "") +
         (WAPPS_HAVE_TASKITER ? ", taskiter)" : ", no taskiter)");
}

#define WAPPS_INSTANTIATE(A) template RunOutcome run_weft<A>(A&, const RunConfig&, WeftMode, bool);
WAPPS_FOR_EACH_APP(WAPPS_INSTANTIATE)

}  // namespace wapps
