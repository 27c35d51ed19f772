// Flow graphs across ranks (src/flow/remote.cpp) on 1 to 4 ranks with 1 or 2 workers per rank: every key's task
// runs on the rank its keymap names, exactly once; fence() returns on every rank only once the whole graph has
// terminated (checked by counting over all ranks right after it); several fences in a row need no barrier.
#include <gtest/gtest.h>
#include <weft/flow.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"

using namespace weft_mpi_test;

namespace {

weft::Options options(unsigned workers) {
  weft::Options o;
  o.num_threads = workers;
  o.comm_thread = weft::Options::from_environment().comm_thread;  // the jobs run with WEFT_COMM_THREAD=on too
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

// Large values: a 256 KiB trivially copyable value (received straight into its shared copy, sent from it) and a
// 1 MiB vector (serialized), along a chain alternating ranks; the content is checked at every hop.
struct Big {
  std::uint32_t word[64 * 1024];
};

TEST_P(Flow, LargeValuesAlternatingRanks) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const std::int64_t N = weft_test::scaled(40, 8);
  std::atomic<std::int64_t> ran{0}, wrong{0};
  weft::flow::Edge<std::int64_t, Big> fixed("fixed");
  weft::flow::Edge<std::int64_t, std::vector<std::uint64_t>> vec("vec");
  auto step = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t& k, const Big& b, const std::vector<std::uint64_t>& v, auto& out) {
        ran.fetch_add(1);
        if (static_cast<int>(k % n) != me) wrong.fetch_add(1);
        for (std::uint32_t i = 0; i < 64 * 1024; i += 61)
          if (b.word[i] != i * 3 + 1) wrong.fetch_add(1);
        if (v.size() != (std::size_t{1} << 17) + static_cast<std::size_t>(k)) wrong.fetch_add(1);
        for (std::size_t i = 0; i < v.size(); i += 97)
          if (v[i] != i + static_cast<std::uint64_t>(k)) wrong.fetch_add(1);
        if (k == N) return;
        std::vector<std::uint64_t> next(v.size() + 1);
        for (std::size_t i = 0; i < next.size(); ++i) next[i] = i + static_cast<std::uint64_t>(k + 1);
        weft::flow::send<0>(k + 1, b, out);  // forwarded as received
        weft::flow::send<1>(k + 1, std::move(next), out);
      },
      weft::flow::edges(fixed, vec), weft::flow::edges(fixed, vec), "step");
  step->set_keymap([n](const std::int64_t& k) { return static_cast<int>(k % n); });
  auto g = weft::flow::graph(rt, step);
  if (me == 0) {
    auto b = std::make_unique<Big>();
    for (std::uint32_t i = 0; i < 64 * 1024; ++i) b->word[i] = i * 3 + 1;
    std::vector<std::uint64_t> v(std::size_t{1} << 17);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = i;
    step->invoke(0, *b, std::move(v));
  }
  g.fence();
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(N + 1));
  EXPECT_EQ(wrong.load(), 0);
}

// Large messages reuse their byte buffers (MessageBuffers, flow_core.hpp): an encoding goes into a buffer that
// last held a longer or a shorter message, sent or received. Values whose sizes grow and shrink from hop to hop
// (around the rendezvous threshold and the smallest buffer kept) each arrive exactly as sent: a string (encoded
// by cereal, received into a kept buffer and decoded), and a large fixed value sent from the body's own variable
// (copied into a kept buffer).
TEST_P(Flow, LargeValuesOfChangingSizes) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const std::int64_t N = weft_test::scaled(36, 12);
  constexpr std::size_t kSizes[] = {std::size_t{1} << 20, 3000, (std::size_t{1} << 18) + 7, std::size_t{1} << 21,
                                    5, std::size_t{1} << 19, 70000};
  auto text = [&](std::int64_t k) {
    std::string t(kSizes[static_cast<std::size_t>(k) % std::size(kSizes)], ' ');
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<char>('a' + (i * 7 + static_cast<std::size_t>(k)) % 26);
    return t;
  };
  std::atomic<std::int64_t> ran{0}, wrong{0};
  weft::flow::Edge<std::int64_t, Big> fixed("fixed");
  weft::flow::Edge<std::int64_t, std::string> str("str");
  auto step = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t& k, const Big& b, const std::string& t, auto& out) {
        ran.fetch_add(1);
        const auto kk = static_cast<std::uint32_t>(k);
        for (std::uint32_t i = 0; i < 64 * 1024; ++i)
          if (b.word[i] != i * 5 + kk) {
            wrong.fetch_add(1);
            break;
          }
        if (t != text(k)) wrong.fetch_add(1);
        if (k == N) return;
        auto next_b = std::make_unique<Big>();
        for (std::uint32_t i = 0; i < 64 * 1024; ++i) next_b->word[i] = i * 5 + kk + 1;
        const std::string next = text(k + 1);
        weft::flow::send<0>(k + 1, *next_b, out);  // an lvalue: copied before send returns
        next_b.reset();
        weft::flow::send<1>(k + 1, next, out);
      },
      weft::flow::edges(fixed, str), weft::flow::edges(fixed, str), "step");
  step->set_keymap([n](const std::int64_t& k) { return static_cast<int>(k % n); });
  auto g = weft::flow::graph(rt, step);
  if (me == 0) {
    auto b = std::make_unique<Big>();
    for (std::uint32_t i = 0; i < 64 * 1024; ++i) b->word[i] = i * 5;
    step->invoke(0, *b, text(0));
  }
  g.fence();
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(N + 1));
  EXPECT_EQ(wrong.load(), 0);
}

// Keys and values that are not trivially copyable (strings, a map), serialized; the default keymap (a hash of
// the string) spreads the keys.
TEST_P(Flow, SerializedKeysAndValues) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const int N = static_cast<int>(weft_test::scaled(300, 50));
  std::atomic<int> ran{0}, wrong{0}, misplaced{0};
  using Value = std::map<std::string, std::vector<int>>;
  weft::flow::Edge<std::string, Value> e("e");
  auto step = weft::flow::make_tt<std::string>(
      [&](const std::string& k, const Value& v, auto& out) {
        ran.fetch_add(1);
        if (static_cast<int>(std::hash<std::string>{}(k) % static_cast<std::size_t>(n)) != me) misplaced.fetch_add(1);
        const int i = std::stoi(k.substr(4));
        if (v.size() != 1 || v.begin()->first != k || v.begin()->second != std::vector<int>(i % 5, i)) wrong.fetch_add(1);
        if (i == N) return;
        const std::string next = "key-" + std::to_string(i + 1);
        weft::flow::send<0>(next, Value{{next, std::vector<int>((i + 1) % 5, i + 1)}}, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "step");
  auto g = weft::flow::graph(rt, step);
  if (me == n - 1) step->invoke(std::string("key-0"), Value{{"key-0", {}}});
  g.fence();
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(N + 1));
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(misplaced.load(), 0);
}

// A broadcast to keys on every rank (several per rank, some twice through two broadcasts): every key gets the
// value once per broadcast, on its owner; an aggregator on rank 0 collects one value per key.
TEST_P(Flow, BroadcastToEveryRank) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const int K = 4 * n + 3;
  std::atomic<int> wrong{0};
  std::atomic<std::int64_t> total{-1};
  weft::flow::Edge<int, std::vector<int>> fan("fan");
  weft::flow::Edge<int, void> fanc("fan-control");
  weft::flow::Edge<int, int> up("up");
  weft::flow::Edge<int, void> start("start");
  auto src = weft::flow::make_tt<int>(
      [&](const int&, auto& out) {
        std::vector<int> keys(K);
        for (int k = 0; k < K; ++k) keys[k] = k;
        weft::flow::broadcast<0>(keys, std::vector<int>{7, 8, 9}, out);
        weft::flow::broadcastk<1>(keys, out);
      },
      weft::flow::edges(start), weft::flow::edges(fan, fanc), "source");
  auto leaf = weft::flow::make_tt<int>(
      [&](const int& k, const std::vector<int>& v, auto& out) {
        if (k % n != me || v != std::vector<int>{7, 8, 9}) wrong.fetch_add(1);
        weft::flow::send<0>(0, k + 1, out);
      },
      weft::flow::edges(fan, fanc), weft::flow::edges(up), "leaf");
  leaf->set_keymap([n](const int& k) { return k % n; });
  auto sum = weft::flow::make_tt<int>(
      [&](const int&, const weft::flow::Aggregator<int>& vals) {
        std::int64_t s = 0;
        for (int v : vals) s += v;
        total.store(s);
      },
      weft::flow::edges(weft::flow::make_aggregator(up, static_cast<std::size_t>(K))), weft::flow::edges(), "sum");
  sum->set_keymap([](const int&) { return 0; });
  src->set_keymap([n](const int&) { return n - 1; });
  auto g = weft::flow::graph(rt, src);
  if (me == 0) src->invoke(0);  // seeded on rank 0, runs on rank n - 1
  g.wait();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(total.load(), me == 0 ? static_cast<std::int64_t>(K) * (K + 1) / 2 : -1);
}

// broadcast<0, 1>: one value to keys of two template tasks with different keymaps (several keys per rank on one
// terminal, a single key on the other), and broadcastk<2, 3> on two control terminals: every key's task runs
// once, on its owner, with the value.
TEST_P(Flow, BroadcastToSeveralTerminalsAcrossRanks) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const int K = 3 * n + 1;
  std::atomic<int> wrong{0}, ran{0};
  std::atomic<std::int64_t> keysum{0};
  weft::flow::Edge<int, std::vector<int>> a("a"), b("b");
  weft::flow::Edge<int, void> ca("ca"), cb("cb");
  weft::flow::Edge<int, void> start("start");
  auto src = weft::flow::make_tt<int>(
      [&](const int&, auto& out) {
        std::vector<int> keys(K);
        for (int k = 0; k < K; ++k) keys[k] = k;
        weft::flow::broadcast<0, 1>(std::make_tuple(keys, 1000 + n - 1), std::vector<int>{7, 8, 9}, out);
        weft::flow::broadcastk<2, 3>(std::make_tuple(1000, keys), out);
      },
      weft::flow::edges(start), weft::flow::edges(a, b, ca, cb), "source");
  auto leaf = [&](auto keymap, const char* name, auto& edge) {
    auto tt = weft::flow::make_tt<int>(
        [&, keymap](const int& k, const std::vector<int>& v) {
          if (keymap(k) != me || v != std::vector<int>{7, 8, 9}) wrong.fetch_add(1);
          ran.fetch_add(1);
          keysum.fetch_add(k);
        },
        weft::flow::edges(edge), weft::flow::edges(), name);
    tt->set_keymap(keymap);
    return tt;
  };
  auto control = [&](auto keymap, const char* name, auto& edge) {
    auto tt = weft::flow::make_tt<int>(
        [&, keymap](const int& k) {
          if (keymap(k) != me) wrong.fetch_add(1);
          ran.fetch_add(1);
          keysum.fetch_add(k);
        },
        weft::flow::edges(edge), weft::flow::edges(), name);
    tt->set_keymap(keymap);
    return tt;
  };
  auto by_mod = [n](const int& k) { return k % n; };
  auto reversed = [n](const int& k) { return n - 1 - k % n; };
  auto la = leaf(by_mod, "leaf-a", a);
  auto lb = leaf(reversed, "leaf-b", b);
  auto lca = control(by_mod, "control-a", ca);
  auto lcb = control(reversed, "control-b", cb);
  src->set_keymap([n](const int&) { return n - 1; });
  auto g = weft::flow::graph(rt, src);
  if (me == 0) src->invoke(0);  // seeded on rank 0, runs on rank n - 1
  g.wait();
  EXPECT_EQ(wrong.load(), 0);
  const std::int64_t keys = static_cast<std::int64_t>(K) * (K - 1) / 2;
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(2 * K + 2));
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(keysum.load())),
            static_cast<std::uint64_t>(2 * keys + 1000 + n - 1 + 1000));
}

// Runs the graph of `src` (on rank n - 1, seeded there) to its end with four consumers on keymap k % n: of `a`,
// of `b` and two of `c`. Each counts its tasks in `ran` and a value that `ok` refuses, or a key on another rank,
// in `wrong`.
template <class V, class Src, class Ok>
void run_with_four_leaves(weft::Runtime& rt, Src& src, weft::flow::Edge<int, V>& a, weft::flow::Edge<int, V>& b,
                          weft::flow::Edge<int, V>& c, Ok ok, std::atomic<int>& ran, std::atomic<int>& wrong) {
  const int me = world_rank(), n = world_size();
  auto leaf = [&](const char* name, auto& edge) {
    auto tt = weft::flow::make_tt<int>(
        [&, me, n](const int& k, const V& v) {
          if (k % n != me || !ok(v)) wrong.fetch_add(1);
          ran.fetch_add(1);
        },
        weft::flow::edges(edge), weft::flow::edges(), name);
    tt->set_keymap([n](const int& k) { return k % n; });
    return tt;
  };
  auto la = leaf("leaf-a", a), lb = leaf("leaf-b", b), lc1 = leaf("leaf-c1", c), lc2 = leaf("leaf-c2", c);
  src->set_keymap([n](const int&) { return n - 1; });
  auto g = weft::flow::graph(rt, src);
  if (me == n - 1) src->invoke(0);
  g.wait();
}

// One value for the keys of two terminals (broadcast<0, 1>) and of an edge that two template tasks take as input
// (broadcast<2>), on every rank: each other rank gets one message with the value, whichever terminals and
// template tasks its keys belong to. Checked by the bytes the source's rank sent: about one value per other
// rank (four without the shared messages). V: a fixed value (sent from its shared copy) or a serialized one;
// small (in the transport's aggregation buffers) or 256 KiB (a rendezvous, received into its shared copy).
template <class V>
void broadcast_one_message_per_rank(unsigned workers, V value, std::size_t value_bytes) {
  weft::Options o = options(workers);
  o.profile.enabled = true;
  weft::Runtime rt(o);
  const int me = world_rank(), n = world_size();
  const int K = 3 * n;
  std::atomic<int> wrong{0}, ran{0};
  weft::flow::Edge<int, V> a("a"), b("b"), c("c");
  weft::flow::Edge<int, void> start("start");
  auto src = weft::flow::make_tt<int>(
      [&](const int&, auto& out) {
        std::vector<int> keys(K);
        for (int k = 0; k < K; ++k) keys[k] = k;
        weft::flow::broadcast<0, 1>(std::make_tuple(keys, keys), value, out);
        weft::flow::broadcast<2>(keys, value, out);
      },
      weft::flow::edges(start), weft::flow::edges(a, b, c), "source");
  run_with_four_leaves(rt, src, a, b, c, [&](const V& v) { return v == value; }, ran, wrong);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(4 * K));
  if (me == n - 1 && n > 1) {
    std::uint64_t sent = 0;
    for (const weft::CounterSection& sec : rt.profile().counters)
      if (sec.name == "transport")
        for (const weft::Counter& c : sec.counters)
          if (c.name == "bytes_sent") sent = c.count;
    const std::uint64_t others = static_cast<std::uint64_t>(n - 1);
    // broadcast<0, 1>: one message per rank; broadcast<2> to the two consumers of one edge: one more.
    EXPECT_GE(sent, 2 * others * value_bytes);
    EXPECT_LT(sent, 3 * others * value_bytes) << "a value sent more than once per broadcast and rank";
  }
}

TEST_P(Flow, BroadcastSendsOneMessagePerRankFixedSmall) {
  std::array<double, 128> v;
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5 * static_cast<double>(i);
  broadcast_one_message_per_rank(GetParam(), v, sizeof v);
}

TEST_P(Flow, BroadcastSendsOneMessagePerRankFixedLarge) {
  auto v = std::make_unique<std::array<double, 32768>>();
  for (std::size_t i = 0; i < v->size(); ++i) (*v)[i] = 0.25 * static_cast<double>(i);
  broadcast_one_message_per_rank(GetParam(), *v, sizeof *v);
}

TEST_P(Flow, BroadcastSendsOneMessagePerRankSerialized) {
  std::vector<double> v(512);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) - 3.0;
  broadcast_one_message_per_rank(GetParam(), v, v.size() * sizeof(double));
}

TEST_P(Flow, BroadcastSendsOneMessagePerRankSerializedLarge) {
  std::vector<double> v(32768);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * 2.0;
  broadcast_one_message_per_rank(GetParam(), v, v.size() * sizeof(double));
}

// Rvalues sent to other ranks (documented in flow.hpp): a vector of fixed elements large enough for a rendezvous
// is moved into the shared copy that MPI sends from (the caller's is left empty); a small one is read, and the
// caller keeps it. To keys on this rank too, their shared copy is moved from it, and the other ranks still get
// the value. Through broadcast<0, 1> over two terminals, a send to an edge that two template tasks consume, and
// a send to an edge of one consumer.
TEST_P(Flow, RvaluesSentToOtherRanks) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const int K = 3 * n;
  std::atomic<int> wrong{0}, ran{0};
  weft::flow::Edge<int, std::vector<int>> a("a"), b("b"), c("c");
  weft::flow::Edge<int, void> start("start");
  const auto expected = [](int k) { return std::vector<int>(k % 2 ? 20000 : 7, k % 2 ? 5 : 6); };
  auto src = weft::flow::make_tt<int>(
      [&](const int&, auto& out) {
        std::vector<int> all, others;
        for (int k = 0; k < K; ++k) {
          all.push_back(k);
          if (k % n != me) others.push_back(k);
        }
        for (int odd : {0, 1}) {
          const std::vector<int> v = expected(odd);
          // After a send to keys all elsewhere (one rank: to no key at all, which may leave anything).
          const auto left_as_documented = [&](const std::vector<int>& m) {
            return n == 1 || (odd ? m.empty() : m == v);
          };
          std::vector<int> mine = v;
          weft::flow::broadcast<0, 1>(std::make_tuple(others, others), std::move(mine), out);
          if (!left_as_documented(mine)) wrong.fetch_add(1);
          for (int k : others) {
            mine = v;
            weft::flow::send<2>(k, std::move(mine), out);
            if (!left_as_documented(mine)) wrong.fetch_add(1);
            mine = v;
            weft::flow::send<0>(k, std::move(mine), out);
            if (!left_as_documented(mine)) wrong.fetch_add(1);
          }
          mine = v;
          weft::flow::broadcast<0, 1>(std::make_tuple(all, all), std::move(mine), out);
          weft::flow::send<2>(me, std::vector<int>(v), out);
        }
      },
      weft::flow::edges(start), weft::flow::edges(a, b, c), "source");
  run_with_four_leaves(
      rt, src, a, b, c, [&](const std::vector<int>& v) { return v == expected(0) || v == expected(1); }, ran, wrong);
  EXPECT_EQ(wrong.load(), 0);
  // Per vector: 2 (K - 3) + 2 (K - 3) + (K - 3) to keys elsewhere (three keys per rank), 2 K to all keys, 2 here.
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(2 * (7 * K - 13)));
}

// Many tiny messages: every rank sends values to keys spread over all ranks (10^5 in all at full scale).
TEST_P(Flow, ManyTinyMessages) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const std::int64_t per_rank = static_cast<std::int64_t>(weft_test::scaled(100000, 10000)) / n;
  std::atomic<std::int64_t> ran{0}, sum{0};
  weft::flow::Edge<std::int64_t, std::int32_t> e("e");
  weft::flow::Edge<int, void> start("start");
  auto src = weft::flow::make_tt<int>(
      [&](const int& r, auto& out) {
        for (std::int64_t i = 0; i < per_rank; ++i) weft::flow::send<0>(r * per_rank + i, std::int32_t{1}, out);
      },
      weft::flow::edges(start), weft::flow::edges(e), "source");
  src->set_keymap([](const int& r) { return r; });
  auto sink = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t&, std::int32_t v) {
        ran.fetch_add(1, std::memory_order_relaxed);
        sum.fetch_add(v, std::memory_order_relaxed);
      },
      weft::flow::edges(e), weft::flow::edges(), "sink");
  auto g = weft::flow::graph(rt, src);
  src->invoke(me);
  g.fence();
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(per_rank * n));
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(sum.load())), static_cast<std::uint64_t>(per_rank * n));
}

// Ranks with no work at all: every key lives on the last rank; the others only take part in the fences.
TEST_P(Flow, RanksWithNoWork) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  std::atomic<int> ran{0};
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>(
      [&](const int& k, int v, auto& out) {
        ran.fetch_add(1);
        if (k < 100) weft::flow::send<0>(k + 1, v + 1, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "t");
  t->set_keymap([n](const int&) { return n - 1; });
  auto g = weft::flow::graph(rt, t);
  for (int f = 0; f < 3; ++f) {
    if (me == 0) t->invoke(0, 0);  // from a rank that owns nothing
    g.fence();
  }
  EXPECT_EQ(ran.load(), me == n - 1 ? 303 : 0);
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), 303u);
}

// invoke_input<J> across ranks: every rank seeds one input of keys that other ranks own (input 0 from rank
// k % n, input 1 from the next rank), and each task runs on its owner with both.
TEST_P(Flow, InvokeInputTravelsToTheOwner) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  const int keys = 60;
  std::atomic<int> ran{0}, bad{0};
  weft::flow::Edge<int, int> a("a");
  weft::flow::Edge<int, std::string> b("b");
  auto t = weft::flow::make_tt<int>(
      [&](const int& k, int x, const std::string& s) {
        ran.fetch_add(1);
        if (x != k * 3 || s != "key " + std::to_string(k) || k % n != me) bad.fetch_add(1);
      },
      weft::flow::edges(a, b), weft::flow::edges(), "pair");
  t->set_keymap([n](const int& k) { return k % n; });
  auto g = weft::flow::graph(rt, t);
  for (int k = 0; k < keys; ++k) {
    if ((k + 1) % n == me) t->invoke_input<0>(k, k * 3);
    if ((k + 2) % n == me) t->invoke_input<1>(k, "key " + std::to_string(k));
  }
  g.wait();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), static_cast<std::uint64_t>(keys));
}

// A void-key template task (a single task): without a keymap it runs on process 0; a keymap taking `const auto&`
// places it elsewhere (flow.hpp, "Template task members").
TEST_P(Flow, VoidKeyTaskPlacement) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  for (bool placed : {false, true}) {
    std::atomic<int> ran{0}, got{0};
    weft::flow::Edge<void, int> e("in");
    auto single = weft::flow::make_tt<void>(
        [&](int v) {
          ran.fetch_add(1);
          got.store(v);
        },
        weft::flow::edges(e), weft::flow::edges(), "single");
    if (placed) single->set_keymap([n](const auto&) { return n - 1; });
    auto g = weft::flow::graph(rt, single);
    if (me == 0) single->invoke(42);
    g.wait();
    const int owner = placed ? n - 1 : 0;
    EXPECT_EQ(ran.load(), me == owner ? 1 : 0) << (placed ? "with a keymap" : "default");
    if (me == owner) {
      EXPECT_EQ(got.load(), 42);
    }
    EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), 1u);
  }
}

// wait() with a task missing an input on one rank only: every rank throws, the owner naming the key.
TEST_P(Flow, WaitReportsPendingTasksOnEveryRank) {
  weft::Runtime rt(options(GetParam()));
  const int me = world_rank(), n = world_size();
  weft::flow::Edge<int, int> a("a"), b("b");
  weft::flow::Edge<int, void> go("go");
  auto src = weft::flow::make_tt<int>([](const int& k, auto& out) { weft::flow::send<0>(k, 5, out); },
                                      weft::flow::edges(go), weft::flow::edges(a), "src");
  auto join = weft::flow::make_tt<int>([](const int&, int, int) {}, weft::flow::edges(a, b), weft::flow::edges(),
                                       "join");
  src->set_keymap([](const int&) { return 0; });
  join->set_keymap([n](const int&) { return n - 1; });
  auto g = weft::flow::graph(rt, src);
  if (me == 0) src->invoke(42);  // join's key 42 gets input a only, on rank n - 1
  try {
    g.wait();
    ADD_FAILURE() << "wait() returned although a task misses an input";
  } catch (const weft::flow::error& x) {
    const std::string w = x.what();
    EXPECT_NE(w.find("1 task never received all inputs"), std::string::npos) << w;
    EXPECT_EQ(w.find("key 42") != std::string::npos, me == n - 1) << w;
  }
  EXPECT_EQ(g.pending(), 0u);
  g.wait();  // discarded: nothing pending any more, on any rank
}

INSTANTIATE_TEST_SUITE_P(Workers, Flow, testing::Values(1u, 2u));

// Ranks that build different graphs (here rank 1 names its template task differently): graph() throws on every
// rank, each message describing that rank's own graph; a graph built alike afterwards runs.
TEST(FlowTypes, DifferentGraphsOnTheRanksAreDescribed) {
  if (world_size() == 1) GTEST_SKIP() << "needs several processes";
  weft::Runtime rt(options(1));
  const int me = world_rank();
  const std::string name = me == 1 ? "stepX" : "step";
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>([](const int&, int) {}, weft::flow::edges(e), weft::flow::edges(), name);
  try {
    (void)weft::flow::graph(rt, t);
    ADD_FAILURE() << "graph() accepted ranks with different graphs";
  } catch (const weft::flow::error& x) {
    const std::string w = x.what();
    EXPECT_NE(w.find("did not build the same graph"), std::string::npos) << w;
    EXPECT_NE(w.find("rank " + std::to_string(me) + " built 1 template task: '" + name + "' (1 edge: 'e')"),
              std::string::npos)
        << w;
  }
  std::atomic<int> ran{0};
  weft::flow::Edge<int, int> e2("e2");  // (not e: graph() would collect the refused template task through it)
  auto same = weft::flow::make_tt<int>([&](const int&, int) { ran.fetch_add(1); }, weft::flow::edges(e2),
                                       weft::flow::edges(), "same");
  auto g = weft::flow::graph(rt, same);
  if (me == 0) same->invoke(7, 1);
  g.wait();
  EXPECT_EQ(sum_all(static_cast<std::uint64_t>(ran.load())), 1u);
}

// A template task whose values cannot cross processes, with the default keymap: refused by graph() on every
// rank of a job of several (with one process, it is fine).
TEST(FlowTypes, UntransferableValueRefusedByGraph) {
  weft::Runtime rt(options(1));
  weft::flow::Edge<int, std::unique_ptr<int>> e("e");
  auto t = weft::flow::make_tt<int>([](const int&, std::unique_ptr<int>) {}, weft::flow::edges(e),
                                    weft::flow::edges(), "owner");
  if (world_size() == 1) {
    EXPECT_NO_THROW((void)weft::flow::graph(rt, t));
    return;
  }
  try {
    (void)weft::flow::graph(rt, t);
    ADD_FAILURE() << "graph() accepted a move-only value type across processes";
  } catch (const weft::flow::error& x) {
    EXPECT_NE(std::string(x.what()).find("'owner'"), std::string::npos) << x.what();
    EXPECT_NE(std::string(x.what()).find("cannot cross processes"), std::string::npos) << x.what();
  }
  // With a keymap of its own the graph is accepted, and values that stay on their rank run. (A send that would
  // cross throws in the sender: on several processes that ends the job, as any error of a task or of a queued
  // invoke, see FlowFailure.QueuedInvokeThrowsOnRank1.)
  weft::flow::Edge<int, std::unique_ptr<int>> e2("e2");
  std::atomic<int> ran{0};
  auto t2 = weft::flow::make_tt<int>([&](const int&, std::unique_ptr<int> v) { ran += *v; }, weft::flow::edges(e2),
                                     weft::flow::edges(), "owner2");
  t2->set_keymap([](const int& k) { return k; });
  auto g = weft::flow::graph(rt, t2);
  const int me = world_rank();
  t2->invoke(me, std::make_unique<int>(me + 1));  // stays on this rank
  g.wait();
  EXPECT_EQ(ran.load(), me + 1);
}

// --- failure: run by tests/mpi/failure.cmake (2 ranks), skipped in the ordinary runs -----------------------

// A task that throws on rank 1 ends the whole job with a line naming the rank, the task and the exception.
TEST(FlowFailure, TaskThrowsOnRank1) {
  if (!std::getenv("WEFT_TEST_THROW")) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  weft::Runtime rt(options(1));
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>(
      [](const int& k, int v, auto& out) {
        if (k == 7) throw std::runtime_error("deliberate failure in a task");
        weft::flow::send<0>(k + 1, v, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "boom");
  t->set_keymap([](const int& k) { return k % 2; });
  auto g = weft::flow::graph(rt, t);
  if (world_rank() == 0) t->invoke(0, 0);
  g.fence();  // never returns: rank 1 ends the job
  std::fprintf(stderr, "weft: rank %d: the fence returned after a task failed on rank 1\n", world_rank());
  std::_Exit(3);
}

// An invoke() queued for the fence that throws there on rank 1 (its keymap names a process out of range): rank 1
// alone would leave the fence with the error and the ranks would part ways (rank 0's next collective met rank
// 1's teardown: an MPI error). It ends the job with a line naming rank 1, the template task and the error.
TEST(FlowFailure, QueuedInvokeThrowsOnRank1) {
  if (!std::getenv("WEFT_TEST_SEED")) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  weft::Runtime rt(options(1));
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>([](const int&, int) {}, weft::flow::edges(e), weft::flow::edges(), "seeded");
  t->set_keymap([](const int& k) { return k; });
  auto g = weft::flow::graph(rt, t);
  if (world_rank() == 1) t->invoke(5, 1);
  g.wait();  // never returns: rank 1 ends the job
  std::fprintf(stderr, "weft: rank %d: wait() returned after an invoke() failed on rank 1\n", world_rank());
  std::_Exit(3);
}

// Rank 0 makes one graph more than rank 1, which destroys its only graph and leaves: rank 0's graph() would wait
// forever for rank 1 to take part. It ends the job with a line naming rank 1.
TEST(FlowFailure, OneRankMakesAnExtraGraph) {
  if (!std::getenv("WEFT_TEST_EXTRA")) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  weft::Runtime rt(options(1));
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>([](const int&, int) {}, weft::flow::edges(e), weft::flow::edges(), "first");
  auto g = weft::flow::graph(rt, t);
  g.wait();
  if (world_rank() == 1) return;  // destroys its graph (a collective step) and its Runtime, then leaves
  weft::flow::Edge<int, int> e2("e2");
  auto t2 = weft::flow::make_tt<int>([](const int&, int) {}, weft::flow::edges(e2), weft::flow::edges(), "extra");
  auto g2 = weft::flow::graph(rt, t2);  // never returns: rank 1 will not take part
  std::fprintf(stderr, "weft: rank 0: graph() returned although rank 1 never made that graph\n");
  std::_Exit(3);
}

// A job that makes no progress: a task on rank 1 blocks (far longer than the watchdog's 2 s) while rank 0 waits
// in its fence. The watchdog prints every rank's view (rank 1's from its other worker) and ends the job. With
// WEFT_TEST_WATCHDOG=silent every rank has one worker: rank 1's blocks and cannot answer, and the line that
// ends the job names it.
TEST(FlowFailure, WatchdogEndsAStuckJob) {
  const char* mode = std::getenv("WEFT_TEST_WATCHDOG");
  if (!mode) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  weft::Options o = options(std::string(mode) == "silent" ? 1 : 2);
  o.watchdog_seconds = 2;
  weft::Runtime rt(o);
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>(
      [](const int& k, int v, auto& out) {
        if (k == 5) std::this_thread::sleep_for(std::chrono::seconds(60));
        weft::flow::send<0>(k + 1, v, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "stuck");
  t->set_keymap([](const int& k) { return k % 2; });
  auto g = weft::flow::graph(rt, t);
  if (world_rank() == 0) t->invoke(0, 0);
  g.fence();
  std::fprintf(stderr, "weft: rank %d: the fence returned although a task never ended\n", world_rank());
  std::_Exit(3);
}

// Run by tests/mpi/failure.cmake (MODE=flowleave, flowreturn): rank 1's program ends (exit(0), or a return that
// destroys the graph and the Runtime first, as returning from main does) after the first fence while rank 0
// starts a second epoch that sends to rank 1. Rank 0's fence would wait forever: rank 1's notice (of the
// graph's destruction, or of its exit; see MpiEnv::check_departures) makes rank 0 end the job with a line
// naming rank 1.
TEST(FlowFailure, RankEndsBeforeAFence) {
  const char* file = std::getenv("WEFT_TEST_LEAVE_FILE");
  if (!file) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  weft::Runtime rt(options(1));
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>(
      [](const int& k, int v, auto& out) {
        if (k < 10) weft::flow::send<0>(k + 1, v, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "hop");
  t->set_keymap([](const int& k) { return k % 2; });
  auto g = weft::flow::graph(rt, t);
  if (world_rank() == 0) t->invoke(0, 0);
  g.fence();
  if (world_rank() == 1) {
    if (FILE* f = std::fopen(file, "w")) {
      std::fprintf(f, "%lld\n", static_cast<long long>(std::time(nullptr)));
      std::fclose(f);
    }
    if (std::getenv("WEFT_TEST_RETURN")) return;  // as returning from main: the graph and Runtime are destroyed
    std::exit(0);
  }
  t->invoke(0, 0);  // rank 0 only: key 1 goes to rank 1, which has gone
  g.fence();
  std::_Exit(3);
}

// Rank 1 dies by SIGKILL inside a task, mid-graph, while rank 0 is in the fence: mpirun ends the job (the time
// of death is written first: see failure.cmake). With WEFT_TEST_EXIT0 it calls exit(0) there instead: weft
// leaves without MPI_Finalize (which would wait for rank 0, itself waiting for rank 1's part of the graph).
TEST(FlowFailure, KilledRankMidGraph) {
  const char* file = std::getenv("WEFT_TEST_KILL_FILE");
  if (!file) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  const bool exit0 = std::getenv("WEFT_TEST_EXIT0") != nullptr;
  weft::Runtime rt(options(1));
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>(
      [file, exit0](const int& k, int v, auto& out) {
        if (k == 1001) {
          if (FILE* f = std::fopen(file, "w")) {
            std::fprintf(f, "%lld\n", static_cast<long long>(std::time(nullptr)));
            std::fclose(f);
          }
          if (exit0) std::exit(0);
          std::raise(SIGKILL);
        }
        weft::flow::send<0>(k + 1, v, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "victim");
  t->set_keymap([](const int& k) { return k % 2; });
  auto g = weft::flow::graph(rt, t);
  if (world_rank() == 0) t->invoke(0, 0);
  g.fence();
  std::_Exit(3);
}

}  // namespace
