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
#include <string>
#include <vector>

#include <sched.h>
#include <unistd.h>

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
  std::atomic<int> worker_polls{0}, ran_elsewhere{0};  // polls by a worker; items run by no worker
  std::atomic<int> polls_at_delivery{-1}, polls_at_run{-1};  // of the last item: when polled in, when it ran
  unsigned workers = ~0u;  // with a communication thread: its index (every worker's is below)
  int expected = 0;
  Task* anchor = nullptr;

  static void run_item(Task* t, weft::Context&) {
    auto* self = *reinterpret_cast<FakeSource**>(t->body);
    if (current_worker_index() >= self->workers) self->ran_elsewhere.fetch_add(1);
    self->polls_at_run.store(self->polls.load());
    self->ran.fetch_add(1);
  }
  static void destroy_item(Task*) {}
  static constexpr BodyOps kOps{&run_item, nullptr, &destroy_item};

  static std::size_t poll(void* ctx) noexcept {
    auto* self = static_cast<FakeSource*>(ctx);
    self->polls.fetch_add(1, std::memory_order_relaxed);
    if (current_worker_index() < self->workers) self->worker_polls.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> g(self->m);
      if (self->items.empty()) return 0;
      self->items.pop_front();
    }
    self->polls_at_delivery.store(self->polls.load());
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

// Runs body(cx, w) in a run of rt with src attached as a progress source (its items counted in the root).
template <class Body>
void run_attached(weft::Runtime& rt, FakeSource& src, Body&& body) {
  const ProgressSource ps = src.source();
  rt.run([&](weft::Context& cx) {
    Worker& w = *tls_worker;
    src.anchor = ContextAccess::task(cx);
    w.engine->attach_progress(&ps);
    body(cx, w);
    w.engine->detach_progress(&ps);
  });
}

class Progress : public testing::TestWithParam<unsigned> {};

TEST_P(Progress, OutsideWorkFoundByIdleWorkersWithoutPush) {
  weft::Options o;
  o.num_threads = GetParam();
  weft::Runtime rt(o);
  FakeSource src;
  src.expected = 12;
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
  run_attached(rt, src, [&](weft::Context& cx, Worker& w) {
    // Watched: the wait sleeps until a child of the root finishes, untimed unless the source is busy.
    wait_until(w, [&] { return src.ran.load() == src.expected; }, ContextAccess::task(cx));
  });
  producer.join();
  EXPECT_EQ(src.ran.load(), src.expected);
  EXPECT_GT(src.polls.load(), 0);
}

TEST_P(Progress, NoPollWithoutSourceAndSeveralSourcesAtOnce) {
  weft::Options o;
  o.num_threads = GetParam();
  weft::Runtime rt(o);
  FakeSource src, other;
  const ProgressSource ps = src.source(), ps2 = other.source();
  other.expected = 1;  // demands (timed) until an item of it ran
  rt.run([&](weft::Context& cx) {
    Engine& e = *tls_worker->engine;
    src.anchor = other.anchor = ContextAccess::task(cx);
    EXPECT_FALSE(e.has_progress());
    e.attach_progress(&ps);
    EXPECT_TRUE(e.has_progress());
    EXPECT_THROW(e.attach_progress(&ps), std::logic_error);  // once each
    e.attach_progress(&ps2);
    EXPECT_EQ(e.progress_demand(), ProgressDemand::timed);  // the strongest of the two
    // A worker with nothing to do polls both (its queues are empty).
    wait_until(*tls_worker, [&] { return src.polls.load() >= 3 && other.polls.load() >= 3; });
    {
      std::lock_guard<std::mutex> g(other.m);
      other.items.push_back(1);
    }
    wait_until(*tls_worker, [&] { return other.ran.load() == 1; });
    EXPECT_EQ(e.progress_demand(), ProgressDemand::none);
    e.detach_progress(&ps2);
    EXPECT_TRUE(e.has_progress());
    const int other_polls = other.polls.load();
    wait_until(*tls_worker, [&] { return src.polls.load() >= 6; });
    EXPECT_EQ(other.polls.load(), other_polls);  // detached: not polled any more
    e.detach_progress(&ps);
    EXPECT_FALSE(e.has_progress());
    EXPECT_EQ(e.poll_progress(), 0u);
    EXPECT_EQ(e.progress_demand(), ProgressDemand::none);
    // At most kMaxProgressSources at once.
    std::vector<FakeSource> many(Engine::kMaxProgressSources + 1);
    std::vector<ProgressSource> mps;
    for (auto& m : many) mps.push_back(m.source());
    for (std::size_t i = 0; i < Engine::kMaxProgressSources; ++i) e.attach_progress(&mps[i]);
    EXPECT_THROW(e.attach_progress(&mps.back()), std::logic_error);
    for (std::size_t i = 0; i < Engine::kMaxProgressSources; ++i) e.detach_progress(&mps[i]);
    EXPECT_FALSE(e.has_progress());
  });
  const int polls = src.polls.load();
  EXPECT_GT(polls, 0);
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 100; ++i) cx.spawn([] {});
  });
  EXPECT_EQ(src.polls.load(), polls);  // detached: never polled again
}

// Dependency tasks that never leave a worker idle still poll between them (at most every
// kProgressPollInterval, checked every kProgressPollEvery tasks): outside work is not left for the end.
TEST_P(Progress, BusyWorkersPollBetweenDependencyTasks) {
  weft::Options o;
  o.num_threads = GetParam();
  weft::Runtime rt(o);
  FakeSource src;
  const ProgressSource ps = src.source();
  std::atomic<int> polls_seen_by_chain{0};
  rt.run([&](weft::Context& cx) {
    Engine& e = *tls_worker->engine;
    src.anchor = ContextAccess::task(cx);
    e.attach_progress(&ps);
    const int before = src.polls.load();
    int x = 0;
    // A chain long enough to span many poll intervals, each task busy for a few microseconds.
    for (int i = 0; i < 2000; ++i)
      cx.spawn(
          [&, before] {
            const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
            while (std::chrono::steady_clock::now() < end) {
            }
            if (++x == 2000) polls_seen_by_chain = src.polls.load() - before;
          },
          weft::inout(x));
    cx.taskwait();
    e.detach_progress(&ps);
  });
  // A chain leaves the other workers idle (they poll anyway); one worker polls only between tasks.
  EXPECT_GT(polls_seen_by_chain.load(), 10);
}

// Options::comm_thread = on: a thread of its own polls the source, also while every worker is busy in a task
// body, and the workers never poll; the tasks it makes ready run on the workers (they steal them).
TEST_P(Progress, CommThreadPollsWhileWorkersComputeAndWorkersNeverPoll) {
  weft::Options o;
  o.num_threads = GetParam();
  o.comm_thread = weft::CommThread::on;
  weft::Runtime rt(o);
  EXPECT_EQ(rt.num_workers(), GetParam());
  FakeSource src;
  src.workers = GetParam();
  src.expected = 50;
  Deadline deadline(60);
  run_attached(rt, src, [&](weft::Context&, Worker& w) {
    EXPECT_FALSE(w.engine->has_progress());  // nothing for the workers to poll
    // This body computes without a scheduling point: the source is polled all the same, and what it makes
    // ready waits for a worker. (Without the thread this would hang with one worker: the deadline fails it.)
    while (src.polls.load() < 1000) std::this_thread::yield();
    for (int i = 0; i < src.expected; ++i) {
      std::lock_guard<std::mutex> g(src.m);
      src.items.push_back(i);
    }
    while (src.ran.load() < src.expected) {
      if (Task* t = find_work(w)) run_task(w, t);  // as a waiting worker does
    }
  });
  EXPECT_EQ(src.ran.load(), src.expected);
  EXPECT_EQ(src.worker_polls.load(), 0);
  EXPECT_EQ(src.ran_elsewhere.load(), 0);
  const int polls = src.polls.load();
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 100; ++i) cx.spawn([] {});
  });
  EXPECT_EQ(src.polls.load(), polls);  // detached: the thread sleeps
}

// A task that sends asks for a poll as soon as it ends (as the transports' send does: countdown 1, interval
// passed). When the worker, idle, polls at once and that poll brings the answer, the answer's task runs
// without another poll first: that one would be a pass of MPI's progress engine on every hop's path.
TEST(ProgressOneWorker, AnIdlePollIsThePollASendAskedFor) {
  weft::Options o;
  o.num_threads = 1;
  weft::Runtime rt(o);
  FakeSource src;
  Deadline deadline(60);
  run_attached(rt, src, [&](weft::Context& cx, Worker& w) {
    for (int round = 1; round <= 3; ++round) {
      cx.spawn([&] {
        Worker& me = *tls_worker;  // "sends": the answer is there by the next poll
        me.last_busy_poll = {};
        me.progress_countdown.store(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> g(src.m);
        src.items.push_back(round);
      });
      wait_until(w, [&] { return src.ran.load() == round; });
      EXPECT_EQ(src.polls_at_run.load(), src.polls_at_delivery.load()) << "round " << round;
    }
  });
  EXPECT_EQ(src.ran.load(), 3);
}

INSTANTIATE_TEST_SUITE_P(Workers, Progress, testing::Values(1u, 2u));

// CommThread::automatic: a thread only for a process of a job of several, and only with a core to spare beside
// its workers (a CPU mask of the whole machine is shared with the job's other processes on the node).
TEST(CommThreadAuto, OnlyWithASpareCore) {
  const char* vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "MPI_LOCALNRANKS", "PMI_RANK", "PMI_SIZE", "PMIX_RANK"};
  for (const char* v : vars) ::unsetenv(v);
  auto threaded = [](unsigned workers, weft::CommThread mode) {
    weft::Options o;
    o.num_threads = workers;
    o.comm_thread = mode;
    weft::Runtime rt(o);
    bool has = false;
    rt.run([&](weft::Context&) { has = tls_worker->engine->progress_worker != nullptr; });
    return has;
  };
  EXPECT_FALSE(threaded(1, weft::CommThread::automatic));  // one process: nothing to communicate
  EXPECT_TRUE(threaded(1, weft::CommThread::on));
  EXPECT_FALSE(threaded(1, weft::CommThread::off));
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  const unsigned cores = static_cast<unsigned>(CPU_COUNT(&mask));
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  if (cores >= 2 && static_cast<long>(cores) >= sysconf(_SC_NPROCESSORS_ONLN)) {
    ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);  // alone on the node: a core beside cores - 1 workers
    EXPECT_TRUE(threaded(cores - 1, weft::CommThread::automatic));
    EXPECT_FALSE(threaded(cores, weft::CommThread::automatic));
    ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(cores).c_str(), 1);  // a process per core already
    EXPECT_FALSE(threaded(1, weft::CommThread::automatic));
    EXPECT_FALSE(threaded(1, weft::CommThread::off));
    ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");  // unknown: not spare
    EXPECT_FALSE(threaded(1, weft::CommThread::automatic));
  }
  for (const char* v : vars) ::unsetenv(v);
}

}  // namespace
