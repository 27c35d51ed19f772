// weft::comm::TerminationDetector on 1 to 4 ranks: random message cascades (each message spawns 0 to 2 more to
// random ranks after a random delay), several epochs in a row without barriers, ranks that learn the end of an
// epoch late while others race ahead into the next one, wave trees of every shape (fan-out 1: a chain, 2, 4).
//
// What proves the detector right: the test counts every message itself; after the run, the totals sent and
// received in each epoch must match over all ranks (a message lost or delivered twice breaks that), and a rank
// must never get a message of an epoch after it saw that epoch end, nor one of an epoch it has not begun (the
// handler checks both; the detector itself aborts the job on the first, and on a message of a finished epoch).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/termination.hpp"
#include "mpi_test_util.hpp"

using namespace weft::comm;
using namespace weft_mpi_test;

namespace {

struct CascadeHeader {
  std::uint32_t ttl;       // generations left
  std::uint32_t size;      // payload bytes
  std::uint64_t id;        // content key
};

struct Item {  // a message received whose successors are still to be sent
  std::uint64_t due;       // loop iteration at which they are sent
  std::uint32_t ttl;
  std::uint64_t id;
};

// fan-out of the wave tree, extra polling thread
using CascadeParam = std::tuple<unsigned, bool>;

class Cascade : public testing::TestWithParam<CascadeParam> {};

TEST_P(Cascade, EpochsInARow) {
  const auto [fanout, poller_thread] = GetParam();
  Transport t;
  TerminationDetector td(t, {.fanout = fanout});
  const int me = t.rank(), n = t.size();
  const std::uint32_t epochs = static_cast<std::uint32_t>(weft_test::scaled(40, 8));
  std::mt19937_64 rng(0x5eed + static_cast<std::uint64_t>(me) * 7919 + fanout * 31 + poller_thread);

  // Work of this rank: items and the active flag change together, under `mu`, so that a handler (which may
  // run on the polling thread) adding work and the main thread finding none cannot interleave badly.
  std::mutex mu;
  std::deque<Item> work;
  std::uint64_t iteration = 0;  // main loop counter (read under mu by handlers for due times)
  std::vector<std::uint64_t> sent(epochs + 1, 0), received(epochs + 1, 0);
  std::uint64_t bad = 0, late = 0;
  std::map<std::uint64_t, std::vector<std::byte>> placed;  // handlers only (they never overlap)
  std::mt19937_64 handler_rng(rng());

  Kind k = td.register_kind(
      "cascade",
      {.deliver =
           [&](const Message& m) {
             const auto h = read_as<CascadeHeader>(m.header());
             std::lock_guard<std::mutex> g(mu);
             if (m.epoch() != td.epoch()) ++bad;        // only in its own epoch
             if (td.terminated(m.epoch())) ++late;      // never after its end
             if (m.payload().size() != h.size ||
                 check_payload(m.payload(), 0, 0, h.id) != std::string::npos)
               ++bad;
             if (h.size > 20000 / 2) {
               // In the buffer place() gave, unless it came ahead of its epoch (then the detector kept it).
               auto it = placed.find(h.id);
               if (it != placed.end()) {
                 if (it->second.data() != m.payload().data()) ++bad;
                 placed.erase(it);
               }
             }
             ++received[std::min<std::size_t>(m.epoch(), epochs)];
             if (h.ttl > 0) {
               // Due now (half of them) or within the next 24 iterations of the main loop.
               work.push_back({iteration + (handler_rng() % 2 ? 0 : handler_rng() % 24), h.ttl - 1, h.id});
               td.set_active();  // a message that leaves work behind makes the rank active
             }
           },
       .place = [&](const Message& m) -> std::span<std::byte> {
         // Several large messages may be on their way at once: one buffer each, by content key.
         auto& buf = placed[read_as<CascadeHeader>(m.header()).id];
         buf.assign(m.payload_size(), std::byte{0});
         return buf;
       }});

  std::atomic<bool> stop{false};
  std::thread poller;
  if (poller_thread)
    poller = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed))
        if (td.poll() == 0) std::this_thread::yield();
    });

  auto send_one = [&](std::uint32_t e, std::uint32_t ttl) {
    const int dest = static_cast<int>(rng() % static_cast<std::uint64_t>(n));
    const std::uint64_t id = rng();
    // One in eight carries a payload above the rendezvous threshold.
    const std::uint32_t size = rng() % 8 == 0 ? 20000u : static_cast<std::uint32_t>(rng() % 64);
    const CascadeHeader h{ttl, size, id};
    td.counted_send(dest, k, bytes_of(h), make_payload(0, 0, id, size));
    ++sent[e];
  };

  // Odd ranks are slow to notice the end of an epoch (they poll rarely once idle), so that the others begin
  // the next epoch and send to them while they are still in the previous one.
  const bool slow = me % 2 == 1;
  for (std::uint32_t round = 1; round <= epochs; ++round) {
    const std::uint32_t e = td.begin_epoch();
    ASSERT_EQ(e, round);
    {
      std::lock_guard<std::mutex> g(mu);
      const unsigned seeds = static_cast<unsigned>(rng() % 6);  // some ranks start nothing
      for (unsigned s = 0; s < seeds; ++s) send_one(e, static_cast<std::uint32_t>(2 + rng() % 12));
    }
    const auto deadline = std::chrono::steady_clock::now() + weft_test::kLongWait;
    while (!td.terminated(e)) {
      bool idle;
      {
        std::lock_guard<std::mutex> g(mu);
        ++iteration;
        // Items due now spawn 0, 1 or 2 messages each.
        for (std::size_t i = 0; i < work.size();) {
          if (work[i].due > iteration) {
            ++i;
            continue;
          }
          const Item it = work[i];
          work.erase(work.begin() + static_cast<std::ptrdiff_t>(i));
          const unsigned children = static_cast<unsigned>(rng() % 3);
          for (unsigned c = 0; c < children; ++c) send_one(e, it.ttl);
        }
        idle = work.empty();
        if (idle) td.set_passive();
      }
      if (!poller_thread) td.poll();
      if (idle && slow) std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (rng() % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
      if (std::chrono::steady_clock::now() > deadline)
        abort_job("epoch " + std::to_string(e) + " did not terminate (hang?)");
      std::this_thread::yield();
    }
    std::lock_guard<std::mutex> g(mu);
    EXPECT_TRUE(work.empty()) << "epoch " << e << " ended with work left on rank " << me;
  }
  stop = true;
  if (poller.joinable()) poller.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(late, 0u);
  EXPECT_TRUE(placed.empty());

  // Every epoch: as many messages received as sent, over all ranks.
  std::vector<std::uint64_t> all_sent(sent.size()), all_received(received.size());
  MPI_Allreduce(sent.data(), all_sent.data(), static_cast<int>(sent.size()), MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(received.data(), all_received.data(), static_cast<int>(received.size()), MPI_UINT64_T, MPI_SUM,
                MPI_COMM_WORLD);
  std::uint64_t total = 0;
  for (std::uint32_t e = 1; e <= epochs; ++e) {
    EXPECT_EQ(all_sent[e], all_received[e]) << "epoch " << e;
    total += all_sent[e];
  }
  EXPECT_GT(total, 0u);
  const std::uint64_t early = sum_all(td.stats().early_messages);
  if (me == 0)
    std::printf("  [cascade fanout=%u poller=%d] %u epochs, %llu messages, %llu ahead of their epoch, %llu waves\n",
                fanout, poller_thread ? 1 : 0, epochs, static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(early), static_cast<unsigned long long>(td.stats().waves));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Cascade,
                         testing::Combine(testing::Values(1u, 2u, 4u), testing::Values(false, true)),
                         [](const testing::TestParamInfo<CascadeParam>& i) {
                           return "fanout" + std::to_string(std::get<0>(i.param)) +
                                  (std::get<1>(i.param) ? "_poller" : "");
                         });

// A rank that begins epoch e + 1 as soon as it learns the end of e and sends at once to every rank: rank 0
// learns first (it declares the end), and with a chain of waves the last rank learns last, so most of these
// messages reach ranks still in e. They must be kept and delivered in e + 1, counted there.
TEST(Termination, RacingAheadIntoTheNextEpoch) {
  Transport t;
  TerminationDetector td(t, {.fanout = 1});
  const int me = t.rank(), n = t.size();
  const std::uint32_t epochs = static_cast<std::uint32_t>(weft_test::scaled(30, 8));
  std::vector<std::uint64_t> got(epochs + 1, 0);
  std::uint64_t bad = 0;
  Kind k = td.register_kind("hello", {.deliver = [&](const Message& m) {
                                        if (m.epoch() != td.epoch()) ++bad;
                                        if (read_as<std::uint32_t>(m.header()) != m.epoch()) ++bad;
                                        ++got[m.epoch()];
                                      }});
  for (std::uint32_t round = 1; round <= epochs; ++round) {
    const std::uint32_t e = td.begin_epoch();
    for (int d = 0; d < n; ++d) td.counted_send(d, k, bytes_of(e), {});
    td.set_passive();
    // The last rank of the chain dawdles: it learns every end last.
    poll_until(
        [&] {
          if (me == n - 1 && n > 1) std::this_thread::sleep_for(std::chrono::microseconds(300));
          return td.poll();
        },
        [&] { return td.terminated(e); }, "the end of epoch " + std::to_string(e));
    EXPECT_EQ(got[e], static_cast<std::uint64_t>(n)) << "epoch " << e;
  }
  EXPECT_EQ(bad, 0u);
  const std::uint64_t early = sum_all(td.stats().early_messages);
  if (me == 0)
    std::printf("  [racing] %u epochs, %llu of %llu messages arrived ahead of their epoch\n", epochs,
                static_cast<unsigned long long>(early),
                static_cast<unsigned long long>(epochs) * static_cast<unsigned>(n) * static_cast<unsigned>(n));
}

// Epochs in which nothing is sent end too; terminated() covers the earlier epochs.
TEST(Termination, EmptyEpochs) {
  Transport t;
  TerminationDetector td(t);
  for (int i = 0; i < 5; ++i) {
    const std::uint32_t e = td.begin_epoch();
    td.set_passive();
    poll_until(t, [&] { return td.terminated(e); }, "an empty epoch");
    EXPECT_TRUE(td.terminated(e - 1));
  }
  EXPECT_EQ(td.epoch(), 5u);
}

TEST(Termination, Misuse) {
  Transport t;
  TerminationDetector td(t);
  Kind k = td.register_kind("k", {.deliver = [](const Message&) {}});
  EXPECT_THROW(td.counted_send(0, k, {}, {}), comm_error);  // before the first epoch
  const std::uint32_t e = td.begin_epoch();
  EXPECT_THROW(td.begin_epoch(), comm_error);  // e has not ended
  EXPECT_THROW(td.counted_send(t.size(), k, {}, {}), comm_error);  // bad rank: not counted either
  td.set_passive();
  poll_until(t, [&] { return td.terminated(e); }, "the end of the epoch");  // the failed send left no count
  EXPECT_THROW(td.counted_send(0, k, {}, {}), comm_error);  // e has ended
  EXPECT_THROW((TerminationDetector{t, {.fanout = 0}}), comm_error);
}

}  // namespace
