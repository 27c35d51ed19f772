// taskiter: recording and cyclic replay, unroll, while-loops (control tasks), update, replay_barrier, the barrier
// chosen for a boundary of broadcasts (and no_barrier), the taskiter as a task among siblings, nested tasks,
// exceptions, rejected uses, statistics.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
  return x ^ (x >> 29);
}

// Parameters: workers, immediate successor.
class Taskiter : public testing::TestWithParam<std::tuple<unsigned, bool>> {
 protected:
  weft::Options options() const {
    return opts(std::get<0>(GetParam()), weft::kDefaultMaxTasks, std::get<1>(GetParam()));
  }
};

// A Gauss-Seidel sweep over blocks: each task reads its neighbours and updates its block. The replayed loop
// must give exactly the sequential result (the order of conflicting accesses is the sequential one).
template <class... Clauses>
std::vector<std::uint64_t> sweep(weft::Runtime& rt, int blocks, std::uint64_t iters, Clauses... clauses) {
  std::vector<std::uint64_t> b(static_cast<std::size_t>(blocks), 1);
  rt.run([&](weft::Context& cx) {
    cx.taskiter(
        iters,
        [&](weft::Context& it) {
          for (int k = 1; k < blocks - 1; ++k) {
            std::uint64_t* p = b.data();
            it.spawn([p, k] { p[k] = mix(p[k], p[k - 1] + 3 * p[k + 1]); }, weft::in(p[k - 1]), weft::in(p[k + 1]),
                     weft::inout(p[k]));
          }
        },
        clauses...);
  });
  return b;
}
std::vector<std::uint64_t> sweep_sequential(int blocks, std::uint64_t iters) {
  std::vector<std::uint64_t> b(static_cast<std::size_t>(blocks), 1);
  for (std::uint64_t i = 0; i < iters; ++i)
    for (int k = 1; k < blocks - 1; ++k) b[k] = mix(b[k], b[k - 1] + 3 * b[k + 1]);
  return b;
}

TEST_P(Taskiter, GaussSeidelMatchesSequential) {
  weft::Runtime rt(options());
  for (std::uint64_t iters : {1u, 2u, 3u, 17u, 200u}) {
    EXPECT_EQ(sweep(rt, 9, iters), sweep_sequential(9, iters)) << iters << " iterations";
    EXPECT_EQ(sweep(rt, 9, iters, weft::replay_barrier), sweep_sequential(9, iters)) << "barrier";
  }
}

// Tasks with 12 accesses each (10 reads, 2 updates; recording keeps up to 8 per task without an allocation):
// the replayed loop gives the sequential result.
void wide_step(std::uint64_t* a, int j) {
  std::uint64_t s = 0;
  for (int m = 2; m < 12; ++m) s += a[(2 * j + m) % 16] * static_cast<std::uint64_t>(m);
  a[2 * j] = mix(a[2 * j], s);
  a[2 * j + 1] += a[2 * j];
}
TEST_P(Taskiter, WideTasksMatchSequential) {
  weft::Runtime rt(options());
  constexpr std::uint64_t kIters = 25;
  std::vector<std::uint64_t> got(16), want(16);
  for (int i = 0; i < 16; ++i) got[i] = want[i] = static_cast<std::uint64_t>(i) + 1;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(kIters, [&](weft::Context& it) {
      std::uint64_t* a = got.data();
      for (int j = 0; j < 6; ++j) {
        auto c = [&](int m) -> std::uint64_t& { return a[(2 * j + m) % 16]; };
        it.spawn([a, j] { wide_step(a, j); }, weft::in(c(2)), weft::in(c(3)), weft::in(c(4)), weft::in(c(5)),
                 weft::in(c(6)), weft::in(c(7)), weft::in(c(8)), weft::in(c(9)), weft::in(c(10)), weft::in(c(11)),
                 weft::inout(a[2 * j]), weft::inout(a[2 * j + 1]));
      }
    });
  });
  for (std::uint64_t i = 0; i < kIters; ++i)
    for (int j = 0; j < 6; ++j) wide_step(want.data(), j);
  EXPECT_EQ(got, want);
}

// Tasks with 40 accesses each (spawn_accesses): 37 reads of read-only data (some named twice) and one shared
// datum named in, then out, then in again. Those join to inout, so every task updates the shared datum and the
// tasks run in spawn order; had the reads won, the tasks would be unordered (one worker then runs the last ready
// first). Past 16 accesses a recorded task's accesses are merged through a sort by address, not a search each.
TEST_P(Taskiter, ManyAccessesNamingADatumSeveralTimesMatchSequential) {
  constexpr int kTasks = 12, kAccesses = 40, kReadOnly = 24;
  constexpr std::uint64_t kIters = 20;
  std::vector<std::uint64_t> ro(kReadOnly);
  for (int i = 0; i < kReadOnly; ++i) ro[i] = static_cast<std::uint64_t>(i) * 7 + 1;
  auto step = [&ro](std::uint64_t& c, int j) {
    std::uint64_t s = 0;
    for (int m = 0; m < kAccesses; ++m) s += ro[(j * 7 + m * 5) % kReadOnly];
    c = mix(c, s + static_cast<std::uint64_t>(j));
  };
  weft::Runtime rt(options());
  std::uint64_t got = 1, want = 1;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(kIters, [&](weft::Context& it) {
      std::vector<weft::Access> acc;
      for (int j = 0; j < kTasks; ++j) {
        acc.clear();
        for (int m = 0; m < kAccesses; ++m)
          acc.push_back(m == 5 || m == 33 ? weft::in(got)
                        : m == 20         ? weft::out(got)
                                          : weft::in(ro[(j * 7 + m * 5) % kReadOnly]));
        it.spawn_accesses([&step, &got, j] { step(got, j); }, acc.data(), acc.size());
      }
    });
  });
  for (std::uint64_t i = 0; i < kIters; ++i)
    for (int j = 0; j < kTasks; ++j) step(want, j);
  EXPECT_EQ(got, want);
}

TEST_P(Taskiter, ChainLogInSequentialOrder) {
  weft::Runtime rt(options());
  std::vector<int> log;
  long x = 0;
  const int tasks = 5, iters = 50;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(iters, [&](weft::Context& it) {
      for (int t = 0; t < tasks; ++t)
        it.spawn([&, t](weft::Context& tc) {
          log.push_back(static_cast<int>(weft::taskiter_iteration(tc)) * tasks + t);
          ++x;
        }, weft::inout(x));
    });
  });
  ASSERT_EQ(log.size(), static_cast<std::size_t>(tasks * iters));
  for (int i = 0; i < tasks * iters; ++i) ASSERT_EQ(log[i], i);
}

// Readers between writers: readers of iteration i+1 wait for the writer of i, the writer of i+1 waits for
// the readers of i+1 and (across the boundary) of i.
TEST_P(Taskiter, ReadersAndWritersAcrossIterations) {
  weft::Runtime rt(options());
  std::uint64_t x = 7;
  const int readers = 4;
  const std::uint64_t iters = 60;
  std::vector<std::uint64_t> seen(iters * 2 * readers, 0);
  rt.run([&](weft::Context& cx) {
    cx.taskiter(iters, [&](weft::Context& it) {
      for (int r = 0; r < readers; ++r)  // head readers: wait for the last writer of the previous iteration
        it.spawn([&, r](weft::Context& tc) { seen[weft::taskiter_iteration(tc) * 2 * readers + r] = x; },
                 weft::in(x));
      it.spawn([&](weft::Context&) { x = mix(x, 1); }, weft::inout(x));
      for (int r = 0; r < readers; ++r)  // tail readers: the next first writer waits for them
        it.spawn([&, r](weft::Context& tc) { seen[weft::taskiter_iteration(tc) * 2 * readers + readers + r] = x; },
                 weft::in(x));
    });
  });
  std::uint64_t y = 7;
  for (std::uint64_t i = 0; i < iters; ++i) {
    for (int r = 0; r < readers; ++r) ASSERT_EQ(seen[i * 2 * readers + r], y) << i;
    y = mix(y, 1);
    for (int r = 0; r < readers; ++r) ASSERT_EQ(seen[i * 2 * readers + readers + r], y) << i;
  }
  EXPECT_EQ(x, y);
}

// A task whose data nobody writes (or that has no access) still runs its iterations one after the other.
TEST_P(Taskiter, ReadOnlyTaskInstancesDoNotOverlap) {
  weft::Runtime rt(options());
  const int c = 0;
  std::atomic<int> inside[3] = {};
  std::atomic<bool> overlap{false};
  int runs[3] = {};
  rt.run([&](weft::Context& cx) {
    cx.taskiter(100, [&](weft::Context& it) {
      auto body = [&](int t) {
        return [&, t] {
          if (inside[t].fetch_add(1) != 0) overlap = true;
          ++runs[t];  // only this task touches it: safe iff its instances do not overlap
          busy_for_us(20);
          inside[t].fetch_sub(1);
        };
      };
      it.spawn(body(0), weft::in(c));
      it.spawn(body(1));
      it.spawn(body(2), weft::in(c));
    });
  });
  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(runs[0] + runs[1] + runs[2], 300);
}

// No barrier: with two workers, a task of iteration 1 runs while an independent task of iteration 0 is still
// running; with replay_barrier it cannot. weft::update has no barrier either (fixed trip count): the body runs
// again for iteration 1 while iteration 0 runs, and a1 starts as soon as its carrier is delivered.
TEST(TaskiterConcurrent, IterationsOverlapWithoutBarrier) {
  enum Mode { pipelined, barrier, update, update_barrier };
  for (Mode mode : {pipelined, barrier, update, update_barrier}) {
    const bool has_barrier = mode == barrier || mode == update_barrier;
    const bool refreshed = mode == update || mode == update_barrier;
    weft::Runtime rt(opts(2));
    int a = 0, b = 0;
    std::atomic<bool> a1_ran{false};
    bool overlapped = false;
    auto body = [&](weft::Context& it, std::uint64_t i) {
      it.spawn([&, i](weft::Context& tc) {
        // (update: the captured i is refreshed too)
        if (weft::taskiter_iteration(tc) == 1 && (i == 1 || !refreshed)) a1_ran = true;
      }, weft::inout(a));
      it.spawn([&](weft::Context& tc) {
        if (weft::taskiter_iteration(tc) == 0)
          // With the barrier, a1 cannot run: the short wait only ends the test sooner (a false negative at worst).
          overlapped = spin_until([&] { return a1_ran.load(); },
                                  has_barrier ? std::chrono::nanoseconds(std::chrono::milliseconds(100)) : kLongWait);
      }, weft::inout(b));
    };
    rt.run([&](weft::Context& cx) {
      if (mode == barrier)
        cx.taskiter(3, body, weft::replay_barrier);
      else if (mode == update)
        cx.taskiter(3, body, weft::update);
      else if (mode == update_barrier)
        cx.taskiter(3, body, weft::update, weft::replay_barrier);
      else
        cx.taskiter(3, body);
    });
    EXPECT_EQ(overlapped, !has_barrier) << "mode " << mode;
  }
}

// The first iteration runs while the body records it: with two workers, a task the body has spawned runs
// while the body still waits for it (before, nothing ran until the whole body had been recorded). In every
// mode: pipelined, replay_barrier, update (whose body runs again every iteration; it waits only the first time).
TEST(TaskiterConcurrent, FirstIterationRunsWhileRecorded) {
  enum Mode { pipelined, barrier, update };
  for (Mode mode : {pipelined, barrier, update}) {
    weft::Runtime rt(opts(2));
    std::atomic<bool> ran{false};
    bool seen_by_body = false;
    long a = 0;
    auto body = [&](weft::Context& it, std::uint64_t i) {
      it.spawn([&] {
        ++a;
        ran = true;
      }, weft::inout(a));
      if (i == 0) seen_by_body = spin_until([&] { return ran.load(); });
      it.spawn([&] { a *= 3; }, weft::inout(a));
    };
    rt.run([&](weft::Context& cx) {
      if (mode == pipelined)
        cx.taskiter(4, body);
      else if (mode == barrier)
        cx.taskiter(4, body, weft::replay_barrier);
      else
        cx.taskiter(4, body, weft::update);
    });
    EXPECT_TRUE(seen_by_body) << "mode " << mode;
    EXPECT_EQ(a, ((((1) * 3 + 1) * 3 + 1) * 3 + 1) * 3) << "mode " << mode;
  }
}

// The first period's instances hand their cross edges to the second period either when they finish (after
// the graph was closed) or, having finished earlier, through the driver that closes it. Here the early tasks
// of each copy finish while the body still records and the last ones only once it has returned, so both
// happen in one loop; the result must be the sequential one.
TEST_P(Taskiter, FirstPeriodFinishesBeforeAndAfterTheGraphCloses) {
  weft::Runtime rt(options());
  const bool several = std::get<0>(GetParam()) > 1;
  for (unsigned k : {1u, 3u}) {
    static constexpr int kBlocks = 12;
    std::vector<std::uint64_t> b(kBlocks, 1), ref(kBlocks, 1);
    std::atomic<bool> recorded{false};
    rt.run([&](weft::Context& cx) {
      cx.taskiter(7, [&](weft::Context& it) {
        std::uint64_t* p = b.data();
        for (int j = 1; j < kBlocks - 1; ++j)
          it.spawn([&recorded, p, j, several](weft::Context& tc) {
            // Late ones wait for the end of the recording (with one worker nothing runs before it anyway).
            if (several && j > kBlocks / 2 && weft::taskiter_iteration(tc) == 0)
              spin_until([&] { return recorded.load(); });
            p[j] = mix(p[j], p[j - 1] + 3 * p[j + 1]);
          }, weft::in(p[j - 1]), weft::in(p[j + 1]), weft::inout(p[j]));
        if (several) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // early ones finish meanwhile
        recorded = true;
      }, weft::unroll(k));
    });
    for (int i = 0; i < 7; ++i)
      for (int j = 1; j < kBlocks - 1; ++j) ref[j] = mix(ref[j], ref[j - 1] + 3 * ref[j + 1]);
    EXPECT_EQ(b, ref) << "k=" << k;
  }
}

// unroll(2): the task pattern alternates between even and odd iterations (double buffering); n odd.
TEST_P(Taskiter, UnrollAlternatingBuffers) {
  weft::Runtime rt(options());
  for (std::uint64_t n : {1u, 2u, 7u, 40u}) {
    for (unsigned k : {2u, 4u}) {  // unroll(1) would replay the even pattern only
      std::uint64_t buf[2] = {3, 0};
      std::uint64_t steps = 0;
      rt.run([&](weft::Context& cx) {
        cx.taskiter(n, [&](weft::Context& it, std::uint64_t i) {
          const int src = static_cast<int>(i % 2), dst = 1 - src;
          it.spawn([&buf, &steps, src, dst] { buf[dst] = mix(buf[src], steps++); }, weft::in(buf[src]),
                   weft::out(buf[dst]), weft::inout(steps));
        }, weft::unroll(k));
      });
      std::uint64_t s[2] = {3, 0}, st = 0;
      for (std::uint64_t i = 0; i < n; ++i) s[1 - i % 2] = mix(s[i % 2], st++);
      EXPECT_EQ(steps, n) << "n=" << n << " k=" << k;
      EXPECT_EQ(buf[n % 2], s[n % 2]) << "n=" << n << " k=" << k;
    }
  }
}

// taskiter_while with unroll(1) runs exactly as `while (cond()) body()`, cond seeing every earlier task.
TEST_P(Taskiter, WhileLoopExactTripCount) {
  weft::Runtime rt(options());
  for (bool barrier : {false, true}) {
    long x = 0, y = 0;
    int checks = 0;
    rt.run([&](weft::Context& cx) {
      auto cond = [&] {
        ++checks;
        return x < 25;
      };
      auto body = [&](weft::Context& it) {
        it.spawn([&] { ++x; }, weft::inout(x));
        it.spawn([&] { y += x; }, weft::in(x), weft::inout(y));
      };
      if (barrier)
        cx.taskiter_while(cond, body, weft::replay_barrier);
      else
        cx.taskiter_while(cond, body);
    });
    EXPECT_EQ(x, 25);
    EXPECT_EQ(y, 25 * 26 / 2);
    EXPECT_EQ(checks, 26);
  }
}

// Strided control with unroll(k): at most k-1 iterations beyond the sequential trip count.
TEST_P(Taskiter, WhileLoopUnrolledOvershootsLessThanK) {
  weft::Runtime rt(options());
  for (unsigned k : {2u, 3u}) {
    for (long limit : {0L, 1L, 5L, 12L}) {
      // Atomic: under unroll(k) cond() runs while the next iterations' tasks may run (documented).
      std::atomic<long> x{0};
      rt.run([&](weft::Context& cx) {
        cx.taskiter_while([&] { return x.load(std::memory_order_relaxed) < limit; },
                          [&](weft::Context& it) {
                            it.spawn([&] { x.fetch_add(1, std::memory_order_relaxed); }, weft::inout(x));
                          },
                          weft::unroll(k));
      });
      EXPECT_GE(x, limit) << "k=" << k;
      EXPECT_LT(x, std::max(limit, 1L) + static_cast<long>(k)) << "k=" << k;
      if (limit == 0) {
        EXPECT_EQ(x, 0);
      }
    }
  }
}

// update: the body runs every iteration and refreshes what the tasks captured.
TEST_P(Taskiter, UpdateRefreshesCapturedValues) {
  weft::Runtime rt(options());
  for (unsigned k : {1u, 2u}) {
    std::uint64_t acc = 1;
    std::vector<std::uint64_t> order;
    const std::uint64_t n = 13;
    rt.run([&](weft::Context& cx) {
      cx.taskiter(n, [&](weft::Context& it, std::uint64_t i) {
        const std::uint64_t a = i * 10 + 1, b = i * i;  // by value: refreshed each iteration
        it.spawn([&acc, &order, a] { acc = mix(acc, a); order.push_back(a); }, weft::inout(acc));
        it.spawn([&acc, b] { acc = mix(acc, b); }, weft::inout(acc));
      }, weft::update, weft::unroll(k));
    });
    std::uint64_t want = 1;
    for (std::uint64_t i = 0; i < n; ++i) want = mix(mix(want, i * 10 + 1), i * i);
    EXPECT_EQ(acc, want) << "k=" << k;
    ASSERT_EQ(order.size(), n);
    for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(order[i], i * 10 + 1);
  }
}

// update without a barrier, over many periods: each iteration's tasks capture values of that iteration, a
// 1-D stencil of blocks (each block reads its neighbours of the previous step) with independent side chains,
// so that instances of consecutive periods overlap and every carrier slot is refilled many times. Checked
// against the sequential loop, element by element; with unroll(4), a trip count that leaves a partial last
// period (its skipped copies run no body).
TEST_P(Taskiter, UpdateWithoutBarrierMatchesSequentialOverManyPeriods) {
  weft::Runtime rt(options());
  constexpr int kBlocks = 6;
  for (unsigned k : {2u, 4u}) {  // the pattern repeats every 2 iterations (double buffer)
    const std::uint64_t n = 2 * weft_test::scaled(200, 20) + (k == 4 ? 1 : 0);
    using Row = std::array<std::uint64_t, kBlocks>;
    Row got, want, side, want_side, next;
    want.fill(1);
    side.fill(7);
    want_side.fill(7);
    auto step = [&](Row& v, Row& sd, std::uint64_t i) {
      for (int b = 0; b < kBlocks; ++b)
        next[b] = mix(mix(v[b], b > 0 ? v[b - 1] : 0), mix(b + 1 < kBlocks ? v[b + 1] : 0, i * 31 + b));
      v = next;
      for (int b = 0; b < kBlocks; ++b) sd[b] = mix(sd[b], i ^ static_cast<std::uint64_t>(b));
    };
    // Double buffer: iteration i reads buf[i % 2] and writes buf[(i + 1) % 2], so its tasks depend on the
    // neighbours of the previous iteration only.
    Row buf[2];
    buf[0].fill(1);
    buf[1].fill(1);
    rt.run([&](weft::Context& cx) {
      cx.taskiter(n, [&](weft::Context& it, std::uint64_t i) {
        const int from = static_cast<int>(i & 1), to = 1 - from;
        for (int b = 0; b < kBlocks; ++b) {
          const std::uint64_t salt = i * 31 + static_cast<std::uint64_t>(b);  // by value: refreshed
          std::uint64_t* src = buf[from].data();
          std::uint64_t* dst = buf[to].data();
          const std::uint64_t* left = b > 0 ? &src[b - 1] : nullptr;
          const std::uint64_t* right = b + 1 < kBlocks ? &src[b + 1] : nullptr;
          auto task = [=] { dst[b] = mix(mix(src[b], left ? *left : 0), mix(right ? *right : 0, salt)); };
          if (left && right)
            it.spawn(task, weft::in(src[b]), weft::in(*left), weft::in(*right), weft::out(dst[b]));
          else if (left)
            it.spawn(task, weft::in(src[b]), weft::in(*left), weft::out(dst[b]));
          else
            it.spawn(task, weft::in(src[b]), weft::in(*right), weft::out(dst[b]));
          const std::uint64_t tag = i ^ static_cast<std::uint64_t>(b);
          std::uint64_t* sd = &side[b];
          it.spawn([sd, tag] { *sd = mix(*sd, tag); }, weft::inout(*sd));
        }
      }, weft::update, weft::unroll(k));
    });
    got = buf[n & 1];
    for (std::uint64_t i = 0; i < n; ++i) step(want, want_side, i);
    EXPECT_EQ(got, want) << "unroll " << k << ", n " << n;
    EXPECT_EQ(side, want_side) << "unroll " << k << ", n " << n;
  }
}

TEST_P(Taskiter, UpdateWhileLoop) {
  weft::Runtime rt(options());
  long x = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter_while([&] { return x < 100; },
                      [&](weft::Context& it, std::uint64_t i) {
                        const long step = static_cast<long>(i) + 1;
                        it.spawn([&x, step] { x += step; }, weft::inout(x));
                      },
                      weft::update);
  });
  EXPECT_EQ(x, 105);  // 1 + 2 + ... + 14
}

TEST_P(Taskiter, UpdateWithChangedGraphIsReported) {
  weft::Runtime rt(options());
  int a = 0, b = 0;
  auto expect_error = [&](auto&& body, const char* what) {
    try {
      rt.run([&](weft::Context& cx) { cx.taskiter(5, body, weft::update); });
      ADD_FAILURE() << "no error for " << what;
    } catch (const weft::taskiter_error& e) {
      EXPECT_NE(std::string(e.what()).find("update"), std::string::npos) << e.what();
    }
  };
  expect_error([&](weft::Context& it, std::uint64_t i) {
    it.spawn([&] { ++a; }, weft::inout(a));
    if (i == 3) it.spawn([&] { ++b; }, weft::inout(b));
  }, "an extra task");
  expect_error([&](weft::Context& it, std::uint64_t i) {
    if (i != 2) it.spawn([&] { ++a; }, weft::inout(a));
  }, "a missing task");
  expect_error([&](weft::Context& it, std::uint64_t i) {
    if (i < 2)
      it.spawn([&] { ++a; }, weft::inout(a));
    else
      it.spawn([&] { ++b; }, weft::inout(b));
  }, "another datum");
  expect_error([&](weft::Context& it, std::uint64_t i) {
    if (i < 2)
      it.spawn([&] { ++a; }, weft::inout(a));
    else
      it.spawn([&] { (void)a; }, weft::in(a));
  }, "another mode");
  // The runtime stays usable.
  EXPECT_EQ(sweep(rt, 6, 4), sweep_sequential(6, 4));
}

// The taskiter is a task: ordered after earlier conflicting siblings, before later ones.
TEST_P(Taskiter, OrderedAmongSiblings) {
  weft::Runtime rt(options());
  long x = 0;
  long seen_before = -1, seen_after = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] {
      busy_for_us(2000);
      x = 100;
    }, weft::out(x));
    cx.taskiter(10, [&](weft::Context& it) {
      it.spawn([&](weft::Context& tc) {
        if (weft::taskiter_iteration(tc) == 0) seen_before = x;
        ++x;
      }, weft::inout(x));
    }, weft::inout(x), weft::label("iter"));
    cx.spawn([&] { seen_after = x; }, weft::in(x));
  });
  EXPECT_EQ(seen_before, 100);
  EXPECT_EQ(seen_after, 110);
}

// Tasks spawned inside recorded tasks are ordinary: they may differ from iteration to iteration.
TEST_P(Taskiter, NestedTasksDifferPerIteration) {
  weft::Runtime rt(options());
  std::vector<long> cells(8, 0);
  long total = 0;
  const std::uint64_t n = 20;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(n, [&](weft::Context& it) {
      it.spawn([&](weft::Context& tc) {
        const auto i = weft::taskiter_iteration(tc);
        const int kids = static_cast<int>(i % 8) + 1;
        for (int c = 0; c < kids; ++c) tc.spawn([&, c, i] { cells[c] += static_cast<long>(i); }, weft::inout(cells[c]));
        tc.taskwait();
        for (int c = 0; c < kids; ++c) total += cells[c];
      }, weft::inout(cells), weft::inout(total));
    });
  });
  std::vector<long> ref(8, 0);
  long rt_total = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const int kids = static_cast<int>(i % 8) + 1;
    for (int c = 0; c < kids; ++c) ref[c] += static_cast<long>(i);
    for (int c = 0; c < kids; ++c) rt_total += ref[c];
  }
  EXPECT_EQ(cells, ref);
  EXPECT_EQ(total, rt_total);
}

TEST_P(Taskiter, NestedTaskiterInBody) {
  weft::Runtime rt(options());
  long x = 0, y = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(4, [&](weft::Context& it) {
      it.taskiter(5, [&](weft::Context& inner) { inner.spawn([&] { ++x; }, weft::inout(x)); }, weft::inout(x));
      it.spawn([&] { y += x; }, weft::in(x), weft::inout(y));
    });
  });
  EXPECT_EQ(x, 20);
  EXPECT_EQ(y, 5 + 10 + 15 + 20);
}

TEST_P(Taskiter, ExceptionStopsLoopAndPropagates) {
  weft::Runtime rt(options());
  enum Mode { pipelined, barrier, update, update_barrier };
  for (Mode mode : {pipelined, barrier, update, update_barrier}) {
    std::atomic<int> ran_after{0};
    long x = 0;
    bool caught = false;
    rt.run([&](weft::Context& cx) {
      auto body = [&](weft::Context& it) {
        it.spawn([&](weft::Context& tc) {
          const auto i = weft::taskiter_iteration(tc);
          if (i == 3) throw std::runtime_error("boom at 3");
          if (i > 3) ++ran_after;
          ++x;
        }, weft::inout(x));
      };
      if (mode == barrier)
        cx.taskiter(1000, body, weft::replay_barrier);
      else if (mode == update)
        cx.taskiter(1000, body, weft::update);
      else if (mode == update_barrier)
        cx.taskiter(1000, body, weft::update, weft::replay_barrier);
      else
        cx.taskiter(1000, body);
      try {
        cx.taskwait();
      } catch (const std::runtime_error& e) {
        caught = std::string(e.what()) == "boom at 3";
      }
    });
    EXPECT_TRUE(caught) << "mode " << mode;
    EXPECT_EQ(x, 3) << "mode " << mode;
    EXPECT_EQ(ran_after.load(), 0) << "mode " << mode;
  }
  EXPECT_EQ(sweep(rt, 6, 4), sweep_sequential(6, 4));  // still usable
}

// update: the body throws while it runs for iteration 7 (a period that is never delivered): the iterations
// before it run to the end, whatever ran ahead, and the exception propagates; none of iteration 7's tasks runs.
TEST_P(Taskiter, UpdateBodyThrowsAfterTheIterationsBeforeIt) {
  weft::Runtime rt(options());
  for (bool barrier : {false, true}) {
    for (unsigned k : {1u, 2u}) {
      long x = 0;
      std::vector<std::uint64_t> seen;
      auto body = [&](weft::Context& it, std::uint64_t i) {
        if (i == 7) throw std::length_error("body at 7");
        it.spawn([&x, &seen, i] {
          ++x;
          seen.push_back(i);
        }, weft::inout(x));
      };
      EXPECT_THROW(rt.run([&](weft::Context& cx) {
        if (barrier)
          cx.taskiter(20, body, weft::update, weft::unroll(k), weft::replay_barrier);
        else
          cx.taskiter(20, body, weft::update, weft::unroll(k));
      }), std::length_error) << "barrier " << barrier << " k " << k;
      const long want = k == 1 ? 7 : 6;  // unroll(2): iteration 7 is in the period of 6 and 7
      EXPECT_EQ(x, want) << "barrier " << barrier << " k " << k;
      ASSERT_EQ(seen.size(), static_cast<std::size_t>(want));
      for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
    }
  }
}

TEST_P(Taskiter, ExceptionInConditionOrBodyPropagates) {
  weft::Runtime rt(options());
  long x = 0;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter_while([&] {
      if (x == 4) throw std::out_of_range("cond");
      return true;
    }, [&](weft::Context& it) { it.spawn([&] { ++x; }, weft::inout(x)); });
  }), std::out_of_range);
  EXPECT_EQ(x, 4);
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) {
      it.spawn([&] { ++x; }, weft::inout(x));
      throw std::length_error("body");
    });
  }), std::length_error);
  // The task was spawned before the body threw: it may have run (as children of a task that throws may), once.
  EXPECT_GE(x, 4);
  EXPECT_LE(x, 5);
  x = 4;
  // A failed nested child fails its recorded task, which stops the loop.
  long y = 0;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter(50, [&](weft::Context& it) {
      it.spawn([&](weft::Context& tc) {
        ++y;
        if (weft::taskiter_iteration(tc) == 5) tc.spawn([] { throw std::domain_error("child"); });
      }, weft::inout(y));
    });
  }), std::domain_error);
  EXPECT_EQ(y, 6);
}

TEST_P(Taskiter, RejectedUses) {
  weft::Runtime rt(options());
  int a = 0;
  auto fails = [&](auto&& prog, const char* needle) {
    try {
      rt.run(prog);
      ADD_FAILURE() << "no taskiter_error, expected one mentioning " << needle;
    } catch (const weft::taskiter_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) { it.spawn([&] { ++a; }, weft::inoutset(a)); });
  }, "inoutset");
  fails([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) { it.spawn([&] { ++a; }, weft::commutative(a)); });
  }, "commutative");
  fails([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) { it.spawn([&] { ++a; }, weft::weak_inout(a)); });
  }, "weak_inout");
  fails([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) { it.spawn([&] { ++a; }, weft::inout(a)); }, weft::weak_in(a));
  }, "weak_in");
  fails([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) {
      it.spawn([] {}, weft::inout(a));  // (runs, as the first iteration, before the body fails)
      it.taskwait();
    });
  }, "taskwait");
  fails([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) { it.taskwait_on(a); });
  }, "taskwait_on");
  fails([&](weft::Context& cx) { cx.taskiter(3, [&](weft::Context&) {}, weft::unroll(0)); }, "unroll");
  fails([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) { it.spawn([&] { ++a; }, weft::inout(a)); }, weft::replay_barrier,
                weft::no_barrier);
  }, "contradict");
  fails([&](weft::Context& cx) { cx.taskiter_while([] { return true; }, [&](weft::Context&) {}); }, "no task");
  fails([&](weft::Context& cx) { (void)weft::taskiter_iteration(cx); }, "taskiter_iteration");
  EXPECT_EQ(a, 0);  // a rejected task never runs
}

TEST_P(Taskiter, DegenerateLoops) {
  weft::Runtime rt(options());
  int calls = 0, runs = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(0, [&](weft::Context& it) {
      ++calls;
      it.spawn([&] { ++runs; });
    });
    cx.taskiter_while([] { return false; }, [&](weft::Context& it) {
      ++calls;
      it.spawn([&] { ++runs; });
    });
  });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(runs, 0);
  rt.run([&](weft::Context& cx) {
    // Sibling taskiters run concurrently unless their accesses order them: both count in `calls`.
    cx.taskiter(5, [&](weft::Context&) { ++calls; }, weft::inout(calls));                // nothing recorded: body once
    cx.taskiter(5, [&](weft::Context&) { ++calls; }, weft::update, weft::inout(calls));  // update: every iteration
    cx.taskiter(4, [&](weft::Context& it) { it.spawn([&] { ++runs; }); });  // no access
  });
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(runs, 4);
}

// A boundary of broadcasts: every reader reads two data written once per iteration by two writers, so the cross
// edges from the writers (2 per reader, 80 in all) outnumber the tasks (42): taskiter runs it with a barrier,
// as under replay_barrier (no cross edge is made), unless weft::no_barrier. All three match the sequential loop.
// A stencil (two readers per datum) keeps its cross edges.
TEST_P(Taskiter, BroadcastBoundaryChoosesABarrier) {
  constexpr int kReaders = 40;
  constexpr std::uint64_t kIters = 6;
  enum Mode { automatic, no_barrier, replay_barrier };
  auto run = [&](Mode mode, std::uint64_t& edges) {
    weft::Runtime rt(options());
    std::uint64_t x0 = 1, x1 = 2;
    std::vector<std::uint64_t> y(kReaders, 3);
    auto body = [&](weft::Context& it) {
      for (int r = 0; r < kReaders; ++r) {
        std::uint64_t* yr = &y[static_cast<std::size_t>(r)];
        it.spawn([&x0, &x1, yr] { *yr = mix(*yr, x0 + 3 * x1); }, weft::in(x0), weft::in(x1), weft::inout(*yr));
      }
      it.spawn([&] { x0 = mix(x0, y[0]); }, weft::inout(x0), weft::in(y[0]));
      it.spawn([&] { x1 = mix(x1, y[kReaders - 1]); }, weft::inout(x1), weft::in(y[kReaders - 1]));
    };
    rt.reset_stats();
    rt.run([&](weft::Context& cx) {
      if (mode == no_barrier)
        cx.taskiter(kIters, body, weft::no_barrier);
      else if (mode == replay_barrier)
        cx.taskiter(kIters, body, weft::replay_barrier);
      else
        cx.taskiter(kIters, body);
    });
    edges = rt.stats().edges_created;
    y.push_back(x0);
    y.push_back(x1);
    return y;
  };
  std::uint64_t x0 = 1, x1 = 2;
  std::vector<std::uint64_t> expect(kReaders, 3);
  for (std::uint64_t i = 0; i < kIters; ++i) {
    for (auto& v : expect) v = mix(v, x0 + 3 * x1);
    x0 = mix(x0, expect[0]);
    x1 = mix(x1, expect[kReaders - 1]);
  }
  expect.push_back(x0);
  expect.push_back(x1);
  std::uint64_t e_auto = 0, e_none = 0, e_barrier = 0;
  EXPECT_EQ(run(automatic, e_auto), expect);
  EXPECT_EQ(run(no_barrier, e_none), expect);
  EXPECT_EQ(run(replay_barrier, e_barrier), expect);
  EXPECT_EQ(e_auto, e_barrier);                   // no cross edge: a barrier
  EXPECT_GE(e_none, e_barrier + 2 * kReaders);    // the broadcasts' cross edges

  // A stencil keeps them: the same edges with and without no_barrier.
  auto stencil_edges = [&](bool forbid_barrier) {
    weft::Runtime rt(options());
    rt.reset_stats();
    if (forbid_barrier)
      EXPECT_EQ(sweep(rt, 64, 5, weft::no_barrier), sweep_sequential(64, 5));
    else
      EXPECT_EQ(sweep(rt, 64, 5), sweep_sequential(64, 5));
    return rt.stats().edges_created;
  };
  EXPECT_EQ(stencil_edges(false), stencil_edges(true));
}

TEST_P(Taskiter, Statistics) {
  weft::Runtime rt(options());
  rt.reset_stats();
  long x = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(30, [&](weft::Context& it) {
      for (int t = 0; t < 4; ++t) it.spawn([&] { ++x; }, weft::inout(x));
    });
  });
  const weft::Stats s = rt.stats();
  EXPECT_EQ(x, 120);
  EXPECT_EQ(s.tasks_created, 5u);  // the taskiter task and its 4 recorded tasks
  EXPECT_EQ(s.tasks_executed, 121u);
}

// A loop of one iteration is not closed into a cyclic graph, but its tasks are linked as spawned ones are:
// Stats::edges_created counts its 4 edges (a count of 0 used to be reported). The same tasks spawned make as
// many, less those to a predecessor that had finished already (edges_pruned_finished: timing).
TEST_P(Taskiter, EdgesOfASingleIterationAreCounted) {
  auto chain = [](weft::Context& cx, long& x) {
    for (int t = 0; t < 5; ++t) cx.spawn([&x] { x = 2 * x + 1; }, weft::inout(x));
  };
  auto stats = [&](bool iterated) {
    weft::Runtime rt(options());
    rt.reset_stats();
    long x = 0;
    rt.run([&](weft::Context& cx) {
      if (iterated)
        cx.taskiter(1, [&](weft::Context& it) { chain(it, x); });
      else
        chain(cx, x);
    });
    EXPECT_EQ(x, 31);
    return rt.stats();
  };
  EXPECT_EQ(stats(true).edges_created, 4u);
  const weft::Stats spawned = stats(false);
  EXPECT_EQ(spawned.edges_created + spawned.edges_pruned_finished, 4u);
}

// A worker runs a chain of replayed instances without going back to its loop after each (the next instance is
// its immediate successor), but not inside a wait for something else: there, the waiting task resumes as soon
// as what it waits for has finished, as after any task. One worker, so that the order is fixed:
//  - P takes an event and returns; then the loop's driver waits for its instances, of which B is a chain;
//  - B of iteration 2 fulfils P's event, so P completes, and D (which reads what P wrote) becomes ready; its
//    priority makes it the immediate successor, before B's next instance, and it runs inside the driver's wait;
//  - D spawns c, which takes an event, and waits for its children: the next instance of B runs inside that wait
//    and fulfils c's event. D's wait is over, and D must resume there, not after the rest of B's chain.
TEST(TaskiterChain, AWaitForOtherTasksIsNotDelayedByTheChain) {
  weft::Runtime rt(opts(1));
  constexpr int kIters = 100;
  int b_runs = 0, b_runs_at_resume = -1, p_fulfilled_at = -1, c_fulfilled_at = -1;
  weft::Event p_event, c_event;
  long y = 0, z = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(kIters, [&](weft::Context& it) {
      it.spawn([&] {
        ++b_runs;
        if (b_runs >= 3 && p_fulfilled_at < 0 && p_event.pending()) {
          p_fulfilled_at = b_runs;
          p_event.fulfill();
        } else if (p_fulfilled_at >= 0 && c_fulfilled_at < 0 && c_event.pending()) {
          c_fulfilled_at = b_runs;
          c_event.fulfill();
        }
      }, weft::inout(y));
    }, weft::inout(y));
    cx.spawn([&](weft::Context& pc) { p_event = pc.event(); }, weft::out(z));
    cx.spawn([&](weft::Context& dc) {
      dc.spawn([&](weft::Context& cc) { c_event = cc.event(); });
      dc.taskwait();
      b_runs_at_resume = b_runs;
    }, weft::in(z), weft::priority(1));
  });
  EXPECT_EQ(b_runs, kIters);
  ASSERT_EQ(p_fulfilled_at, 3) << "the order this test relies on did not happen";
  ASSERT_GT(c_fulfilled_at, p_fulfilled_at) << "c's event was not fulfilled by an instance of B";
  EXPECT_EQ(b_runs_at_resume, c_fulfilled_at) << "D resumed only after more of B's chain had run";
}

INSTANTIATE_TEST_SUITE_P(Workers, Taskiter,
                         testing::Combine(testing::Values(1u, 2u, 4u), testing::Bool()),
                         [](const auto& info) {
                           char name[32];
                           std::snprintf(name, sizeof name, "w%u_%s", std::get<0>(info.param),
                                         std::get<1>(info.param) ? "is" : "nois");
                           return std::string(name);
                         });

}  // namespace
