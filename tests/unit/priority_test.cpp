// priority(p): among ready tasks a worker takes the highest priority first. Checked on one worker, where the
// order is deterministic: the root spawns everything, nothing runs before its taskwait (max_tasks is far
// above the number of tasks, so throttling never runs tasks early).
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

std::vector<int> shuffled_priorities(int n, int offset, unsigned seed) {
  std::vector<int> p(n);
  std::iota(p.begin(), p.end(), offset);
  std::shuffle(p.begin(), p.end(), std::mt19937(seed));
  return p;
}

std::vector<int> descending(std::vector<int> v) {
  std::sort(v.begin(), v.end(), std::greater<>());
  return v;
}

TEST(Priority, IndependentTasksRunInDescendingPriorityOnOneWorker) {
  weft::Runtime rt(opts(1));
  for (unsigned seed = 1; seed <= 5; ++seed) {
    auto prios = shuffled_priorities(40, -20, seed);
    std::vector<int> order;
    rt.run([&](weft::Context& cx) {
      for (int p : prios) cx.spawn([&order, p] { order.push_back(p); }, weft::priority(p));
      EXPECT_TRUE(order.empty()) << "a task ran before the root waited, on a single worker";
      cx.taskwait();
    });
    EXPECT_EQ(order, descending(prios)) << "seed " << seed;
  }
}

// Clauses in any order; priority together with accesses and a label.
TEST(Priority, ClausesInAnyOrder) {
  weft::Runtime rt(opts(1));
  std::vector<int> order;
  int a = 0, b = 0, c = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { order.push_back(1); }, weft::label("one"), weft::priority(1), weft::out(a));
    cx.spawn([&] { order.push_back(3); }, weft::out(b), weft::priority(3), weft::label("three"));
    cx.spawn([&] { order.push_back(2); }, weft::priority(2), weft::out(c));
    cx.taskwait();
  });
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1}));
}

// Successors made ready together by one predecessor run in descending priority (the first as immediate
// successor, the rest from the queue).
TEST(Priority, SuccessorsReleasedTogetherRunInDescendingPriority) {
  for (bool immediate : {true, false}) {
    weft::Runtime rt(opts(1, weft::kDefaultMaxTasks, immediate));
    auto prios = shuffled_priorities(20, 0, 7);
    int x = 0;
    std::vector<int> order;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] { x = 1; }, weft::out(x));
      for (int p : prios)
        cx.spawn([&order, &x, p] {
          EXPECT_EQ(x, 1);
          order.push_back(p);
        }, weft::in(x), weft::priority(p));
      cx.taskwait();
    });
    EXPECT_EQ(order, descending(prios)) << "immediate_successor=" << immediate;
  }
}

// Inside a nested task too.
TEST(Priority, NestedChildrenRunInDescendingPriority) {
  weft::Runtime rt(opts(1));
  auto prios = shuffled_priorities(16, 100, 3);
  std::vector<int> order;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& p) {
      for (int q : prios) p.spawn([&order, q] { order.push_back(q); }, weft::priority(q));
      p.taskwait();
    });
    cx.taskwait();
  });
  EXPECT_EQ(order, descending(prios));
}

// Priorities must not break dependencies: a high-priority task still waits for its low-priority predecessor.
TEST(Priority, PriorityDoesNotOverrideDependencies) {
  for (unsigned w : {1u, 2u, 4u}) {
    weft::Runtime rt(opts(w));
    std::vector<int> log;
    int x = 0;
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 30; ++i)
        cx.spawn([&log, i] { log.push_back(i); }, weft::inout(x), weft::priority(i % 2 ? 100 - i : i - 100));
    });
    std::vector<int> expect(30);
    std::iota(expect.begin(), expect.end(), 0);
    EXPECT_EQ(log, expect) << w << " workers";
  }
}

// A thief takes its victim's tasks in the victim's own order: positive priorities, then default ones, then
// negative ones. Worker 1 is held in a blocker task while the root (worker 0, which then runs no task: it
// spins in its body) queues one task of each kind; released, worker 1 steals all three.
TEST(Priority, ThiefTakesDefaultBeforeNegativePriority) {
  weft::Runtime rt(opts(2));
  std::vector<int> order;  // written by worker 1 only, read after the run
  std::atomic<bool> blocked{false}, release{false};
  std::atomic<int> done{0};
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] {
      blocked.store(true);
      spin_until([&] { return release.load(); });
    });
    ASSERT_TRUE(spin_until([&] { return blocked.load(); })) << "worker 1 did not take the blocker";
    for (int p : {-5, 0, 5})
      cx.spawn([&order, &done, p] {
        order.push_back(p);
        done.fetch_add(1);
      }, weft::priority(p));
    release.store(true);
    EXPECT_TRUE(spin_until([&] { return done.load() == 3; })) << "worker 1 did not steal the tasks";
  });
  EXPECT_EQ(order, (std::vector<int>{5, 0, -5}));
}

}  // namespace
