// The per-worker work-stealing deque (src/engine/queues.hpp: StealDeque), driven directly with bare descriptors:
// batch stealing takes the oldest task and at most half of the rest, in order; and, with one owner pushing and
// popping while thieves steal batches into deques of their own and steal from each other, every task is taken
// exactly once (run under ThreadSanitizer, this also checks that a task's contents written before its push are
// visible to the thread that takes it, also after it moved from one deque to another).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "../common/test_util.hpp"
#include "engine/queues.hpp"

namespace {

using weft::detail::StealDeque;
using weft::detail::Task;

std::vector<std::unique_ptr<Task>> make_tasks(std::size_t n) {
  std::vector<std::unique_ptr<Task>> ts;
  for (std::size_t i = 0; i < n; ++i) {
    ts.push_back(std::make_unique<Task>());
    ts.back()->trace_tag = i;  // the task's number
  }
  return ts;
}

TEST(StealDeque, BatchTakesTheOldestAndAtMostHalf) {
  auto ts = make_tasks(10);
  StealDeque victim, thief;
  for (auto& t : ts) victim.push(t.get());
  std::uint32_t moved = 99;
  Task* first = victim.steal_batch(thief, 31, moved);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->trace_tag, 0u);
  EXPECT_EQ(moved, 5u) << "at most half of the 10 queued tasks besides the first";
  // The thief's own thieves take the moved tasks oldest first; the thief itself pops the newest.
  StealDeque third;
  std::uint32_t none = 99;
  Task* s = thief.steal_batch(third, 0, none);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->trace_tag, 1u);
  EXPECT_EQ(none, 0u);
  for (std::uint64_t k = 5; k >= 2; --k) {
    Task* p = thief.pop();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->trace_tag, k);
  }
  EXPECT_EQ(thief.pop(), nullptr);
  // The victim keeps the newest ones.
  for (std::uint64_t k = 9; k >= 6; --k) {
    Task* p = victim.pop();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->trace_tag, k);
  }
  EXPECT_EQ(victim.pop(), nullptr);
  EXPECT_EQ(victim.steal_batch(thief, 31, moved), nullptr);
  EXPECT_EQ(moved, 0u);
}

TEST(StealDeque, BatchOfOneAndLimit) {
  auto ts = make_tasks(100);
  StealDeque victim, thief;
  for (auto& t : ts) victim.push(t.get());
  std::uint32_t moved = 0;
  Task* first = victim.steal_batch(thief, 0, moved);  // steal_batch = 1: one task, as steal()
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->trace_tag, 0u);
  EXPECT_EQ(moved, 0u);
  EXPECT_FALSE(thief.maybe_nonempty());
  first = victim.steal_batch(thief, 7, moved);  // capped by max_more, not by half
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->trace_tag, 1u);
  EXPECT_EQ(moved, 7u);
  // A single task left: the batch is that task alone.
  while (victim.pop() != nullptr) {
  }
  auto one = make_tasks(1);
  victim.push(one[0].get());
  EXPECT_EQ(victim.steal_batch(thief, 31, moved), one[0].get());
  EXPECT_EQ(moved, 0u);
}

// One owner pushes (popping every fourth time) while thieves steal batches from it and from each other, each
// into its own deque, which only it pops: every task is taken exactly once.
TEST(StealDeque, OwnerAndBatchThievesTakeEveryTaskOnce) {
  const std::size_t n = weft_test::scaled(200000, 2000);
  const unsigned thieves = 3;
  for (std::uint32_t batch : {0u, 3u, 31u}) {
    auto ts = make_tasks(n);
    std::vector<std::atomic<int>> taken(n);
    static const char kMark[] = "queued";
    StealDeque owner;
    std::vector<std::unique_ptr<StealDeque>> own(thieves);
    for (auto& d : own) d = std::make_unique<StealDeque>();
    std::atomic<bool> done{false};
    std::atomic<std::size_t> moved_total{0};
    auto take = [&](Task* t) {
      EXPECT_EQ(t->label, kMark);
      taken[t->trace_tag].fetch_add(1, std::memory_order_relaxed);
    };
    std::vector<std::thread> ths;
    for (unsigned k = 0; k < thieves; ++k)
      ths.emplace_back([&, k] {
        StealDeque& mine = *own[k];
        unsigned victim = k;
        for (;;) {
          if (Task* t = mine.pop()) {
            take(t);
            continue;
          }
          // Victims in turn: the owner, then the other thieves.
          victim = (victim + 1) % (thieves + 1);
          StealDeque& v = victim == thieves ? owner : *own[victim];
          if (&v == &mine) continue;
          std::uint32_t moved = 0;
          if (Task* t = v.steal_batch(mine, batch, moved)) {
            moved_total.fetch_add(moved, std::memory_order_relaxed);
            take(t);
            continue;
          }
          if (done.load(std::memory_order_acquire) && !owner.maybe_nonempty() && !mine.maybe_nonempty()) break;
        }
      });
    for (std::size_t i = 0; i < n; ++i) {
      Task* t = ts[i].get();
      t->label = kMark;
      owner.push(t);
      if (i % 4 == 3)
        if (Task* x = owner.pop()) take(x);
    }
    while (Task* x = owner.pop()) take(x);
    done.store(true, std::memory_order_release);
    for (auto& th : ths) th.join();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(taken[i].load(), 1) << "task " << i << ", batch " << batch;
    if (batch == 0) {
      EXPECT_EQ(moved_total.load(), 0u);
    }
    std::printf("batch %u: %zu of %zu tasks moved in batches\n", batch, moved_total.load(), n);
  }
}

}  // namespace
