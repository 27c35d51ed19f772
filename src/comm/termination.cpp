#include "comm/termination.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "comm/mpi_env.hpp"
#include "trace/counters.hpp"

namespace weft::comm {

// The control messages, in the header of the control kind.
struct TerminationDetector::Control {
  enum Type : std::uint32_t { request = 1, report = 2, end = 3 };
  std::uint32_t type;
  std::uint32_t epoch;
  std::uint32_t wave;
  std::uint32_t pad = 0;
  std::uint64_t sent = 0, received = 0;  // report: the subtree's sums
};

namespace {
// Counters with one writer at a time (see transport.cpp): relaxed load and store.
inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
}  // namespace

TerminationDetector::TerminationDetector(Transport& transport, const TerminationConfig& config)
    : transport_(transport), cfg_(config), rank_(transport.rank()), size_(transport.size()) {
  if (cfg_.fanout == 0) throw comm_error("weft: TerminationConfig::fanout must be at least 1");
  for (auto& c : sent_) c.store(0, std::memory_order_relaxed);
  for (auto& c : received_) c.store(0, std::memory_order_relaxed);
  const auto f = static_cast<long>(cfg_.fanout);
  parent_ = rank_ == 0 ? -1 : static_cast<int>((rank_ - 1) / f);
  for (long c = rank_ * f + 1; c <= rank_ * f + f && c < size_; ++c) children_.push_back(static_cast<int>(c));
  control_kind_ = transport_.register_kind("weft.termination", {.deliver = [this](const Message& m) {
                                                                  on_control(m);
                                                                }});
  hook_id_ = transport_.add_progress_hook([this] { return step(); });
  // The profile's "termination" section (trace/counters.hpp).
  counters_id_ = weft::detail::trace::add_counter_source("termination", [this](std::vector<weft::Counter>& out) {
    const TerminationStats s = stats();
    out.push_back(weft::Counter{"epochs", false, epoch(), 0});
    out.push_back(weft::Counter{"waves", false, s.waves, 0});
    out.push_back(weft::Counter{"control_messages", false, s.control_messages, 0});
    out.push_back(weft::Counter{"early_messages", false, s.early_messages, 0});
  });
}

TerminationDetector::~TerminationDetector() {
  weft::detail::trace::remove_counter_source(counters_id_);
  transport_.remove_progress_hook(hook_id_);
  transport_.retire_kind(control_kind_);
  for (Kind k : kinds_) transport_.retire_kind(k);
}

Kind TerminationDetector::register_kind(std::string name, Handler handler) {
  if (!handler.deliver)
    throw comm_error("weft: message kind '" + name + "' registered without a deliver function");
  clients_.push_back(std::make_unique<Handler>(std::move(handler)));
  const Handler* client = clients_.back().get();
  Handler wrapped;
  wrapped.deliver = [this, client](const Message& m) { deliver_basic(*client, m); };
  // Without a client place(), the transport's own buffer serves the early messages too (copied when kept).
  if (client->place) wrapped.place = [this, client](const Message& m) { return place_basic(*client, m); };
  const Kind k = transport_.register_kind(std::move(name), std::move(wrapped));
  kinds_.push_back(k);
  return k;
}

// --- the computation's side ------------------------------------------------------------------------------

std::uint32_t TerminationDetector::begin_epoch() {
  const std::uint32_t e = epoch_.load(std::memory_order_relaxed);
  if (e != 0 && !terminated(e))
    throw comm_error("weft: begin_epoch() while epoch " + std::to_string(e) + " has not terminated");
  const std::uint32_t next = e + 1;
  // Epoch next - 2 used these counters; it ended long ago (next - 1 has ended too), so nobody touches them: the
  // senders of `next` start after the store below, and received_ of `next` is written only once epoch_ says so.
  sent_[next & 1].store(0, std::memory_order_relaxed);
  received_[next & 1].store(0, std::memory_order_relaxed);
  active_.store(true, std::memory_order_relaxed);
  // release: whoever reads the new epoch (the progress hook, acquire) sees the reset counters and the active flag.
  epoch_.store(next, std::memory_order_release);
  return next;
}

void TerminationDetector::set_active() noexcept { active_.store(true, std::memory_order_release); }

void TerminationDetector::set_passive() noexcept {
  // release: the sent counts of this rank's last sends (relaxed increments before it) are visible to the report
  // that reads this flag with acquire; the report must include them.
  active_.store(false, std::memory_order_release);
}

bool TerminationDetector::passive_in(std::uint32_t e) const noexcept {
  return epoch_.load(std::memory_order_acquire) == e && !active_.load(std::memory_order_acquire);
}

std::uint32_t TerminationDetector::check_sending_epoch() const {
  const std::uint32_t e = epoch_.load(std::memory_order_acquire);
  if (e == 0 || terminated(e))
    throw comm_error(e == 0 ? std::string("weft: counted_send() before the first begin_epoch()")
                            : "weft: counted_send() in epoch " + std::to_string(e) + ", which has terminated");
  return e;
}

void TerminationDetector::counted_send(int dest, Kind kind, std::span<const std::byte> header,
                                       std::span<const std::byte> payload) {
  const std::uint32_t e = check_sending_epoch();
  // Counted before the message can be received anywhere (relaxed: published by set_passive's release).
  sent_[e & 1].fetch_add(1, std::memory_order_relaxed);
  try {
    transport_.send(dest, kind, header, payload, e);
  } catch (...) {
    sent_[e & 1].fetch_sub(1, std::memory_order_relaxed);  // not sent: a count would never be matched
    throw;
  }
}

void TerminationDetector::counted_send(int dest, Kind kind, std::span<const std::byte> header,
                                       std::span<const std::byte> payload, SendDone done) {
  const std::uint32_t e = check_sending_epoch();
  sent_[e & 1].fetch_add(1, std::memory_order_relaxed);
  try {
    transport_.send(dest, kind, header, payload, std::move(done), e);
  } catch (...) {
    sent_[e & 1].fetch_sub(1, std::memory_order_relaxed);
    throw;
  }
}

// --- basic messages (under the token) -----------------------------------------------------------------------

std::span<std::byte> TerminationDetector::place_basic(const Handler& client, const Message& m) {
  if (m.epoch() > epoch_.load(std::memory_order_acquire)) {
    // Ahead of this rank: the client may not know where such a message goes yet. Ours, until it is delivered.
    auto buf = std::make_unique<std::byte[]>(m.payload_size());
    std::byte* p = buf.get();
    early_buffers_.emplace(p, std::move(buf));
    return {p, m.payload_size()};
  }
  return client.place(m);
}

void TerminationDetector::deliver_basic(const Handler& client, const Message& m) {
  const std::uint32_t e = epoch_.load(std::memory_order_acquire);
  std::unique_ptr<std::byte[]> ours;
  if (!early_buffers_.empty() && !m.payload().empty()) {
    auto it = early_buffers_.find(m.payload().data());
    if (it != early_buffers_.end()) {
      ours = std::move(it->second);
      early_buffers_.erase(it);
    }
  }
  if (m.epoch() > e) {
    bump(early_count_);
    Early x{&client, m.source(), m.kind(), m.epoch(), {m.header().begin(), m.header().end()}, std::move(ours),
            m.payload_size()};
    if (!x.payload && m.payload_size()) {
      x.payload = std::make_unique<std::byte[]>(m.payload_size());
      std::memcpy(x.payload.get(), m.payload().data(), m.payload_size());
    }
    early_.push_back(std::move(x));
    return;
  }
  if (m.epoch() < e || terminated(m.epoch()))
    abort_job("termination detection: a message of epoch " + std::to_string(m.epoch()) + " from rank " +
              std::to_string(m.source()) + " arrived in epoch " + std::to_string(e) +
              (terminated(m.epoch()) ? ", after that epoch was declared terminated" : ""));
  if (!early_.empty()) drain_early(e);  // kept messages of this epoch go first: same-sender order
  bump(received_[e & 1]);
  client.deliver(m);
}

std::size_t TerminationDetector::drain_early(std::uint32_t e) {
  // Kept messages are all of epoch e + 1 at most (see the header), in arrival order; deliver those of e.
  std::size_t n = 0;
  while (!early_.empty() && early_.front().epoch <= e) {
    Early x = std::move(early_.front());
    early_.pop_front();
    bump(received_[e & 1]);
    const std::span<const std::byte> payload(x.payload.get(), x.payload ? x.size : 0);
    x.client->deliver(Message(x.source, x.kind, x.epoch, x.header, payload, x.size));
    ++n;
  }
  return n;
}

// --- the waves (under the token) ----------------------------------------------------------------------------

void TerminationDetector::send_control(int dest, const Control& c) {
  transport_.send(dest, control_kind_, std::as_bytes(std::span<const Control>(&c, 1)), {});
}

void TerminationDetector::on_control(const Message& m) {
  bump(control_count_);
  Control c;
  if (m.header().size() != sizeof c) abort_job("termination detection: malformed control message");
  std::memcpy(&c, m.header().data(), sizeof c);
  switch (c.type) {
    case Control::request:
      // From the parent: take part (the report waits until this rank is passive in that epoch, which it may not
      // even have begun) and pass it on at once, so that the subtrees gather in parallel.
      wave_epoch_ = c.epoch;
      wave_ = c.wave;
      replies_ = 0;
      wave_sent_ = wave_received_ = 0;
      for (int child : children_) send_control(child, c);
      break;
    case Control::report:
      if (c.epoch != wave_epoch_ || c.wave != wave_)
        abort_job("termination detection: report of wave " + std::to_string(c.wave) + " (epoch " +
                  std::to_string(c.epoch) + ") during wave " + std::to_string(wave_));
      ++replies_;
      wave_sent_ += c.sent;
      wave_received_ += c.received;
      break;
    case Control::end:
      // release: a thread that sees terminated(e) sees what this rank delivered in e.
      terminated_.store(c.epoch, std::memory_order_release);
      if (wave_epoch_ <= c.epoch) wave_ = 0;
      for (int child : children_) send_control(child, c);
      break;
    default: abort_job("termination detection: unknown control message");
  }
}

void TerminationDetector::evaluate(std::uint32_t e, std::uint64_t sent, std::uint64_t received) {
  // Rank 0, a wave of epoch e complete: Mattern's test on this wave and the previous one.
  if (have_previous_ && previous_epoch_ == e && previous_sent_ == previous_received_ && sent == previous_sent_ &&
      received == previous_received_) {
    have_previous_ = false;
    terminated_.store(e, std::memory_order_release);
    const Control end{Control::end, e, wave_, 0, 0, 0};
    for (int child : children_) send_control(child, end);
    return;
  }
  have_previous_ = true;
  previous_epoch_ = e;
  previous_sent_ = sent;
  previous_received_ = received;
}

std::size_t TerminationDetector::step() {
  std::size_t n = 0;
  const std::uint32_t e = epoch_.load(std::memory_order_acquire);
  if (e == 0) return 0;
  if (!early_.empty() && early_.front().epoch <= e) n += drain_early(e);
  // At most three rounds: with one rank (no children), a wave completes as soon as it starts, and the two waves
  // of the test then run in one poll.
  for (int round = 0; round < 3; ++round) {
    // Report (or, on rank 0, evaluate) this rank's part of the current wave once it is passive in its epoch.
    if (wave_ != 0 && wave_epoch_ == e && replies_ == children_.size() && passive_in(e) && !terminated(e)) {
      const std::uint64_t sent = wave_sent_ + sent_[e & 1].load(std::memory_order_relaxed);
      const std::uint64_t received = wave_received_ + received_[e & 1].load(std::memory_order_relaxed);
      if (rank_ == 0) {
        evaluate(e, sent, received);
      } else {
        send_control(parent_, Control{Control::report, e, wave_, 0, sent, received});
      }
      wave_ = 0;
      ++n;
    }
    // Rank 0 starts the next wave when it is passive itself and none is in progress.
    if (rank_ != 0 || wave_ != 0 || terminated(e) || !passive_in(e)) break;
    wave_epoch_ = e;
    wave_ = ++next_wave_;
    replies_ = 0;
    wave_sent_ = wave_received_ = 0;
    bump(waves_);
    const Control req{Control::request, e, wave_, 0, 0, 0};
    for (int child : children_) send_control(child, req);
    ++n;
    if (!children_.empty()) break;
  }
  return n;
}

TerminationStats TerminationDetector::stats() const noexcept {
  TerminationStats s;
  s.waves = waves_.load(std::memory_order_relaxed);
  s.early_messages = early_count_.load(std::memory_order_relaxed);
  s.control_messages = control_count_.load(std::memory_order_relaxed);
  s.epoch = epoch_.load(std::memory_order_acquire);
  s.terminated = terminated_.load(std::memory_order_acquire);
  s.epoch_sent = sent_[s.epoch & 1].load(std::memory_order_relaxed);
  s.epoch_received = received_[s.epoch & 1].load(std::memory_order_relaxed);
  s.active = active_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace weft::comm
