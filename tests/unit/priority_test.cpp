// priority(p): among ready tasks a worker takes the highest priority first, the most recently queued first
// among equal priorities. Checked on one worker, where the order is deterministic: the root spawns
// everything, nothing runs before its taskwait (max_tasks is far above the number of tasks, so throttling
// never runs tasks early). With several workers: thieves take prioritised tasks too, and every task runs once.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <utility>
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

// Equal priorities: the most recently queued task first (default priority 0 included, whose queue is LIFO).
TEST(Priority, EqualPrioritiesRunNewestFirstOnOneWorker) {
  weft::Runtime rt(opts(1));
  for (unsigned seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    std::vector<std::pair<int, int>> spawned;  // (priority, spawn number)
    for (int i = 0; i < 60; ++i) spawned.emplace_back(static_cast<int>(rng() % 7) - 3, i);
    std::vector<std::pair<int, int>> order;
    rt.run([&](weft::Context& cx) {
      for (auto [p, i] : spawned) cx.spawn([&order, p, i] { order.emplace_back(p, i); }, weft::priority(p));
      cx.taskwait();
    });
    std::sort(spawned.begin(), spawned.end(), std::greater<>());  // priority, then spawn number, descending
    EXPECT_EQ(order, spawned) << "seed " << seed;
  }
}

// Prioritised tasks queued by a worker that then stays busy (the root spins in its body, it never takes a
// task) are taken by the other workers, asleep when they are queued: the idle path sees them.
TEST(Priority, PrioritizedTasksAreStolenFromABusyWorker) {
  for (unsigned nw : {2u, 4u}) {
    const int n = static_cast<int>(scaled(400, 50));
    weft::Runtime rt(opts(nw, 4 * static_cast<std::size_t>(n)));  // no throttling: the root runs no task
    std::atomic<int> done{0};
    rt.run([&](weft::Context& cx) {
      sleep_ms(20);  // the other workers go to sleep
      for (int i = 0; i < n; ++i)
        cx.spawn([&done] { done.fetch_add(1); }, weft::priority(i % 3 == 0 ? -1 - i : 1 + i));
      EXPECT_TRUE(spin_until([&] { return done.load() == n; })) << "the tasks were not stolen, " << nw << " workers";
    });
    EXPECT_EQ(done.load(), n);
    EXPECT_GE(rt.stats().tasks_stolen, static_cast<std::uint64_t>(n));
  }
}

// Several workers, random priorities (0 among them), tasks that spawn children, some dependencies, and short
// busy tasks so that workers steal from each other: every task runs exactly once. (Dependencies order
// siblings only: each root's children share cells of their own.)
TEST(Priority, StressEveryTaskRunsOnceWithStealing) {
  const int roots = static_cast<int>(scaled(300, 40));
  const int fanout = 6;
  const int total = roots * (1 + fanout);
  for (unsigned nw : {2u, 3u, 4u}) {
    for (unsigned seed = 1; seed <= 3; ++seed) {
      weft::Runtime rt(opts(nw));
      auto ran = std::make_unique<std::atomic<int>[]>(static_cast<std::size_t>(total));
      for (int i = 0; i < total; ++i) ran[i].store(0);
      std::vector<long> cells(2 * static_cast<std::size_t>(roots), 0);  // two per root: siblings share them
      auto prio = [seed](int i) { return static_cast<int>((static_cast<unsigned>(i) * 2654435761u ^ seed) % 21) - 10; };
      rt.run([&](weft::Context& cx) {
        for (int r = 0; r < roots; ++r) {
          auto body = [&, r](weft::Context& c) {
            ran[r].fetch_add(1);
            for (int k = 0; k < fanout; ++k) {
              const int id = roots + r * fanout + k;
              if (k % 3 == 0) {
                c.spawn([&ran, id] { ran[id].fetch_add(1); busy_for_us(2); }, weft::priority(prio(id)));
              } else {
                long& cell = cells[2 * static_cast<std::size_t>(r) + static_cast<std::size_t>(k % 2)];
                c.spawn([&ran, &cell, id] { ran[id].fetch_add(1); ++cell; }, weft::inout(cell),
                        weft::priority(prio(id)));
              }
            }
            c.taskwait();
          };
          cx.spawn(body, weft::priority(prio(r)));
        }
      });
      for (int i = 0; i < total; ++i) ASSERT_EQ(ran[i].load(), 1) << "task " << i << ", " << nw << " workers";
      long sum = 0;
      for (long c : cells) sum += c;
      EXPECT_EQ(sum, static_cast<long>(roots) * (fanout - (fanout + 2) / 3));
      const weft::Stats s = rt.stats();
      EXPECT_EQ(s.tasks_executed, static_cast<std::uint64_t>(total));
    }
  }
}

// A failed task's prioritised successors are cancelled, taken from the queues like any task (their bodies
// skipped), and the runtime is usable afterwards.
TEST(Priority, CancelledPrioritizedSuccessorsAreDrained) {
  for (unsigned nw : {1u, 2u, 4u}) {
    weft::Runtime rt(opts(nw));
    int x = 0;
    std::atomic<int> ran{0};
    const int n = 50;
    EXPECT_THROW(rt.run([&](weft::Context& cx) {
      cx.spawn([] { throw std::runtime_error("boom"); }, weft::out(x), weft::priority(3));
      for (int i = 0; i < n; ++i)
        cx.spawn([&ran] { ran.fetch_add(1); }, weft::in(x), weft::priority(i % 2 ? i : -i - 1));
    }), std::runtime_error);
    EXPECT_EQ(ran.load(), 0);
    EXPECT_EQ(rt.stats().tasks_cancelled, static_cast<std::uint64_t>(n)) << nw << " workers";
    std::atomic<int> after{0};
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < n; ++i) cx.spawn([&after] { after.fetch_add(1); }, weft::priority(i - n / 2));
    });
    EXPECT_EQ(after.load(), n);
  }
}

}  // namespace
