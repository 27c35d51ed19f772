// Distributed termination detection for message-driven computations, by epoch: Mattern's four-counter method
// (F. Mattern, "Algorithms for distributed termination detection", Distributed Computing 2(3), 1987, section 5),
// with non-blocking control waves over the Transport.
//
//   TerminationDetector td(transport);              // collective order: registers its control kind
//   Kind k = td.register_kind("work", handler);      // basic messages: counted and stamped with their epoch
//   std::uint32_t e = td.begin_epoch();              // this rank enters epoch e, active
//   td.counted_send(dest, k, header, payload);       // while active
//   td.set_passive();                                // nothing left to do here until a message comes
//   while (!td.terminated(e)) td.poll();             // every rank learns the end of e
//
// The computation. In an epoch each rank is active or passive. It starts active (begin_epoch); it sends basic
// messages only while active; it becomes passive when it has nothing left to do (set_passive); a passive rank
// becomes active again only by receiving a basic message of the epoch (the handler calls set_active() if the
// message leaves work behind, e.g. deferred tasks). With several threads per rank, the client aggregates: the
// rank is passive when none of its threads has work.
//
// The method. Each rank counts the basic messages it sent and received in the epoch. Rank 0 runs waves down a
// tree (fan-out TerminationConfig::fanout): a rank forwards the wave to its children at once and reports up when
// it is passive in that epoch and its children have reported, with its counters added to theirs; so a wave
// completes only when every rank has been seen passive, and each rank's counters are read once per wave, at its
// report. Rank 0 declares the epoch terminated when two consecutive waves see the same totals, with sent ==
// received: Mattern's condition (received in the first wave == sent in the second) then holds, which proves
// that no message was in flight and no rank active at the end of the first wave (a message received between the
// two reads would raise the second wave's received count). The end is sent down the tree; terminated(e) turns
// true on each rank as it arrives. Control messages are not counted. Waves only run while rank 0 is passive and
// stop at the first active rank, so a busy computation sees no control traffic beyond one pending wave.
//
// Epochs without barriers. Every basic message carries its epoch (Transport's epoch field). A rank learns the
// end of epoch e at different times; one that has learnt it may begin e + 1 and send before another has: a
// message of an epoch that the receiving rank has not begun yet is kept (payload included) and delivered, in
// order, once that rank begins it; it is counted then, in its own epoch. (A rank can receive nothing older than
// its epoch, nor two epochs ahead: either would mean an epoch ended with a message in flight.) begin_epoch()
// requires the previous epoch to have terminated on this rank.
//
// Threads. begin_epoch, set_active, set_passive and counted_send may be called from any thread; the detector's
// own work runs inside Transport::poll() (a progress hook), so whoever polls the transport drives the waves.
// Handlers of basic kinds run under the progress token like any handler.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/transport.hpp"

namespace weft::comm {

struct TerminationConfig {
  /// Children per rank in the wave tree (1: a chain). Every rank must use the same value.
  unsigned fanout = 4;
};

struct TerminationStats {
  std::uint64_t waves = 0;           ///< waves this rank started (rank 0 only)
  std::uint64_t early_messages = 0;  ///< basic messages that arrived before this rank began their epoch
  std::uint64_t control_messages = 0;  ///< control messages this rank received
  std::uint32_t epoch = 0;             ///< the epoch this rank is in
  std::uint32_t terminated = 0;        ///< the last epoch this rank knows has terminated
  std::uint64_t epoch_sent = 0, epoch_received = 0;  ///< basic messages of `epoch` sent and received here
  bool active = false;                 ///< this rank's flag in `epoch`
};

class TerminationDetector {
 public:
  /// Registers the control kind on `transport` (so: in the same order on every rank as the other kinds) and
  /// its progress hook. The transport must outlive the detector.
  explicit TerminationDetector(Transport& transport, const TerminationConfig& config = {});
  /// Retires its kinds and removes its hook. Destroy it only once its last epoch has terminated.
  ~TerminationDetector();
  TerminationDetector(const TerminationDetector&) = delete;
  TerminationDetector& operator=(const TerminationDetector&) = delete;

  /// Registers a kind of basic messages (see Transport::register_kind): delivered to `handler` only in their
  /// epoch, counted when delivered.
  Kind register_kind(std::string name, Handler handler);

  /// Enters the next epoch (the first is 1), active. Throws comm_error if the current one has not terminated
  /// on this rank.
  std::uint32_t begin_epoch();
  /// The epoch this rank is in (0 before the first begin_epoch).
  std::uint32_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }
  void set_active() noexcept;
  void set_passive() noexcept;

  /// Sends a basic message of the current epoch (see Transport::send), counted. Only while active. Throws
  /// comm_error outside an epoch (before the first, or once the current one has terminated).
  void counted_send(int dest, Kind kind, std::span<const std::byte> header, std::span<const std::byte> payload);
  void counted_send(int dest, Kind kind, std::span<const std::byte> header, std::span<const std::byte> payload,
                    SendDone done);

  /// Transport::poll(): the detector's work runs in it.
  std::size_t poll(std::size_t budget = 0) { return transport_.poll(budget); }
  /// True once epoch e has terminated, as this rank knows (every epoch up to e has, then).
  bool terminated(std::uint32_t e) const noexcept { return terminated_.load(std::memory_order_acquire) >= e; }

  TerminationStats stats() const noexcept;
  Transport& transport() noexcept { return transport_; }

 private:
  struct Early {  // a basic message ahead of this rank's epoch
    const Handler* client;
    int source;
    Kind kind;
    std::uint32_t epoch;
    std::vector<std::byte> header;
    std::unique_ptr<std::byte[]> payload;
    std::size_t size;
  };
  struct Control;

  std::uint32_t check_sending_epoch() const;
  void deliver_basic(const Handler& client, const Message& m);
  std::span<std::byte> place_basic(const Handler& client, const Message& m);
  std::size_t drain_early(std::uint32_t epoch);
  void on_control(const Message& m);
  std::size_t step();
  bool passive_in(std::uint32_t e) const noexcept;
  void send_control(int dest, const Control& c);
  void evaluate(std::uint32_t e, std::uint64_t sent, std::uint64_t received);

  Transport& transport_;
  TerminationConfig cfg_;
  int rank_, size_;
  int parent_;
  std::vector<int> children_;
  Kind control_kind_;
  std::vector<Kind> kinds_;                 // registered basic kinds (retired in the destructor)
  std::deque<std::unique_ptr<Handler>> clients_;  // the clients' handlers, at stable addresses
  std::size_t hook_id_ = 0;
  std::uint64_t counters_id_ = 0;  // the profile's "termination" section

  // Written by client threads.
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<bool> active_{false};
  std::atomic<std::uint64_t> sent_[2];      // by epoch parity: epochs e and e + 1 may overlap on a rank
  // Written under the progress token.
  std::atomic<std::uint64_t> received_[2];
  std::atomic<std::uint32_t> terminated_{0};
  std::atomic<std::uint64_t> waves_{0}, early_count_{0}, control_count_{0};

  // Under the progress token only.
  std::deque<Early> early_;
  std::map<const std::byte*, std::unique_ptr<std::byte[]>> early_buffers_;  // placed for early rendezvous
  std::uint32_t wave_epoch_ = 0, wave_ = 0;  // the wave this rank takes part in (wave_ == 0: none)
  unsigned replies_ = 0;                      // children that reported in it
  std::uint64_t wave_sent_ = 0, wave_received_ = 0;  // their sums
  std::uint32_t next_wave_ = 0;                       // rank 0: number of the last wave started
  bool have_previous_ = false;                        // rank 0: the previous wave of wave_epoch_ ...
  std::uint32_t previous_epoch_ = 0;
  std::uint64_t previous_sent_ = 0, previous_received_ = 0;  // ... and its totals
};

}  // namespace weft::comm
