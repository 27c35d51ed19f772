// Repros of engine defects: each test failed (or crashed) before its fix.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

weft::Runtime make_runtime(unsigned threads) {
  weft::Options o;
  o.num_threads = threads;
  return weft::Runtime(o);
}

double rss_mib() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1024.0 * 1024.0);
}

// A task that fails because a child's exception was never rethrown cancels its dependents whatever the
// timing: also a dependent spawned after it has finished (it used to run its body).
TEST(Hardening, FailedParentCancelsDependentsSpawnedAfterItFinished) {
  for (unsigned threads : {1u, 2u}) {
    weft::Runtime rt = make_runtime(threads);
    int x = 0;
    std::atomic<bool> b_ran{false};
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& a) {  // A: out x, its child throws and A does not wait
        a.spawn([] { throw std::runtime_error("child"); });
        x = 1;
      }, weft::out(x));
      EXPECT_THROW(cx.taskwait_on(x), std::runtime_error);  // A has finished (failed); its error is consumed
      cx.spawn([&] { b_ran = true; }, weft::in(x));         // B depends on the failed A
      cx.taskwait();
    });
    EXPECT_FALSE(b_ran.load()) << threads << " workers";
    EXPECT_EQ(rt.stats().tasks_cancelled, 1u);
  }
}

// A successor readied by the last task a waiting worker ran must not stay in that worker's private
// immediate-successor slot once the wait returns: another worker must be able to take it.
TEST(Hardening, SuccessorReadiedDuringAWaitIsStealableAfterIt) {
  weft::Runtime rt = make_runtime(2);
  std::atomic<bool> blocker_started{false}, release{false}, b_ran{false};
  int x = 0;
  rt.run([&](weft::Context& cx) {
    // Worker 1 takes the blocker (worker 0 runs the root body, which does not run tasks while it spins).
    cx.spawn([&] {
      blocker_started = true;
      weft_test::spin_until([&] { return release.load(); });
    });
    ASSERT_TRUE(weft_test::spin_until([&] { return blocker_started.load(); }));
    cx.spawn([&] { x = 1; }, weft::out(x));           // A, run by worker 0 inside taskwait_on
    cx.spawn([&] { b_ran = true; }, weft::in(x));     // B, readied by A's completion on worker 0
    cx.taskwait_on(x);
    release = true;  // worker 1 is free: it must find B while this body goes on
    EXPECT_TRUE(weft_test::spin_until([&] { return b_ran.load(); }));
  });
}

// An access to a null or empty region names the datum at address null, like any other address (it used to
// index the domain's empty record array).
// A Runtime destroyed while a run is in progress stops the process with one line, instead of the workers
// crashing on freed memory: from another thread while run() waits for a task, and from one of its own tasks.
void destroy_while_another_thread_runs() {
  auto* rt = new weft::Runtime(weft_test::opts(2));
  std::atomic<bool> started{false}, release{false};
  std::thread runner([&] {
    rt->run([&](weft::Context& cx) {
      cx.spawn([&] {
        started = true;
        while (!release.load()) std::this_thread::yield();
      });
    });
  });
  while (!started.load()) std::this_thread::yield();
  delete rt;  // aborts here
  release = true;
  runner.join();
}
void destroy_from_its_own_task() {
  auto* rt = new weft::Runtime(weft_test::opts(2));
  rt->run([&](weft::Context&) { delete rt; });
}

TEST(HardeningDeathTest, RuntimeDestroyedDuringARunStopsWithAMessage) {
  EXPECT_DEATH(destroy_while_another_thread_runs(), "weft: a Runtime was destroyed while another thread is in its run\\(\\)");
  EXPECT_DEATH(destroy_from_its_own_task(), "weft: a Runtime was destroyed from inside one of its own tasks");
}

TEST(Hardening, NullAndEmptyRegions) {
  weft::Runtime rt = make_runtime(2);
  std::vector<int> empty;
  int order = 0, first = -1, second = -1;
  rt.run([&](weft::Context& cx) {
    cx.taskwait_on(nullptr);  // nothing spawned yet
    cx.spawn([&] { first = order++; }, weft::out(empty.data(), empty.size()));
    cx.taskwait_on(nullptr);
    cx.spawn([&] { second = order++; }, weft::in(empty.data(), empty.size()));
  });
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  rt.run([&](weft::Context& cx) {  // a fresh domain whose first access is the null address
    cx.spawn([&] { ++order; }, weft::in(static_cast<const int*>(nullptr), 0));
  });
  EXPECT_EQ(order, 3);
}

// An Access built by hand whose mode is no AccessMode is refused by spawn_accesses, naming the access; the
// task never exists.
TEST(Hardening, AccessModeOutOfRangeIsRefused) {
  weft::Runtime rt = make_runtime(2);
  int a = 0, b = 0;
  bool ran = false;
  std::string what;
  rt.run([&](weft::Context& cx) {
    const weft::Access acc[] = {weft::in(a), {&b, sizeof b, static_cast<weft::AccessMode>(77)}};
    try {
      cx.spawn_accesses([&] { ran = true; }, acc, 2);
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
  });
  EXPECT_FALSE(ran);
  EXPECT_NE(what.find("access 1 has mode 77"), std::string::npos) << what;
  EXPECT_EQ(rt.stats().tasks_created, 0u);
}

struct ThrowingCopy {
  ThrowingCopy() = default;
  ThrowingCopy(const ThrowingCopy&) { throw std::runtime_error("copy"); }
  ThrowingCopy& operator=(const ThrowingCopy&) = default;
};

// A body whose copy throws: the exception reaches the spawn, and the descriptor goes back to its pool (each
// failed spawn used to leak 256 bytes).
TEST(Hardening, ThrowingBodyCopyDoesNotLeak) {
  weft::Runtime rt = make_runtime(1);
  const std::size_t n = weft_test::scaled(300000);
  double before = 0;
  std::size_t caught = 0;
  rt.run([&](weft::Context& cx) {
    // Built in place (no copy yet); every spawn copies the lvalue lambda, which throws.
    auto small = [c = ThrowingCopy{}] { (void)c; };
    auto large = [c = ThrowingCopy{}, pad = std::array<char, 200>{}] { (void)c; (void)pad; };  // heap body
    for (int warm = 0; warm < 1000; ++warm) {
      try {
        cx.spawn(small);
      } catch (const std::runtime_error&) {
      }
    }
    before = rss_mib();
    for (std::size_t i = 0; i < n; ++i) {
      try {
        if (i % 2)
          cx.spawn(small, weft::inout(caught));
        else
          cx.spawn(large);
      } catch (const std::runtime_error&) {
        ++caught;
      }
    }
  });
  EXPECT_EQ(caught, n);
  EXPECT_EQ(rt.stats().tasks_created, 0u);
  if (!weft_test::kSanitized) {  // (ASan keeps freed memory in quarantine; it checks leaks itself)
    EXPECT_LT(rss_mib() - before, 16.0) << "descriptors of failed spawns were not recycled";
  }
}

// A fixed-count taskiter that fails at iteration 0 stops releasing instances: it does not replay the
// remaining iterations as empty instances (observable on one worker: each replayed instance runs as the
// immediate successor of the previous one).
TEST(Hardening, FailedTaskiterStopsAtOnce) {
  weft::Runtime rt = make_runtime(1);
  long counter = 0;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter(10000000, [&](weft::Context& it) {
      it.spawn([&] {
        if (counter++ == 0) throw std::runtime_error("iteration 0");
      }, weft::inout(counter));
    });
  }), std::runtime_error);
  EXPECT_EQ(counter, 1);
  EXPECT_LT(rt.stats().immediate_successor, 100u) << "the failed loop still replayed its iterations";
}

}  // namespace
