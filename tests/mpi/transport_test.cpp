// weft::comm::Transport on 1 to 4 ranks (the same binary under mpiexec -np 1..4): small and large messages,
// content and order checks, concurrent senders and pollers, messages to self, kinds registered late. Each test
// runs with both receive modes (pre-posted ring, probe).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_util.hpp"

using namespace weft::comm;
using namespace weft_mpi_test;

namespace {

class TransportTest : public testing::TestWithParam<RecvMode> {
 protected:
  TransportConfig config() const {
    TransportConfig c;
    c.recv_mode = GetParam();
    return c;
  }
};

struct ModeName {
  std::string operator()(const testing::TestParamInfo<RecvMode>& i) const {
    return i.param == RecvMode::ring ? "ring" : "probe";
  }
};

// Ping-pong of 8-byte messages between pairs (0,1), (2,3), ...; an unpaired last rank plays with itself. The
// starter sends 1, each side answers v + 1, up to 2 * rounds: the starter receives the even values, its peer
// the odd ones, a rank alone all of them.
TEST_P(TransportTest, PingPongSmall) {
  Transport t(config());
  const int me = t.rank(), n = t.size();
  const int peer = (me ^ 1) < n ? (me ^ 1) : me;
  const bool alone = peer == me, starter = me < peer;
  // Each round trip needs both ranks scheduled: with more ranks than cores, a few scheduler slices each.
  const bool oversubscribed = static_cast<unsigned>(n) > std::thread::hardware_concurrency();
  const std::uint64_t rounds = weft_test::scaled(oversubscribed ? 500 : 10000, 100);
  const std::uint64_t expect = alone ? 2 * rounds : rounds;
  std::uint64_t received = 0, bad = 0;
  Kind ping = 0;
  ping = t.register_kind("ping", {.deliver = [&](const Message& m) {
                                    const auto v = read_as<std::uint64_t>(m.payload());
                                    if (m.source() != peer || m.payload_size() != 8 || !m.header().empty()) ++bad;
                                    const std::uint64_t want =
                                        alone ? received + 1 : 2 * received + (starter ? 2 : 1);
                                    if (v != want) ++bad;
                                    ++received;
                                    const std::uint64_t next = v + 1;
                                    if (next <= 2 * rounds) t.send(peer, ping, {}, bytes_of(next));
                                  }});
  barrier(t);
  if (alone || starter) {
    const std::uint64_t first = 1;
    t.send(peer, ping, {}, bytes_of(first));
  }
  poll_until(t, [&] { return received >= expect; }, "ping-pong replies");
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(received, expect);
  barrier(t);
  const TransportStats s = t.stats();
  EXPECT_EQ(s.messages_sent, expect);
  ASSERT_EQ(s.kinds.size(), 1u);
  EXPECT_EQ(s.kinds[0].name, "ping");
  EXPECT_EQ(s.kinds[0].messages_sent, expect);
  EXPECT_EQ(s.kinds[0].messages_received, received);
  EXPECT_EQ(s.kinds[0].bytes_received, 8 * received);
  EXPECT_GT(s.polls, 0u);
  EXPECT_GT(s.poll_seconds, 0.0);
}

// Every rank sends N tiny messages to every rank (itself included); receivers check each message's content and
// that each sender's messages arrive in sending order.
TEST_P(TransportTest, AllToAllTinyInOrder) {
  Transport t(config());
  const int me = t.rank(), n = t.size();
  const std::uint64_t count = weft_test::scaled(100000, 1000);
  std::vector<std::uint64_t> next(static_cast<std::size_t>(n), 0);
  std::uint64_t bad = 0, total = 0;
  Kind k = t.register_kind("tiny", {.deliver = [&](const Message& m) {
                                      const auto seq = read_as<std::uint32_t>(m.header());
                                      const auto src = static_cast<std::size_t>(m.source());
                                      if (m.header().size() != 4 || m.payload_size() != 8) ++bad;
                                      if (seq != next[src]) ++bad;
                                      next[src] = seq + 1;
                                      const auto v = read_as<std::uint64_t>(m.payload());
                                      if (v != (static_cast<std::uint64_t>(m.source()) << 40 |
                                                static_cast<std::uint64_t>(me) << 32 | seq))
                                        ++bad;
                                      ++total;
                                    }});
  barrier(t);
  for (std::uint32_t i = 0; i < count; ++i) {
    for (int d = 0; d < n; ++d) {
      const int dest = (me + d) % n;
      const std::uint64_t v = static_cast<std::uint64_t>(me) << 40 | static_cast<std::uint64_t>(dest) << 32 | i;
      t.send(dest, k, bytes_of(i), bytes_of(v));
    }
    if (i % 64 == 0) t.poll();
  }
  poll_until(t, [&] { return total >= count * static_cast<std::uint64_t>(n); }, "all-to-all tiny messages");
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(total, count * static_cast<std::uint64_t>(n));
  for (int s = 0; s < n; ++s) EXPECT_EQ(next[static_cast<std::size_t>(s)], count) << "from rank " << s;
  barrier(t);
  const TransportStats st = t.stats();
  EXPECT_EQ(st.messages_sent, count * static_cast<std::uint64_t>(n));
  EXPECT_EQ(st.self_messages, count);
  EXPECT_EQ(st.messages_received, count * static_cast<std::uint64_t>(n));
  if (n > 1) {
    EXPECT_LT(st.mpi_messages_sent, st.messages_sent - st.self_messages) << "no aggregation";
  }
  // Every message has been delivered everywhere: this rank's last sends complete without anyone's help.
  poll_until(t, [&] { return t.outstanding() == 0; }, "the last sends to complete");
}

// 1 MiB payloads (and sizes around the threshold) from every rank to every rank: copied sends delivered into
// transport buffers, borrowed sends (done callback) delivered into buffers supplied by place().
TEST_P(TransportTest, LargeMessagesByRendezvous) {
  TransportConfig c = config();
  Transport t(c);
  const int me = t.rank(), n = t.size();
  const std::size_t thr = c.rendezvous_threshold;
  const std::vector<std::size_t> sizes = {0, 1, thr - 1, thr, thr + 1, 64 * 1024, 1 << 20, (3 << 20) + 5};
  const int reps = 3;
  // Placed buffers: one per (source, size index, rep), allocated by place() and checked at delivery.
  std::map<std::array<std::uint64_t, 3>, std::vector<std::byte>> placed;
  std::uint64_t delivered = 0, bad = 0, placed_calls = 0;
  struct Hdr {
    std::uint32_t size_index, rep, borrowed;
  };
  Kind k = t.register_kind(
      "large",
      {.deliver =
           [&](const Message& m) {
             const auto h = read_as<Hdr>(m.header());
             const std::size_t size = sizes[h.size_index];
             const std::uint64_t seq = h.size_index * 16 + h.rep;
             if (m.payload_size() != size || m.payload().size() != size) ++bad;
             if (check_payload(m.payload(), m.source(), me, seq) != std::string::npos) ++bad;
             if (size > thr) {
               auto it = placed.find({static_cast<std::uint64_t>(m.source()), h.size_index, h.rep});
               if (it == placed.end() || m.payload().data() != it->second.data()) ++bad;
               if (it != placed.end()) placed.erase(it);
             }
             ++delivered;
           },
       .place =
           [&](const Message& m) -> std::span<std::byte> {
             ++placed_calls;
             const auto h = read_as<Hdr>(m.header());
             if (!m.payload().empty() || m.payload_size() != sizes[h.size_index]) ++bad;
             auto& buf = placed[{static_cast<std::uint64_t>(m.source()), h.size_index, h.rep}];
             buf.assign(m.payload_size(), std::byte{0});
             return buf;
           }});
  std::vector<std::vector<std::byte>> keep;  // borrowed payloads, alive until their done callback
  std::atomic<std::uint64_t> done_calls{0};
  std::uint64_t borrowed = 0;
  barrier(t);
  for (int rep = 0; rep < reps; ++rep) {
    for (std::uint32_t si = 0; si < sizes.size(); ++si) {
      for (int d = 0; d < n; ++d) {
        const int dest = (me + d) % n;
        const Hdr h{si, static_cast<std::uint32_t>(rep), static_cast<std::uint32_t>(rep % 2)};
        auto payload = make_payload(me, dest, si * 16 + rep, sizes[si]);
        if (h.borrowed) {
          keep.push_back(std::move(payload));
          ++borrowed;
          t.send(dest, k, bytes_of(h), keep.back(), [&done_calls] { done_calls.fetch_add(1); });
        } else {
          t.send(dest, k, bytes_of(h), payload);
          std::fill(payload.begin(), payload.end(), std::byte{0xEE});  // copied: ours to scribble on
        }
      }
      t.poll();
    }
  }
  const std::uint64_t expect = static_cast<std::uint64_t>(reps) * sizes.size() * static_cast<std::uint64_t>(n);
  poll_until(t, [&] { return delivered >= expect && done_calls.load() >= borrowed; }, "large messages");
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(delivered, expect);
  EXPECT_EQ(done_calls.load(), borrowed);
  EXPECT_TRUE(placed.empty());
  std::uint64_t large_sizes = 0;
  for (std::size_t s : sizes) large_sizes += s > thr;
  EXPECT_EQ(placed_calls, large_sizes * reps * static_cast<std::uint64_t>(n));
  const TransportStats st = t.stats();
  EXPECT_EQ(st.rendezvous_sent, large_sizes * reps * static_cast<std::uint64_t>(n));
  EXPECT_EQ(st.rendezvous_received, st.rendezvous_sent);
  barrier(t);
}

// Without place(), a large payload lands in a buffer of the transport.
TEST_P(TransportTest, LargeWithoutPlace) {
  Transport t(config());
  const int me = t.rank(), n = t.size();
  const std::size_t size = 1 << 20;
  std::uint64_t got = 0, bad = 0;
  Kind k = t.register_kind("large-noplace", {.deliver = [&](const Message& m) {
                                               if (m.payload().size() != size ||
                                                   check_payload(m.payload(), m.source(), me, 7) !=
                                                       std::string::npos)
                                                 ++bad;
                                               ++got;
                                             }});
  barrier(t);
  for (int d = 0; d < n; ++d) t.send(d, k, {}, make_payload(me, d, 7, size));
  poll_until(t, [&] { return got >= static_cast<std::uint64_t>(n); }, "large messages without place()");
  EXPECT_EQ(bad, 0u);
  barrier(t);
}

// Several threads of each rank send while several threads poll. Thread `th` sends message i to rank
// (me + i + th) % n, so every receiver knows how many to expect from each (sender, thread) and checks their
// order (one thread's small messages to one rank keep their order) and content. Some payloads are large.
TEST_P(TransportTest, ConcurrentSendersAndPollers) {
  Transport t(config());
  const int me = t.rank(), n = t.size();
  constexpr int kSenders = 3, kPollers = 2;
  const std::uint32_t per_thread = static_cast<std::uint32_t>(weft_test::scaled(20000, 500));
  const std::size_t big = 20000;  // above the threshold: rendezvous
  struct Hdr {
    std::uint32_t thread, seq;
  };
  // Written by handlers only, which never run concurrently (one poller at a time): no lock needed.
  std::vector<std::array<std::uint32_t, kSenders>> next(static_cast<std::size_t>(n));
  std::atomic<std::uint64_t> got{0};
  std::uint64_t bad = 0;
  std::atomic<int> in_handler{0};
  Kind k = t.register_kind(
      "concurrent", {.deliver = [&](const Message& m) {
                       if (in_handler.fetch_add(1) != 0) ++bad;  // handlers must be serialised
                       const auto h = read_as<Hdr>(m.header());
                       const std::size_t size = h.seq % 97 == 0 ? big : 16;
                       if (size != big) {  // a large one is delivered when its data is in: later ones may pass
                         auto& nx = next[static_cast<std::size_t>(m.source())][h.thread];
                         if (h.seq < nx) ++bad;
                         nx = h.seq + 1;
                       }
                       if (m.payload().size() != size ||
                           check_payload(m.payload(), m.source(), me, h.thread * 1000003ull + h.seq) !=
                               std::string::npos)
                         ++bad;
                       in_handler.fetch_sub(1);
                       got.fetch_add(1, std::memory_order_relaxed);
                     }});
  // Expected from each sender: messages i of thread th with (src + i + th) % n == me.
  std::uint64_t expect = 0;
  for (int src = 0; src < n; ++src)
    for (int th = 0; th < kSenders; ++th)
      for (std::uint32_t i = 0; i < per_thread; ++i) expect += (src + static_cast<int>(i) + th) % n == me;
  barrier(t);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < kPollers; ++p)
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed))
        if (t.poll() == 0) std::this_thread::yield();
    });
  for (int th = 0; th < kSenders; ++th)
    threads.emplace_back([&, th] {
      for (std::uint32_t i = 0; i < per_thread; ++i) {
        const int dest = (me + static_cast<int>(i) + th) % n;
        // The receiver checks against its own rank as `dst`: the pattern is keyed by the destination.
        const std::size_t size = i % 97 == 0 ? big : 16;
        const auto payload = make_payload(me, dest, static_cast<std::uint64_t>(th) * 1000003ull + i, size);
        t.send(dest, k, bytes_of(Hdr{static_cast<std::uint32_t>(th), i}), payload);
        if (i % 1024 == 0) t.poll();  // senders poll too, as workers will
      }
    });
  for (std::size_t i = kPollers; i < threads.size(); ++i) threads[i].join();
  poll_until([&] { return std::size_t{0}; }, [&] { return got.load() >= expect; }, "concurrent messages");
  stop = true;
  for (int p = 0; p < kPollers; ++p) threads[static_cast<std::size_t>(p)].join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(got.load(), expect);
  barrier(t);
}

// Messages to oneself, small and large, also sent from handlers: a chain of 1000 self-messages unrolls over
// polls, not recursively inside send().
TEST_P(TransportTest, SelfMessages) {
  Transport t(config());
  const int me = t.rank();
  int depth = 0, max_depth = 0;
  std::uint64_t chain = 0, large = 0, bad = 0;
  Kind k_chain = 0;
  k_chain = t.register_kind("chain", {.deliver = [&](const Message& m) {
                                        max_depth = std::max(max_depth, ++depth);
                                        if (m.source() != me) ++bad;
                                        const auto v = read_as<std::uint64_t>(m.payload());
                                        if (v != chain) ++bad;
                                        ++chain;
                                        if (v + 1 < 1000) t.send(me, k_chain, {}, bytes_of(v + 1));
                                        --depth;
                                      }});
  std::vector<std::byte> target(1 << 20);
  Kind k_large = t.register_kind(
      "self-large", {.deliver =
                         [&](const Message& m) {
                           if (m.payload().data() != target.data() ||
                               check_payload(m.payload(), me, me, 3) != std::string::npos)
                             ++bad;
                           ++large;
                         },
                     .place = [&](const Message&) { return std::span<std::byte>(target); }});
  const std::uint64_t zero = 0;
  t.send(me, k_chain, {}, bytes_of(zero));
  auto payload = make_payload(me, me, 3, target.size());
  bool done = false;
  t.send(me, k_large, {}, payload, [&] { done = true; });
  poll_until(t, [&] { return chain == 1000 && large == 1 && done; }, "self messages");
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(max_depth, 1);
  const TransportStats s = t.stats();
  EXPECT_EQ(s.self_messages, 1001u);
  barrier(t);
}

// A message whose kind the receiver has not registered yet waits for the registration and is delivered then,
// in order, large ones included.
TEST_P(TransportTest, KindRegisteredLate) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Transport t(config());
  const int me = t.rank();
  bool go = false;
  Kind k_go = t.register_kind("go", {.deliver = [&](const Message&) { go = true; }});
  barrier(t);
  std::vector<std::uint64_t> seen;
  std::uint64_t bad = 0;
  std::vector<std::byte> big_target(100000);
  Handler late{.deliver =
                   [&](const Message& m) {
                     const auto v = read_as<std::uint64_t>(m.header());
                     seen.push_back(v);
                     if (v == 5 && (m.payload().size() != big_target.size() ||
                                    check_payload(m.payload(), 0, 1, 5) != std::string::npos))
                       ++bad;
                   },
               .place = [&](const Message&) { return std::span<std::byte>(big_target); }};
  if (me == 0) {
    Kind k_late = t.register_kind("late", late);
    for (std::uint64_t i = 0; i < 10; ++i)
      t.send(1, k_late, bytes_of(i), i == 5 ? make_payload(0, 1, 5, big_target.size()) : std::vector<std::byte>{});
    t.poll();
    t.send(1, k_go, {}, {});
  } else if (me == 1) {
    poll_until(t, [&] { return go; }, "the go message");
    for (int i = 0; i < 100; ++i) t.poll();  // the late messages are in by now, kept
    EXPECT_TRUE(seen.empty());
    t.register_kind("late", late);
    poll_until(t, [&] { return seen.size() >= 10; }, "the late kind's messages");
    // In sending order, except the large one (5), delivered when its data is in.
    std::vector<std::uint64_t> small;
    for (std::uint64_t v : seen)
      if (v != 5) small.push_back(v);
    EXPECT_EQ(small, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 6, 7, 8, 9}));
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 5u), 1);
    EXPECT_EQ(bad, 0u);
  } else {
    t.register_kind("late", late);
  }
  barrier(t);
}

// A handler may register a kind (it runs under the token: registration must not wait for it).
TEST_P(TransportTest, RegisterFromHandler) {
  Transport t(config());
  const int me = t.rank(), n = t.size();
  std::uint64_t second = 0;
  Kind k2 = 0;
  bool registered = false;
  Kind k1 = t.register_kind("first", {.deliver = [&](const Message&) {
                                        if (!registered) {
                                          k2 = t.register_kind("second", {.deliver = [&](const Message&) {
                                                                            ++second;
                                                                          }});
                                          registered = true;
                                        }
                                      }});
  t.send(me, k1, {}, {});
  poll_until(t, [&] { return registered; }, "registration from a handler");
  barrier(t);  // every rank has registered "second"
  for (int d = 0; d < n; ++d) t.send(d, k2, {}, {});
  poll_until(t, [&] { return second >= static_cast<std::uint64_t>(n); }, "messages of the second kind");
  t.check_consistency();
  barrier(t);
}

// A kind's name, for messages that name a kind (a protocol error); an id not registered says so.
TEST_P(TransportTest, KindNames) {
  Transport t(config());
  Kind a = t.register_kind("alpha", {.deliver = [](const Message&) {}});
  Kind b = t.register_kind("beta", {.deliver = [](const Message&) {}});
  EXPECT_EQ(t.kind_name(a), "alpha");
  EXPECT_EQ(t.kind_name(b), "beta");
  EXPECT_EQ(t.kind_name(static_cast<Kind>(b + 1)), "kind " + std::to_string(b + 1));
  t.retire_kind(a);
  EXPECT_EQ(t.kind_name(a), "alpha");  // a retired kind keeps its id and name
  barrier(t);
}

// Registering a kind (which waits for the progress token) and reading the counters while other threads poll
// back to back: the pollers step aside for the registration, which must not starve.
TEST_P(TransportTest, RegisterAndStatsWhileOthersPoll) {
  Transport t(config());
  const int me = t.rank(), n = t.size();
  std::atomic<bool> stop{false};
  std::vector<std::thread> pollers;
  for (int p = 0; p < 2; ++p)
    pollers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) t.poll();  // no yield: the worst case
    });
  std::atomic<std::uint64_t> got{0};
  std::vector<Kind> kinds;
  for (int i = 0; i < 20; ++i) {
    kinds.push_back(t.register_kind("busy-" + std::to_string(i), {.deliver = [&](const Message&) {
                                                                    got.fetch_add(1, std::memory_order_relaxed);
                                                                  }}));
    const TransportStats s = t.stats();
    EXPECT_EQ(s.kinds.size(), kinds.size());
    (void)t.outstanding();
  }
  barrier([] { return std::size_t{0}; });  // every rank has registered all 20 (the pollers progress)
  for (Kind k : kinds)
    for (int d = 0; d < n; ++d) t.send(d, k, {}, {});
  poll_until([] { return std::size_t{0}; }, [&] { return got.load() >= 20u * static_cast<unsigned>(n); },
             "messages of kinds registered under load");
  stop = true;
  for (auto& th : pollers) th.join();
  const TransportStats s = t.stats();
  std::uint64_t per_kind = 0;
  for (const KindStats& k : s.kinds) per_kind += k.messages_received;
  EXPECT_EQ(per_kind, 20u * static_cast<unsigned>(n));
  (void)me;
  barrier(t);
}

TEST_P(TransportTest, ConsistencyCheck) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Transport t(config());
  auto h = Handler{.deliver = [](const Message&) {}};
  t.register_kind("a", h);
  t.check_consistency();  // same kinds everywhere: passes
  t.register_kind(t.rank() == 1 ? "b-on-rank-1" : "b", h);
  try {
    t.check_consistency();
    ADD_FAILURE() << "no error for different kinds";
  } catch (const comm_error& e) {
    EXPECT_NE(std::string(e.what()).find("different message kinds"), std::string::npos) << e.what();
  }
  barrier(t);
}

TEST_P(TransportTest, BadArguments) {
  Transport t(config());
  Kind k = t.register_kind("k", {.deliver = [](const Message&) {}});
  std::vector<std::byte> big_header(t.config().max_header + 1);
  EXPECT_THROW(t.send(t.size(), k, {}, {}), comm_error);
  EXPECT_THROW(t.send(-1, k, {}, {}), comm_error);
  EXPECT_THROW(t.send(0, static_cast<Kind>(k + 1), {}, {}), comm_error);
  EXPECT_THROW(t.send(0, k, big_header, {}), comm_error);
  EXPECT_THROW(t.register_kind("no-deliver", {}), comm_error);
  TransportConfig bad = config();
  bad.aggregate_bytes = 100;
  EXPECT_THROW(Transport{bad}, comm_error);
  barrier(t);
}

INSTANTIATE_TEST_SUITE_P(Modes, TransportTest, testing::Values(RecvMode::ring, RecvMode::probe), ModeName());

// The environment: weft initialised MPI (the test main did not), at a level it accepts, and duplicated the world.
TEST(MpiEnvTest, InitialisedByWeft) {
  MpiEnv& env = MpiEnv::get();
  EXPECT_TRUE(env.initialised_by_weft());
  EXPECT_GE(env.thread_level(), MPI_THREAD_SERIALIZED);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(env.comm(), MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);  // same group, different context
  int flag = 0;
  void* ub = nullptr;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  ASSERT_TRUE(flag);
  EXPECT_LT(env.max_tag(), *static_cast<int*>(ub));
}


// --- failure: run by tests/mpi/failure.cmake (2 ranks), skipped in the ordinary runs -----------------------

// Rank 1 dies by SIGKILL inside a handler (mid-poll) while rank 0 waits for its answer: mpirun must end the job
// with a failure status. Rank 1 writes the time of death first, so that the driver measures from there, not
// from the job's start (start-up time on a loaded machine is not the point). Rank 0 gives up by itself after
// a while, so that no process outlives a driver that timed out.
TEST(Failure, KilledRankEndsJob) {
  const char* file = std::getenv("WEFT_TEST_KILL_FILE");
  if (!file) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  ASSERT_EQ(world_size(), 2);
  Transport t;
  const int me = t.rank();
  std::uint64_t got = 0;
  Kind k = 0;
  k = t.register_kind("kill-ping", {.deliver = [&](const Message&) {
                                      ++got;
                                      if (me == 1 && got == 1000) {
                                        if (FILE* f = std::fopen(file, "w")) {
                                          std::fprintf(f, "%lld\n", static_cast<long long>(std::time(nullptr)));
                                          std::fclose(f);
                                        }
                                        std::raise(SIGKILL);
                                      }
                                      t.send(1 - me, k, {}, {});
                                    }});
  if (me == 0) t.send(1, k, {}, {});
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up)
    if (t.poll() == 0) std::this_thread::yield();
  std::fprintf(stderr, "weft: rank %d: still running 60 s after the peer's death: mpirun did not end the job\n", me);
  std::_Exit(3);
}

// abort_job on one rank ends every rank, with one rank-tagged line.
TEST(Failure, AbortJobEndsJob) {
  if (!std::getenv("WEFT_TEST_ABORT")) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  Transport t;
  if (t.rank() == 1) abort_job("deliberate abort from the test");
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up)
    if (t.poll() == 0) std::this_thread::yield();
  std::_Exit(3);
}

}  // namespace
