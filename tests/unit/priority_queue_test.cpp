// The per-worker queue of prioritised tasks (src/engine/queues.hpp: PriorityQueue, a lock-free local LIFO with
// priorities), driven directly with bare descriptors: its order on one thread, and one owner pushing and
// popping while thieves pop, every task taken exactly once (run under ThreadSanitizer, this also checks that
// a task's contents written before its push are visible to the thread that pops it).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "../common/test_util.hpp"
#include "engine/queues.hpp"

namespace {

using weft::detail::PriorityQueue;
using weft::detail::Task;

std::vector<std::unique_ptr<Task>> make_tasks(const std::vector<std::int32_t>& prios) {
  std::vector<std::unique_ptr<Task>> ts;
  for (std::size_t i = 0; i < prios.size(); ++i) {
    ts.push_back(std::make_unique<Task>());
    ts.back()->priority = prios[i];
    ts.back()->trace_tag = i;  // the task's number
  }
  return ts;
}

// Descending priority; among equal priorities the newest first; pop(1) takes positive priorities only.
TEST(PriorityQueue, OrderOnOneThread) {
  std::vector<std::int32_t> prios;
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    std::int32_t p = static_cast<std::int32_t>(rng() % 9) - 4;
    prios.push_back(p == 0 ? 7 : p);
  }
  prios.push_back(INT32_MAX);
  prios.push_back(INT32_MIN);
  auto ts = make_tasks(prios);
  PriorityQueue q;
  EXPECT_TRUE(q.empty());
  for (auto& t : ts) ASSERT_TRUE(q.push(t.get()));
  EXPECT_FALSE(q.empty());
  EXPECT_EQ(q.top_priority(), INT32_MAX);
  EXPECT_TRUE(q.has_above(0));
  EXPECT_FALSE(q.has_above(INT32_MAX));

  std::vector<std::pair<std::int32_t, std::uint64_t>> expect;  // (priority, number)
  for (auto& t : ts) expect.emplace_back(t->priority, t->trace_tag);
  std::sort(expect.begin(), expect.end(), std::greater<>());  // number descending among equals: newest first

  std::vector<std::pair<std::int32_t, std::uint64_t>> got;
  while (Task* t = q.pop(1)) got.emplace_back(t->priority, t->trace_tag);
  for (auto& g : got) EXPECT_GT(g.first, 0);
  EXPECT_FALSE(q.empty()) << "pop(1) took a negative priority";
  EXPECT_FALSE(q.has_above(0));
  EXPECT_TRUE(q.has_above(-5));
  while (Task* t = q.pop(INT32_MIN)) got.emplace_back(t->priority, t->trace_tag);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.top_priority(), INT32_MIN);
  EXPECT_EQ(got, expect);
}

// Pushes interleaved with pops: the first task is always the best one queued.
TEST(PriorityQueue, InterleavedPushAndPop) {
  std::mt19937 rng(11);
  std::vector<std::int32_t> prios;
  for (int i = 0; i < 2000; ++i) prios.push_back(static_cast<std::int32_t>(rng() % 5) + 1);
  auto ts = make_tasks(prios);
  PriorityQueue q;
  std::vector<Task*> model;  // what the queue holds, oldest first
  for (auto& t : ts) {
    ASSERT_TRUE(q.push(t.get()));
    model.push_back(t.get());
    if (rng() % 3 == 0) {
      // The expected task: the highest priority, the newest among those.
      auto best = model.begin();
      for (auto it = model.begin(); it != model.end(); ++it)
        if ((*it)->priority >= (*best)->priority) best = it;
      EXPECT_EQ(q.top_priority(), (*best)->priority);
      EXPECT_TRUE(q.has_above((*best)->priority - 1));
      EXPECT_FALSE(q.has_above((*best)->priority));
      ASSERT_EQ(q.pop(1), *best);
      model.erase(best);
    }
  }
  while (!model.empty()) {
    auto best = model.begin();
    for (auto it = model.begin(); it != model.end(); ++it)
      if ((*it)->priority >= (*best)->priority) best = it;
    ASSERT_EQ(q.pop(1), *best);
    model.erase(best);
  }
  EXPECT_EQ(q.pop(INT32_MIN), nullptr);
}

// One owner pushes (and pops now and then) while thieves pop: every task is taken once, none is lost. A
// task's `label` is written before its push and read by whoever pops it.
TEST(PriorityQueue, OwnerAndThievesTakeEveryTaskOnce) {
  const std::size_t n = weft_test::scaled(100000, 1000);
  const unsigned thieves = 3;
  for (int round = 0; round < 3; ++round) {
    std::mt19937 rng(static_cast<unsigned>(round));
    std::vector<std::int32_t> prios(n);
    for (auto& p : prios) {
      p = static_cast<std::int32_t>(rng() % 201) - 100;
      if (p == 0) p = 1;
    }
    auto ts = make_tasks(prios);
    std::vector<std::atomic<int>> taken(n);
    static const char kMark[] = "queued";
    PriorityQueue q;
    std::atomic<bool> done{false};
    std::atomic<std::size_t> stolen{0};
    auto take = [&](Task* t) {
      EXPECT_EQ(t->label, kMark);
      taken[t->trace_tag].fetch_add(1, std::memory_order_relaxed);
    };
    std::vector<std::thread> ths;
    for (unsigned k = 0; k < thieves; ++k)
      ths.emplace_back([&] {
        while (!done.load(std::memory_order_acquire) || !q.empty()) {
          if (Task* t = q.pop(INT32_MIN, /*owner=*/false)) {
            take(t);
            stolen.fetch_add(1, std::memory_order_relaxed);
          }
        }
      });
    std::vector<Task*> fallback;  // pushes refused while a thief held a list (the engine queues those elsewhere)
    for (std::size_t i = 0; i < n; ++i) {
      Task* t = ts[i].get();
      t->label = kMark;
      if (!q.push(t)) fallback.push_back(t);
      if (i % 4 == 3)
        if (Task* x = q.pop(i % 8 == 3 ? 1 : INT32_MIN)) take(x);
    }
    while (Task* x = q.pop(INT32_MIN)) take(x);
    done.store(true, std::memory_order_release);
    for (auto& th : ths) th.join();
    for (Task* t : fallback) take(t);
    EXPECT_TRUE(q.empty());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(taken[i].load(), 1) << "task " << i << ", round " << round;
    std::printf("round %d: %zu of %zu tasks stolen, %zu pushes refused\n", round, stolen.load(), n,
                fallback.size());
  }
}

}  // namespace
