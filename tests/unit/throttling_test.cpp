// Throttling (Options::max_tasks): a producer with max_tasks unfinished children runs ready tasks before
// spawning more, so the number of unfinished children stays bounded.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <ostream>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

struct ThrottleParam {
  unsigned workers;
  bool chain;
};

void PrintTo(const ThrottleParam& p, std::ostream* os) {
  *os << (p.chain ? "chain" : "independent") << ", " << p.workers << " workers";
}

class Throttling : public testing::TestWithParam<ThrottleParam> {};

// One producer spawns N tasks (a chain through one datum, or independent). Every task observes
// spawned - finished (an upper bound of the runtime's unfinished children, since the producer counts a child
// before spawning it and the child counts itself finished before it really is); the peak must stay near
// max_tasks.
TEST_P(Throttling, UnfinishedChildrenStayBounded) {
  const auto [workers, chain] = GetParam();
  constexpr std::size_t kMax = 64;
  weft::Runtime rt(opts(workers, kMax));
  rt.reset_stats();
  const std::int64_t n = static_cast<std::int64_t>(scaled(1000000, 20000));
  std::atomic<std::int64_t> spawned{0}, finished{0}, peak{0};
  std::int64_t x = 0;
  rt.run([&](weft::Context& cx) {
    for (std::int64_t i = 0; i < n; ++i) {
      spawned.fetch_add(1, std::memory_order_relaxed);
      auto body = [&] {
        std::int64_t unfinished = spawned.load(std::memory_order_relaxed) - finished.load(std::memory_order_relaxed);
        atomic_max(peak, unfinished);
        if (chain) ++x;
        finished.fetch_add(1, std::memory_order_relaxed);
      };
      if (chain)
        cx.spawn(body, weft::inout(x));
      else
        cx.spawn(body);
    }
  });
  EXPECT_EQ(finished.load(), n);
  if (chain) {
    EXPECT_EQ(x, n);
  }
  EXPECT_LE(peak.load(), static_cast<std::int64_t>(2 * kMax)) << "throttling did not bound unfinished children";
  weft::Stats s = rt.stats();
  EXPECT_EQ(s.tasks_created, static_cast<std::uint64_t>(n));
  EXPECT_EQ(s.tasks_executed, static_cast<std::uint64_t>(n));
  EXPECT_GT(s.throttle_stalls, 0u);
  // Each stall runs tasks until only half as many remain: at least about max_tasks/2 spawns between stalls.
  EXPECT_LE(s.throttle_stalls, static_cast<std::uint64_t>(n / (kMax / 2 - 1) + 1));
}

INSTANTIATE_TEST_SUITE_P(Cases, Throttling,
                         testing::Values(ThrottleParam{1, true}, ThrottleParam{1, false}, ThrottleParam{2, true},
                                         ThrottleParam{2, false}),
                         [](const testing::TestParamInfo<ThrottleParam>& i) {
                           char buf[32];
                           std::snprintf(buf, sizeof buf, "%s_w%u", i.param.chain ? "chain" : "independent",
                                         i.param.workers);
                           return std::string(buf);
                         });

// Nested producers each respect the bound for their own children.
TEST(ThrottlingNested, NestedProducersBounded) {
  constexpr std::size_t kMax = 16;
  weft::Runtime rt(opts(2, kMax));
  const int producers = 4;
  const int per = static_cast<int>(scaled(20000, 2000));
  std::atomic<std::int64_t> spawned[producers] = {}, finished[producers] = {}, peak[producers] = {};
  std::atomic<std::int64_t> total{0};
  rt.run([&](weft::Context& cx) {
    for (int p = 0; p < producers; ++p)
      cx.spawn([&, p](weft::Context& pc) {
        for (int i = 0; i < per; ++i) {
          spawned[p].fetch_add(1, std::memory_order_relaxed);
          pc.spawn([&, p] {
            atomic_max(peak[p], spawned[p].load(std::memory_order_relaxed) - finished[p].load(std::memory_order_relaxed));
            total.fetch_add(1, std::memory_order_relaxed);
            finished[p].fetch_add(1, std::memory_order_relaxed);
          });
        }
      });
  });
  EXPECT_EQ(total.load(), static_cast<std::int64_t>(producers) * per);
  for (int p = 0; p < producers; ++p) EXPECT_LE(peak[p].load(), static_cast<std::int64_t>(2 * kMax)) << p;
}

// No stalls when the producer stays below max_tasks.
TEST(ThrottlingMisc, NoStallsBelowLimit) {
  weft::Runtime rt(opts(1, 1000));
  rt.reset_stats();
  std::atomic<int> done{0};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 500; ++i) cx.spawn([&] { done.fetch_add(1); });
  });
  EXPECT_EQ(done.load(), 500);
  EXPECT_EQ(rt.stats().throttle_stalls, 0u);
}

// max_tasks = 1: every spawn after the first waits; still correct.
TEST(ThrottlingMisc, MaxTasksOne) {
  for (unsigned w : {1u, 2u}) {
    weft::Runtime rt(opts(w, 1));
    std::uint64_t x = 0;  // unsigned: the recurrence wraps
    std::atomic<int> peak{0}, live{0};
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 2000; ++i) {
        live.fetch_add(1);
        cx.spawn([&, i] {
          atomic_max(peak, live.load());
          x = x * 3 + static_cast<std::uint64_t>(i);
          live.fetch_sub(1);
        }, weft::inout(x));
      }
    });
    std::uint64_t e = 0;
    for (int i = 0; i < 2000; ++i) e = e * 3 + static_cast<std::uint64_t>(i);
    EXPECT_EQ(x, e);
    EXPECT_LE(peak.load(), 2);
  }
}

// WEFT_MAX_TASKS from the environment reaches the runtime.
TEST(ThrottlingMisc, MaxTasksFromEnvironment) {
  ::setenv("WEFT_MAX_TASKS", "32", 1);
  ::setenv("WEFT_NUM_THREADS", "1", 1);
  weft::Options o = weft::Options::from_environment();
  ::unsetenv("WEFT_MAX_TASKS");
  ::unsetenv("WEFT_NUM_THREADS");
  EXPECT_EQ(o.max_tasks, 32u);
  weft::Runtime rt(o);
  EXPECT_EQ(rt.options().max_tasks, 32u);
  std::atomic<std::int64_t> spawned{0}, finished{0}, peak{0};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 20000; ++i) {
      spawned.fetch_add(1);
      cx.spawn([&] {
        atomic_max(peak, spawned.load() - finished.load());
        finished.fetch_add(1);
      });
    }
  });
  EXPECT_EQ(finished.load(), 20000);
  EXPECT_LE(peak.load(), 64);
}

// On one worker a child runs only when its producer stalls (or waits), so the bound is exact: a producer
// never has more than max_tasks unfinished children when it spawns. The producer reads its children's count
// only once per room (engine: throttle_check); the nested producers here take turns on the worker (each
// child spawns grandchildren while its parent stalls), so each one's room is read again when it resumes. A
// room too large for its parent, or kept across another parent's spawns, shows as a peak above max_tasks + 1.
TEST(ThrottlingMisc, ExactBoundOnOneWorkerWithNestedProducers) {
  constexpr std::int64_t kMax = 8;
  weft::Runtime rt(opts(1, kMax));
  constexpr int kChildren = 300, kGrandchildren = 20;
  std::atomic<std::int64_t> spawned{0}, finished{0}, peak{0};
  std::atomic<std::int64_t> leaves{0}, leaf_peak{0};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < kChildren; ++i) {
      spawned.fetch_add(1, std::memory_order_relaxed);
      cx.spawn([&](weft::Context& c) {
        atomic_max(peak, spawned.load() - finished.load());
        // This child's own children: at most kMax unfinished at each of its spawns.
        std::int64_t mine_spawned = 0;
        std::atomic<std::int64_t> mine_finished{0};  // outlives its readers: they end before the taskwait
        for (int j = 0; j < kGrandchildren; ++j) {
          ++mine_spawned;
          atomic_max(leaf_peak, mine_spawned - mine_finished.load());
          c.spawn([&] {
            leaves.fetch_add(1, std::memory_order_relaxed);
            mine_finished.fetch_add(1);
          });
        }
        c.taskwait();
        finished.fetch_add(1, std::memory_order_relaxed);
      });
    }
  });
  EXPECT_EQ(finished.load(), kChildren);
  EXPECT_EQ(leaves.load(), static_cast<std::int64_t>(kChildren) * kGrandchildren);
  EXPECT_LE(peak.load(), kMax + 1) << "a producer spawned past max_tasks";
  EXPECT_LE(leaf_peak.load(), kMax + 1) << "a nested producer spawned past max_tasks";
  EXPECT_GE(peak.load(), kMax) << "the test did not reach the limit";
  EXPECT_GE(leaf_peak.load(), kMax) << "the test did not reach the limit";
}

// A producer whose wait runs another producer's spawns, while it still has unfinished children of its own,
// reads its count again before it spawns on (the room is per parent). One worker: the producer's seven `a`
// children stay queued while taskwait_on(c) runs `c`. The producer's room is used up by its spawn of `c`, so
// `c`'s spawn reads `c`'s count and leaves room for `c`; room kept across to the producer would let its next
// spawns take it to 14 unfinished children.
TEST(ThrottlingMisc, RoomIsNotSharedBetweenProducers) {
  constexpr std::int64_t kMax = 8;
  weft::Runtime rt(opts(1, kMax));
  std::atomic<std::int64_t> spawned{0}, finished{0};
  std::int64_t peak = 0;
  int c = 0;
  rt.run([&](weft::Context& cx) {
    auto count_spawn = [&] { peak = std::max(peak, spawned.fetch_add(1) + 1 - finished.load()); };
    auto spawn_a = [&] {
      count_spawn();
      cx.spawn([&] { finished.fetch_add(1); });
    };
    for (int i = 0; i < 7; ++i) spawn_a();  // the first reads the count (0): room for 7 more
    count_spawn();
    cx.spawn([&](weft::Context& cc) {
      cc.spawn([] {});
      cc.taskwait();
      ++c;
      finished.fetch_add(1);
    }, weft::inout(c));
    cx.taskwait_on(c);
    EXPECT_EQ(finished.load(), 1) << "the a children were meant to stay queued";
    for (int i = 0; i < 7; ++i) spawn_a();
  });
  EXPECT_EQ(c, 1);
  EXPECT_EQ(finished.load(), spawned.load());
  EXPECT_LE(peak, kMax + 1) << "a producer spawned past max_tasks on another producer's room";
  EXPECT_GE(peak, kMax) << "the test did not reach the limit";
}

}  // namespace
