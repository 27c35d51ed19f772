// weft-apps — how each variant drives an application (apps.hpp). The serial reference is here; the OpenMP
// drivers are in omp_drivers.cpp (compiled by GCC with libgomp and by clang++-16 with libomp), the weft drivers
// in weft_drivers.cpp. Each driver times only its parallel construct (Runtime::run, the `parallel` region).
#pragma once

#include <string>

#include "../micro/common.hpp"
#include "apps.hpp"

// Every application type; the drivers are instantiated for each.
#define WAPPS_FOR_EACH_APP(X) X(Multisaxpy) X(HeatFixed) X(HeatWhile) X(Nbody) X(Hpccg) X(Hpcg)

namespace wapps {

struct RunConfig {
  long iters = 1;   // iterations (the upper bound for an application with a condition)
  int workers = 1;  // threads
};
struct RunOutcome {
  double seconds = 0;
  long iterations = 0;  // iterations run (fewer than RunConfig::iters when the condition stopped the loop)
};

/// Serial reference: the task bodies called in program order. use_condition = false: exactly c.iters iterations.
struct SerialSpawn {
  template <class F, class... D>
  void operator()(F&& f, const D&...) {
    f();
  }
};
template <class App>
RunOutcome run_serial(App& app, const RunConfig& c, bool use_condition = true) {
  SerialSpawn s;
  const double t0 = wbench::now_s();
  const long done = run_loop(
      app, c.iters, [&](int slot) { app.iteration(s, slot); }, [](int) {}, use_condition);
  return {wbench::now_s() - t0, done};
}

// OpenMP (omp_drivers.cpp): tasks with depend clauses spawned by one thread of a `parallel` region
// (`single`), and work sharing (`for` per phase).
template <class App>
RunOutcome run_omp_tasks(App& app, const RunConfig& c);
template <class App>
RunOutcome run_omp_for(App& app, const RunConfig& c);
std::string omp_describe();

// weft (weft_drivers.cpp).
enum class WeftMode {
  tasks,     ///< every iteration spawns its tasks
  taskiter,  ///< taskiter: record once, replay as a cyclic graph without barriers (unless taskiter chooses
             ///< one: a boundary of broadcasts, see weft/taskiter.hpp)
  overlap,   ///< taskiter with weft::no_barrier: never a barrier
  replay,    ///< record once, replay with a barrier between iterations (periods of `period()` iterations;
             ///< a condition is checked once per period, so up to 2*period-1 more iterations than serially)
  update,    ///< taskiter with weft::update: the body runs again every iteration, without a barrier (with
             ///< one in a while-loop, whose condition is then checked once per period, as for replay)
  update_barrier,  ///< weft::update with weft::replay_barrier: the body runs again once the previous period
                   ///< has finished
};
template <class App>
RunOutcome run_weft(App& app, const RunConfig& c, WeftMode mode, bool immediate_successor);
/// Whether `mode` is available in this build, and if not why.
bool weft_mode_available(WeftMode mode, std::string* why);
std::string weft_describe();

}  // namespace wapps
