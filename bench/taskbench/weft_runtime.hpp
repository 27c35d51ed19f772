// The weft runtime of the weft implementations of Task Bench (taskbench-weft, -weft-taskiter, -weft-flow).
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <weft/weft.hpp>

#include "core/core.hpp"

namespace taskbench {

/// weft::Options from the WEFT_* environment (WEFT_BIND, WEFT_MAX_TASKS, ...) with -workers threads; a bad value
/// exits 2 with the message, like a bad flag.
inline weft::Options weft_options(const App& app) {
  try {
    weft::Options options = weft::Options::from_environment();
    options.num_threads = static_cast<unsigned>(app.workers);
    options.validate();
    return options;
  } catch (const weft::config_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(2);
  }
}

/// The Runtime for `options`; a profile or trace file (WEFT_PROFILE=json:FILE, WEFT_TRACE) that cannot be created
/// exits 2 with the message, like a bad value.
inline weft::Runtime make_runtime(const weft::Options& options) {
  try {
    return weft::Runtime(options);
  } catch (const weft::config_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(2);
  }
}

/// Starts the runtime before the timer, as the OpenMP, oneTBB and MPI implementations start theirs: faults in
/// the task pools with as many (empty) tasks as a run can have unfinished, then runs one task per worker, each
/// waiting (at most a second) until all have started, as the oneTBB implementation does. So every worker is
/// awake, and polling, when the timed run begins: a worker that fell asleep while the program set up its
/// buffers can take milliseconds to be scheduled again (measured on a 2-core virtual machine: 2-4 ms, longer
/// than a whole fine-grained run), and merely waking it, as a run does, does not wait for that.
inline void start_runtime(weft::Runtime& rt) {
  const std::size_t n = rt.options().max_tasks;
  const unsigned workers = rt.num_workers();
  std::atomic<unsigned> arrived{0};
  rt.run([&](weft::Context& cx) {
    for (std::size_t i = 0; i < n; ++i) cx.spawn([] {});
    cx.taskwait();
    for (unsigned k = 0; k < workers; ++k)
      cx.spawn([&] {
        arrived.fetch_add(1);
        const double give_up = now_seconds() + 1.0;
        while (arrived.load() < workers && now_seconds() < give_up) std::this_thread::yield();
      });
  });
}

}  // namespace taskbench
