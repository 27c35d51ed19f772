// PaRSEC's LFQ scheduler (Options::scheduler = Scheduler::lfq; src/engine/queues.hpp: BoundedTaskBuffer,
// OverflowQueue): what differs from the default scheduler. The engine's other tests run on it too (registered a
// second time with WEFT_SCHEDULER=lfq: tests/CMakeLists.txt, weft_also_on_lfq).
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include "../common/test_util.hpp"
#include "engine/engine.hpp"

using namespace weft_test;

namespace {

weft::Options lfq(unsigned workers, unsigned buffer = 0, std::size_t max_tasks = weft::kDefaultMaxTasks) {
  weft::Options o = opts(workers, max_tasks);
  o.scheduler = weft::Scheduler::lfq;
  o.lfq_buffer = buffer;
  return o;
}

// The overflow queue of the runtime running the calling task.
const weft::detail::OverflowQueue& overflow_queue() {
  return static_cast<const weft::detail::Engine*>(weft::detail::current_engine())->overflow;
}

// The order in which a single worker runs tasks (appended by each body).
struct Order {
  std::mutex m;
  std::vector<int> ids;
  void add(int id) {
    std::lock_guard<std::mutex> g(m);
    ids.push_back(id);
  }
};

class Lfq : public testing::TestWithParam<unsigned> {};

// Many more ready tasks than the buffers hold: the rest go through the shared FIFO (seen while the workers
// other than the producer are held in a task each), and every task runs exactly once.
TEST_P(Lfq, FanOutBeyondTheBuffersGoesThroughTheOverflowQueue) {
  const unsigned workers = GetParam();
  const int n = static_cast<int>(scaled(4000, 200));
  weft::Runtime rt(lfq(workers, 0, 1u << 20));
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
  std::atomic<bool> go{false};
  bool overflowed = false;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i)
      cx.spawn([&, i] {
        EXPECT_TRUE(spin_until([&] { return go.load(); }));
        runs[static_cast<std::size_t>(i)].fetch_add(1);
      });
    overflowed = overflow_queue().maybe_nonempty();
    go.store(true);
    cx.taskwait();
    EXPECT_FALSE(overflow_queue().maybe_nonempty());
  });
  EXPECT_TRUE(overflowed) << n << " tasks on " << workers << " workers, buffers of " << 4 * workers;
  for (int i = 0; i < n; ++i) EXPECT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << "task " << i;
  EXPECT_EQ(rt.stats().tasks_executed, static_cast<std::uint64_t>(n));
}

// A tree of taskwaits (each inner task spawns two children and waits): the shared FIFO hands a waiting worker
// tasks of other subtrees, but waits nest at most kLfqFreeNesting deep before a waiter runs only its own
// children (without that bound: 2000 nested waits at this height on one worker).
TEST_P(Lfq, NestedTaskwaitsStayShallow) {
  const int height = kSanitized ? 11 : 14;
  weft::Runtime rt(lfq(GetParam()));
  static thread_local int depth = 0;
  std::atomic<int> deepest{0};
  struct Node {
    int h;
    long long* out;
    std::atomic<int>* deepest;
    void operator()(weft::Context& cx) const {
      atomic_max(*deepest, ++depth);
      if (h == 0) {
        *out = 1;
      } else {
        long long l = 0, r = 0;
        cx.spawn(Node{h - 1, &l, deepest});
        cx.spawn(Node{h - 1, &r, deepest});
        cx.taskwait();
        *out = l + r;
      }
      --depth;
    }
  };
  long long leaves = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn(Node{height, &leaves, &deepest});
    cx.taskwait();
  });
  EXPECT_EQ(leaves, 1LL << height);
  // Free nesting, then the rest of one subtree (its height), plus the tasks a worker runs outside any wait.
  EXPECT_LE(deepest.load(), static_cast<int>(weft::detail::kLfqFreeNesting) + height + 2);
}

// Immediate successors bypass the buffers as under the default scheduler: a chain readies each task as its
// predecessor finishes, and nearly all of them run from the immediate-successor slot.
TEST_P(Lfq, ImmediateSuccessorsBypassTheQueues) {
  weft::Runtime rt(lfq(GetParam()));
  const int n = static_cast<int>(scaled(2000, 100));
  int x = 0;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i)
      cx.spawn(
          [&, i] {
            EXPECT_EQ(x, i);
            ++x;
          },
          weft::inout(x));
    cx.taskwait();
  });
  EXPECT_EQ(x, n);
  EXPECT_GE(rt.stats().immediate_successor, static_cast<std::uint64_t>(n / 2));
}

INSTANTIATE_TEST_SUITE_P(Workers, Lfq, testing::Values(1u, 2u, 4u), WorkersName());

// One worker, tasks that fit in its buffer: they run in descending priority, the newest first among equals.
TEST(LfqOneWorker, BufferRunsTheHighestPriorityFirstNewestAmongEquals) {
  weft::Runtime rt(lfq(1, 64));
  std::mt19937 rng(7);
  std::vector<int> prio(64);
  for (int& p : prio) p = static_cast<int>(rng() % 9) - 4;
  Order order;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 64; ++i) cx.spawn([&, i] { order.add(i); }, weft::priority(prio[static_cast<std::size_t>(i)]));
    cx.taskwait();
  });
  std::vector<int> want(64);
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int a, int b) {
    return prio[static_cast<std::size_t>(a)] != prio[static_cast<std::size_t>(b)]
               ? prio[static_cast<std::size_t>(a)] > prio[static_cast<std::size_t>(b)]
               : a > b;
  });
  EXPECT_EQ(order.ids, want);
}

// One worker, more tasks than its buffer holds: the buffer keeps the highest priorities (they run first, in
// descending order); the others went to the FIFO in the order they were pushed out, and run in that order.
TEST(LfqOneWorker, BufferKeepsTheHighestPrioritiesAndTheRestRunsInFifoOrder) {
  constexpr unsigned kBuffer = 8;
  constexpr int kTasks = 200;
  weft::Runtime rt(lfq(1, kBuffer, 1024));
  std::vector<int> prio(kTasks);
  std::iota(prio.begin(), prio.end(), 0);
  std::shuffle(prio.begin(), prio.end(), std::mt19937(11));
  // The model: a buffer of kBuffer tasks; when it is full, the lowest priority of the buffer and the new task
  // goes to the FIFO.
  std::vector<int> buffer, fifo;
  for (int i = 0; i < kTasks; ++i) {
    buffer.push_back(i);
    if (buffer.size() > kBuffer) {
      auto low = std::min_element(buffer.begin(), buffer.end(), [&](int a, int b) {
        return prio[static_cast<std::size_t>(a)] < prio[static_cast<std::size_t>(b)];
      });
      fifo.push_back(*low);
      buffer.erase(low);
    }
  }
  std::sort(buffer.begin(), buffer.end(),
            [&](int a, int b) { return prio[static_cast<std::size_t>(a)] > prio[static_cast<std::size_t>(b)]; });
  std::vector<int> want = buffer;
  want.insert(want.end(), fifo.begin(), fifo.end());

  Order order;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < kTasks; ++i)
      cx.spawn([&, i] { order.add(i); }, weft::priority(prio[static_cast<std::size_t>(i)]));
    cx.taskwait();
  });
  EXPECT_EQ(order.ids, want);
  // The first kBuffer are the kBuffer highest priorities.
  for (unsigned k = 0; k < kBuffer; ++k) EXPECT_EQ(prio[static_cast<std::size_t>(order.ids[k])], kTasks - 1 - static_cast<int>(k));
}

// Equal priorities, a buffer of one slot: the newest task stays, the older ones go to the FIFO as newer ones
// arrive: the last spawned runs first, then the others in spawn order.
TEST(LfqOneWorker, OverflowQueueIsFirstInFirstOut) {
  const int n = 100;
  weft::Runtime rt(lfq(1, 1, 1024));
  Order order;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) cx.spawn([&, i] { order.add(i); });
    cx.taskwait();
  });
  std::vector<int> want{n - 1};
  for (int i = 0; i < n - 1; ++i) want.push_back(i);
  EXPECT_EQ(order.ids, want);
}

// A successor that a finishing task makes ready does not overtake a queued task of higher priority: A (10)
// readies B (0) while C (5) waits in the buffer: A, C, B.
TEST(LfqOneWorker, QueuedHigherPriorityRunsBeforeTheImmediateSuccessor) {
  weft::Runtime rt(lfq(1));
  Order order;
  int x = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { order.add(0); }, weft::inout(x), weft::priority(10));
    cx.spawn([&] { order.add(1); }, weft::inout(x));
    cx.spawn([&] { order.add(2); }, weft::priority(5));
    cx.taskwait();
  });
  EXPECT_EQ(order.ids, (std::vector<int>{0, 2, 1}));
}

// The options: the default is llp; lfq_buffer is validated.
TEST(LfqOptions, DefaultsAndValidation) {
  weft::Options o;
  EXPECT_EQ(o.scheduler, weft::Scheduler::llp);
  EXPECT_EQ(o.lfq_buffer, 0u);
  o.scheduler = weft::Scheduler::lfq;
  o.lfq_buffer = weft::kMaxLfqBuffer;
  EXPECT_NO_THROW(o.validate());
  o.lfq_buffer = weft::kMaxLfqBuffer + 1;
  EXPECT_THROW(o.validate(), weft::config_error);
  o.lfq_buffer = 0;
  o.scheduler = static_cast<weft::Scheduler>(7);
  EXPECT_THROW(weft::Runtime rt(o), weft::config_error);
}

}  // namespace
