// The engine's progress hook (src/engine: ProgressSource), with a fake source and no MPI: work that arrives from
// outside the engine (as messages do) is found by polling workers, and while the source says it is busy no
// worker sleeps until a push (nothing pushes when an outside event arrives: the workers would never wake).
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "../common/test_util.hpp"
#include "engine/engine.hpp"

namespace {

using namespace weft::detail;

// Outside work: a producer thread deposits items; poll() takes one and makes a detached task of it (as a
// transport's handler delivers a message). The task counts itself.
struct FakeSource {
  std::mutex m;
  std::deque<int> items;
  std::atomic<int> produced{0}, ran{0}, polls{0};
  int expected = 0;
  Task* anchor = nullptr;

  static void run_item(Task* t, weft::Context&) {
    auto* self = *reinterpret_cast<FakeSource**>(t->body);
    self->ran.fetch_add(1);
  }
  static void destroy_item(Task*) {}
  static constexpr BodyOps kOps{&run_item, nullptr, &destroy_item};

  static std::size_t poll(void* ctx) noexcept {
    auto* self = static_cast<FakeSource*>(ctx);
    self->polls.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> g(self->m);
      if (self->items.empty()) return 0;
      self->items.pop_front();
    }
    Task* t = detached_allocate("fake-message", 0);
    *reinterpret_cast<FakeSource**>(t->body) = self;
    t->body_ops = &kOps;
    detached_submit(t, self->anchor);
    return 1;
  }
  static ProgressDemand demand(void* ctx) noexcept {
    auto* self = static_cast<FakeSource*>(ctx);
    return self->ran.load() < self->expected ? ProgressDemand::timed : ProgressDemand::none;
  }
  ProgressSource source() { return {&poll, &demand, this}; }
};

// Ends the process if a run hangs (an idle worker asleep with outside work waiting): a failure, not a timeout.
struct Deadline {
  std::atomic<bool> done{false};
  std::thread t;
  explicit Deadline(int seconds)
      : t([this, seconds] {
          const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
          while (!done.load() && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          if (!done.load()) {
            std::fprintf(stderr, "progress_test: hung (a worker slept with a busy progress source)\n");
            std::_Exit(3);
          }
        }) {}
  ~Deadline() {
    done = true;
    t.join();
  }
};

class Progress : public testing::TestWithParam<unsigned> {};

TEST_P(Progress, OutsideWorkFoundByIdleWorkersWithoutPush) {
  weft::Options o;
  o.num_threads = GetParam();
  weft::Runtime rt(o);
  FakeSource src;
  src.expected = 12;
  const ProgressSource ps = src.source();
  Deadline deadline(60);
  // The producer deposits items slowly: between two, every worker has long passed its spinning phase and
  // sleeps. Nothing wakes the workers but their own timed sleeps, which the busy source imposes.
  std::thread producer([&] {
    for (int i = 0; i < src.expected; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
      std::lock_guard<std::mutex> g(src.m);
      src.items.push_back(i);
      src.produced.fetch_add(1);
    }
  });
  rt.run([&](weft::Context& cx) {
    Worker& w = *tls_worker;
    Task* root = ContextAccess::task(cx);
    src.anchor = root;
    w.engine->attach_progress(&ps);
    // Watched: the wait sleeps until a child of the root finishes, untimed unless the source is busy.
    wait_until(w, [&] { return src.ran.load() == src.expected; }, root);
    w.engine->detach_progress();
  });
  producer.join();
  EXPECT_EQ(src.ran.load(), src.expected);
  EXPECT_GT(src.polls.load(), 0);
}

TEST_P(Progress, NoPollWithoutSourceAndOneSourceAtATime) {
  weft::Options o;
  o.num_threads = GetParam();
  weft::Runtime rt(o);
  FakeSource src;
  const ProgressSource ps = src.source();
  rt.run([&](weft::Context& cx) {
    Engine& e = *tls_worker->engine;
    src.anchor = ContextAccess::task(cx);
    EXPECT_FALSE(e.has_progress());
    e.attach_progress(&ps);
    EXPECT_TRUE(e.has_progress());
    EXPECT_THROW(e.attach_progress(&ps), std::logic_error);
    // A worker with nothing to do polls (its queues are empty).
    wait_until(*tls_worker, [&] { return src.polls.load() >= 3; });
    e.detach_progress();
    EXPECT_FALSE(e.has_progress());
    EXPECT_EQ(e.poll_progress(), 0u);
    EXPECT_EQ(e.progress_demand(), ProgressDemand::none);
  });
  const int polls = src.polls.load();
  EXPECT_GT(polls, 0);
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 100; ++i) cx.spawn([] {});
  });
  EXPECT_EQ(src.polls.load(), polls);  // detached: never polled again
}

INSTANTIATE_TEST_SUITE_P(Workers, Progress, testing::Values(1u, 2u));

}  // namespace
