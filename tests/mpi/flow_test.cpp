// Flow graphs across ranks (src/flow/remote.cpp) on 1 to 4 ranks with 1 or 2 workers per rank: every key's task
// runs on the rank its keymap names, exactly once; fence() returns on every rank only once the whole graph has
// terminated (checked by counting over all ranks right after it); several fences in a row need no barrier.
#include <gtest/gtest.h>
#include <weft/flow.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"

using namespace weft_mpi_test;

namespace {

weft::Options options(unsigned workers) {
  weft::Options o;
  o.num_threads = workers;
  return o;
}

struct Payload {  // a value with some bytes to it: checked at every hop
  std::int64_t key;
  double x;
  std::uint32_t check[6];
};

class Flow : public testing::TestWithParam<unsigned> {};

// A chain whose consecutive keys alternate ranks (keymap k % size): every hop crosses ranks.
TEST_P(Flow, ChainAlternatingRanks) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const std::int64_t N = weft_test::scaled(2000, 200);
  std::atomic<std::int64_t> ran{0}, wrong{0};
  std::atomic<std::int64_t> last{-1};
  weft::flow::Edge<std::int64_t, Payload> e("hop");
  auto step = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t& k, const Payload& p, auto& out) {
        ran.fetch_add(1);
        if (static_cast<int>(k % n) != me || p.key != k || p.x != 0.5 * static_cast<double>(k)) wrong.fetch_add(1);
        for (std::uint32_t i = 0; i < 6; ++i)
          if (p.check[i] != static_cast<std::uint32_t>(k) * 7 + i) wrong.fetch_add(1);
        if (k == N) {
          last.store(k);
          return;
        }
        Payload q{k + 1, 0.5 * static_cast<double>(k + 1), {}};
        for (std::uint32_t i = 0; i < 6; ++i) q.check[i] = static_cast<std::uint32_t>(k + 1) * 7 + i;
        weft::flow::send<0>(k + 1, q, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "step");
  step->set_keymap([n](const std::int64_t& k) { return static_cast<int>(k % n); });
  auto g = weft::flow::graph(rt, step);
  if (me == 0) {
    Payload p{0, 0.0, {}};
    for (std::uint32_t i = 0; i < 6; ++i) p.check[i] = i;
    g.invoke(0, p);
  }
  g.fence();
  // Everything has run everywhere once fence() returns on any rank.
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(N + 1));
  EXPECT_EQ(wrong.load(), 0);
  std::int64_t expected_here = 0;
  for (std::int64_t k = 0; k <= N; ++k) expected_here += (k % n) == me;
  EXPECT_EQ(ran.load(), expected_here);
  EXPECT_EQ(last.load() == N, static_cast<int>(N % n) == me);
  EXPECT_EQ(g.pending(), 0u);
}

// A binary tree with keys (level, index) spread over the ranks by the default keymap (hash modulo ranks):
// every key runs exactly once, on its owner; the leaves' values meet in an aggregator on rank 0.
TEST_P(Flow, BinaryTreeSpreadOverRanks) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const int depth = static_cast<int>(weft_test::scaled(10, 6));
  using Key = std::pair<int, int>;
  std::mutex m;
  std::vector<Key> seen;
  std::atomic<int> misplaced{0};
  std::atomic<std::int64_t> total{-1};
  weft::flow::Edge<Key, std::int64_t> down("down");
  weft::flow::Edge<int, std::int64_t> up("up");
  auto node = weft::flow::make_tt<Key>(
      [&](const Key& k, std::int64_t v, auto& out) {
        {
          std::lock_guard<std::mutex> g(m);
          seen.push_back(k);
        }
        if (static_cast<int>(weft::flow::Hash<Key>{}(k) % static_cast<std::size_t>(n)) != me) misplaced.fetch_add(1);
        if (k.first == depth) {
          weft::flow::send<1>(0, v, out);
        } else {
          std::vector<Key> kids{{k.first + 1, 2 * k.second}, {k.first + 1, 2 * k.second + 1}};
          weft::flow::broadcast<0>(kids, v + 1, out);
        }
      },
      weft::flow::edges(down), weft::flow::edges(down, up), "node");
  const std::size_t leaves = std::size_t{1} << depth;
  auto root = weft::flow::make_tt<int>(
      [&](const int&, const weft::flow::Aggregator<std::int64_t>& vals) {
        std::int64_t s = 0;
        for (std::int64_t v : vals) s += v;
        total.store(s);
      },
      weft::flow::edges(weft::flow::make_aggregator(up, leaves)), weft::flow::edges(), "sum");
  root->set_keymap([](const int&) { return 0; });
  auto g = weft::flow::graph(rt, node);
  if (me == n - 1) g.invoke(Key{0, 0}, std::int64_t{0});
  g.wait();
  const std::uint64_t nodes = (std::uint64_t{1} << (depth + 1)) - 1;
  EXPECT_EQ(sum_all(seen.size()), nodes);
  std::set<Key> unique(seen.begin(), seen.end());
  EXPECT_EQ(unique.size(), seen.size()) << "a key ran twice";
  EXPECT_EQ(misplaced.load(), 0);
  if (me == 0)
    EXPECT_EQ(total.load(), static_cast<std::int64_t>(leaves) * depth);
  else
    EXPECT_EQ(total.load(), -1);
}

// Several fences in a row on one graph, seeded from a different rank each time, no barrier in between: a rank
// that leaves fence f early may send fence f + 1's messages to one still in f (the detector keeps them).
TEST_P(Flow, FencesInARow) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const int fences = static_cast<int>(weft_test::scaled(20, 6));
  const std::int64_t len = 64;
  std::atomic<std::int64_t> ran{0};
  weft::flow::Edge<std::int64_t, std::int64_t> e("hop");
  auto step = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t& k, std::int64_t round, auto& out) {
        ran.fetch_add(1);
        if ((k + 1) % len != 0) weft::flow::send<0>(k + 1, round, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "step");
  auto g = weft::flow::graph(rt, step);  // default keymap: std::hash (identity) modulo ranks
  for (int f = 0; f < fences; ++f) {
    if (me == f % n) g.invoke(static_cast<std::int64_t>(f) * len, std::int64_t{f});
    g.fence();
    // The graph has terminated on every rank: the counts are final (a collective read right after).
    EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>((f + 1) * len)) << f;
  }
  // Empty fences too.
  g.fence();
  g.fence();
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(fences * len));
}

INSTANTIATE_TEST_SUITE_P(Workers, Flow, testing::Values(1u, 2u));

}  // namespace
