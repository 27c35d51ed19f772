// Exceptions: captured, rethrown at taskwait / end of run with their type, dependent tasks cancelled
// (transitively), independent tasks still run, later exceptions dropped, runtime usable afterwards.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

struct Boom {
  int code;
};
struct Bang : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Exceptions : public testing::TestWithParam<unsigned> {};

TEST_P(Exceptions, RethrownAtTaskwaitWithType) {
  weft::Runtime rt(opts(GetParam()));
  int caught = -1;
  bool after = false;
  rt.run([&](weft::Context& cx) {
    cx.spawn([] { throw Boom{42}; });
    try {
      cx.taskwait();
    } catch (const Boom& b) {
      caught = b.code;
    }
    // Rethrown once only: a second taskwait has nothing to report.
    cx.spawn([] {});
    cx.taskwait();
    after = true;
  });
  EXPECT_EQ(caught, 42);
  EXPECT_TRUE(after);
}

TEST_P(Exceptions, RethrownAtEndOfRunWithType) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> others{0};
  try {
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 10; ++i) cx.spawn([&] { others.fetch_add(1); });
      cx.spawn([] { throw Bang("bang"); });
      for (int i = 0; i < 10; ++i) cx.spawn([&] { others.fetch_add(1); });
    });
    ADD_FAILURE() << "run() did not rethrow";
  } catch (const Bang& e) {
    EXPECT_STREQ(e.what(), "bang");
  }
  EXPECT_EQ(others.load(), 20) << "independent tasks must still run";
}

// A -> B -> C is cancelled transitively after A throws; D (independent) runs; counted in Stats.
TEST_P(Exceptions, DependentsCancelledTransitively) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0, y = 0, z = 0, w = 0;
  std::atomic<int> ran_b{0}, ran_c{0}, ran_d{0}, ran_e{0};
  bool caught = false;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] {
      x = 1;
      throw Bang("A");
    }, weft::out(x));
    cx.spawn([&] { ran_b.fetch_add(1); y = x; }, weft::in(x), weft::out(y));      // depends on A
    cx.spawn([&] { ran_c.fetch_add(1); z = y; }, weft::in(y), weft::inout(z));    // depends on B
    cx.spawn([&] { ran_d.fetch_add(1); w = 1; }, weft::out(w));                   // independent
    cx.spawn([&] { ran_e.fetch_add(1); }, weft::in(w));                           // depends on D only
    try {
      cx.taskwait();
    } catch (const Bang& e) {
      caught = std::string(e.what()) == "A";
    }
  });
  EXPECT_TRUE(caught);
  EXPECT_EQ(ran_b.load(), 0);
  EXPECT_EQ(ran_c.load(), 0);
  EXPECT_EQ(ran_d.load(), 1);
  EXPECT_EQ(ran_e.load(), 1);
  weft::Stats s = rt.stats();
  EXPECT_EQ(s.tasks_created, 5u);
  EXPECT_EQ(s.tasks_cancelled, 2u);
  EXPECT_EQ(s.tasks_executed, 3u);  // A (threw), D, E
  EXPECT_EQ(s.exceptions_dropped, 0u);

  // The runtime stays usable.
  rt.reset_stats();
  int v = 0;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 10; ++i) cx.spawn([&] { ++v; }, weft::inout(v));
  });
  EXPECT_EQ(v, 10);
  EXPECT_EQ(rt.stats().tasks_cancelled, 0u);
  EXPECT_EQ(rt.stats().tasks_executed, 10u);
}

// Cancellation reaches readers, inoutset and commutative members that follow the failed writer.
TEST_P(Exceptions, CancellationThroughAllModes) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0;
  std::atomic<int> ran{0};
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.spawn([] { throw Boom{1}; }, weft::out(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::in(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::in(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::inoutset(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::inoutset(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::commutative(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::commutative(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::in(x));
    cx.spawn([&] { ran.fetch_add(1); }, weft::out(x));
  }), Boom);
  EXPECT_EQ(ran.load(), 0);
  weft::Stats s = rt.stats();
  EXPECT_EQ(s.tasks_cancelled, 8u);
  EXPECT_EQ(s.tasks_executed, 1u);
  EXPECT_EQ(s.tasks_created, 9u);
}

// The child of a weak task that accesses the failed writer's datum is cancelled (whether or not the weak
// task itself runs), and so is a later sibling reading that datum, which depends on it transitively.
TEST_P(Exceptions, CancellationThroughWeakTask) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0, y = 0;
  std::atomic<int> ran_child{0}, ran_later{0}, ran_unrelated_child{0};
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.spawn([] { throw Boom{1}; }, weft::out(x));
    cx.spawn([&](weft::Context& p) {
      p.spawn([&] { ran_child.fetch_add(1); }, weft::inout(x));
      p.spawn([&] { ran_unrelated_child.fetch_add(1); }, weft::inout(y));
    }, weft::weak_inout(x), weft::inout(y));
    cx.spawn([&] { ran_later.fetch_add(1); }, weft::in(x));
  }), Boom);
  EXPECT_EQ(ran_child.load(), 0);
  EXPECT_EQ(ran_later.load(), 0);
  weft::Stats s = rt.stats();
  EXPECT_EQ(s.tasks_executed + s.tasks_cancelled, s.tasks_created);
  EXPECT_GE(s.tasks_cancelled, 2u);
}

// A weak predecessor that fails cancels the weak task's children on the datum and its own successors, never its
// body (a weak access does not delay it): the same whether the writer failed before the weak task was spawned
// (a caught taskwait_on orders it; the failed writer stays named) or after it (the writer first waits, for at
// most 100 ms, for a gate the weak task's body opens: on one worker the writer may run first, and the outcome
// must be the same then too).
TEST_P(Exceptions, WeakPredecessorFailureDoesNotDependOnTiming) {
  for (const bool failed_first : {true, false}) {
    weft::Runtime rt(opts(GetParam()));
    rt.reset_stats();
    int x = 0;
    std::atomic<bool> gate{false};
    std::atomic<int> ran_weak_body{0}, ran_child{0}, ran_later{0};
    bool caught = false;
    try {
      rt.run([&](weft::Context& cx) {
        cx.spawn(
            [&] {
              const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
              if (!failed_first)
                while (!gate.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
              throw Boom{1};
            },
            weft::out(x));
        if (failed_first) {
          try {
            cx.taskwait_on(x);
          } catch (const Boom&) {
            caught = true;
          }
        }
        cx.spawn(
            [&](weft::Context& p) {
              ran_weak_body.fetch_add(1);
              gate = true;
              p.spawn([&] { ran_child.fetch_add(1); }, weft::inout(x));
            },
            weft::weak_inout(x));
        cx.spawn([&] { ran_later.fetch_add(1); }, weft::in(x));
        cx.taskwait();
      });
    } catch (const Boom&) {
      caught = !failed_first;
    }
    SCOPED_TRACE(failed_first ? "writer failed before the weak task was spawned" : "writer failed after its body ran");
    EXPECT_TRUE(caught);
    EXPECT_EQ(ran_weak_body.load(), 1);
    EXPECT_EQ(ran_child.load(), 0);
    EXPECT_EQ(ran_later.load(), 0);
    weft::Stats s = rt.stats();
    EXPECT_EQ(s.tasks_cancelled, 2u);
    EXPECT_EQ(s.tasks_executed + s.tasks_cancelled, s.tasks_created);
  }
}

// A taskwait that rethrows a child's failure ends it: the children spawned after it start afresh (a program
// that catches the exception and writes the datum again is not silently cancelled). A taskwait_on does not end
// it (other children may still run): later accessors of the failed datum stay cancelled until a taskwait.
TEST_P(Exceptions, CaughtTaskwaitLetsLaterChildrenStartAfresh) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0, seen = -1;
  std::atomic<int> after_wait_on{0};
  std::string caught;
  EXPECT_NO_THROW(rt.run([&](weft::Context& cx) {
    cx.spawn([] { throw Boom{1}; }, weft::out(x));
    try {
      cx.taskwait_on(x);
    } catch (const Boom&) {
      caught += "wait_on ";
    }
    cx.spawn([&] { after_wait_on.fetch_add(1); }, weft::in(x));  // still follows the failed writer
    try {
      cx.taskwait();
    } catch (const Boom&) {
      caught += "wait";  // (the failure was rethrown by taskwait_on already)
    }
    cx.spawn([&] { x = 42; }, weft::out(x));
    cx.spawn([&] { seen = x; }, weft::in(x));
    cx.spawn([&](weft::Context& p) { p.spawn([&] { x += 1; }, weft::inout(x)); }, weft::weak_inout(x));
    cx.taskwait();
  }));
  EXPECT_EQ(caught, "wait_on ");
  EXPECT_EQ(after_wait_on.load(), 0);
  EXPECT_EQ(seen, 42);
  EXPECT_EQ(x, 43);
  EXPECT_EQ(rt.stats().tasks_cancelled, 1u);
}

// A grandchild throws, nobody waits: its parent fails, the parent's dependents are cancelled, and the
// exception leaves run().
TEST_P(Exceptions, NestedExceptionPropagatesUp) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0;
  std::atomic<bool> successor_ran{false};
  std::atomic<int> independent{0};
  try {
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& p) {
        p.spawn([&](weft::Context& c) {
          c.spawn([] { throw Boom{7}; });
        });
      }, weft::out(x));
      cx.spawn([&] { successor_ran = true; }, weft::in(x));
      cx.spawn([&] { independent.fetch_add(1); });
    });
    ADD_FAILURE() << "run() did not rethrow";
  } catch (const Boom& b) {
    EXPECT_EQ(b.code, 7);
  }
  EXPECT_FALSE(successor_ran.load());
  EXPECT_EQ(independent.load(), 1);
  EXPECT_EQ(rt.stats().tasks_cancelled, 1u);
}

// A parent that catches its child's exception at taskwait completes normally: its successors run, run()
// does not throw.
TEST_P(Exceptions, CaughtExceptionDoesNotFailParent) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0;
  bool successor_ran = false;
  EXPECT_NO_THROW(rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& p) {
      p.spawn([] { throw Boom{3}; });
      try {
        p.taskwait();
      } catch (const Boom&) {
        x = 3;
      }
    }, weft::out(x));
    cx.spawn([&] { successor_ran = (x == 3); }, weft::in(x));
  }));
  EXPECT_TRUE(successor_ran);
  EXPECT_EQ(rt.stats().tasks_cancelled, 0u);
}

// Two failing independent tasks: one exception is rethrown, the other dropped and counted.
TEST_P(Exceptions, LaterExceptionsDropped) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int caught = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([] { throw Boom{1}; });
    cx.spawn([] { throw Boom{2}; });
    cx.spawn([] { throw Boom{3}; });
    try {
      cx.taskwait();
    } catch (const Boom& b) {
      caught = b.code;
    }
  });
  EXPECT_GE(caught, 1);
  EXPECT_LE(caught, 3);
  EXPECT_EQ(rt.stats().exceptions_dropped, 2u);
  EXPECT_EQ(rt.stats().tasks_executed, 3u);
}

// A cancelled task never runs its body, so its children are never spawned.
TEST_P(Exceptions, CancelledTaskSpawnsNoChildren) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0;
  std::atomic<int> children{0};
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.spawn([] { throw Boom{0}; }, weft::out(x));
    cx.spawn([&](weft::Context& p) {
      for (int i = 0; i < 5; ++i) p.spawn([&] { children.fetch_add(1); });
    }, weft::inout(x));
  }), Boom);
  EXPECT_EQ(children.load(), 0);
  EXPECT_EQ(rt.stats().tasks_created, 2u);
  EXPECT_EQ(rt.stats().tasks_cancelled, 1u);
}

// The root function itself throws: run() waits for the spawned tasks, then rethrows.
TEST_P(Exceptions, RootThrows) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> done{0};
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 8; ++i)
      cx.spawn([&] {
        sleep_ms(1);
        done.fetch_add(1);
      });
    throw Bang("root");
  }), Bang);
  EXPECT_EQ(done.load(), 8);
  // usable afterwards
  int v = 0;
  rt.run([&](weft::Context& cx) { cx.spawn([&] { v = 1; }, weft::out(v)); });
  EXPECT_EQ(v, 1);
}

// A nested task throws after spawning children: the children still run to completion, the task counts as
// failed (its dependents are cancelled) and the exception reaches run().
TEST_P(Exceptions, ParentThrowsAfterSpawningChildren) {
  weft::Runtime rt(opts(GetParam()));
  rt.reset_stats();
  int x = 0;
  std::atomic<int> children{0};
  std::atomic<bool> successor_ran{false};
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& p) {
      for (int i = 0; i < 6; ++i)
        p.spawn([&] {
          sleep_ms(1);
          children.fetch_add(1);
        });
      throw Bang("parent");
    }, weft::out(x));
    cx.spawn([&] { successor_ran = true; }, weft::in(x));
  }), Bang);
  EXPECT_EQ(children.load(), 6);
  EXPECT_FALSE(successor_ran.load());
  EXPECT_EQ(rt.stats().tasks_cancelled, 1u);
}

// Exceptions in many runs in a row: nothing leaks from one run into the next.
TEST_P(Exceptions, ManyFailingRuns) {
  weft::Runtime rt(opts(GetParam()));
  const int runs = static_cast<int>(scaled(100, 10));
  for (int r = 0; r < runs; ++r) {
    int x = 0;
    bool threw = false;
    try {
      rt.run([&](weft::Context& cx) {
        cx.spawn([r] { throw Boom{r}; }, weft::out(x));
        cx.spawn([] {}, weft::in(x));
      });
    } catch (const Boom& b) {
      threw = b.code == r;
    }
    ASSERT_TRUE(threw) << "run " << r;
    bool clean = true;
    try {
      rt.run([&](weft::Context& cx) { cx.spawn([&] { x = 2; }, weft::out(x)); });
    } catch (...) {
      clean = false;
    }
    ASSERT_TRUE(clean) << "an exception leaked into the next run, run " << r;
    ASSERT_EQ(x, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, Exceptions, testing::Values(1u, 2u, 4u), WorkersName());

TEST(ExceptionsMisc, RunInsideTaskThrowsLogicError) {
  weft::Runtime rt(opts(2));
  bool root_caught = false;
  std::atomic<bool> task_caught{false};
  rt.run([&](weft::Context& cx) {
    try {
      rt.run([](weft::Context&) {});
    } catch (const std::logic_error&) {
      root_caught = true;
    }
    cx.spawn([&] {
      try {
        rt.run([](weft::Context&) {});
      } catch (const std::logic_error&) {
        task_caught = true;
      }
    });
  });
  EXPECT_TRUE(root_caught);
  EXPECT_TRUE(task_caught.load());
}

}  // namespace
