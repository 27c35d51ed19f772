// Stats counters: exact task counts, edge accounting on deterministic (single-worker) graphs, reset.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <cstdint>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

void expect_all_zero(const weft::Stats& s) {
  EXPECT_EQ(s.tasks_created, 0u);
  EXPECT_EQ(s.tasks_executed, 0u);
  EXPECT_EQ(s.tasks_cancelled, 0u);
  EXPECT_EQ(s.tasks_stolen, 0u);
  EXPECT_EQ(s.immediate_successor, 0u);
  EXPECT_EQ(s.edges_created, 0u);
  EXPECT_EQ(s.edges_pruned_finished, 0u);
  EXPECT_EQ(s.edges_pruned_duplicate, 0u);
  EXPECT_EQ(s.edges_saved_inoutset, 0u);
  EXPECT_EQ(s.internal_nodes, 0u);
  EXPECT_EQ(s.throttle_stalls, 0u);
  EXPECT_EQ(s.exceptions_dropped, 0u);
}

class StatsTest : public testing::TestWithParam<unsigned> {};

// Exact numbers of created and executed tasks for a nested program, summed over all workers.
TEST_P(StatsTest, TaskCountsExact) {
  weft::Runtime rt(opts(GetParam()));
  expect_all_zero(rt.stats());  // fresh runtime
  int x = 0;
  auto program = [&](weft::Context& cx) {
    for (int i = 0; i < 10; ++i)
      cx.spawn([&](weft::Context& c) {
        for (int j = 0; j < 5; ++j) c.spawn([] {});
        c.spawn([&] { ++x; }, weft::inout(x));
      }, weft::inout(x));
  };
  rt.run(program);
  weft::Stats s = rt.stats();
  EXPECT_EQ(s.tasks_created, 70u);
  EXPECT_EQ(s.tasks_executed, 70u);
  EXPECT_EQ(s.tasks_cancelled, 0u);
  EXPECT_EQ(x, 10);
  // Counters accumulate across runs until reset.
  rt.run(program);
  s = rt.stats();
  EXPECT_EQ(s.tasks_created, 140u);
  EXPECT_EQ(s.tasks_executed, 140u);
  rt.reset_stats();
  expect_all_zero(rt.stats());
  rt.run(program);
  EXPECT_EQ(rt.stats().tasks_created, 70u);
  EXPECT_EQ(rt.stats().tasks_executed, 70u);
}

INSTANTIATE_TEST_SUITE_P(Workers, StatsTest, testing::Values(1u, 2u, 4u), WorkersName());

// On one worker nothing runs before the root's taskwait, so every predecessor is unfinished when its
// successors are spawned and the edge counts are exact.
TEST(StatsEdges, ChainCreatesOneEdgePerLink) {
  weft::Runtime rt(opts(1));
  rt.reset_stats();
  int x = 0;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 20; ++i) cx.spawn([&] { ++x; }, weft::inout(x));
    cx.taskwait();
  });
  weft::Stats s = rt.stats();
  EXPECT_EQ(x, 20);
  EXPECT_EQ(s.edges_created, 19u);
  EXPECT_EQ(s.edges_pruned_finished, 0u);
  EXPECT_EQ(s.edges_pruned_duplicate, 0u);
  EXPECT_EQ(s.tasks_stolen, 0u);
  EXPECT_EQ(s.throttle_stalls, 0u);
}

// B depends on A through two data: one edge, one duplicate pruned.
TEST(StatsEdges, DuplicateEdgePruned) {
  weft::Runtime rt(opts(1));
  rt.reset_stats();
  int x = 0, y = 0, z = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { ++x; ++y; }, weft::inout(x), weft::inout(y));
    cx.spawn([&] { ++x; ++y; }, weft::inout(x), weft::inout(y));
    cx.taskwait();
  });
  weft::Stats s = rt.stats();
  EXPECT_EQ(x, 2);
  EXPECT_EQ(s.edges_created, 1u);
  EXPECT_EQ(s.edges_pruned_duplicate, 1u);

  rt.reset_stats();
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { x = y = z = 5; }, weft::out(x), weft::out(y), weft::out(z));
    cx.spawn([&] { EXPECT_EQ(x + y + z, 15); }, weft::in(x), weft::in(y), weft::in(z));
    cx.taskwait();
  });
  s = rt.stats();
  EXPECT_EQ(s.edges_created, 1u);
  EXPECT_EQ(s.edges_pruned_duplicate, 2u);
}

// m = 4 inoutset members followed by n = 4 readers: joining saves m*n - (m+n) = 8 edges.
TEST(StatsEdges, InoutsetJoinSavesEdges) {
  weft::Runtime rt(opts(1));
  rt.reset_stats();
  int x = 0;
  std::atomic<int> ok{0};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 4; ++i) cx.spawn([&] { std::atomic_ref<int>(x).fetch_add(1); }, weft::inoutset(x));
    for (int i = 0; i < 4; ++i) cx.spawn([&] { if (x == 4) ok.fetch_add(1); }, weft::in(x));
    cx.taskwait();
  });
  weft::Stats s = rt.stats();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(s.edges_saved_inoutset, 8u);
  EXPECT_GE(s.internal_nodes, 1u);
  EXPECT_EQ(s.tasks_created, 8u);
  EXPECT_EQ(s.tasks_executed, 8u);
}

// Immediate successor: on one worker a chain runs its successors directly; never when disabled.
TEST(StatsEdges, ImmediateSuccessorCounter) {
  for (bool on : {true, false}) {
    weft::Runtime rt(opts(1, weft::kDefaultMaxTasks, on));
    rt.reset_stats();
    int x = 0;
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 10; ++i) cx.spawn([&] { ++x; }, weft::inout(x));
      cx.taskwait();
    });
    EXPECT_EQ(x, 10);
    if (on) {
      EXPECT_GE(rt.stats().immediate_successor, 5u);
    } else {
      EXPECT_EQ(rt.stats().immediate_successor, 0u);
    }
  }
}

// Stats are exact after run() with several workers and nested spawning from all of them.
TEST(StatsConcurrent, ExactUnderConcurrency) {
  weft::Runtime rt(opts(4));
  rt.reset_stats();
  const int outer = static_cast<int>(scaled(200, 20));
  std::atomic<int> ran{0};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < outer; ++i)
      cx.spawn([&](weft::Context& c) {
        ran.fetch_add(1);
        for (int j = 0; j < 10; ++j) c.spawn([&] { ran.fetch_add(1); });
      });
  });
  weft::Stats s = rt.stats();
  EXPECT_EQ(ran.load(), outer * 11);
  EXPECT_EQ(s.tasks_created, static_cast<std::uint64_t>(outer) * 11);
  EXPECT_EQ(s.tasks_executed, static_cast<std::uint64_t>(outer) * 11);
  EXPECT_EQ(s.tasks_cancelled, 0u);
}

}  // namespace
