// The no-progress watchdog's last step (Options::watchdog_seconds), shared by the distributed front ends (a flow
// graph's fence, a cluster's run). The rank whose wait saw no progress prints its view, asks every other rank
// for its own, and gives them a second to print it and answer. Then it ends the job with a line that names the
// ranks that did not answer: a rank whose only worker is stuck in a task, or that is blocked outside weft, or
// gone.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "comm/transport.hpp"

namespace weft::comm {

class WatchdogViews {
 public:
  /// Registers the request and its answer on `t` as kinds `name` and `name`.answer (in the client's sequence
  /// of registrations: the same on every rank). `view`: this rank's view, one line; called on the polling
  /// thread when another rank asks, and by fire(). Both must outlive the transport's last poll.
  WatchdogViews(Transport& t, const std::string& name, std::function<std::string()> view);

  /// Prints this rank's view, asks the other ranks for theirs and polls `t` until they have all answered, for
  /// at most a second; then ends the job (abort_job) with `what` followed by the ranks that did not answer.
  [[noreturn]] void fire(const std::string& what);

 private:
  Transport& t_;
  std::function<std::string()> view_;
  Kind ask_ = 0, answer_ = 0;
  /// answered_[r]: rank r has printed its view (set by the answer's handler, on the polling thread).
  std::unique_ptr<std::atomic<bool>[]> answered_;
};

}  // namespace weft::comm
