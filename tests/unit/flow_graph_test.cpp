// Flow graphs (weft/flow.hpp), part 2: priorities and keymaps, user code outside the tables' locks, errors and
// misuse, statistics, the ablation switches; on several workers. Part 1: flow_test.cpp.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "flow_workers.hpp"

namespace {

// --- priorities and keymaps --------------------------------------------------------------------------------

// The priority map and the keymap may be set before graph() or after it, before the graph executes.
TEST(Flow, PriorityMapOrdersReadyTasks) {
  for (const bool after_graph : {false, true}) {
    SCOPED_TRACE(after_graph ? "priomap set after graph()" : "priomap set before graph()");
    weft::Runtime rt(opts(1));
    std::vector<int> order;
    wf::Edge<int, void> e;
    auto fan = wf::make_tt<int>(
        [](const int&, auto& out) {
          for (int k = 0; k < 20; ++k) wf::sendk<0>(k, out);
        },
        wf::edges(wf::Edge<int, void>()), wf::edges(e), "fan");
    auto leaf = wf::make_tt<int>([&](const int& k) { order.push_back(k); }, wf::edges(e), wf::edges(), "leaf");
    auto priomap = [](const int& k) { return (k * 7) % 20; };
    if (!after_graph) leaf->set_priomap(priomap);
    auto g = wf::graph(rt, fan);
    if (after_graph) leaf->set_priomap(priomap);
    g.invoke(0);
    g.wait();
    ASSERT_EQ(order.size(), 20u);
    for (std::size_t i = 1; i < order.size(); ++i)
      EXPECT_GT((order[i - 1] * 7) % 20, (order[i] * 7) % 20) << "position " << i;
  }
}

TEST(Flow, KeymapToAnotherProcessIsAnError) {
  for (const bool after_graph : {false, true}) {
    SCOPED_TRACE(after_graph ? "keymap set after graph()" : "keymap set before graph()");
    weft::Runtime rt(opts(2));
    wf::Edge<int, int> e;
    auto tt = wf::make_tt<int>([](const int&, int) {}, wf::edges(e), wf::edges(), "mapped");
    auto keymap = [](const int& k) { return k == 3 ? 1 : 0; };
    if (!after_graph) tt->set_keymap(keymap);
    auto g = wf::graph(rt, tt);
    if (after_graph) tt->set_keymap(keymap);
    g.invoke(1, 0);
    g.wait();  // key 1 lives on process 0: fine
    g.invoke(3, 0);
    try {
      g.wait();
      ADD_FAILURE() << "expected an error";
    } catch (const wf::error& e) {
      EXPECT_NE(std::string(e.what()).find("process 1"), std::string::npos) << e.what();
    }
  }
}

// --- user code runs outside the table's locks -------------------------------------------------------------

// A callback that delivers to the template task that calls it, for the very key being delivered (the same bucket
// of its pending-task table): callbacks ran under that bucket's spin lock, and deadlocked on it.
enum class Callback { priomap, keymap, count };
void callback_delivers_to_its_own_tt(weft::Runtime& rt, Callback which) {
  const int n = 50;
  wf::Edge<int, int> e;
  std::vector<std::atomic<bool>> reentered(n);
  std::mutex m;
  std::map<int, std::vector<int>> got;
  std::function<void(int)> deliver_again;  // set once the template task exists
  // Each key collects 2 values: the one invoked below, and 1000 + key from inside the callback.
  auto reenter = [&](const int& k) {
    if (!reentered[k].exchange(true)) deliver_again(k);
  };
  std::function<std::size_t(const int&)> count = [&](const int& k) {
    if (which == Callback::count) reenter(k);
    return std::size_t(2);
  };
  auto agg = wf::make_tt<int>(
      [&](const int& k, const wf::Aggregator<int>& vs) {
        std::lock_guard<std::mutex> g(m);
        got[k].assign(vs.begin(), vs.end());
      },
      wf::edges(wf::make_aggregator(e, count)), wf::edges(), "agg");
  deliver_again = [tt = agg.get()](int k) { tt->invoke(k, 1000 + k); };
  if (which == Callback::priomap)
    agg->set_priomap([&](const int& k) {
      reenter(k);
      return 0;
    });
  if (which == Callback::keymap)
    agg->set_keymap([&](const int& k) {
      reenter(k);
      return 0;
    });
  auto g = wf::graph(rt, agg);
  for (int k = 0; k < n; ++k) agg->invoke(k, k);
  g.wait();
  ASSERT_EQ(got.size(), std::size_t(n));
  for (auto& [k, v] : got) {
    std::sort(v.begin(), v.end());
    EXPECT_EQ(v, (std::vector<int>{k, 1000 + k})) << "key " << k;
  }
}
TEST_P(FlowWorkers, PriomapMayDeliverToItsOwnTemplateTask) { callback_delivers_to_its_own_tt(rt, Callback::priomap); }
TEST_P(FlowWorkers, KeymapMayDeliverToItsOwnTemplateTask) { callback_delivers_to_its_own_tt(rt, Callback::keymap); }
TEST_P(FlowWorkers, CountMayDeliverToItsOwnTemplateTask) { callback_delivers_to_its_own_tt(rt, Callback::count); }

// A value whose copy constructor delivers to the same key of its template task (the same bucket).
struct Reentrant {
  int v = 0;
  static inline std::function<void()> on_copy;  // called by the first copy after it is set
  Reentrant() = default;
  explicit Reentrant(int x) : v(x) {}
  Reentrant(Reentrant&& o) noexcept : v(o.v) {}
  Reentrant(const Reentrant& o) : v(o.v) {
    if (auto f = std::exchange(on_copy, nullptr)) f();
  }
  Reentrant& operator=(const Reentrant&) = default;
};

TEST_P(FlowWorkers, ValueCopyMayDeliverToItsOwnTemplateTask) {
  wf::Edge<int, Reentrant> a;
  wf::Edge<int, int> b;
  std::atomic<int> sum{0};
  auto join = wf::make_tt<int>([&](const int&, const Reentrant& x, int y) { sum += x.v * y; }, wf::edges(a, b),
                                 wf::edges(), "join");
  auto src = wf::make_tt<int>(
      [&](const int& k, auto& out) {
        Reentrant r(k);
        Reentrant::on_copy = [&] { wf::send<1>(7, 3, out); };  // input b of key 7, from inside the copy
        wf::send<0>(7, r, out);                                  // an lvalue: copied into the task of key 7
      },
      wf::edges(wf::Edge<int, void>()), wf::edges(a, b), "src");
  auto g = wf::graph(rt, src, join);
  g.invoke(5);
  g.wait();
  EXPECT_EQ(sum.load(), 15);
}

// Another worker delivering to the same key is not held up while a value is being copied.
TEST(Flow, OtherWorkersDeliverWhileAValueIsCopied) {
  weft::Runtime rt(opts(2));
  std::atomic<bool> copying{false}, delivered{false}, blocked{false};
  wf::Edge<int, Reentrant> a;
  wf::Edge<int, int> b;
  std::atomic<int> sum{0};
  auto join = wf::make_tt<int>([&](const int&, const Reentrant& x, int y) { sum += x.v * y; }, wf::edges(a, b),
                               wf::edges(), "join");
  auto sa = wf::make_tt<int>(
      [&](const int&, auto& out) {
        Reentrant r(2);
        Reentrant::on_copy = [&] {
          copying = true;
          // The copy waits (bounded) for the other input of the same key to be delivered meanwhile.
          if (!weft_test::spin_until([&] { return delivered.load(); })) blocked = true;
        };
        wf::send<0>(1, r, out);
      },
      wf::edges(wf::Edge<int, void>()), wf::edges(a), "sa");
  auto sb = wf::make_tt<int>(
      [&](const int&, auto& out) {
        weft_test::spin_until([&] { return copying.load(); });
        wf::send<0>(1, 5, out);
        delivered = true;
      },
      wf::edges(wf::Edge<int, void>()), wf::edges(b), "sb");
  auto g = wf::graph(rt, sa, sb, join);
  sa->invoke(0);
  sb->invoke(0);
  g.wait();
  EXPECT_FALSE(blocked.load()) << "a delivery to the key waited for the copy of another of its values";
  EXPECT_EQ(sum.load(), 10);
}

// Values whose copy constructor throws: the graph fails with that exception at wait(), every value constructed is
// destroyed once, and nothing stays pending, whichever input (first, last, aggregated) failed.
struct Bomb {
  int v = 0;
  static inline std::atomic<int> live{0};
  static inline std::atomic<int> explode_at{-1};  // the copy of this value throws
  explicit Bomb(int x) : v(x) { ++live; }
  Bomb(Bomb&& o) noexcept : v(o.v) { ++live; }
  Bomb(const Bomb& o) : v(o.v) {
    if (o.v == explode_at.load()) throw std::runtime_error("bomb " + std::to_string(o.v));
    ++live;
  }
  ~Bomb() { --live; }
};

TEST_P(FlowWorkers, ThrowingValueCopyFailsTheGraphCleanly) {
  const int n = 40;
  wf::Edge<int, Bomb> a, b, c;
  std::atomic<int> ran{0};
  auto join = wf::make_tt<int>([&](const int&, const Bomb&, const Bomb&, const wf::Aggregator<Bomb>&) { ++ran; },
                               wf::edges(a, b, wf::make_aggregator(c, 3)), wf::edges(), "join");
  // Key k: input a from `first`, then b and the aggregated values from `second` (copies: lvalues).
  auto first = wf::make_tt<int>(
      [](const int& k, auto& out) {
        Bomb x(k);
        wf::send<0>(k, x, out);
      },
      wf::edges(wf::Edge<int, void>()), wf::edges(a), "first");
  auto second = wf::make_tt<int>(
      [](const int& k, auto& out) {
        for (int i = 0; i < 3; ++i) {
          Bomb y(n + 3 * k + i);
          wf::send<0>(k, y, out);
        }
        Bomb x(2 * n * n + k);
        wf::send<1>(k, x, out);
      },
      wf::edges(wf::Edge<int, void>()), wf::edges(c, b), "second");
  auto g = wf::graph(rt, first, second, join);
  const int victims[] = {7, n + 3 * 9 + 1, 2 * n * n + 11, 2 * n * n + 0};  // first input, aggregated, last input
  for (int victim : victims) {
    Bomb::explode_at = victim;
    ran = 0;
    for (int phase = 0; phase < 2; ++phase) {  // inputs in one run or split over two (pending in between)
      try {
        for (int k = 0; k < n; ++k) first->invoke(k);
        if (phase == 1) g.fence();  // throws if the victim was sent by `first`
        for (int k = 0; k < n; ++k) second->invoke(k);
        g.wait();
        ADD_FAILURE() << "expected the copy's exception, victim " << victim;
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "bomb " + std::to_string(victim));
      }
      EXPECT_EQ(g.pending(), 0u);
      EXPECT_EQ(Bomb::live.load(), 0) << "victim " << victim << ", phase " << phase;
    }
  }
  // The graph runs again.
  Bomb::explode_at = -1;
  ran = 0;
  for (int k = 0; k < n; ++k) first->invoke(k), second->invoke(k);
  g.wait();
  EXPECT_EQ(ran.load(), n);
  EXPECT_EQ(Bomb::live.load(), 0);
}

// --- errors --------------------------------------------------------------------------------------------------

TEST_P(FlowWorkers, SameInputTwiceIsReported) {
  wf::Edge<int, int> a, b;
  auto src = wf::make_tt<int>(
      [](const int& k, auto& out) {
        wf::send<0>(k, 1, out);
        wf::send<0>(k, 2, out);  // twice on input 0 of key k
      },
      wf::edges(wf::Edge<int, void>()), wf::edges(a), "src");
  std::atomic<int> ran{0};
  auto sink = wf::make_tt<int>([&](const int&, int, int) { ++ran; }, wf::edges(a, b), wf::edges(), "sink");
  auto g = wf::graph(rt, src);
  g.invoke(5);
  try {
    g.wait();
    FAIL() << "expected an error";
  } catch (const wf::error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'sink', key 5: input 0 received twice"), std::string::npos) << m;
  }
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(g.pending(), 0u);  // discarded
}

TEST_P(FlowWorkers, MissingInputsAreReportedAtWait) {
  wf::Edge<int, int> a, b;
  auto sink = wf::make_tt<int>([](const int&, int, int) {}, wf::edges(a, b), wf::edges(), "join");
  auto src = wf::make_tt<int>([](const int& k, auto& out) { wf::send<0>(k, k, out); },
                              wf::edges(wf::Edge<int, void>()), wf::edges(a), "src");
  auto g = wf::graph(rt, src);
  g.invoke(4);
  g.fence();  // fence keeps the pending task
  EXPECT_EQ(g.pending(), 1u);
  g.invoke(9);
  try {
    g.wait();
    FAIL() << "expected an error";
  } catch (const wf::error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("2 tasks never received all inputs"), std::string::npos) << m;
    EXPECT_NE(m.find("'join'"), std::string::npos) << m;
    EXPECT_NE(m.find("missing input 1"), std::string::npos) << m;
    EXPECT_NE(m.find("a duplicate send shows up here too"), std::string::npos) << m;
  }
  EXPECT_EQ(g.pending(), 0u);
}

TEST_P(FlowWorkers, FenceKeepsPendingTasksForLaterInputs) {
  wf::Edge<int, int> a, b;
  std::atomic<int> sum{0};
  auto join = wf::make_tt<int>([&](const int&, int x, int y) { sum += x * y; }, wf::edges(a, b), wf::edges(), "join");
  auto left = wf::make_tt<int>([](const int& k, auto& out) { wf::send<0>(k, k, out); },
                               wf::edges(wf::Edge<int, void>()), wf::edges(a), "left");
  auto right = wf::make_tt<int>([](const int& k, auto& out) { wf::send<0>(k, 2, out); },
                                wf::edges(wf::Edge<int, void>()), wf::edges(b), "right");
  auto g = wf::graph(rt, left, right);
  for (int k = 0; k < 1000; ++k) left->invoke(k);  // 1000 pending tasks: the table grows
  g.fence();
  EXPECT_EQ(g.pending(), 1000u);
  EXPECT_EQ(sum.load(), 0);
  for (int k = 0; k < 1000; ++k) right->invoke(k);
  g.wait();
  EXPECT_EQ(sum.load(), 999 * 1000);
}

// A pending task belongs to the run that completes it, not to the one that created it: that run's root is gone
// (the engine may give the next run another descriptor for its root), and wait() must still cover the task.
TEST_P(FlowWorkers, PendingTasksRunInTheFenceThatCompletesThem) {
  const int n = 200;
  wf::Edge<int, int> a, b, c;
  std::atomic<int> ran{0};
  auto join = wf::make_tt<int>(
      [&](const int& k, int x, int y, int z) {
        weft_test::busy_for_us(20);  // wait() returning before the bodies ran would be seen below
        if (x == k && y == 2 * k && z == 3 * k) ran.fetch_add(1, std::memory_order_relaxed);
      },
      wf::edges(a, b, c), wf::edges(), "join");
  auto feed = [&](int input) {
    return wf::make_tt<int>([input](const int& k, auto& out) { wf::send<0>(k, (input + 1) * k, out); },
                            wf::edges(wf::Edge<int, void>()), wf::edges(input == 0 ? a : input == 1 ? b : c), "feed");
  };
  auto f0 = feed(0), f1 = feed(1), f2 = feed(2);
  auto g = wf::graph(rt, f0, f1, f2);
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < n; ++k) f0->invoke(k);
    g.fence();  // one input each: pending
    // A run in between, on the same runtime, as a program would have (other descriptors change hands).
    rt.run([](weft::Context& cx) {
      for (int i = 0; i < 10; ++i) cx.spawn([] {});
    });
    for (int k = 0; k < n; ++k) f1->invoke(k);
    g.fence();  // two inputs each: still pending
    EXPECT_EQ(g.pending(), std::size_t(n));
    for (int k = 0; k < n; ++k) f2->invoke(k);
    g.wait();
    EXPECT_EQ(ran.load(), (round + 1) * n) << "round " << round;
    EXPECT_EQ(g.pending(), 0u);
  }
}

TEST_P(FlowWorkers, ExceptionInBodyReachesWait) {
  wf::Edge<int, int> e;
  std::atomic<int> ran{0};
  auto step = wf::make_tt<int>(
      [&](const int& k, int x, auto& out) {
        ++ran;
        if (k == 50) throw std::runtime_error("step 50 failed");
        if (k < 1000) wf::send<0>(k + 1, x, out);
      },
      wf::edges(e), wf::edges(e), "step");
  auto g = wf::graph(rt, step);
  g.invoke(0, 1);
  EXPECT_THROW(
      {
        try {
          g.wait();
        } catch (const std::runtime_error& err) {
          EXPECT_STREQ(err.what(), "step 50 failed");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(ran.load(), 51);
  // The graph stays usable.
  ran = 0;
  g.invoke(900, 1);
  g.wait();
  EXPECT_EQ(ran.load(), 101);
}

// A value sent on an edge that nothing consumes would be lost: the sending body throws, naming the edge. So does
// a send to a consumer whose last shared_ptr the program dropped before graph() (it left its input edge; the
// send called into the destroyed template task before). Broadcasts too.
TEST_P(FlowWorkers, SendOnAnEdgeWithoutConsumerIsAnError) {
  auto expect_lost = [](auto& g, const char* edge, const char* sender) {
    try {
      g.wait();
      ADD_FAILURE() << "a value sent on '" << edge << "', which nothing consumes, was dropped silently";
    } catch (const wf::error& x) {
      EXPECT_NE(std::string(x.what()).find(std::string("edge '") + edge + "'"), std::string::npos) << x.what();
      EXPECT_NE(std::string(x.what()).find(std::string("template task '") + sender + "', key 1: a value was sent"),
                std::string::npos)
          << x.what();
      EXPECT_NE(std::string(x.what()).find("no template task takes as input"), std::string::npos) << x.what();
    }
  };
  {
    wf::Edge<int, int> in("in"), nowhere("nowhere");
    auto src = wf::make_tt<int>([](const int& k, int v, auto& out) { wf::send<0>(k, v, out); }, wf::edges(in),
                                wf::edges(nowhere), "src");
    auto g = wf::graph(rt, src);
    g.invoke(1, 1);
    expect_lost(g, "nowhere", "src");
  }
  {
    wf::Edge<int, int> in("in"), mid("mid");
    std::atomic<int> ran{0};
    auto make_pair = [&] {  // a helper that returns only the producer, its consumer dropped
      auto producer = wf::make_tt<int>(
          [](const int& k, int v, auto& out) { wf::broadcast<0>(std::vector<int>{k, k + 1}, v, out); }, wf::edges(in),
          wf::edges(mid), "producer");
      auto consumer = wf::make_tt<int>([&](const int&, int) { ++ran; }, wf::edges(mid), wf::edges(), "consumer");
      return producer;
    };
    auto producer = make_pair();
    auto g = wf::graph(rt, producer);
    EXPECT_EQ(g.size(), 1u);
    g.invoke(1, 1);
    expect_lost(g, "mid", "producer");
    EXPECT_EQ(ran.load(), 0);
  }
}

TEST(Flow, GraphMisuseIsReported) {
  weft::Runtime rt(opts(2));
  wf::Edge<int, int> e;
  auto tt = wf::make_tt<int>([](const int&, int) {}, wf::edges(e), wf::edges(), "t");
  {
    auto g = wf::graph(rt, tt);
    EXPECT_THROW(wf::graph(rt, tt), wf::error);  // already in a graph
    bool threw = false;
    rt.run([&](weft::Context&) {
      try {
        g.fence();
      } catch (const std::logic_error&) {
        threw = true;
      }
    });
    EXPECT_TRUE(threw);
  }
  auto g2 = wf::graph(rt, tt);  // free again once the first graph is gone
  g2.invoke(1, 1);
  g2.wait();
  EXPECT_THROW(wf::make_aggregator(e, 0), wf::error);
}

TEST(Flow, InvokeFromAnotherThreadWhileExecutingIsRefused) {
  weft::Runtime rt(opts(2));
  wf::Edge<int, int> e;
  std::atomic<bool> started{false}, done{false};
  auto tt = wf::make_tt<int>(
      [&](const int&, int) {
        started = true;
        weft_test::spin_until([&] { return done.load(); });
      },
      wf::edges(e), wf::edges(), "t");
  auto g = wf::graph(rt, tt);
  g.invoke(0, 0);
  std::thread other([&] {
    weft_test::spin_until([&] { return started.load(); });
    EXPECT_THROW(tt->invoke(1, 1), wf::error);
    done = true;
  });
  g.wait();
  other.join();
}

TEST(Flow, PendingTasksAreFreedWithTheGraph) {
  // Under ASan this checks that discarded records release their values.
  weft::Runtime rt(opts(2));
  wf::Edge<int, std::string> a, b;
  auto join = wf::make_tt<int>([](const int&, const std::string&, const std::string&) {}, wf::edges(a, b),
                               wf::edges(), "join");
  auto src = wf::make_tt<int>([](const int& k, auto& out) { wf::send<0>(k, std::string(100, 'x'), out); },
                              wf::edges(wf::Edge<int, void>()), wf::edges(a), "src");
  auto g = wf::graph(rt, src);
  for (int k = 0; k < 100; ++k) g.invoke(k);
  g.fence();
  EXPECT_EQ(g.pending(), 100u);
}

TEST(Flow, OwnRuntimeFromEnvironment) {
  wf::Edge<int, int> e;
  int got = 0;
  auto tt = wf::make_tt<int>([&](const int& k, int v) { got = k + v; }, wf::edges(e), wf::edges(), "t");
  auto g = wf::graph(tt);
  EXPECT_GE(g.runtime().num_workers(), 1u);
  g.invoke(2, 3);
  g.wait();
  EXPECT_EQ(got, 5);
}

TEST(Flow, StatsCountFlowTasks) {
  weft::Runtime rt(opts(2));
  wf::Edge<int, void> e;
  auto step = wf::make_tt<int>(
      [](const int& k, auto& out) {
        if (k < 999) wf::sendk<0>(k + 1, out);
      },
      wf::edges(e), wf::edges(e), "step");
  auto g = wf::graph(rt, step);
  rt.reset_stats();
  g.invoke(0);
  g.wait();
  EXPECT_EQ(rt.stats().tasks_created, 1000u);
  EXPECT_EQ(rt.stats().tasks_executed, 1000u);
}

}  // namespace

namespace {

// The ablation switches (Options::local_counts, Options::biased_lock) change how the engine counts and how the
// tables lock, not what a program computes: a two-input join over enough keys to grow its table, and nested
// dependency tasks, on 4 workers with each switch off.
TEST(Flow, AblationSwitchesKeepResults) {
  for (int mode = 0; mode < 4; ++mode) {
    weft::Options o = opts(4);
    o.local_counts = (mode & 1) == 0;
    o.biased_lock = (mode & 2) == 0;
    weft::Runtime rt(o);
    using Key = std::tuple<int, int>;
    const int n = 120;  // 14400 keys: the table of 256 buckets grows
    wf::Edge<Key, int> a, b;
    std::atomic<long> sum{0};
    auto prod = wf::make_tt<int>(
        [&](const int& i, auto& out) {
          for (int j = 0; j < n; ++j) {
            wf::send<0>(Key{i, j}, i, out);
            wf::send<1>(Key{i, j}, j, out);
          }
        },
        wf::edges(wf::Edge<int, void>()), wf::edges(a, b), "producer");
    auto join = wf::make_tt<Key>([&](const Key&, int i, int j) { sum.fetch_add(i * n + j); }, wf::edges(a, b),
                                 wf::edges(), "join");
    auto g = wf::graph(rt, prod);
    for (int i = 0; i < n; ++i) g.invoke(i);
    g.wait();
    const long keys = static_cast<long>(n) * n;
    EXPECT_EQ(sum.load(), keys * (keys - 1) / 2) << "mode " << mode;

    std::vector<long> cells(64, 0);
    rt.run([&](weft::Context& cx) {
      for (int r = 0; r < 50; ++r)
        for (std::size_t c = 0; c < cells.size(); ++c)
          cx.spawn(
              [&cells, c](weft::Context& inner) {
                for (int k = 0; k < 4; ++k) inner.spawn([&cells, c] { cells[c] += 1; }, weft::inout(cells[c]));
              },
              weft::weak_inout(cells[c]));
    });
    for (long v : cells) EXPECT_EQ(v, 200) << "mode " << mode;
  }
}

}  // namespace
