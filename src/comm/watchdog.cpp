#include "comm/watchdog.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/mpi_env.hpp"

namespace weft::comm {

WatchdogViews::WatchdogViews(Transport& t, const std::string& name, std::function<std::string()> view)
    : t_(t), view_(std::move(view)), answered_(new std::atomic<bool>[static_cast<std::size_t>(t.size())]) {
  for (int r = 0; r < t.size(); ++r) answered_[r].store(false, std::memory_order_relaxed);
  // Asked by a rank that is about to end the job: print, then say so (any run, any epoch).
  ask_ = t_.register_kind(name, {.deliver = [this](const Message& m) {
                               std::fprintf(stderr, "%s (asked by rank %d)\n", view_().c_str(), m.source());
                               std::fflush(stderr);
                               t_.send(m.source(), answer_, {}, {});
                             }});
  answer_ = t_.register_kind(name + ".answer", {.deliver = [this](const Message& m) {
                                  answered_[m.source()].store(true, std::memory_order_relaxed);
                                }});
}

void WatchdogViews::fire(const std::string& what) {
  std::fprintf(stderr, "%s\n", view_().c_str());
  const int rank = t_.rank(), size = t_.size();
  if (size == 1) abort_job(what);
  for (int r = 0; r < size; ++r)
    if (r != rank) t_.send(r, ask_, {}, {});
  // The others print while this rank goes on polling (their answers come only through polls).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  auto all_answered = [&] {
    for (int r = 0; r < size; ++r)
      if (r != rank && !answered_[r].load(std::memory_order_relaxed)) return false;
    return true;
  };
  while (!all_answered() && std::chrono::steady_clock::now() < deadline)
    if (t_.poll() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::string silent;
  int n_silent = 0;
  for (int r = 0; r < size; ++r)
    if (r != rank && !answered_[r].load(std::memory_order_relaxed)) {
      if (++n_silent <= 16) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    }
  if (n_silent > 16) silent += ", ... (" + std::to_string(n_silent) + " in all)";
  if (n_silent == 0)
    abort_job(what + "; the views of the other ranks are printed above (every rank answered: where a view "
                     "shows unfinished tasks that wait neither for messages nor for predecessors, a task does "
                     "not return or waits outside weft)");
  abort_job(what + "; the views of the ranks that answered are printed above; no answer within a second from " +
            "rank(s) " + silent +
            " (a task that never returns on a rank with no other worker to poll, a wait outside weft, or a rank "
            "that is gone)");
}

}  // namespace weft::comm
