// weft::Context::spawn_accesses, the spawn taskbench-weft uses (a run-time number of accesses per task): the
// accesses order tasks exactly as the same accesses given to spawn would.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "test_util.hpp"

TEST(SpawnAccesses, RunTimeAccessListsOrderTasks) {
  // A 1-D stencil over `width` cells and `steps` steps, double-buffered: task (t, i) reads cells i-1..i+1 of
  // generation t-1 (a run-time count: 2 at the edges, 3 inside) and writes cell i of generation t. Each cell
  // holds the step that wrote it; a task that ran too early would see an older step.
  const int width = 6, steps = static_cast<int>(weft_test::scaled(200, 20));
  for (unsigned workers : {1u, 2u}) {
    weft::Options o;
    o.num_threads = workers;
    weft::Runtime rt(o);
    std::vector<long> cells[2] = {std::vector<long>(width, -1), std::vector<long>(width, -1)};
    std::atomic<int> wrong{0};
    rt.run([&](weft::Context& cx) {
      std::vector<weft::Access> acc;
      for (int t = 0; t < steps; ++t) {
        for (int i = 0; i < width; ++i) {
          acc.clear();
          const int lo = i > 0 ? i - 1 : 0, hi = i + 1 < width ? i + 1 : width - 1;
          std::vector<long>& prev = cells[(t + 1) % 2];
          std::vector<long>& cur = cells[t % 2];
          if (t > 0)
            for (int p = lo; p <= hi; ++p) acc.push_back(weft::in(prev[p]));
          acc.push_back(weft::out(cur[i]));
          cx.spawn_accesses(
              [&, t, i, lo, hi] {
                if (t > 0)
                  for (int p = lo; p <= hi; ++p)
                    if (prev[p] != t - 1) wrong.fetch_add(1, std::memory_order_relaxed);
                cur[i] = t;
              },
              acc.data(), acc.size(), weft::priority(1), weft::label("stencil"));
        }
      }
    });
    EXPECT_EQ(wrong.load(), 0) << workers << " workers";
    for (int i = 0; i < width; ++i) EXPECT_EQ(cells[(steps - 1) % 2][i], steps - 1);
  }
}

TEST(SpawnAccesses, NoAccessesRunsAtOnce) {
  weft::Runtime rt(weft::Options{});
  int ran = 0;
  rt.run([&](weft::Context& cx) { cx.spawn_accesses([&] { ++ran; }, nullptr, 0); });
  EXPECT_EQ(ran, 1);
}
