#include "comm/transport.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/mpi_env.hpp"
#include "comm/sync.hpp"
#include "trace/clock.hpp"
#include "trace/counters.hpp"

namespace weft::comm {
namespace {

constexpr int kTagEager = 0;      // aggregated messages
constexpr int kFirstDataTag = 1;  // rendezvous data: kFirstDataTag .. MpiEnv::max_tag(), cycling
// One MPI call moves at most this much of a rendezvous payload (MPI counts are int): larger payloads travel as
// several pieces with the same tag, which MPI's non-overtaking rule keeps in order.
constexpr std::size_t kMaxPiece = std::size_t{1} << 30;

constexpr std::uint16_t kFlagRdv = 1;    // the payload travels by rendezvous (tag, payload_len = its size)
constexpr std::uint16_t kFlagLocal = 2;  // rendezvous to self: an 8-byte pointer to the RdvSend follows

// A message in an aggregation buffer: this frame, the header (padded to 8 bytes), then the payload (padded) for
// an eager message, nothing for a rendezvous announcement, the RdvSend pointer for a local rendezvous. Frames
// start at multiples of 8, so headers and payloads are 8-byte aligned for handlers.
struct Frame {
  std::uint16_t kind;
  std::uint16_t flags;
  std::uint32_t header_len;
  std::uint32_t epoch;
  std::uint32_t tag;
  std::uint64_t payload_len;
};
static_assert(sizeof(Frame) == 24);
constexpr std::size_t kFrame = sizeof(Frame);

constexpr std::size_t align8(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

// Counters written only under the progress token (one writer at a time, ordered by the token's
// acquire/release), read by stats() from any thread: a relaxed load and store, no read-modify-write.
inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

struct KindCounters {
  std::atomic<std::uint64_t> msgs_sent{0}, bytes_sent{0}, msgs_recv{0}, bytes_recv{0};
};

// A large payload being sent: announced in an aggregation buffer, posted to MPI right after that buffer.
struct RdvSend {
  int dest = 0;
  int tag = 0;
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::unique_ptr<std::byte[]> owned;  // send() without `done`: our copy
  SendDone done;
  unsigned pieces_left = 0;
};

// A large payload being received into its placed buffer.
struct RdvRecv {
  int source = 0;
  Kind kind = 0;
  std::uint32_t epoch = 0;
  std::vector<std::byte> header;
  std::byte* dst = nullptr;
  std::size_t size = 0;
  std::unique_ptr<std::byte[]> owned;  // no place(), or a kind not registered yet
  unsigned pieces_left = 0;
};

struct Buffer {
  std::unique_ptr<std::byte[]> data;
  std::size_t len = 0;
  std::vector<RdvSend*> rdv;  // announced in this buffer, in order: their data is posted after it
  Buffer* next = nullptr;     // sealed list / free list
};

// One destination: the buffer being filled and the full ones waiting for a flush, under a short lock.
struct alignas(64) Dest {
  SpinLock lock;
  Buffer* cur = nullptr;
  Buffer* sealed_head = nullptr;
  Buffer* sealed_tail = nullptr;
  std::uint32_t next_tag = 0;     // rendezvous tags to this destination, in announcement order
  std::atomic<bool> queued{false};  // on the dirty list, or about to be
  Dest* next_dirty = nullptr;
  int rank = 0;
};

// A message that arrived before its kind was registered here.
struct Stashed {
  int source;
  Kind kind;
  std::uint32_t epoch;
  std::vector<std::byte> header, payload;
};

// A received aggregated MPI message being dispatched (a ring slot, or a probed message).
struct Inbound {
  Buffer* buf = nullptr;
  MPI_Request req = MPI_REQUEST_NULL;  // RecvMode::probe (a ring slot's request is in Impl::reqs_)
  int source = -1;
  std::size_t len = 0, pos = 0;
  bool arrived = false;
};

// What an outstanding request is for.
struct ReqCtx {
  enum Type : std::uint8_t { ring_slot, eager_send, rdv_send, rdv_recv } type;
  void* ptr;
};

std::uint64_t fnv1a(std::uint64_t h, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace

struct Transport::Impl {
  explicit Impl(const TransportConfig& c);
  ~Impl();
  void shutdown();        // the MPI side of destruction (collective)
  void release_memory();  // everything allocated, whatever state MPI is in

  void send(int dest, Kind kind, std::span<const std::byte> header, std::span<const std::byte> payload,
            SendDone* done, std::uint32_t epoch);
  std::size_t poll(std::size_t budget);
  std::size_t progress(std::size_t budget);  // under the token

  // Send side.
  Buffer* take_buffer();
  void recycle(Buffer* b);
  void mark_dirty(Dest& d);
  std::size_t flush();
  void count_sent(const Buffer& b, bool self);
  void post_rdv_send(RdvSend* r);
  void finish_rdv_send(RdvSend* r);

  // Receive side.
  std::size_t test_requests(bool with_ring);
  std::size_t receive_ring(std::size_t& budget);
  std::size_t receive_probe(std::size_t& budget);
  std::size_t dispatch_self(std::size_t& budget);
  std::size_t dispatch_frames(Inbound& in, std::size_t& budget);
  void dispatch_one(int source, const std::byte* p);
  void deliver(const Message& m);
  void run_handler(const Message& m);
  const Handler* placer(Kind k);
  void discard_self_frames(const Buffer& b, std::size_t from);
  void start_rdv_recv(int source, const Frame& f, std::span<const std::byte> header);
  void local_rdv(const Frame& f, std::span<const std::byte> header, RdvSend* r);
  std::size_t drain_stash();
  void post_ring(std::size_t slot);
  void repost_ring();
  void push_req(MPI_Request r, ReqCtx ctx) {
    reqs_.push_back(r);
    ctx_.push_back(ctx);
  }
  void publish_outstanding();
  TransportStats stats() const;
  void append_counters(std::vector<weft::Counter>& out) const;  // the profile's "transport" section

  TransportConfig cfg_;
  MpiEnv& env_;
  ProgressToken& token_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, max_tag_ = 32766;

  std::unique_ptr<Dest[]> dests_;
  std::atomic<Dest*> dirty_{nullptr};  // Treiber stack of destinations with something to flush

  SpinLock pool_lock_;
  Buffer* pool_ = nullptr;  // free buffers (senders and the poller take them)

  // Kinds: a fixed array, so that a handler registering a kind cannot move the handler being run.
  std::unique_ptr<Handler[]> handlers_;
  std::unique_ptr<std::string[]> kind_names_;  // filled before nkinds_ publishes them
  std::atomic<unsigned> nkinds_{0};           // published with release after the slot is filled
  std::unique_ptr<KindCounters[]> kind_stats_;

  // Everything below: only under the token.
  // Every request this rank has in flight: first the ring's receives (RecvMode::ring, one per slot,
  // MPI_REQUEST_NULL from its arrival until it is posted again), then sends and rendezvous in posting order. A
  // poll tests the sends and rendezvous with one MPI_Testsome (when there are any) and the ring's head slot with
  // MPI_Test (see receive_ring).
  std::vector<MPI_Request> reqs_;
  std::vector<ReqCtx> ctx_;
  std::vector<int> done_idx_;
  std::vector<MPI_Status> statuses_;
  std::vector<Inbound> ring_;  // RecvMode::ring: pre-posted slots, dispatched in posting order
  std::size_t ring_head_ = 0;
  std::vector<std::size_t> repost_;  // slots dispatched, to post again at the next poll, in dispatch order
  std::deque<Inbound> probed_;  // RecvMode::probe: matched messages, in matching order
  std::deque<Buffer*> self_q_;  // flushed buffers to this rank
  std::size_t self_pos_ = 0;    // dispatch position in self_q_.front()
  std::deque<Stashed> stash_;
  std::vector<std::uint32_t> stash_count_;  // per kind
  std::vector<std::pair<std::size_t, std::function<std::size_t()>>> hooks_;
  std::size_t next_hook_ = 1;
  bool closing_ = false;

  std::atomic<std::size_t> outstanding_{0};
  std::atomic<std::uint64_t> msgs_sent_{0}, bytes_sent_{0}, msgs_recv_{0}, bytes_recv_{0}, self_msgs_{0},
      rdv_sent_{0}, rdv_recv_{0}, mpi_sent_{0}, mpi_bytes_{0}, polls_{0}, busy_polls_{0}, poll_ticks_{0};
  detail::trace::Clock clock_;
  mutable std::mutex clock_mu_;
  std::uint64_t counters_id_ = 0;  // this transport's source of the profile's "transport" section
};

// --- construction / destruction ---------------------------------------------------------------------------

Transport::Impl::Impl(const TransportConfig& c)
    : cfg_(c), env_(MpiEnv::get()), token_(env_.token()) {
  if (cfg_.max_header > (std::size_t{1} << 20))
    throw comm_error("weft: TransportConfig::max_header " + std::to_string(cfg_.max_header) + " above 1 MiB");
  if (cfg_.rendezvous_threshold > (std::size_t{1} << 26))
    throw comm_error("weft: TransportConfig::rendezvous_threshold " + std::to_string(cfg_.rendezvous_threshold) +
                     " above 64 MiB");
  const std::size_t need = kFrame + align8(cfg_.max_header) + align8(cfg_.rendezvous_threshold) + 16;
  if (cfg_.aggregate_bytes < need || cfg_.aggregate_bytes > static_cast<std::size_t>(INT32_MAX))
    throw comm_error("weft: TransportConfig::aggregate_bytes " + std::to_string(cfg_.aggregate_bytes) +
                     " must be at least " + std::to_string(need) +
                     " (rendezvous_threshold + max_header + framing) and fit an int");
  if (cfg_.recv_mode == RecvMode::ring && cfg_.recv_slots == 0)
    throw comm_error("weft: TransportConfig::recv_slots must be at least 1");
  if (cfg_.max_kinds == 0 || cfg_.max_kinds > 65536)
    throw comm_error("weft: TransportConfig::max_kinds must be in 1..65536");
  if (cfg_.poll_budget == 0) cfg_.poll_budget = 1;

  TokenScope hold(token_);  // MPI_Comm_idup: weft's MPI calls never overlap
  rank_ = env_.rank();
  size_ = env_.size();
  max_tag_ = env_.max_tag();
  // Non-blocking, so that a rank that will never join (it made one graph fewer and is destroying it, or has
  // left) ends the job instead of leaving this one waiting: see MpiEnv::check_while_making.
  const std::uint64_t number = env_.begin_transport();
  MPI_Request dup;
  MPI_Comm_idup(env_.comm(), &comm_, &dup);
  for (int done = 0;;) {
    MPI_Test(&dup, &done, MPI_STATUS_IGNORE);
    if (done) break;
    env_.check_while_making(number);
    std::this_thread::yield();
  }
  dests_ = std::make_unique<Dest[]>(static_cast<std::size_t>(size_));
  for (int i = 0; i < size_; ++i) dests_[i].rank = i;
  handlers_ = std::make_unique<Handler[]>(cfg_.max_kinds);
  kind_stats_ = std::make_unique<KindCounters[]>(cfg_.max_kinds);
  kind_names_ = std::make_unique<std::string[]>(cfg_.max_kinds);
  stash_count_.assign(cfg_.max_kinds, 0);
  if (size_ > 1 && cfg_.recv_mode == RecvMode::ring) {
    ring_.resize(cfg_.recv_slots);
    reqs_.assign(ring_.size(), MPI_REQUEST_NULL);
    ctx_.assign(ring_.size(), {ReqCtx::ring_slot, nullptr});
    for (std::size_t i = 0; i < ring_.size(); ++i) {
      ring_[i].buf = take_buffer();
      post_ring(i);
    }
  }
  // Last: a constructor that throws leaves no source behind.
  counters_id_ = detail::trace::add_counter_source(
      "transport", [this](std::vector<weft::Counter>& out) { append_counters(out); });
}

Transport::Impl::~Impl() {
  // With MPI gone (the program finalised it first), no request can be completed or cancelled: only memory.
  if (MpiEnv::mpi_live()) shutdown();
  // After the shutdown's last sends, before anything is freed: the profile keeps this transport's final counts
  // (a run that outlives the transport still reports them).
  detail::trace::remove_counter_source(counters_id_);
  release_memory();
}

void Transport::Impl::shutdown() {
  if (token_.held_by_this_thread()) abort_job("a Transport was destroyed by one of its message handlers");
  TokenScope hold(token_);
  closing_ = true;
  // 1. Our sends: flush what is buffered and complete every request we started, without dispatching anything
  //    (handlers' owners may be gone); MPI_Testsome keeps MPI progressing meanwhile.
  for (;;) {
    flush();
    test_requests(false);
    bool busy = dirty_.load(std::memory_order_acquire) != nullptr;
    for (const ReqCtx& c : ctx_) busy |= c.type == ReqCtx::eager_send || c.type == ReqCtx::rdv_send;
    if (!busy) break;
    env_.check_during_teardown();  // a rank that left without this teardown never receives them
    std::this_thread::yield();
  }
  // 2. Every rank is here: none sends any more.
  MPI_Request barrier;
  MPI_Ibarrier(comm_, &barrier);
  for (int flag = 0; !flag;) {
    MPI_Test(&barrier, &flag, MPI_STATUS_IGNORE);
    if (!flag) {
      env_.check_during_teardown();  // (nor enters the barrier)
      std::this_thread::yield();
    }
  }
  // 3. Whatever arrived and was not dispatched is lost: say so.
  repost_ring();          // a slot dispatched last is posted again, so that a late arrival is seen here too
  test_requests(true);    // the ring's last arrivals
  std::size_t lost = stash_.size();
  for (const Inbound& s : ring_) lost += s.arrived && s.pos < s.len;
  for (const Inbound& in : probed_) lost += in.pos < in.len || !in.arrived;
  if (!self_q_.empty()) ++lost;
  for (const ReqCtx& c : ctx_) lost += c.type == ReqCtx::rdv_recv;
  if (lost)
    std::fprintf(stderr,
                 "weft: rank %d: transport destroyed with undelivered messages (%zu batches or payloads); its "
                 "client did not wait for them\n",
                 rank_, lost);
  // 4. Release the receives still posted, then the communicator. A cancelled receive completes locally; a
  //    probed one is matched already, its data on the way.
  for (std::size_t i = 0; i < reqs_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&reqs_[i]);
    MPI_Wait(&reqs_[i], MPI_STATUS_IGNORE);
  }
  for (Inbound& in : probed_)
    if (!in.arrived) MPI_Wait(&in.req, MPI_STATUS_IGNORE);
  MPI_Comm_free(&comm_);
}

void Transport::Impl::release_memory() {
  for (Inbound& s : ring_) delete s.buf;
  for (Inbound& in : probed_) delete in.buf;
  // Requests left (only when MPI went away first, or rendezvous receives cancelled above): several pieces of
  // one payload share its record, freed with the last.
  for (std::size_t i = ring_.size(); i < ctx_.size(); ++i) {
    switch (ctx_[i].type) {
      case ReqCtx::ring_slot: break;
      case ReqCtx::eager_send: delete static_cast<Buffer*>(ctx_[i].ptr); break;
      case ReqCtx::rdv_send: {
        auto* r = static_cast<RdvSend*>(ctx_[i].ptr);
        if (--r->pieces_left == 0) delete r;
        break;
      }
      case ReqCtx::rdv_recv: {
        auto* r = static_cast<RdvRecv*>(ctx_[i].ptr);
        if (--r->pieces_left == 0) delete r;
        break;
      }
    }
  }
  for (std::size_t i = 0; i < self_q_.size(); ++i) {
    discard_self_frames(*self_q_[i], i == 0 ? self_pos_ : 0);
    delete self_q_[i];
  }
  auto drop = [](Buffer* b) {  // a buffer never flushed: its announced rendezvous were never posted
    for (RdvSend* r : b->rdv) delete r;
    delete b;
  };
  for (int i = 0; i < size_; ++i) {
    Dest& d = dests_[i];
    for (Buffer* b = d.sealed_head; b;) {
      Buffer* next = b->next;
      if (i == rank_) discard_self_frames(*b, 0);
      drop(b);
      b = next;
    }
    if (d.cur) {
      if (i == rank_) discard_self_frames(*d.cur, 0);
      drop(d.cur);
    }
  }
  while (pool_) {
    Buffer* b = pool_;
    pool_ = b->next;
    delete b;
  }
}

// --- buffers ----------------------------------------------------------------------------------------------

Buffer* Transport::Impl::take_buffer() {
  {
    std::lock_guard<SpinLock> g(pool_lock_);
    if (Buffer* b = pool_) {
      pool_ = b->next;
      b->next = nullptr;
      return b;
    }
  }
  auto* b = new Buffer;
  b->data = std::make_unique<std::byte[]>(cfg_.aggregate_bytes);
  return b;
}

void Transport::Impl::recycle(Buffer* b) {
  b->len = 0;
  b->rdv.clear();  // keeps its capacity: the next rendezvous in this buffer does not allocate
  std::lock_guard<SpinLock> g(pool_lock_);
  b->next = pool_;
  pool_ = b;
}

// --- send -------------------------------------------------------------------------------------------------

void Transport::Impl::send(int dest, Kind kind, std::span<const std::byte> header,
                           std::span<const std::byte> payload, SendDone* done, std::uint32_t epoch) {
  if (dest < 0 || dest >= size_)
    throw comm_error("weft: send to rank " + std::to_string(dest) + " of " + std::to_string(size_));
  // acquire: pairs with register_kind's release; the kind must exist here (ids come from register_kind).
  if (kind >= nkinds_.load(std::memory_order_acquire))
    throw comm_error("weft: send of unregistered message kind " + std::to_string(kind));
  if (header.size() > cfg_.max_header)
    throw comm_error("weft: message header of " + std::to_string(header.size()) + " bytes above max_header " +
                     std::to_string(cfg_.max_header));
  const bool self = dest == rank_;
  const bool rdv = payload.size() > cfg_.rendezvous_threshold;
  RdvSend* r = nullptr;
  if (rdv) {
    // Allocation and the copy (if any) before the lock: the critical section stays a few hundred ns.
    r = new RdvSend;
    r->dest = dest;
    r->size = payload.size();
    if (done && *done) {
      r->data = payload.data();
      r->done = std::move(*done);
    } else {
      r->owned = std::make_unique<std::byte[]>(payload.size());
      std::memcpy(r->owned.get(), payload.data(), payload.size());
      r->data = r->owned.get();
    }
    r->pieces_left = static_cast<unsigned>((payload.size() + kMaxPiece - 1) / kMaxPiece);
  }
  const std::size_t hlen = align8(header.size());
  const std::size_t bytes = kFrame + hlen + (rdv ? (self ? 8 : 0) : align8(payload.size()));
  Frame f{kind, static_cast<std::uint16_t>(rdv ? (self ? kFlagRdv | kFlagLocal : kFlagRdv) : 0),
          static_cast<std::uint32_t>(header.size()), epoch, 0, static_cast<std::uint64_t>(payload.size())};
  Dest& d = dests_[dest];
  {
    std::lock_guard<SpinLock> g(d.lock);
    Buffer* b = d.cur;
    if (!b || b->len + bytes > cfg_.aggregate_bytes) {
      if (b) {  // full: sealed, in order, for the next flush
        if (d.sealed_tail) {
          d.sealed_tail->next = b;
        } else {
          d.sealed_head = b;
        }
        d.sealed_tail = b;
      }
      b = d.cur = take_buffer();
    }
    if (rdv && !self) {
      // Tags cycle per destination in announcement order. The sender posts the data sends in that order and the
      // receiver posts its receives in dispatch order, which is the same: even a reused tag matches correctly.
      f.tag = static_cast<std::uint32_t>(kFirstDataTag + d.next_tag % static_cast<std::uint32_t>(max_tag_));
      ++d.next_tag;
      r->tag = static_cast<int>(f.tag);
    }
    std::byte* p = b->data.get() + b->len;
    std::memcpy(p, &f, kFrame);
    if (!header.empty()) std::memcpy(p + kFrame, header.data(), header.size());
    if (!rdv) {
      if (!payload.empty()) std::memcpy(p + kFrame + hlen, payload.data(), payload.size());
    } else if (self) {
      std::memcpy(p + kFrame + hlen, &r, sizeof r);
    }
    if (r && !self) b->rdv.push_back(r);  // a local one is found through its frame
    b->len += bytes;
  }
  mark_dirty(d);
  if (!rdv && done && *done) (*done)();  // copied: the caller's buffer is free already
}

void Transport::Impl::mark_dirty(Dest& d) {
  // The destination goes on the dirty stack once until a flush takes it off. A flush clears `queued` before it
  // takes the destination's lock, so a message appended after that flush's look sees `queued` false (its lock
  // acquisition follows the flush's release) and pushes the destination again: nothing is left unflushed.
  // acquire: pairs with the flush's release store of false, which follows its read of next_dirty: our write of
  // next_dirty below must not race with that read.
  if (d.queued.load(std::memory_order_relaxed) || d.queued.exchange(true, std::memory_order_acquire)) return;
  Dest* head = dirty_.load(std::memory_order_relaxed);
  do {
    d.next_dirty = head;
    // release: the poller that takes the stack (acquire) reads next_dirty as written here.
  } while (!dirty_.compare_exchange_weak(head, &d, std::memory_order_release, std::memory_order_relaxed));
}

void Transport::Impl::count_sent(const Buffer& b, bool self) {
  // Per-kind counters from the frames themselves: the senders pay nothing for them.
  std::uint64_t msgs = 0, bytes = 0;
  for (std::size_t pos = 0; pos < b.len;) {
    Frame f;
    std::memcpy(&f, b.data.get() + pos, kFrame);
    const std::uint64_t n = f.header_len + f.payload_len;
    bump(kind_stats_[f.kind].msgs_sent);
    bump(kind_stats_[f.kind].bytes_sent, n);
    ++msgs;
    bytes += n;
    if (f.flags & kFlagRdv) bump(rdv_sent_);
    pos += kFrame + align8(f.header_len) +
           ((f.flags & kFlagRdv) ? ((f.flags & kFlagLocal) ? 8 : 0) : align8(f.payload_len));
  }
  bump(msgs_sent_, msgs);
  bump(bytes_sent_, bytes);
  if (self) bump(self_msgs_, msgs);
}

std::size_t Transport::Impl::flush() {
  // A load first: most polls find nothing, and a read keeps the line shared with the senders.
  if (!dirty_.load(std::memory_order_relaxed)) return 0;
  // acquire: pairs with mark_dirty's release (next_dirty links, and the buffers behind the destination lock).
  Dest* list = dirty_.exchange(nullptr, std::memory_order_acquire);
  std::size_t n = 0;
  while (list) {
    Dest& d = *list;
    list = d.next_dirty;  // before clearing `queued`: a sender may push d again right after
    d.queued.store(false, std::memory_order_release);  // release: orders that read before the sender's write
    Buffer* head;
    {
      std::lock_guard<SpinLock> g(d.lock);
      head = d.sealed_head;
      if (d.cur && d.cur->len) {
        if (d.sealed_tail) {
          d.sealed_tail->next = d.cur;
        } else {
          head = d.cur;
        }
        d.cur = nullptr;
      }
      d.sealed_head = d.sealed_tail = nullptr;
    }
    const bool self = d.rank == rank_;
    while (head) {
      Buffer* b = head;
      head = b->next;
      b->next = nullptr;
      count_sent(*b, self);
      ++n;
      if (self) {
        self_q_.push_back(b);  // dispatched by dispatch_self; local rendezvous need no MPI
        continue;
      }
      MPI_Request req;
      MPI_Isend(b->data.get(), static_cast<int>(b->len), MPI_BYTE, d.rank, kTagEager, comm_, &req);
      bump(mpi_sent_);
      bump(mpi_bytes_, b->len);
      push_req(req, {ReqCtx::eager_send, b});
      // The data of the rendezvous announced in b, in announcement order (see the tag comment in send()).
      for (RdvSend* r : b->rdv) post_rdv_send(r);
      b->rdv.clear();
    }
  }
  return n;
}

void Transport::Impl::post_rdv_send(RdvSend* r) {
  for (std::size_t off = 0; off < r->size; off += kMaxPiece) {
    const std::size_t len = std::min(kMaxPiece, r->size - off);
    MPI_Request req;
    MPI_Isend(r->data + off, static_cast<int>(len), MPI_BYTE, r->dest, r->tag, comm_, &req);
    push_req(req, {ReqCtx::rdv_send, r});
  }
}

void Transport::Impl::finish_rdv_send(RdvSend* r) {
  if (r->done) r->done();
  delete r;
}

// Frees the local rendezvous announced in b from `from` on (never dispatched: the transport is going away).
void Transport::Impl::discard_self_frames(const Buffer& b, std::size_t from) {
  for (std::size_t pos = from; pos < b.len;) {
    Frame f;
    std::memcpy(&f, b.data.get() + pos, kFrame);
    const std::size_t h = align8(f.header_len);
    if ((f.flags & kFlagRdv) && (f.flags & kFlagLocal)) {
      RdvSend* r;
      std::memcpy(&r, b.data.get() + pos + kFrame + h, sizeof r);
      delete r;
    }
    pos += kFrame + h + ((f.flags & kFlagRdv) ? ((f.flags & kFlagLocal) ? 8 : 0) : align8(f.payload_len));
  }
}

// --- receive ----------------------------------------------------------------------------------------------

void Transport::Impl::post_ring(std::size_t slot) {
  Inbound& s = ring_[slot];
  s.arrived = false;
  s.len = s.pos = 0;
  MPI_Irecv(s.buf->data.get(), static_cast<int>(cfg_.aggregate_bytes), MPI_BYTE, MPI_ANY_SOURCE, kTagEager, comm_,
            &reqs_[slot]);
}

void Transport::Impl::repost_ring() {
  // In dispatch order, which is the ring's order: the slots stay matched in posting order.
  for (std::size_t slot : repost_) post_ring(slot);
  repost_.clear();
}

// Sends and rendezvous (and, with_ring, the ring's slots: only at shutdown; a poll tests the ring's head in
// receive_ring) in one MPI_Testsome.
std::size_t Transport::Impl::test_requests(bool with_ring) {
  const std::size_t first = with_ring ? 0 : ring_.size();
  if (reqs_.size() <= first) return 0;  // only ring slots: no call (an idle poll costs one MPI_Test, not two)
  const std::size_t nreq = reqs_.size() - first;
  int count = 0;
  done_idx_.resize(nreq);
  statuses_.resize(nreq);
  MPI_Testsome(static_cast<int>(nreq), reqs_.data() + first, &count, done_idx_.data(), statuses_.data());
  if (count <= 0) return 0;  // MPI_UNDEFINED: every request null (with_ring: slots being dispatched)
  std::vector<RdvRecv*> arrived;
  std::size_t n = 0;
  for (int i = 0; i < count; ++i) {
    const auto idx = first + static_cast<std::size_t>(done_idx_[i]);
    const ReqCtx c = ctx_[idx];
    switch (c.type) {
      case ReqCtx::ring_slot: {  // dispatched in posting order by receive_ring
        Inbound& s = ring_[idx];
        int bytes = 0;
        MPI_Get_count(&statuses_[static_cast<std::size_t>(i)], MPI_BYTE, &bytes);
        s.arrived = true;
        s.source = statuses_[static_cast<std::size_t>(i)].MPI_SOURCE;
        s.len = static_cast<std::size_t>(bytes);
        s.pos = 0;
        continue;  // counted when dispatched
      }
      case ReqCtx::eager_send: recycle(static_cast<Buffer*>(c.ptr)); break;
      case ReqCtx::rdv_send: {
        auto* r = static_cast<RdvSend*>(c.ptr);
        if (--r->pieces_left == 0) finish_rdv_send(r);
        break;
      }
      case ReqCtx::rdv_recv: {
        auto* r = static_cast<RdvRecv*>(c.ptr);
        if (--r->pieces_left == 0) arrived.push_back(r);
        break;
      }
    }
    ++n;
  }
  // Completed requests are MPI_REQUEST_NULL now: drop them (not the ring's), keeping the others' order.
  std::size_t w = ring_.size();
  for (std::size_t i = w; i < reqs_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    reqs_[w] = reqs_[i];
    ctx_[w] = ctx_[i];
    ++w;
  }
  reqs_.resize(w);
  ctx_.resize(w);
  if (!closing_) {
    for (RdvRecv* r : arrived) {
      bump(rdv_recv_);
      deliver(Message(r->source, r->kind, r->epoch, r->header, std::span<const std::byte>(r->dst, r->size),
                      r->size));
      delete r;
    }
  } else {
    for (RdvRecv* r : arrived) delete r;
  }
  return n;
}

void Transport::Impl::run_handler(const Message& m) {
  const std::uint64_t n = m.header().size() + m.payload_size();
  bump(kind_stats_[m.kind()].msgs_recv);
  bump(kind_stats_[m.kind()].bytes_recv, n);
  bump(msgs_recv_);
  bump(bytes_recv_, n);
  handlers_[m.kind()].deliver(m);
}

void Transport::Impl::deliver(const Message& m) {
  const Kind k = m.kind();
  if (k >= nkinds_.load(std::memory_order_relaxed)) {  // not registered here yet: kept, in order
    stash_.push_back({m.source(), k, m.epoch(), {m.header().begin(), m.header().end()},
                      {m.payload().begin(), m.payload().end()}});
    ++stash_count_[k];
    return;
  }
  if (stash_count_[k]) drain_stash();  // registered meanwhile: the older messages of its kind go first
  run_handler(m);
}

std::size_t Transport::Impl::drain_stash() {
  // In arrival order, the messages whose kind is registered now; the others stay, in order. Order holds per
  // kind: a kind registered late does not hold back the kinds that were registered in time.
  std::size_t n = 0;
  const unsigned nk = nkinds_.load(std::memory_order_relaxed);
  for (auto it = stash_.begin(); it != stash_.end();) {
    if (it->kind >= nk) {
      ++it;
      continue;
    }
    Stashed s = std::move(*it);
    it = stash_.erase(it);  // before the handler runs: it cannot touch the stash (no dispatch inside a handler)
    --stash_count_[s.kind];
    run_handler(Message(s.source, s.kind, s.epoch, s.header, s.payload, s.payload.size()));
    ++n;
  }
  return n;
}

void Transport::Impl::dispatch_one(int source, const std::byte* p) {
  Frame f;
  std::memcpy(&f, p, kFrame);
  const std::span<const std::byte> header(p + kFrame, f.header_len);
  if (!(f.flags & kFlagRdv)) {
    const std::span<const std::byte> payload(p + kFrame + align8(f.header_len), f.payload_len);
    deliver(Message(source, f.kind, f.epoch, header, payload, payload.size()));
  } else if (f.flags & kFlagLocal) {
    RdvSend* r;
    std::memcpy(&r, p + kFrame + align8(f.header_len), sizeof r);
    local_rdv(f, header, r);
  } else {
    start_rdv_recv(source, f, header);
  }
}

// The handler whose place() decides where a large payload of kind k goes: none when the kind is not registered
// yet (the payload then goes to a buffer of ours and is stashed with the message).
const Handler* Transport::Impl::placer(Kind k) {
  if (k >= nkinds_.load(std::memory_order_relaxed)) return nullptr;
  if (stash_count_[k]) drain_stash();  // older messages of the kind first, as in deliver()
  return &handlers_[k];
}

// Where a large payload goes: h->place(), or a buffer of ours.
static std::byte* placed(const Handler* h, const Message& m, std::unique_ptr<std::byte[]>& owned) {
  if (h && h->place) {
    std::span<std::byte> dst = h->place(m);
    if (dst.size() < m.payload_size())
      abort_job("place() of message kind " + std::to_string(m.kind()) + " returned " +
                std::to_string(dst.size()) + " bytes for a payload of " + std::to_string(m.payload_size()));
    return dst.data();
  }
  owned = std::make_unique<std::byte[]>(m.payload_size());
  return owned.get();
}

void Transport::Impl::local_rdv(const Frame& f, std::span<const std::byte> header, RdvSend* r) {
  const Message announce(rank_, f.kind, f.epoch, header, {}, r->size);
  std::unique_ptr<std::byte[]> owned;
  std::byte* dst = placed(placer(f.kind), announce, owned);
  std::memcpy(dst, r->data, r->size);
  bump(rdv_recv_);
  const std::size_t size = r->size;
  finish_rdv_send(r);  // the sender's buffer is free: the bytes are in place
  deliver(Message(rank_, f.kind, f.epoch, header, std::span<const std::byte>(dst, size), size));
}

void Transport::Impl::start_rdv_recv(int source, const Frame& f, std::span<const std::byte> header) {
  auto* r = new RdvRecv;
  r->source = source;
  r->kind = f.kind;
  r->epoch = f.epoch;
  r->header.assign(header.begin(), header.end());
  r->size = static_cast<std::size_t>(f.payload_len);
  r->dst = placed(placer(f.kind), Message(source, f.kind, f.epoch, r->header, {}, r->size), r->owned);
  r->pieces_left = static_cast<unsigned>((r->size + kMaxPiece - 1) / kMaxPiece);
  for (std::size_t off = 0; off < r->size; off += kMaxPiece) {
    const std::size_t len = std::min(kMaxPiece, r->size - off);
    MPI_Request req;
    MPI_Irecv(r->dst + off, static_cast<int>(len), MPI_BYTE, source, static_cast<int>(f.tag), comm_, &req);
    push_req(req, {ReqCtx::rdv_recv, r});
  }
}

std::size_t Transport::Impl::dispatch_frames(Inbound& in, std::size_t& budget) {
  std::size_t n = 0;
  const std::byte* base = in.buf->data.get();
  while (in.pos < in.len && budget > 0) {
    Frame f;
    std::memcpy(&f, base + in.pos, kFrame);
    const std::size_t bytes = kFrame + align8(f.header_len) +
                              ((f.flags & kFlagRdv) ? ((f.flags & kFlagLocal) ? 8 : 0) : align8(f.payload_len));
    if (in.pos + bytes > in.len || f.header_len > cfg_.max_header || f.kind >= cfg_.max_kinds)
      abort_job("malformed message from rank " + std::to_string(in.source) +
                " (do all ranks use the same TransportConfig?)");
    const std::size_t at = in.pos;
    in.pos += bytes;  // before the handler: a handler that throws aborts, but a nested poll would see progress
    dispatch_one(in.source, base + at);
    ++n;
    --budget;
  }
  return n;
}

std::size_t Transport::Impl::dispatch_self(std::size_t& budget) {
  std::size_t n = 0;
  while (!self_q_.empty() && budget > 0) {
    Inbound in;
    in.buf = self_q_.front();
    in.source = rank_;
    in.len = in.buf->len;
    in.pos = self_pos_;
    n += dispatch_frames(in, budget);
    self_pos_ = in.pos;
    if (in.pos < in.len) break;
    self_q_.pop_front();
    self_pos_ = 0;
    recycle(in.buf);
  }
  return n;
}

std::size_t Transport::Impl::receive_ring(std::size_t& budget) {
  // Slots are dispatched in posting order, the order in which MPI matches arrivals to them: per sender, that is
  // the sending order (non-overtaking). A slot that has not arrived stops the walk, even if a later one has
  // (a large aggregate may complete after a later small one), so testing the head alone is enough: a later slot
  // is tested when it becomes the head. MPI_Test, unlike MPI_Testsome, looks at the request again after its pass
  // of MPI's progress engine: an arrival is dispatched by the poll that receives it, not by the next one.
  std::size_t n = 0;
  while (budget > 0) {
    Inbound& s = ring_[ring_head_];
    if (!s.arrived) {
      // A null request: the slot is dispatched and not posted again yet (the whole ring was taken in this poll);
      // MPI_Test would call it complete.
      if (reqs_[ring_head_] == MPI_REQUEST_NULL) break;
      int flag = 0;
      MPI_Status st;
      MPI_Test(&reqs_[ring_head_], &flag, &st);
      if (!flag) break;
      int bytes = 0;
      MPI_Get_count(&st, MPI_BYTE, &bytes);
      s.arrived = true;
      s.source = st.MPI_SOURCE;
      s.len = static_cast<std::size_t>(bytes);
      s.pos = 0;
    }
    n += dispatch_frames(s, budget);
    if (s.pos < s.len) break;  // budget spent: the rest of this slot at the next poll
    s.arrived = false;
    // Posted again at the start of the next poll, not in this one: the task this message readied runs first
    // (MPI_Irecv is a good part of a poll's cost). Until then MPI keeps a new arrival for the next posted slot,
    // or as unexpected while none is posted.
    repost_.push_back(ring_head_);
    ring_head_ = (ring_head_ + 1) % ring_.size();
    // A short aggregate is latency-bound traffic: the poll returns now, so the work it readied starts without
    // waiting for one more MPI_Test (a pass of MPI's progress engine, when the next slot is empty); the next
    // poll takes the next slot. A long one (a sender streaming) goes on, so a backlog drains at once.
    if (s.len < cfg_.aggregate_bytes / 2) break;
  }
  return n;
}

std::size_t Transport::Impl::receive_probe(std::size_t& budget) {
  std::size_t n = 0;
  while (budget > 0) {
    if (probed_.empty() || probed_.back().arrived) {
      // Match the next message, if any. Bounded by budget: a flood of arrivals is taken a budget at a time.
      int flag = 0;
      MPI_Message msg;
      MPI_Status st;
      MPI_Improbe(MPI_ANY_SOURCE, kTagEager, comm_, &flag, &msg, &st);
      if (flag) {
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        Inbound in;
        in.buf = take_buffer();
        in.source = st.MPI_SOURCE;
        in.len = static_cast<std::size_t>(count);
        MPI_Imrecv(in.buf->data.get(), count, MPI_BYTE, &msg, &in.req);
        probed_.push_back(in);
      }
    }
    if (probed_.empty()) break;
    Inbound& in = probed_.front();
    if (!in.arrived) {
      int flag = 0;
      MPI_Test(&in.req, &flag, MPI_STATUS_IGNORE);
      if (!flag) break;
      in.arrived = true;
    }
    n += dispatch_frames(in, budget);
    if (in.pos < in.len) break;
    recycle(in.buf);
    probed_.pop_front();
  }
  return n;
}

// --- poll -------------------------------------------------------------------------------------------------

std::size_t Transport::Impl::progress(std::size_t budget) {
  // Each step is guarded here by its cheap "nothing to do" test: an idle poll makes no call but the ring's
  // MPI_Test and the hooks. (relaxed loads of the dirty stack: flush() takes it with acquire.)
  std::size_t n = 0;
  // What was sent since the last poll leaves before anything else is done.
  if (dirty_.load(std::memory_order_relaxed)) n += flush();
  if (!repost_.empty()) repost_ring();  // the slots the last polls dispatched (see receive_ring)
  if (!stash_.empty()) n += drain_stash();
  if (reqs_.size() > ring_.size()) n += test_requests(false);  // sends completed, rendezvous delivered
  if (!self_q_.empty()) n += dispatch_self(budget);
  if (size_ > 1) n += cfg_.recv_mode == RecvMode::ring ? receive_ring(budget) : receive_probe(budget);
  for (std::size_t i = 0; i < hooks_.size(); ++i) n += hooks_[i].second();
  // What the handlers and hooks just sent leaves in this poll.
  if (dirty_.load(std::memory_order_relaxed)) n += flush();
  // What outstanding() counts changes only with an event counted in n, or with a probed message matched but
  // not arrived: an idle poll skips the recount.
  if (n != 0 || !probed_.empty()) publish_outstanding();
  return n;
}

void Transport::Impl::publish_outstanding() {
  std::size_t o = reqs_.size() - ring_.size() + self_q_.size() + stash_.size() + probed_.size();
  if (!ring_.empty() && ring_[ring_head_].arrived) ++o;
  // relaxed: a hint for idle decisions, read with the dirty stack; exactness is not promised. Stored only when
  // it changes: readers on other cores keep their copy of the line.
  if (outstanding_.load(std::memory_order_relaxed) != o) outstanding_.store(o, std::memory_order_relaxed);
}

std::size_t Transport::Impl::poll(std::size_t budget) {
  if (!token_.try_acquire()) return 0;
  const detail::trace::Ticks t0 = clock_.now();
  std::size_t n = 0;
  try {
    n = progress(budget ? budget : cfg_.poll_budget);
  } catch (const std::exception& e) {
    abort_job(std::string("a message handler threw: ") + e.what());
  } catch (...) {
    abort_job("a message handler threw a non-standard exception");
  }
  bump(polls_);
  if (n) bump(busy_polls_);
  bump(poll_ticks_, clock_.now() - t0);
  token_.release();
  return n;
}

// --- Transport --------------------------------------------------------------------------------------------

Transport::Transport(const TransportConfig& config) : impl_(std::make_unique<Impl>(config)) {}
Transport::~Transport() = default;

int Transport::rank() const noexcept { return impl_->rank_; }
int Transport::size() const noexcept { return impl_->size_; }
const TransportConfig& Transport::config() const noexcept { return impl_->cfg_; }

Kind Transport::register_kind(std::string name, Handler handler) {
  if (!handler.deliver) throw comm_error("weft: message kind '" + name + "' registered without a deliver function");
  TokenScope hold(impl_->token_);  // the dispatcher reads the table under the token
  const unsigned k = impl_->nkinds_.load(std::memory_order_relaxed);
  if (k >= impl_->cfg_.max_kinds)
    throw comm_error("weft: more than " + std::to_string(impl_->cfg_.max_kinds) + " message kinds (registering '" +
                     name + "')");
  impl_->handlers_[k] = std::move(handler);
  impl_->kind_names_[k] = std::move(name);
  // release: a sender on another thread that sees the new count (acquire, in send) sees the slot filled.
  impl_->nkinds_.store(k + 1, std::memory_order_release);
  return static_cast<Kind>(k);
}

std::string Transport::kind_name(Kind kind) const {
  // acquire: a kind below the count has its name filled (register_kind's release).
  if (static_cast<unsigned>(kind) < impl_->nkinds_.load(std::memory_order_acquire)) return impl_->kind_names_[kind];
  return "kind " + std::to_string(static_cast<unsigned>(kind));
}

void Transport::retire_kind(Kind kind) {
  TokenScope hold(impl_->token_);
  if (kind >= impl_->nkinds_.load(std::memory_order_relaxed)) return;
  std::string name = impl_->kind_names_[kind];
  Handler& h = impl_->handlers_[kind];
  h.place = nullptr;
  h.deliver = [name](const Message& m) {
    abort_job("a message of kind '" + name + "' from rank " + std::to_string(m.source()) +
              " arrived after its client was destroyed");
  };
}

void Transport::send(int dest, Kind kind, std::span<const std::byte> header, std::span<const std::byte> payload,
                     std::uint32_t epoch) {
  impl_->send(dest, kind, header, payload, nullptr, epoch);
}

void Transport::send(int dest, Kind kind, std::span<const std::byte> header, std::span<const std::byte> payload,
                     SendDone done, std::uint32_t epoch) {
  impl_->send(dest, kind, header, payload, &done, epoch);
}

std::size_t Transport::poll(std::size_t budget) { return impl_->poll(budget); }

std::size_t Transport::add_progress_hook(std::function<std::size_t()> hook) {
  TokenScope hold(impl_->token_);
  const std::size_t id = impl_->next_hook_++;
  impl_->hooks_.emplace_back(id, std::move(hook));
  return id;
}

void Transport::remove_progress_hook(std::size_t id) {
  TokenScope hold(impl_->token_);
  auto& h = impl_->hooks_;
  h.erase(std::remove_if(h.begin(), h.end(), [&](const auto& e) { return e.first == id; }), h.end());
}

std::size_t Transport::outstanding() const noexcept {
  // acquire on the stack head: if it is empty, what earlier flushes published is visible too.
  return impl_->outstanding_.load(std::memory_order_relaxed) +
         (impl_->dirty_.load(std::memory_order_acquire) != nullptr);
}

void Transport::check_consistency() {
  Impl& m = *impl_;
  if (m.token_.held_by_this_thread())
    throw comm_error("weft: Transport::check_consistency() called from a message handler (it is collective)");
  TokenScope hold(m.token_);
  std::uint64_t h = 1469598103934665603ull;
  const std::uint64_t cfg[] = {m.cfg_.rendezvous_threshold, m.cfg_.max_header, m.cfg_.aggregate_bytes,
                               m.cfg_.max_kinds};
  h = fnv1a(h, cfg, sizeof cfg);
  const unsigned nk = m.nkinds_.load(std::memory_order_relaxed);
  for (unsigned k = 0; k < nk; ++k) h = fnv1a(h, m.kind_names_[k].data(), m.kind_names_[k].size() + 1);
  // max(h) and max(~h) = ~min(h) in one reduction: equal on every rank iff all hashes are equal.
  std::uint64_t mine[2] = {h, ~h}, all[2] = {0, 0};
  MPI_Request req;
  MPI_Iallreduce(mine, all, 2, MPI_UINT64_T, MPI_MAX, m.comm_, &req);
  for (int flag = 0;;) {
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (flag) break;
    // Keep our part of any protocol going: a rank still on its way here may wait for our messages.
    if (m.progress(m.cfg_.poll_budget) == 0) std::this_thread::yield();
  }
  if (all[0] != h || ~all[1] != h) {
    std::string names;
    for (unsigned k = 0; k < nk; ++k) names += (k ? ", " : "") + m.kind_names_[k];
    throw comm_error("weft: rank " + std::to_string(m.rank_) +
                     ": ranks registered different message kinds or use different transport settings (here: " +
                     std::to_string(nk) + " kinds: " + names + ")");
  }
}

std::uint64_t Transport::sum_over_ranks(std::uint64_t value) {
  Impl& m = *impl_;
  if (m.token_.held_by_this_thread())
    throw comm_error("weft: Transport::sum_over_ranks() called from a message handler (it is collective)");
  TokenScope hold(m.token_);
  std::uint64_t total = 0;
  MPI_Request req;
  MPI_Iallreduce(&value, &total, 1, MPI_UINT64_T, MPI_SUM, m.comm_, &req);
  for (int flag = 0;;) {
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (flag) break;
    if (m.progress(m.cfg_.poll_budget) == 0) std::this_thread::yield();  // as in check_consistency
  }
  return total;
}

TransportStats Transport::stats() const { return impl_->stats(); }

void Transport::Impl::append_counters(std::vector<weft::Counter>& out) const {
  const TransportStats s = stats();
  auto count = [&](const char* name, std::uint64_t v) { out.push_back(weft::Counter{name, false, v, 0}); };
  count("messages_sent", s.messages_sent);
  count("bytes_sent", s.bytes_sent);
  count("messages_received", s.messages_received);
  count("bytes_received", s.bytes_received);
  count("self_messages", s.self_messages);
  count("rendezvous_sent", s.rendezvous_sent);
  count("rendezvous_received", s.rendezvous_received);
  count("mpi_messages_sent", s.mpi_messages_sent);
  count("mpi_bytes_sent", s.mpi_bytes_sent);
  count("polls", s.polls);
  count("busy_polls", s.busy_polls);
  out.push_back(weft::Counter{"poll_s", true, 0, s.poll_seconds});
}

TransportStats Transport::Impl::stats() const {
  const Impl& m = *this;
  TransportStats s;
  auto ld = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  s.messages_sent = ld(m.msgs_sent_);
  s.bytes_sent = ld(m.bytes_sent_);
  s.messages_received = ld(m.msgs_recv_);
  s.bytes_received = ld(m.bytes_recv_);
  s.self_messages = ld(m.self_msgs_);
  s.rendezvous_sent = ld(m.rdv_sent_);
  s.rendezvous_received = ld(m.rdv_recv_);
  s.mpi_messages_sent = ld(m.mpi_sent_);
  s.mpi_bytes_sent = ld(m.mpi_bytes_);
  s.polls = ld(m.polls_);
  s.busy_polls = ld(m.busy_polls_);
  {
    std::lock_guard<std::mutex> g(m.clock_mu_);
    detail::trace::Clock c = m.clock_;  // calibrate a copy: poll() reads the original concurrently
    c.calibrate();
    s.poll_seconds = c.seconds(ld(m.poll_ticks_));
  }
  // acquire: pairs with register_kind's release; the names of the kinds counted are written.
  const unsigned nk = m.nkinds_.load(std::memory_order_acquire);
  for (unsigned k = 0; k < nk; ++k) {
    KindStats ks;
    ks.name = m.kind_names_[k];
    ks.messages_sent = ld(m.kind_stats_[k].msgs_sent);
    ks.bytes_sent = ld(m.kind_stats_[k].bytes_sent);
    ks.messages_received = ld(m.kind_stats_[k].msgs_recv);
    ks.bytes_received = ld(m.kind_stats_[k].bytes_recv);
    s.kinds.push_back(std::move(ks));
  }
  return s;
}

}  // namespace weft::comm
