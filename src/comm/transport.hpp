// Active messages over MPI: the one transport under weft's distributed front ends (flow graphs across ranks,
// offloaded tasks, MPI inside tasks).
//
//   Transport t;                                        // collective: every rank constructs its transport
//   Kind k = t.register_kind("ping", {.deliver = ...}); // same order on every rank: ids agree, never pointers
//   t.send(dest, k, header, payload);                   // any thread, any time; copies small messages
//   t.poll();                                           // any thread; one at a time; runs the handlers
//
// Sending. send() appends the message to its destination's aggregation buffer (a short spin lock per
// destination), so several small messages travel in one MPI message; the buffers go out when some thread
// polls. A payload above TransportConfig::rendezvous_threshold travels by rendezvous: the buffered frame
// announces its size and an MPI tag, the receiver's handler says where the bytes go (Handler::place), and an
// MPI_Isend / MPI_Irecv pair moves them straight there; the sender's own MPI_Isend is posted right after the
// announcement, so MPI's rendezvous protocol does the flow control and no extra round trip is spent. A message
// to one's own rank never touches MPI (a large one costs one copy, into the placed buffer).
//
// Receiving. poll() takes the process-wide progress token (MpiEnv::token()) with a try-lock and returns at once
// when another thread has it; it then does a bounded amount of work: flushes what was sent since the last poll
// (MPI_Isend), posts again the receive ring's slots that the last polls consumed (pre-posted MPI_Irecv with
// MPI_ANY_SOURCE), runs one MPI_Testsome over the outstanding sends and rendezvous (if any), tests the ring in
// posting order (MPI_Test on its head) and dispatches up to `budget` messages, runs the progress hooks and
// flushes what the handlers sent. RecvMode::probe replaces the ring with MPI_Improbe/MPI_Imrecv (measured
// slower here: bench/comm). No MPI call on this path blocks.
// Handlers run on the polling thread, under the token, one at a time; send() takes no lock a handler could hold,
// so handlers may send. A handler that calls poll() gets 0 (the token is taken); one that throws ends the job
// (abort_job: its message is lost, and a peer would wait for it).
//
// Order. Messages from one rank to another are dispatched in the order they were sent; for a large message,
// place() is called in that order and deliver() when its bytes have arrived (later messages may be delivered
// first). A message whose kind is not registered yet on the receiving rank (that rank is still constructing its
// clients) is kept and delivered once the kind is registered, in order.
//
// Memory. Aggregation buffers are taken from a pool and return to it when MPI has sent them; nothing bounds
// what senders append between two polls (the engine polls at scheduling points and when idle).
//
// Every rank must use the same TransportConfig (buffer sizes) and register the same kinds in the same order;
// check_consistency() verifies both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace weft::comm {

/// Message kind: an index in registration order, the same on every rank.
using Kind = std::uint16_t;

/// One message as a handler sees it. A view: its spans are valid only during the handler call.
class Message {
 public:
  Message(int source, Kind kind, std::uint32_t epoch, std::span<const std::byte> header,
          std::span<const std::byte> payload, std::size_t payload_size) noexcept
      : source_(source), kind_(kind), epoch_(epoch), header_(header), payload_(payload), size_(payload_size) {}

  int source() const noexcept { return source_; }
  Kind kind() const noexcept { return kind_; }
  /// The number the sender attached (TerminationDetector: the message's epoch); opaque to the transport.
  std::uint32_t epoch() const noexcept { return epoch_; }
  std::span<const std::byte> header() const noexcept { return header_; }
  /// The payload; for a large message the placed buffer (its first payload_size() bytes). Empty in place().
  std::span<const std::byte> payload() const noexcept { return payload_; }
  /// The payload's size, also in place() where the bytes have not arrived yet.
  std::size_t payload_size() const noexcept { return size_; }

 private:
  int source_;
  Kind kind_;
  std::uint32_t epoch_;
  std::span<const std::byte> header_, payload_;
  std::size_t size_;
};

/// What a rank does with the messages of one kind.
struct Handler {
  /// Called for every message, on the polling thread.
  std::function<void(const Message&)> deliver{};
  /// Optional, for large messages (rendezvous): called when the announcement arrives (payload() empty,
  /// payload_size() known); returns where the payload must go, at least payload_size() bytes, valid until
  /// deliver() is called for that message. Without it the transport allocates the buffer and frees it after
  /// deliver().
  std::function<std::span<std::byte>(const Message&)> place{};
};

/// Called on the polling thread once a borrowed payload has been sent and its buffer may be reused.
using SendDone = std::function<void()>;

/// How poll() receives the aggregated (eager) MPI messages.
enum class RecvMode {
  ring,   ///< recv_slots pre-posted MPI_Irecv(MPI_ANY_SOURCE): MPI copies an arrival straight into a slot
  probe,  ///< MPI_Improbe then MPI_Imrecv into a buffer of the right size: no receive posted in advance
};

/// Settings of a transport. Every rank must use the same values.
struct TransportConfig {
  /// Payloads larger than this move by rendezvous; smaller ones are copied into the aggregation buffer.
  std::size_t rendezvous_threshold = 8 * 1024;
  /// Largest header (in every message).
  std::size_t max_header = 1024;
  /// Largest aggregated MPI message, and the size of each receive slot. At least
  /// rendezvous_threshold + max_header + 40 (one message of each maximum plus the framing).
  std::size_t aggregate_bytes = 32 * 1024;
  /// RecvMode::ring: receives posted in advance.
  unsigned recv_slots = 8;
  /// Messages dispatched by poll() when it is given no budget.
  unsigned poll_budget = 256;
  RecvMode recv_mode = RecvMode::ring;
  /// Most message kinds (register_kind).
  unsigned max_kinds = 256;
};

/// Counters of one kind (messages and bytes of header + payload).
struct KindStats {
  std::string name;
  std::uint64_t messages_sent = 0, bytes_sent = 0, messages_received = 0, bytes_received = 0;
};

/// Counters since construction. Messages are counted when they leave in a flush (sent) and when they are
/// dispatched (received); bytes are header + payload.
struct TransportStats {
  std::uint64_t messages_sent = 0, bytes_sent = 0, messages_received = 0, bytes_received = 0;
  std::uint64_t self_messages = 0;       ///< of messages_sent: to this rank, without MPI
  std::uint64_t rendezvous_sent = 0, rendezvous_received = 0;
  std::uint64_t mpi_messages_sent = 0;   ///< aggregated eager MPI messages
  std::uint64_t mpi_bytes_sent = 0;
  std::uint64_t polls = 0;               ///< poll() calls that got the token
  std::uint64_t busy_polls = 0;          ///< of those, the ones that did something
  double poll_seconds = 0;               ///< time spent inside poll() calls that got the token
  std::vector<KindStats> kinds;          ///< per registered kind, by id
};

class Transport {
 public:
  /// Collective over every rank (MPI_Comm_dup of weft's communicator); sets up MPI first if needed
  /// (MpiEnv::get(), which may throw comm_error). Throws comm_error for an invalid config.
  explicit Transport(const TransportConfig& config = {});
  /// Collective. The client must have quiesced first: no message in flight to or from this rank (a
  /// TerminationDetector's epoch has ended, or the client's own protocol says so). Completes this rank's sends,
  /// meets the other ranks (MPI_Ibarrier) and releases the receives. Messages still undelivered then are
  /// reported on stderr (a client bug), never delivered: their handlers' owners may be gone.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  const TransportConfig& config() const noexcept;

  /// Registers the next kind. Every rank registers the same kinds in the same order (that order is the id).
  /// Any thread, any time (also from a handler); messages of a kind that arrive before it is registered
  /// here wait for it. Throws comm_error beyond max_kinds or without a deliver function.
  Kind register_kind(std::string name, Handler handler);

  /// Retires a kind whose client is going away: a message of that kind arriving later ends the job with a
  /// line naming it (a protocol error: the client should have waited for its messages), instead of running a
  /// handler whose captures are gone. The id stays taken. Any thread; waits for the token unless in a handler.
  void retire_kind(Kind kind);
  /// The name a kind was registered with ("kind N" for an id not registered here), for messages. Any thread.
  std::string kind_name(Kind kind) const;

  /// Sends a message; the header and payload are copied before send() returns (a large payload too: use the
  /// overload with `done` to avoid that copy). Any thread, also handlers. The message leaves at a later poll()
  /// of this rank. Throws comm_error for a bad rank, kind or a header larger than max_header.
  void send(int dest, Kind kind, std::span<const std::byte> header, std::span<const std::byte> payload,
            std::uint32_t epoch = 0);
  /// As send(), but a large payload is borrowed, not copied: it must stay valid and unchanged until `done`
  /// runs (on a polling thread, after MPI has sent it). For a payload at or below the threshold, which is
  /// copied, `done` runs before send() returns.
  void send(int dest, Kind kind, std::span<const std::byte> header, std::span<const std::byte> payload,
            SendDone done, std::uint32_t epoch = 0);

  /// Progress (see above). Returns the number of events handled (messages dispatched, sends and rendezvous
  /// completed, MPI messages flushed, what the hooks report): 0 when there was nothing to do or another
  /// thread holds the token. `budget`: most messages dispatched by this call (0: config().poll_budget).
  std::size_t poll(std::size_t budget = 0);

  /// Adds a function that every poll() runs under the token, after the dispatch and before the flush (a
  /// protocol's state machine, e.g. TerminationDetector); it returns how many events it handled. Returns an id
  /// for remove_progress_hook. Any thread; waits for the token unless called from a handler.
  std::size_t add_progress_hook(std::function<std::size_t()> hook);
  void remove_progress_hook(std::size_t id);

  /// Operations in progress on this rank: messages buffered but not flushed, MPI sends and rendezvous not
  /// completed, received messages not yet dispatched. 0 means that this rank owes no progress to anyone (an
  /// idle worker may then sleep, as far as the transport is concerned). A snapshot, from any thread.
  std::size_t outstanding() const noexcept;

  /// Collective: checks that every rank registered the same kinds (by name, in order) and uses the same
  /// config; throws comm_error naming the difference otherwise. Keeps progressing while it waits.
  void check_consistency();

  /// Collective: the sum of `value` over every rank (MPI_Iallreduce on the transport's communicator), progressing
  /// meanwhile. Not from a handler.
  std::uint64_t sum_over_ranks(std::uint64_t value);

  /// Counters (see TransportStats); any thread.
  TransportStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::comm
