// Nested tasks: children of children, taskwait scope, release of a parent's accesses after its children.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <cstdint>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

class Nesting : public testing::TestWithParam<unsigned> {};

// A tree of depth 3 with fan-out 5: every task runs exactly once and run() returns after all of them.
TEST_P(Nesting, ChildrenOfChildrenAllRun) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> count[4] = {};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 5; ++i)
      cx.spawn([&](weft::Context& c1) {
        count[1].fetch_add(1);
        for (int j = 0; j < 5; ++j)
          c1.spawn([&](weft::Context& c2) {
            count[2].fetch_add(1);
            for (int k = 0; k < 5; ++k)
              c2.spawn([&] {
                busy_for_us(2);
                count[3].fetch_add(1);
              });
          });
      });
  });  // no taskwait anywhere: run() must still wait for everything
  EXPECT_EQ(count[1].load(), 5);
  EXPECT_EQ(count[2].load(), 25);
  EXPECT_EQ(count[3].load(), 125);
}

// taskwait returns only when every child spawned so far has finished, a child counting as finished once its
// own children have finished too.
TEST_P(Nesting, TaskwaitWaitsForChildrenAndTheirDescendants) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(50, 5));
  for (int r = 0; r < rounds; ++r) {
    std::atomic<int> leaves{0};
    int seen_in_child = -1, seen_in_root = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c1) {
        for (int j = 0; j < 4; ++j)
          c1.spawn([&](weft::Context& c2) {
            for (int k = 0; k < 3; ++k)
              c2.spawn([&] {
                busy_for_us(20);
                leaves.fetch_add(1);
              });
          });
        c1.taskwait();
        seen_in_child = leaves.load();
      });
      cx.taskwait();
      seen_in_root = leaves.load();
    });
    ASSERT_EQ(seen_in_child, 12) << "round " << r;
    ASSERT_EQ(seen_in_root, 12) << "round " << r;
  }
}

// taskwait can be called several times; each waits for the children spawned so far.
TEST_P(Nesting, RepeatedTaskwaits) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> done{0};
  std::vector<int> seen;
  rt.run([&](weft::Context& cx) {
    for (int phase = 1; phase <= 5; ++phase) {
      for (int i = 0; i < 10; ++i)
        cx.spawn([&] {
          busy_for_us(5);
          done.fetch_add(1);
        });
      cx.taskwait();
      seen.push_back(done.load());
    }
    cx.taskwait();  // nothing to wait for
  });
  EXPECT_EQ(seen, (std::vector<int>{10, 20, 30, 40, 50}));
}

// A task's accesses are released only when its children have finished: a successor sibling sees what the
// parent's children wrote even though the parent's body returned without a taskwait.
TEST_P(Nesting, ParentReleasesAccessesAfterChildren) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(50, 5));
  for (int r = 0; r < rounds; ++r) {
    int x = 0;
    int seen = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& p) {
        x = 1;
        p.spawn([&](weft::Context& c) {
          c.spawn([&] {
            sleep_ms(1);
            x = 42;  // grandchild
          }, weft::out(x));
        }, weft::inout(x));
      }, weft::out(x));
      cx.spawn([&] { seen = x; }, weft::in(x));
    });
    ASSERT_EQ(seen, 42) << "round " << r;
  }
}

// Children of successive parents that all update the same datum keep the sequential order, at every level.
TEST_P(Nesting, NestedUpdatesKeepSequentialOrder) {
  weft::Runtime rt(opts(GetParam()));
  std::uint64_t x = 1;
  auto step = [](std::uint64_t v, std::uint64_t id) { return v * 1000003u + id; };
  rt.run([&](weft::Context& cx) {
    for (std::uint64_t p = 0; p < 6; ++p) {
      cx.spawn([&, p](weft::Context& pc) {
        x = step(x, 100 * p);
        for (std::uint64_t c = 0; c < 4; ++c)
          pc.spawn([&, p, c](weft::Context& cc) {
            if (c == 1) busy_for_us(50);
            x = step(x, 100 * p + 10 * (c + 1));
            for (std::uint64_t g = 0; g < 3; ++g)
              cc.spawn([&, p, c, g] { x = step(x, 100 * p + 10 * (c + 1) + g + 1); }, weft::inout(x));
          }, weft::inout(x));
      }, weft::inout(x));
    }
  });
  std::uint64_t expect = 1;
  for (std::uint64_t p = 0; p < 6; ++p) {
    expect = step(expect, 100 * p);
    for (std::uint64_t c = 0; c < 4; ++c) {
      expect = step(expect, 100 * p + 10 * (c + 1));
      for (std::uint64_t g = 0; g < 3; ++g) expect = step(expect, 100 * p + 10 * (c + 1) + g + 1);
    }
  }
  EXPECT_EQ(x, expect);
}

// Recursive Fibonacci with out() children and taskwait.
long fib_task(weft::Context& cx, int n) {
  if (n < 2) return n;
  long a = 0, b = 0;
  cx.spawn([&a, n](weft::Context& c) { a = fib_task(c, n - 1); }, weft::out(a));
  cx.spawn([&b, n](weft::Context& c) { b = fib_task(c, n - 2); }, weft::out(b));
  cx.taskwait();
  return a + b;
}

TEST_P(Nesting, RecursiveFibonacci) {
  weft::Runtime rt(opts(GetParam()));
  const int n = kSanitized ? 14 : 20;
  long result = 0;
  rt.run([&](weft::Context& cx) { result = fib_task(cx, n); });
  long a = 0, b = 1;
  for (int i = 0; i < n; ++i) {
    long t = a + b;
    a = b;
    b = t;
  }
  EXPECT_EQ(result, a);
}

INSTANTIATE_TEST_SUITE_P(Workers, Nesting, testing::Values(1u, 2u, 4u), WorkersName());

// taskwait in a task waits for that task's children only, not for its siblings: B (a sibling) keeps running
// on the other worker until A has passed its taskwait.
TEST(NestingConcurrent, TaskwaitDoesNotWaitForSiblings) {
  weft::Runtime rt(opts(2));
  const int rounds = static_cast<int>(scaled(10, 2));
  for (int r = 0; r < rounds; ++r) {
    std::atomic<bool> b_started{false}, b_done{false}, a_passed{false};
    std::atomic<int> a_children{0};
    bool a_saw_b_started = false, b_done_at_a = true, b_saw_a = false;
    int children_at_a = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] {
        b_started = true;
        b_saw_a = spin_until([&] { return a_passed.load(); });
        b_done = true;
      });
      cx.spawn([&](weft::Context& a) {
        // Only continue once B runs elsewhere, so this worker cannot pick B up inside the taskwait below.
        a_saw_b_started = spin_until([&] { return b_started.load(); });
        for (int i = 0; i < 3; ++i)
          a.spawn([&](weft::Context& c) {
            c.spawn([&] { a_children.fetch_add(1); });
            a_children.fetch_add(1);
          });
        a.taskwait();
        children_at_a = a_children.load();
        b_done_at_a = b_done.load();
        a_passed = true;
      });
    });
    ASSERT_TRUE(a_saw_b_started) << "the two sibling tasks never ran concurrently on 2 workers";
    ASSERT_EQ(children_at_a, 6);
    ASSERT_FALSE(b_done_at_a) << "taskwait waited for a sibling";
    ASSERT_TRUE(b_saw_a);
  }
}

}  // namespace
