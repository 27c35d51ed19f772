// Completion events (weft::Event, Context::event): a task completes only once its body has returned, its
// children have finished and every event it took has been fulfilled; from any thread, before or after the body
// returns; failures through fail() and through exceptions while events are pending; misuse is an error.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

struct Bang : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A few thousand yields: the fulfilling thread lags behind the task (no sleeping, nothing timed).
void delay_loop(unsigned n = 2000) {
  for (unsigned i = 0; i < n; ++i) std::this_thread::yield();
}

// A plain std::thread (not a worker of any runtime) that fulfils the events handed to it, in order, each after a
// delay loop, running an action first (e.g. writing what the task's successors read).
class Fulfiller {
 public:
  explicit Fulfiller(unsigned delay = 2000) : delay_(delay), thread_([this] { loop(); }) {}
  ~Fulfiller() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void hand(weft::Event ev, std::function<void()> before = {}, std::exception_ptr fail = nullptr) {
    {
      std::lock_guard<std::mutex> g(m_);
      q_.push_back(Item{std::move(ev), std::move(before), std::move(fail)});
    }
    cv_.notify_all();
  }
  std::size_t done() const { return done_.load(); }

 private:
  struct Item {
    weft::Event ev;
    std::function<void()> before;
    std::exception_ptr fail;
  };
  void loop() {
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;
      Item it = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      delay_loop(delay_);
      if (it.before) it.before();
      if (it.fail)
        it.ev.fail(std::move(it.fail));  // no reference left here: the catcher releases the last one
      else
        it.ev.fulfill();
      done_.fetch_add(1);
      lk.lock();
    }
  }
  unsigned delay_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Item> q_;
  bool stop_ = false;
  std::atomic<std::size_t> done_{0};
  std::thread thread_;
};

class Events : public testing::TestWithParam<unsigned> {};

// The writer's `in` reader never sees the value before the foreign thread's fulfil (which wrote it).
TEST_P(Events, SuccessorWaitsForForeignFulfil) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f;
  const int rounds = static_cast<int>(scaled(50, 5));
  for (int r = 0; r < rounds; ++r) {
    int x = 0, seen = -1;
    std::atomic<bool> fulfilled{false};
    bool fulfilled_at_reader = false;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) {
        f.hand(c.event(), [&] {
          x = 42;  // written by the foreign thread: published to the reader by the fulfil
          fulfilled = true;
        });
      }, weft::out(x));
      cx.spawn([&] {
        fulfilled_at_reader = fulfilled.load();
        seen = x;
      }, weft::in(x));
    });
    ASSERT_TRUE(fulfilled_at_reader);
    ASSERT_EQ(seen, 42);
  }
}

// Fulfilled by the body itself before it returns: the task completes as usual when the body returns.
TEST_P(Events, FulfilBeforeBodyReturns) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0, seen = -1;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 100; ++i) {
      cx.spawn([&](weft::Context& c) {
        weft::Event ev = c.event();
        EXPECT_TRUE(ev.pending());
        ++x;
        ev.fulfill();
        EXPECT_FALSE(ev.pending());
      }, weft::inout(x));
    }
    cx.spawn([&] { seen = x; }, weft::in(x));
  });
  EXPECT_EQ(seen, 100);
}

// Fulfilled by another task: a child of the task (its body has returned by then, or not).
TEST_P(Events, FulfilFromAnotherTask) {
  weft::Runtime rt(opts(GetParam()));
  const int n = static_cast<int>(scaled(200, 20));
  std::vector<int> v(static_cast<std::size_t>(n), 0);
  std::vector<int> seen(static_cast<std::size_t>(n), -1);
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) {
      cx.spawn([&, i](weft::Context& c) {
        c.spawn([&, i, ev = c.event()]() mutable {
          delay_loop(50);
          v[static_cast<std::size_t>(i)] = i + 1;
          ev.fulfill();
        });
      }, weft::out(v[static_cast<std::size_t>(i)]));
      cx.spawn([&, i] { seen[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(i)]; },
               weft::in(v[static_cast<std::size_t>(i)]));
    }
  });
  for (int i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)], i + 1) << i;
}

// Many events per task, fulfilled by two foreign threads in any order: the successor runs after all of them.
TEST_P(Events, ManyEventsPerTask) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f1(100), f2(150);
  const int k = static_cast<int>(scaled(200, 20));
  std::atomic<int> fulfilled{0};
  int x = 0, seen_fulfilled = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& c) {
      for (int i = 0; i < k; ++i) (i % 2 ? f1 : f2).hand(c.event(), [&] { fulfilled.fetch_add(1); });
      x = 1;
    }, weft::out(x));
    cx.spawn([&] { seen_fulfilled = fulfilled.load(); }, weft::in(x));
  });
  EXPECT_EQ(seen_fulfilled, k);
}

// Events of nested children: the parent's taskwait waits for them, and so does the parent's own completion
// (its successor) when it does not wait.
TEST_P(Events, NestedChildrenAndTaskwait) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f(300);
  const int n = static_cast<int>(scaled(40, 4));
  std::atomic<int> fulfilled{0};
  int after_taskwait = -1, x = 0, seen = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& p) {
      for (int i = 0; i < n; ++i)
        p.spawn([&](weft::Context& c) {
          c.spawn([&](weft::Context& g) { f.hand(g.event(), [&] { fulfilled.fetch_add(1); }); });
          f.hand(c.event(), [&] { fulfilled.fetch_add(1); });
        });
      p.taskwait();
      after_taskwait = fulfilled.load();
    });
    // No taskwait in the writer: its accesses wait for its grandchildren's events.
    cx.spawn([&](weft::Context& p) {
      p.spawn([&](weft::Context& c) {
        c.spawn([&](weft::Context& g) {
          f.hand(g.event(), [&] { x = 5; });
        });
      });
    }, weft::out(x));
    cx.spawn([&] { seen = x; }, weft::in(x));
  });
  EXPECT_EQ(after_taskwait, 2 * n);
  EXPECT_EQ(seen, 5);
}

// taskwait_on waits for a writer's event.
TEST_P(Events, TaskwaitOn) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f;
  const int rounds = static_cast<int>(scaled(20, 3));
  for (int r = 0; r < rounds; ++r) {
    int x = 0, at_wait = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) { f.hand(c.event(), [&] { x = r + 1; }); }, weft::out(x));
      cx.taskwait_on(x);
      at_wait = x;
    });
    ASSERT_EQ(at_wait, r + 1);
  }
}

// A task's own taskwait waits for its children, not for its own events (which may be fulfilled only later).
TEST_P(Events, OwnTaskwaitDoesNotWaitForOwnEvent) {
  weft::Runtime rt(opts(GetParam()));
  int child = 0, x = 0, seen = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& c) {
      weft::Event ev = c.event();
      c.spawn([&] { child = 1; });
      c.taskwait();  // returns with ev pending
      EXPECT_EQ(child, 1);
      x = 3;
      ev.fulfill();
    }, weft::out(x));
    cx.spawn([&] { seen = x; }, weft::in(x));
  });
  EXPECT_EQ(seen, 3);
}

// Commutative tasks take events too; their successors wait for every member's events.
TEST_P(Events, CommutativeTasks) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f(100);
  std::atomic<int> fulfilled{0};
  int acc = 0, seen = -1, seen_fulfilled = -1;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 20; ++i)
      cx.spawn([&](weft::Context& c) {
        ++acc;
        f.hand(c.event(), [&] { fulfilled.fetch_add(1); });
      }, weft::commutative(acc));
    cx.spawn([&] {
      seen = acc;
      seen_fulfilled = fulfilled.load();
    }, weft::in(acc));
  });
  EXPECT_EQ(seen, 20);
  EXPECT_EQ(seen_fulfilled, 20);
}

// The root of a run takes an event: run() returns once it is fulfilled.
TEST_P(Events, RootEvent) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<bool> fulfilled{false};
  {
    Fulfiller f;
    rt.run([&](weft::Context& cx) { f.hand(cx.event(), [&] { fulfilled = true; }); });
    EXPECT_TRUE(fulfilled.load());
  }
  // From a worker task of the same run, after the root's body returned.
  int x = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&, ev = cx.event()]() mutable {
      delay_loop(200);
      x = 1;
      ev.fulfill();
    });
  });
  EXPECT_EQ(x, 1);
}

// fail(e): the task fails with e: its dependents are cancelled, e is rethrown at the parent's taskwait.
TEST_P(Events, FailCancelsDependentsAndRethrows) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f;
  rt.reset_stats();
  bool reader_ran = false, unrelated_ran = false, caught = false;
  int x = 0, y = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& c) {
      f.hand(c.event(), [&] { x = 1; }, std::make_exception_ptr(Bang("request failed")));
    }, weft::out(x));
    cx.spawn([&] { reader_ran = true; }, weft::in(x));
    cx.spawn([&] { y = x; }, weft::inout(x), weft::out(y));  // transitively
    cx.spawn([&] { unrelated_ran = true; });
    try {
      cx.taskwait();
    } catch (const Bang& b) {
      caught = std::string(b.what()) == "request failed";
    }
  });
  EXPECT_TRUE(caught);
  EXPECT_FALSE(reader_ran);
  EXPECT_EQ(y, 0);
  EXPECT_TRUE(unrelated_ran);
  EXPECT_EQ(rt.stats().tasks_cancelled, 2u);

  // Without a taskwait: out of run(). The runtime stays usable.
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
                 cx.spawn([&](weft::Context& c) {
                   c.spawn([&](weft::Context& g) { f.hand(g.event(), {}, std::make_exception_ptr(Bang("deep"))); });
                 });
               }),
               Bang);
  int z = 0;
  rt.run([&](weft::Context& cx) { cx.spawn([&](weft::Context& c) { f.hand(c.event(), [&] { z = 2; }); }); });
  EXPECT_EQ(z, 2);
}

// A failure reported from a worker while the body still runs is rethrown by the body's own taskwait (as a
// child's exception would be): the body may handle it, and the task then does not fail.
TEST_P(Events, FailBeforeBodyTaskwaitIsRethrownThere) {
  weft::Runtime rt(opts(GetParam()));
  bool caught_in_body = false, reader_ran = false;
  int x = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& c) {
      weft::Event ev = c.event();
      ev.fail(std::make_exception_ptr(Bang("early")));
      try {
        c.taskwait();
      } catch (const Bang&) {
        caught_in_body = true;
      }
    }, weft::out(x));
    cx.spawn([&] { reader_ran = true; }, weft::in(x));
  });
  EXPECT_TRUE(caught_in_body);
  EXPECT_TRUE(reader_ran);
}

// An exception escapes the body while its event is pending (handed to another thread): the run waits for the
// event all the same, the task fails with the body's exception, its dependents are cancelled.
TEST_P(Events, BodyThrowsWhileEventPending) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f;
  std::atomic<bool> fulfilled{false};
  bool reader_ran = false;
  int x = 0;
  try {
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) {
        f.hand(c.event(), [&] { fulfilled = true; });
        throw Bang("body");
      }, weft::out(x));
      cx.spawn([&] { reader_ran = true; }, weft::in(x));
    });
    ADD_FAILURE() << "run() did not throw";
  } catch (const Bang& b) {
    EXPECT_STREQ(b.what(), "body");
  }
  EXPECT_TRUE(fulfilled.load()) << "run() returned before the failed task's event was fulfilled";
  EXPECT_FALSE(reader_ran);

  // The body's Event is destroyed by the unwinding: the body's exception is the one reported (the event's
  // "destroyed without being fulfilled" is dropped and counted).
  rt.reset_stats();
  try {
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) {
        weft::Event ev = c.event();
        throw Bang("first");
      }, weft::out(x));
    });
    ADD_FAILURE() << "run() did not throw";
  } catch (const Bang& b) {
    EXPECT_STREQ(b.what(), "first");
  }
  EXPECT_EQ(rt.stats().exceptions_dropped, 1u);
}

// Misuse is an error, never silent: a second fulfil (or fail) of a handle, fail(nullptr), an empty handle.
TEST_P(Events, DoubleFulfilIsAnError) {
  weft::Runtime rt(opts(GetParam()));
  bool second_threw = false, fail_after_threw = false, null_fail_threw = false, empty_threw = false,
       moved_threw = false;
  int x = 0, seen = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& c) {
      weft::Event ev = c.event();
      ev.fulfill();
      try {
        ev.fulfill();
      } catch (const std::logic_error& e) {
        second_threw = std::string(e.what()).find("weft::Event::fulfill") != std::string::npos;
      }
      try {
        ev.fail(std::make_exception_ptr(Bang("x")));
      } catch (const std::logic_error&) {
        fail_after_threw = true;
      }
      weft::Event ev2 = c.event();
      try {
        ev2.fail(nullptr);
      } catch (const std::logic_error&) {
        null_fail_threw = ev2.pending();  // left as it was
      }
      weft::Event ev3 = std::move(ev2);
      try {
        ev2.fulfill();  // NOLINT(bugprone-use-after-move): that is the point
      } catch (const std::logic_error&) {
        moved_threw = true;
      }
      ev3.fulfill();
      weft::Event empty;
      try {
        empty.fulfill();
      } catch (const std::logic_error&) {
        empty_threw = true;
      }
      x = 1;
    }, weft::out(x));
    cx.spawn([&] { seen = x; }, weft::in(x));
  });
  EXPECT_TRUE(second_threw);
  EXPECT_TRUE(fail_after_threw);
  EXPECT_TRUE(null_fail_threw);
  EXPECT_TRUE(moved_threw);
  EXPECT_TRUE(empty_threw);
  EXPECT_EQ(seen, 1);
}

// An Event destroyed (or assigned over) unfulfilled fails its task with std::logic_error: nothing hangs.
TEST_P(Events, AbandonedEventFailsTheTask) {
  weft::Runtime rt(opts(GetParam()));
  bool reader_ran = false;
  int x = 0;
  try {
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) { weft::Event ev = c.event(); }, weft::out(x));
      cx.spawn([&] { reader_ran = true; }, weft::in(x));
    });
    ADD_FAILURE() << "run() did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("without being fulfilled"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(reader_ran);

  // Assigned over, on a foreign thread.
  std::thread t;
  try {
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) {
        t = std::thread([ev = c.event()]() mutable {
          delay_loop(200);
          ev = weft::Event();
        });
      });
    });
    ADD_FAILURE() << "run() did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("without being fulfilled"), std::string::npos) << e.what();
  }
  t.join();
}

// Fulfilled from a worker of another runtime (a foreign thread for the task's runtime).
TEST_P(Events, FulfilFromAnotherRuntime) {
  weft::Runtime rt(opts(GetParam()));
  weft::Runtime other(opts(1));
  int x = 0, seen = -1;
  std::thread t;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& c) {
      t = std::thread([&, ev = c.event()]() mutable {
        other.run([&](weft::Context& oc) {
          oc.spawn([&] {
            x = 9;
            ev.fulfill();
          });
        });
      });
    }, weft::out(x));
    cx.spawn([&] { seen = x; }, weft::in(x));
  });
  t.join();
  EXPECT_EQ(seen, 9);
}

// A taskiter body refuses events; the tasks it recorded take a fresh one every iteration, and each instance's
// successors (of that iteration and the next) wait for it: a foreign thread fulfils them late, the result is
// the sequential one.
TEST_P(Events, TaskiterBodyRefusesRecordedTasksTakeThemEveryIteration) {
  weft::Runtime rt(opts(GetParam()));
  bool body_refused = false;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(2, [&](weft::Context& it) {
      try {
        (void)it.event();
      } catch (const weft::taskiter_error&) {
        body_refused = true;
      }
    });
  });
  EXPECT_TRUE(body_refused);
  constexpr int kIters = 200;
  std::mutex m;
  std::vector<std::shared_ptr<weft::Event>> handed;  // events for the fulfiller thread
  std::atomic<bool> stop{false};
  std::thread fulfiller([&] {
    while (!stop.load()) {
      std::shared_ptr<weft::Event> e;
      {
        std::lock_guard<std::mutex> g(m);
        if (!handed.empty()) {
          e = handed.back();
          handed.pop_back();
        }
      }
      if (e) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        e->fulfill();
      } else {
        std::this_thread::yield();
      }
    }
  });
  long x = 1, y = 0, late = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(
        kIters,
        [&](weft::Context& it) {
          it.spawn(
              [&](weft::Context& c) {
                x = x * 7 % 1000003;
                auto e = std::make_shared<weft::Event>(c.event());
                std::lock_guard<std::mutex> g(m);
                handed.push_back(std::move(e));
              },
              weft::inout(x));
          // Runs only once the event of this iteration's writer is fulfilled: it would otherwise read x early
          // and, one iteration later, race with the writer.
          it.spawn([&] { y += x; }, weft::in(x), weft::inout(y));
          it.spawn([&] { late += x % 3; }, weft::in(x), weft::inout(late));
        },
        weft::inout(x), weft::inout(y), weft::inout(late));
  });
  stop = true;
  fulfiller.join();
  long ex = 1, ey = 0, el = 0;
  for (int i = 0; i < kIters; ++i) {
    ex = ex * 7 % 1000003;
    ey += ex;
    el += ex % 3;
  }
  EXPECT_EQ(x, ex);
  EXPECT_EQ(y, ey);
  EXPECT_EQ(late, el);
}

// Throttling does not wait for children that hold events: more receivers than Options::max_tasks wait for a
// sender spawned after all of them, on one worker too.
TEST_P(Events, ThrottlingSpawnsPastChildrenHoldingEvents) {
  weft::Options o = opts(GetParam());
  o.max_tasks = 16;
  weft::Runtime rt(o);
  constexpr int kWaiters = 100;
  std::vector<weft::Event> waiting;
  std::mutex m;
  std::vector<int> got(kWaiters, 0);
  int value = 0;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < kWaiters; ++i) {
      cx.spawn(
          [&](weft::Context& c) {
            weft::Event e = c.event();
            std::lock_guard<std::mutex> g(m);
            if (value == 42)
              e.fulfill();  // ran after the sender (other workers may run it early)
            else
              waiting.push_back(std::move(e));
          },
          weft::out(got[i]));
      cx.spawn([&, i] { got[i] = value; }, weft::in(got[i]));  // its successor, blocked as well
    }
    cx.spawn([&] {
      std::lock_guard<std::mutex> g(m);
      value = 42;
      for (auto& e : waiting) e.fulfill();
    });
  });
  for (int i = 0; i < kWaiters; ++i) EXPECT_EQ(got[i], 42) << i;
}

// A chain of tasks each held by an event that foreign threads fulfil: the result equals the sequential one.
TEST_P(Events, ChainThroughForeignThreads) {
  weft::Runtime rt(opts(GetParam()));
  Fulfiller f1(20), f2(30);
  const int n = static_cast<int>(scaled(2000, 200));
  unsigned long x = 0, y = 0;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) {
      if (i % 3 == 0) {
        cx.spawn([&, i](weft::Context& c) {
          (i % 2 ? f1 : f2).hand(c.event(), [&, i] { x = x * 3 + static_cast<unsigned long>(i); });
        }, weft::inout(x));
      } else {
        cx.spawn([&, i] { x = x * 3 + static_cast<unsigned long>(i); }, weft::inout(x));
      }
      if (i % 7 == 0) cx.spawn([&] { y += x % 1000; }, weft::in(x), weft::inout(y));
    }
  });
  unsigned long sx = 0, sy = 0;
  for (int i = 0; i < n; ++i) {
    sx = sx * 3 + static_cast<unsigned long>(i);
    if (i % 7 == 0) sy += sx % 1000;
  }
  EXPECT_EQ(x, sx);
  EXPECT_EQ(y, sy);
}

INSTANTIATE_TEST_SUITE_P(Workers, Events, testing::Values(1u, 2u, 4u), WorkersName());

// The run's watchdog (Options::watchdog_seconds): an event kept and never fulfilled leaves nothing to run, and
// the watchdog ends the process with a message that says what the run waits for, instead of a hang.
class EventsDeathTest : public testing::TestWithParam<unsigned> {};

TEST_P(EventsDeathTest, WatchdogEndsARunWaitingForAnEventNeverFulfilled) {
  EXPECT_EXIT(
      {
        weft::Options o = opts(GetParam());
        o.watchdog_seconds = 0.5;
        weft::Runtime rt(o);
        std::vector<weft::Event> kept;  // never fulfilled, never destroyed before the run ends
        std::mutex m;
        rt.run([&](weft::Context& cx) {
          for (int i = 0; i < 3; ++i)
            cx.spawn([&](weft::Context& c) {
              std::lock_guard<std::mutex> g(m);
              kept.push_back(c.event());
            });
        });
        std::exit(0);
      },
      testing::ExitedWithCode(1),
      "weft: watchdog: no worker has had a task to run for 0.5 s \\(Options::watchdog_seconds, WEFT_WATCHDOG\\) "
      "and the run's function waits for 3 of its tasks \\(each with its descendants\\); completion events "
      "\\(weft::Event\\) not fulfilled: 3 of those tasks' own, 0 of the function's.*ending the process");
}

TEST_P(EventsDeathTest, WatchdogNamesTheEventsOfTheRunsOwnFunction) {
  EXPECT_EXIT(
      {
        weft::Options o = opts(GetParam());
        o.watchdog_seconds = 0.25;
        weft::Runtime rt(o);
        weft::Event kept;
        rt.run([&](weft::Context& cx) { kept = cx.event(); });
        std::exit(0);
      },
      testing::ExitedWithCode(1), "waits for 0 of its tasks .*not fulfilled: 0 of those tasks' own, 1 of the function's");
}

// The watchdog counts only time in which every worker waits for work: a task that runs (here: sleeps) for
// several times the limit, while a foreign thread fulfils its event, does not trip it. (Nothing timed is
// asserted: the task runs, it does not wait for work, however loaded the machine.)
TEST_P(EventsDeathTest, WatchdogLeavesALongTaskAlone) {
  weft::Options o = opts(GetParam());
  o.watchdog_seconds = 0.1;
  weft::Runtime rt(o);
  std::atomic<bool> fulfilled{false};
  std::thread foreign;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& c) {
      foreign = std::thread([&fulfilled, ev = c.event()]() mutable {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ev.fulfill();
        fulfilled = true;
      });
      while (!fulfilled) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
  });
  foreign.join();
  EXPECT_TRUE(fulfilled.load());
}

INSTANTIATE_TEST_SUITE_P(Workers, EventsDeathTest, testing::Values(1u, 2u), WorkersName());

}  // namespace
