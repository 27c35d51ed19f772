// Runtime lifecycle: reuse across many runs, worker counts (1, 2, 4, oversubscribed), worker ids, run() from
// several threads (sequential and concurrent: serialised), construction and destruction.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

class RuntimeTest : public testing::TestWithParam<unsigned> {};

TEST_P(RuntimeTest, NumWorkers) {
  weft::Runtime rt(opts(GetParam()));
  EXPECT_EQ(rt.num_workers(), GetParam());
  unsigned root_id = 99, root_n = 0;
  std::atomic<int> bad{0};
  rt.run([&](weft::Context& cx) {
    root_id = cx.worker_id();
    root_n = cx.num_workers();
    for (int i = 0; i < 100; ++i)
      cx.spawn([&](weft::Context& c) {
        if (c.worker_id() >= GetParam() || c.num_workers() != GetParam()) bad.fetch_add(1);
      });
  });
  EXPECT_EQ(root_id, 0u) << "the caller of run() is worker 0";
  EXPECT_EQ(root_n, GetParam());
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(RuntimeTest, EmptyRuns) {
  weft::Runtime rt(opts(GetParam()));
  int calls = 0;
  for (int i = 0; i < 100; ++i) rt.run([&](weft::Context&) { ++calls; });
  EXPECT_EQ(calls, 100);
  const auto f = [&](weft::Context& cx) { cx.spawn([&] { ++calls; }); };
  rt.run(f);  // const lvalue functor
  EXPECT_EQ(calls, 101);
}

TEST_P(RuntimeTest, ReuseAcrossManyRuns) {
  weft::Runtime rt(opts(GetParam()));
  const int runs = static_cast<int>(scaled(1000, 50));
  rt.reset_stats();
  for (int r = 0; r < runs; ++r) {
    std::int64_t x = r, y = 0;
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 10; ++i) {
        cx.spawn([&, i] { x = x * 2 + i; }, weft::inout(x));
        cx.spawn([&] { y += x; }, weft::in(x), weft::inout(y));
      }
    });
    std::int64_t ex = r, ey = 0;
    for (int i = 0; i < 10; ++i) {
      ex = ex * 2 + i;
      ey += ex;
    }
    ASSERT_EQ(x, ex) << "run " << r;
    ASSERT_EQ(y, ey) << "run " << r;
  }
  EXPECT_EQ(rt.stats().tasks_executed, static_cast<std::uint64_t>(runs) * 20);
}

TEST_P(RuntimeTest, RunFromOtherThreadsOneAfterAnother) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> total{0};
  for (int t = 0; t < 4; ++t) {
    std::thread th([&] {
      rt.run([&](weft::Context& cx) {
        EXPECT_EQ(cx.worker_id(), 0u);
        for (int i = 0; i < 50; ++i) cx.spawn([&] { total.fetch_add(1); });
      });
    });
    th.join();
  }
  EXPECT_EQ(total.load(), 200);
}

INSTANTIATE_TEST_SUITE_P(Workers, RuntimeTest, testing::Values(1u, 2u, 4u, 8u), WorkersName());

// Concurrent run() calls on one Runtime are serialised: two runs never overlap.
TEST(RuntimeConcurrent, ConcurrentRunsAreSerialised) {
  weft::Runtime rt(opts(2));
  std::atomic<int> inside{0}, overlaps{0}, tasks{0};
  const int per_thread = static_cast<int>(scaled(50, 5));
  auto client = [&] {
    for (int r = 0; r < per_thread; ++r) {
      rt.run([&](weft::Context& cx) {
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        for (int i = 0; i < 20; ++i) cx.spawn([&] { tasks.fetch_add(1); });
        cx.taskwait();
        inside.fetch_sub(1);
      });
    }
  };
  std::thread a(client), b(client), c(client);
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(tasks.load(), 3 * per_thread * 20);
}

// All 4 workers take part: 4 tasks that can only finish if they run at the same time.
TEST(RuntimeConcurrent, AllWorkersParticipate) {
  weft::Runtime rt(opts(4));
  Rendezvous rv(4);
  std::atomic<int> ok{0};
  std::mutex m;
  std::set<unsigned> ids;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 4; ++i)
      cx.spawn([&](weft::Context& c) {
        {
          std::lock_guard<std::mutex> g(m);
          ids.insert(c.worker_id());
        }
        if (rv.arrive_and_wait()) ok.fetch_add(1);
      });
  });
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(ids.size(), 4u);
}

// Construct and destroy runtimes repeatedly, with and without runs.
TEST(RuntimeLifecycle, CreateAndDestroyMany) {
  for (int i = 0; i < 20; ++i) {
    weft::Runtime rt(opts(1 + i % 4));
    if (i % 2) {
      std::atomic<int> n{0};
      rt.run([&](weft::Context& cx) {
        for (int k = 0; k < 10; ++k) cx.spawn([&] { n.fetch_add(1); });
      });
      EXPECT_EQ(n.load(), 10);
    }
  }
}

// Two runtimes alive at the same time, used from two threads.
TEST(RuntimeLifecycle, TwoRuntimesSideBySide) {
  weft::Runtime r1(opts(2)), r2(opts(2));
  std::atomic<int> n1{0}, n2{0};
  auto use = [](weft::Runtime& rt, std::atomic<int>& n) {
    for (int r = 0; r < 20; ++r) {
      int x = 0;
      rt.run([&](weft::Context& cx) {
        for (int i = 0; i < 50; ++i) cx.spawn([&] { ++x; n.fetch_add(1); }, weft::inout(x));
      });
      EXPECT_EQ(x, 50);
    }
  };
  std::thread a([&] { use(r1, n1); }), b([&] { use(r2, n2); });
  a.join();
  b.join();
  EXPECT_EQ(n1.load(), 1000);
  EXPECT_EQ(n2.load(), 1000);
}

}  // namespace
