// Idle workers: a push racing with workers going to sleep must wake one of them. Hop i spawns hop i + 1 after
// a random busy gap (about the time the other workers take to fall asleep, so the push lands before, during
// or after their announcement of sleep), then waits until another worker has started it. A lost wake-up
// leaves hop i + 1 queued with every other worker asleep: the bounded wait fails (the engine's idle sleep has
// no periodic timeout that would hide it).
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <random>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

struct Chain {
  std::vector<int> gap_us;
  std::atomic<long long> started{-1};
  std::atomic<long long> lost{-1};  // the first hop that no other worker started in time
};

struct Hop {
  Chain* c;
  long long i;
  void operator()(weft::Context& cx) const {
    c->started.store(i);
    if (i + 1 == static_cast<long long>(c->gap_us.size()) || c->lost.load() >= 0) return;
    busy_for_us(c->gap_us[static_cast<std::size_t>(i)]);
    cx.spawn(Hop{c, i + 1});
    // This worker does not run it: another one must, woken by the push if it was asleep.
    if (!spin_until([&] { return c->started.load() >= i + 1; })) c->lost.store(i + 1);
  }
};

class Idle : public testing::TestWithParam<unsigned> {};

TEST_P(Idle, PushRacingWithSleepIsNeverLost) {
  weft::Runtime rt(opts(GetParam()));
  Chain c;
  std::mt19937 rng(GetParam());
  std::uniform_int_distribution<int> gap(0, 1500);
  c.gap_us.resize(scaled(2000, 100));
  for (int& g : c.gap_us) g = gap(rng);
  rt.run([&](weft::Context& cx) { cx.spawn(Hop{&c, 0}); });
  EXPECT_EQ(c.lost.load(), -1) << "no worker started this hop within " << kLongWait.count() << " s of its push";
  EXPECT_EQ(c.started.load(), static_cast<long long>(c.gap_us.size()) - 1);
}

// A task waiting for its children (taskwait) sleeps until a child's completion wakes it: children that finish on
// other workers after random gaps (around the time the waiter takes to fall asleep) must each wake it. The sleep
// has no timeout: a lost wake-up hangs this test (ctest's timeout fails it).
TEST_P(Idle, WaiterForChildrenIsWokenByTheirCompletion) {
  weft::Runtime rt(opts(GetParam()));
  std::mt19937 rng(GetParam() + 7);
  std::uniform_int_distribution<int> gap(0, 1500);
  const int rounds = scaled(400, 40);
  int done = 0;
  rt.run([&](weft::Context& cx) {
    for (int r = 0; r < rounds; ++r) {
      const int g = gap(rng);
      std::atomic<bool> started{false};
      cx.spawn([&started, g] {
        started.store(true);
        busy_for_us(g);
      });
      // Another worker takes the child (this one runs nothing while it spins), then this one waits for it.
      ASSERT_TRUE(spin_until([&] { return started.load(); })) << "no worker took the child";
      cx.taskwait();
      ++done;
    }
  });
  EXPECT_EQ(done, rounds);
}

// Workers asleep when a run ends leave it: with a profile, the end of a run waits for every worker to leave.
TEST(Idle, RunsEndWithWorkersAsleep) {
  weft::Options o = opts(4);
  o.profile.enabled = true;
  weft::Runtime rt(o);
  for (int r = 0; r < 20; ++r) {
    std::atomic<int> n{0};
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] { n.fetch_add(1); });
      busy_for_us(r * 500);  // the other workers fall asleep (from r = 2 or so), later and later in the run
    });
    EXPECT_EQ(n.load(), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, Idle, testing::Values(2u, 4u), WorkersName());

}  // namespace
