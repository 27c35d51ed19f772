// Weak accesses (OmpSs-2): they do not delay the task itself, its children accessing the datum are ordered
// after the task's predecessors, and later siblings wait for the whole task, children included.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <cstdint>
#include <vector>

#include "../common/test_util.hpp"

#include <unistd.h>

using namespace weft_test;

namespace {

// On 2 workers: W (writer of x) blocks until P (weak_inout(x), spawned after W) has started. That only
// happens if P is not delayed by W. P's child, which accesses x, must still run after W.
TEST(WeakConcurrent, WeakParentNotDelayedButChildOrdered) {
  weft::Runtime rt(opts(2));
  const int rounds = static_cast<int>(scaled(20, 3));
  for (int r = 0; r < rounds; ++r) {
    int x = 0;
    std::atomic<bool> p_started{false};
    bool w_saw_p = false;
    int child_read = -1, later_read = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] {
        w_saw_p = spin_until([&] { return p_started.load(); });
        x = 1;
      }, weft::out(x));
      cx.spawn([&](weft::Context& p) {
        p_started = true;
        p.spawn([&] {
          child_read = x;
          sleep_ms(1);
          x = 2;
        }, weft::inout(x));
      }, weft::weak_inout(x));
      cx.spawn([&] { later_read = x; }, weft::in(x));
    });
    ASSERT_TRUE(w_saw_p) << "a weak_inout task was delayed by its predecessor writer";
    ASSERT_EQ(child_read, 1) << "child of a weak task ran before the parent's predecessor";
    ASSERT_EQ(later_read, 2) << "later sibling did not wait for the weak task's child";
  }
}

class Weak : public testing::TestWithParam<unsigned> {};

// The same ordering guarantees with any number of workers (without the concurrency requirement).
TEST_P(Weak, ChildOrderedAfterPredecessorAndBeforeSuccessor) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(100, 10));
  for (int r = 0; r < rounds; ++r) {
    int x = 0;
    int child_read = -1, later_read = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] {
        if (r % 2) busy_for_us(100);
        x = 1;
      }, weft::out(x));
      cx.spawn([&](weft::Context& p) {
        p.spawn([&] {
          child_read = x;
          if (r % 3 == 0) busy_for_us(100);
          x = 2;
        }, weft::inout(x));
      }, weft::weak_inout(x));
      cx.spawn([&] { later_read = x; }, weft::in(x));
    });
    ASSERT_EQ(child_read, 1) << "round " << r;
    ASSERT_EQ(later_read, 2) << "round " << r;
  }
}

// weak_in: children read the predecessor's value; a later writer waits for those children.
TEST_P(Weak, WeakInChildrenReadAndLaterWriterWaits) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  std::atomic<int> readers_done{0};
  std::vector<int> reads(4, -1);
  int writer_saw = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] {
      busy_for_us(200);
      x = 7;
    }, weft::out(x));
    cx.spawn([&](weft::Context& p) {
      for (int i = 0; i < 4; ++i)
        p.spawn([&, i] {
          sleep_ms(1);
          reads[i] = x;
          readers_done.fetch_add(1);
        }, weft::in(x));
    }, weft::weak_in(x));
    cx.spawn([&] {
      writer_saw = readers_done.load();
      x = 8;
    }, weft::out(x));
  });
  EXPECT_EQ(reads, (std::vector<int>{7, 7, 7, 7}));
  EXPECT_EQ(writer_saw, 4);
  EXPECT_EQ(x, 8);
}

// weak_out: a child writes; a later reader sees the child's value.
TEST_P(Weak, WeakOutChildWritesLaterReaderSees) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  int seen = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& p) {
      p.spawn([&] {
        sleep_ms(2);
        x = 11;
      }, weft::out(x));
    }, weft::weak_out(x));
    cx.spawn([&] { seen = x; }, weft::in(x));
  });
  EXPECT_EQ(seen, 11);
}

// Weak accesses nest: P weak_inout(x) -> Q weak_inout(x) -> R inout(x). R is ordered after P's predecessor
// and before P's successor.
TEST_P(Weak, NestedWeakChain) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(50, 5));
  for (int r = 0; r < rounds; ++r) {
    std::uint64_t x = 3;
    std::uint64_t seen = 0;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] {
        busy_for_us(50);
        x = x * 10 + 1;
      }, weft::inout(x));
      cx.spawn([&](weft::Context& p) {
        p.spawn([&](weft::Context& q) {
          q.spawn([&] {
            busy_for_us(30);
            x = x * 10 + 2;
          }, weft::inout(x));
          q.spawn([&] { x = x * 10 + 3; }, weft::inout(x));
        }, weft::weak_inout(x));
        p.spawn([&] { x = x * 10 + 4; }, weft::inout(x));
      }, weft::weak_inout(x));
      cx.spawn([&] { x = x * 10 + 5; }, weft::inout(x));
      cx.spawn([&] { seen = x; }, weft::in(x));
    });
    ASSERT_EQ(seen, 312345u) << "round " << r;
  }
}

// A later sibling waits for the whole weak task, including children that do not access the datum.
TEST_P(Weak, LaterSiblingWaitsForAllChildrenOfWeakTask) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  std::atomic<bool> child_done{false};
  bool later_saw = false;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& p) {
      p.spawn([&] {
        sleep_ms(5);
        child_done = true;
      });
    }, weft::weak_inout(x));
    cx.spawn([&] { later_saw = child_done.load(); }, weft::in(x));
  });
  EXPECT_TRUE(later_saw);
}

// Weak accesses mixed with strong siblings over several data, iterated: sequential result.
TEST_P(Weak, MixedWeakAndStrongPipeline) {
  weft::Runtime rt(opts(GetParam()));
  const int n = static_cast<int>(scaled(200, 20));
  std::uint64_t a = 1, b = 2;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) {
      if (i % 3 == 0) {
        cx.spawn([&, i](weft::Context& p) {
          p.spawn([&, i] { b = b * 7 + a + static_cast<std::uint64_t>(i); }, weft::in(a), weft::inout(b));
          p.spawn([&, i] { a = a * 5 + static_cast<std::uint64_t>(i); }, weft::inout(a));
        }, weft::weak_inout(a), weft::weak_inout(b));
      } else if (i % 3 == 1) {
        cx.spawn([&, i] { a = a * 3 + b + static_cast<std::uint64_t>(i); }, weft::inout(a), weft::in(b));
      } else {
        cx.spawn([&, i](weft::Context& p) {
          p.spawn([&, i] { b = b * 11 + a + static_cast<std::uint64_t>(i); }, weft::inout(b), weft::in(a));
        }, weft::weak_in(a), weft::weak_out(b));
      }
    }
  });
  std::uint64_t ea = 1, eb = 2;
  for (int i = 0; i < n; ++i) {
    std::uint64_t u = static_cast<std::uint64_t>(i);
    if (i % 3 == 0) {
      eb = eb * 7 + ea + u;
      ea = ea * 5 + u;
    } else if (i % 3 == 1) {
      ea = ea * 3 + eb + u;
    } else {
      eb = eb * 11 + ea + u;
    }
  }
  EXPECT_EQ(a, ea);
  EXPECT_EQ(b, eb);
}

// A task may combine a commutative access with weak accesses. Found by the differential test: an engine
// that holds the commutative lock until the task completes (children and weak predecessors included) can
// deadlock when the weak predecessor is another member of the same commutative set. Each case runs in a child
// process that must finish within 5 s, so a deadlock fails the test instead of hanging the suite.
void weak_and_commutative_case(int variant, unsigned workers) {
  weft::Runtime rt(opts(workers));
  int a = 0, b = 0, seen_b = -1;
  rt.run([&](weft::Context& cx) {
    switch (variant) {
      case 0:  // both members also weakly write another datum (no children)
        for (int i = 0; i < 2; ++i) cx.spawn([&] { ++a; }, weft::commutative(a), weft::weak_out(b));
        break;
      case 1:  // the second member's weak predecessor is the first member
        cx.spawn([&] { ++a; b = 5; }, weft::commutative(a), weft::out(b));
        cx.spawn([&](weft::Context& p) {
          ++a;
          p.spawn([&] { seen_b = b; }, weft::in(b));
        }, weft::commutative(a), weft::weak_in(b));
        break;
      default:  // commutative on two data, then commutative + weak_in on them
        cx.spawn([&] { ++a; ++b; }, weft::commutative(a), weft::commutative(b));
        cx.spawn([&] { ++a; }, weft::commutative(a), weft::weak_in(b));
        break;
    }
  });
  if (variant == 1 && seen_b != 5) std::_Exit(3);
  if (a != 2) std::_Exit(4);
}

TEST(WeakDeathTest, CommutativeMemberWithWeakAccessDoesNotDeadlock) {
  for (int variant = 0; variant < 3; ++variant)
    for (unsigned workers : {1u, 2u})
      EXPECT_EXIT(
          {
            ::alarm(5);
            weak_and_commutative_case(variant, workers);
            std::_Exit(0);
          },
          testing::ExitedWithCode(0), "")
          << "variant " << variant << ", " << workers
          << " workers (killed by SIGALRM: deadlock; exit 3: child read a wrong value; exit 4: lost update)";
}

INSTANTIATE_TEST_SUITE_P(Workers, Weak, testing::Values(1u, 2u, 4u), WorkersName());

}  // namespace
