// taskwait_on(x): waits for the earlier siblings that write x (what an `in` access to x would wait for),
// not for unrelated tasks; rethrows a pending child exception.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <stdexcept>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

// On 2 workers: L (unrelated) runs on the other worker until the root has passed taskwait_on(x).
TEST(TaskwaitOnConcurrent, WaitsForWriterNotForUnrelatedTask) {
  weft::Runtime rt(opts(2));
  const int rounds = static_cast<int>(scaled(10, 2));
  for (int r = 0; r < rounds; ++r) {
    int x = 0, y = 0;
    std::atomic<bool> l_started{false}, l_done{false}, root_passed{false};
    bool root_saw_l = false, l_saw_root = false, l_done_at_root = true;
    int x_at_root = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] {
        l_started = true;
        l_saw_root = spin_until([&] { return root_passed.load(); });
        y = 1;
        l_done = true;
      }, weft::out(y));
      // Make sure L runs elsewhere so that the root cannot pick it up while waiting.
      root_saw_l = spin_until([&] { return l_started.load(); });
      cx.spawn([&] {
        sleep_ms(2);
        x = 5;
      }, weft::out(x));
      cx.taskwait_on(x);
      x_at_root = x;
      l_done_at_root = l_done.load();
      root_passed = true;
      cx.taskwait();
    });
    ASSERT_TRUE(root_saw_l) << "a spawned task was not picked up by the idle second worker";
    ASSERT_EQ(x_at_root, 5);
    ASSERT_FALSE(l_done_at_root) << "taskwait_on waited for an unrelated task";
    ASSERT_TRUE(l_saw_root);
  }
}

class TaskwaitOn : public testing::TestWithParam<unsigned> {};

// The writer's accesses are released only when its children finish, so taskwait_on waits for them too.
TEST_P(TaskwaitOn, WaitsForWriterIncludingItsChildren) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(30, 3));
  for (int r = 0; r < rounds; ++r) {
    int x = 0;
    int seen = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& p) {
        p.spawn([&] {
          sleep_ms(1);
          x = 9;
        }, weft::out(x));
      }, weft::out(x));
      cx.taskwait_on(x);
      seen = x;
    });
    ASSERT_EQ(seen, 9);
  }
}

// Waits for every member of an inoutset / commutative set and for the last writer after readers.
TEST_P(TaskwaitOn, WaitsForAllSetMembersAndLastWriter) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0, y = 0;
  int seen_x = -1, seen_y = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { x = 100; }, weft::out(x));
    for (int k = 0; k < 5; ++k)
      cx.spawn([&, k] {
        busy_for_us(20 * k);
        std::atomic_ref<int>(x).fetch_add(1);
      }, weft::inoutset(x));
    for (int k = 0; k < 5; ++k)
      cx.spawn([&, k] {
        busy_for_us(20 * k);
        x += 10;
      }, weft::commutative(x));
    cx.spawn([&] { y = 1; }, weft::out(y));
    cx.spawn([&] { sleep_ms(1); }, weft::in(y));
    cx.spawn([&] {
      busy_for_us(100);
      y = 2;
    }, weft::out(y));
    cx.taskwait_on(x);
    seen_x = x;
    cx.taskwait_on(y);
    seen_y = y;
  });
  EXPECT_EQ(seen_x, 155);
  EXPECT_EQ(seen_y, 2);
}

// Nothing wrote the datum: returns at once; also usable inside nested tasks and repeatedly.
TEST_P(TaskwaitOn, NestedAndNoWriter) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0, unused = 0;
  int seen1 = -1, seen2 = -1;
  rt.run([&](weft::Context& cx) {
    cx.taskwait_on(unused);
    cx.spawn([&](weft::Context& p) {
      p.taskwait_on(unused);
      p.spawn([&] {
        busy_for_us(100);
        x = 1;
      }, weft::out(x));
      p.taskwait_on(x);
      seen1 = x;
      p.spawn([&] { x = 2; }, weft::inout(x));
      p.taskwait_on(x);
      seen2 = x;
    }, weft::inout(x));
  });
  EXPECT_EQ(seen1, 1);
  EXPECT_EQ(seen2, 2);
}

struct WriterFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An exception from the writer is rethrown by taskwait_on.
TEST_P(TaskwaitOn, RethrowsWriterException) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  bool caught = false;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { throw WriterFailed("writer"); }, weft::out(x));
    try {
      cx.taskwait_on(x);
    } catch (const WriterFailed& e) {
      caught = std::string(e.what()) == "writer";
    }
  });
  EXPECT_TRUE(caught);
}

INSTANTIATE_TEST_SUITE_P(Workers, TaskwaitOn, testing::Values(1u, 2u, 4u), WorkersName());

}  // namespace
