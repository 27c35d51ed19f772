// Randomized differential test of flow graphs: random keyed dataflow graphs run on weft with 1, 2 and 4 workers
// and compared with a sequential interpretation.
//
// Program model:
//   * template tasks T0..Tn-1 in topological order over the keys 0..K-1; every task of every template task runs
//     exactly once; T0 (and sometimes T1) are sources: one control input, invoked for every key;
//   * every other Ts has two inputs: a plain one (each key receives exactly one value) and an aggregator (each
//     key receives one or more values; its count per key comes from a callback), fed by random earlier template
//     tasks through edges;
//   * a template task has up to three output terminals, each an edge; an edge feeds one or several consumers
//     (a consumer chosen for an edge that already exists joins it); the keys a sender sends to along an edge are
//     a permutation of the keys (so every key is reached) plus, for aggregator edges, 0-2 random extra keys
//     (sent with broadcast, or with one send per key);
//   * a task computes a hash of its key, template task, plain input and the sorted aggregated values, records it
//     and sends hash(value, edge) along its edges. Values are vectors (not trivially copyable): shared copies are
//     exercised when an edge has several consumers or a broadcast several keys;
//   * random priorities (priomap) on some template tasks;
//   * the sources' tasks are invoked in 1-3 phases with a fence() between phases: tasks that received some inputs
//     in one phase wait, pending, for the rest in a later one (across runs).
// Checked: every task ran once, its value equals the sequential interpretation's.
//
// Several processes (built as tests/mpi's weft_mpi_flow_differential, WEFT_TEST_MPI): the same programs on every
// rank of an MPI job, 1 and 2 workers per rank; each template task gets a random keymap (the default hash, key
// modulo ranks, a random table, or every key on one rank), so values, broadcasts and aggregated values cross
// ranks; each source key is invoked on a rank chosen at random (its owner or not). The runs and values recorded
// on each rank are summed over the ranks before the comparison.
//
// Environment: WEFT_TEST_SCALE scales the number of programs; WEFT_FLOW_DIFF_SEED=<seed> runs one program.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#ifdef WEFT_TEST_MPI
#include <mpi.h>

#include "mpi_test_util.hpp"
#endif

namespace wf = weft::flow;

namespace {

using u64 = std::uint64_t;
using Payload = std::vector<u64>;

u64 mix(u64 x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}
u64 mix(u64 a, u64 b) { return mix(a * 0x9E3779B97F4A7C15ull + b + 1); }

Payload payload(u64 v) { return Payload(1 + v % 3, v); }  // 1-3 copies of v
u64 value_of(const Payload& p) {
  EXPECT_FALSE(p.empty());
  for (u64 x : p) EXPECT_EQ(x, p[0]);
  return p.empty() ? 0 : p[0];
}

constexpr int kTerminals = 4;  // 0, 1: plain edges; 2, 3: aggregator edges

#ifdef WEFT_TEST_MPI
int ranks() { return weft_mpi_test::world_size(); }
int my_rank() { return weft_mpi_test::world_rank(); }
#else
int ranks() { return 1; }
int my_rank() { return 0; }
#endif

struct EdgeSpec {
  int producer = 0;
  bool aggregator = false;               // feeds aggregator terminals (extra keys allowed)
  std::vector<int> perm;                 // key k sends to perm[k] ...
  std::vector<std::vector<int>> extras;  // ... and to extras[k]
  std::vector<bool> use_broadcast;       // per sender key
  std::vector<int> count;                // values each key receives
  wf::Edge<int, Payload> edge;
};

struct Program {
  u64 seed = 0;
  int n = 0, keys = 0, sources = 1;
  std::vector<std::array<int, kTerminals>> out;  // per template task and terminal: edge id or -1
  std::vector<int> plain_in, agg_in;             // per template task: edge ids (-1 for sources)
  std::vector<EdgeSpec> edges;
  std::vector<bool> has_priomap;
  int phases = 1;
  std::vector<std::vector<int>> phase;           // [source][key]: the phase that invokes it
  std::vector<std::vector<u64>> expected;        // [template task][key]
  // Several processes: per template task, the keymap (-1: the default; else a table [key] -> rank), and the
  // rank that invokes each source key.
  std::vector<std::vector<int>> keymap;
  std::vector<std::vector<int>> invoker;         // [source][key]

  std::vector<int> dests(const EdgeSpec& e, int k) const {
    std::vector<int> d{e.perm[k]};
    d.insert(d.end(), e.extras[k].begin(), e.extras[k].end());
    return d;
  }
  static u64 send_value(u64 task_value, int edge) { return mix(task_value, 1000 + u64(edge)); }
  static u64 task_value(int s, int k, u64 plain, std::vector<u64> agg) {
    std::sort(agg.begin(), agg.end());
    u64 v = mix(u64(s), u64(k) + 77) ^ mix(plain, 5);
    for (u64 a : agg) v = mix(v, a);
    return v;
  }
};

Program generate(u64 seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Program p;
  p.seed = seed;
  p.n = pick(2, 7);
  p.keys = pick(1, 40);
  p.sources = p.n > 2 ? pick(1, 2) : 1;
  p.out.assign(p.n, {-1, -1, -1, -1});
  p.plain_in.assign(p.n, -1);
  p.agg_in.assign(p.n, -1);
  p.has_priomap.resize(p.n);
  for (int s = 0; s < p.n; ++s) p.has_priomap[s] = pick(0, 3) == 0;
  // An edge of `producer` of the given kind: a new one on a free terminal, or (sometimes, or when both terminals
  // of that kind are taken) an existing one, which then gets one more consumer.
  auto edge_from = [&](int producer, bool aggregator) {
    const int t0 = aggregator ? 2 : 0;
    std::vector<int> used, free;
    for (int t = t0; t < t0 + 2; ++t) (p.out[producer][t] >= 0 ? used : free).push_back(t);
    if (!used.empty() && (free.empty() || pick(0, 2) == 0)) return p.out[producer][used[pick(0, int(used.size()) - 1)]];
    EdgeSpec e;
    e.producer = producer;
    e.aggregator = aggregator;
    e.perm.resize(p.keys);
    for (int k = 0; k < p.keys; ++k) e.perm[k] = k;
    std::shuffle(e.perm.begin(), e.perm.end(), rng);
    e.extras.resize(p.keys);
    e.use_broadcast.resize(p.keys);
    for (int k = 0; k < p.keys; ++k) {
      if (aggregator)
        for (int x = pick(0, 2); x > 0; --x) e.extras[k].push_back(pick(0, p.keys - 1));
      e.use_broadcast[k] = pick(0, 1) == 1;
    }
    e.count.assign(p.keys, 0);
    for (int k = 0; k < p.keys; ++k)
      for (int d : p.dests(e, k)) ++e.count[d];
    const int id = int(p.edges.size());
    p.edges.push_back(std::move(e));
    p.out[producer][free.front()] = id;
    return id;
  };
  for (int s = p.sources; s < p.n; ++s) {
    // The first inner template task reads from the last source and aggregates from the first: the graph is
    // connected, so graph(first source) finds every template task.
    p.plain_in[s] = edge_from(s == p.sources ? p.sources - 1 : pick(0, s - 1), false);
    p.agg_in[s] = edge_from(s == p.sources ? 0 : pick(0, s - 1), true);
  }
  const int nr = ranks();
  p.keymap.assign(p.n, {});
  for (int s = 0; s < p.n; ++s) {
    const int kind = nr > 1 ? pick(0, 3) : 0;
    if (kind == 0) continue;  // the default keymap
    p.keymap[s].resize(p.keys);
    const int one = pick(0, nr - 1);
    for (int k = 0; k < p.keys; ++k) p.keymap[s][k] = kind == 1 ? k % nr : kind == 2 ? pick(0, nr - 1) : one;
  }
  p.invoker.assign(p.sources, std::vector<int>(p.keys));
  for (auto& inv : p.invoker)
    for (int& r : inv) r = pick(0, nr - 1);
  p.phases = pick(1, 3);
  p.phase.assign(p.sources, std::vector<int>(p.keys));
  for (auto& ph : p.phase)
    for (int& x : ph) x = pick(0, p.phases - 1);
  // The sequential interpretation: template tasks in order, keys in order.
  std::vector<std::vector<u64>> plain(p.n, std::vector<u64>(p.keys));
  std::vector<std::vector<std::vector<u64>>> agg(p.n, std::vector<std::vector<u64>>(p.keys));
  p.expected.assign(p.n, std::vector<u64>(p.keys));
  for (int s = 0; s < p.n; ++s)
    for (int k = 0; k < p.keys; ++k) {
      const u64 v = s < p.sources ? Program::task_value(s, k, 0, {}) : Program::task_value(s, k, plain[s][k], agg[s][k]);
      p.expected[s][k] = v;
      for (int t = 0; t < kTerminals; ++t) {
        const int e = p.out[s][t];
        if (e < 0) continue;
        for (int c = p.sources; c < p.n; ++c)
          for (int d : p.dests(p.edges[e], k)) {
            if (p.plain_in[c] == e) plain[c][d] = Program::send_value(v, e);
            if (p.agg_in[c] == e) agg[c][d].push_back(Program::send_value(v, e));
          }
      }
    }
  return p;
}

template <std::size_t T, class Out>
void emit_on(const std::vector<int>& dests, bool use_broadcast, u64 v, Out& out) {
  if (use_broadcast) {
    wf::broadcast<T>(dests, payload(v), out);
  } else {
    for (int d : dests) wf::send<T>(d, payload(v), out);
  }
}

// What a task sends: hash(value, edge) along each of its edges.
template <class Out>
void emit(const Program& p, int s, int k, u64 v, Out& out) {
  for (int t = 0; t < kTerminals; ++t) {
    const int e = p.out[s][t];
    if (e < 0) continue;
    const EdgeSpec& es = p.edges[e];
    const std::vector<int> d = p.dests(es, k);
    const u64 sv = Program::send_value(v, e);
    switch (t) {
      case 0: emit_on<0>(d, es.use_broadcast[k], sv, out); break;
      case 1: emit_on<1>(d, es.use_broadcast[k], sv, out); break;
      case 2: emit_on<2>(d, es.use_broadcast[k], sv, out); break;
      default: emit_on<3>(d, es.use_broadcast[k], sv, out); break;
    }
  }
}

// One body type for every source, so that they can share a vector.
struct SourceBody {
  const Program* p;
  std::function<void(int, int, u64)> record;
  int s;
  template <class Out>
  void operator()(const int& k, Out& out) const {
    const u64 v = Program::task_value(s, k, 0, {});
    record(s, k, v);
    emit(*p, s, k, v, out);
  }
};

struct Results {
  explicit Results(const Program& p) : value(p.n * p.keys), runs(p.n * p.keys) {}
  std::vector<std::atomic<u64>> value;
  std::vector<std::atomic<int>> runs;
};

// Builds the program's graph on `rt`, runs it, compares with the sequential interpretation.
void run_program(Program& p, weft::Runtime& rt) {
  for (auto& e : p.edges) e.edge = wf::Edge<int, Payload>("e");  // fresh edges for this runtime's graph
  Results res(p);
  auto record = [&p, &res](int s, int k, u64 v) {
    res.value[s * p.keys + k].store(v, std::memory_order_relaxed);
    res.runs[s * p.keys + k].fetch_add(1, std::memory_order_relaxed);
  };
  auto outs = [&](int s) {
    std::array<wf::Edge<int, Payload>, kTerminals> o;
    for (int t = 0; t < kTerminals; ++t)
      if (p.out[s][t] >= 0) o[t] = p.edges[p.out[s][t]].edge;
    return wf::edges(o[0], o[1], o[2], o[3]);
  };
  auto prio = [&p](int s) {
    return [seed = p.seed, s](const int& k) { return static_cast<std::int32_t>(mix(seed + u64(s), u64(k)) % 7) - 3; };
  };
  using SourceTT = decltype(wf::make_tt<int>(SourceBody{}, wf::edges(wf::Edge<int, void>()), outs(0)));
  std::vector<SourceTT> sources;
  std::vector<std::shared_ptr<void>> inner;
  const Program& cp = p;
  for (int s = 0; s < p.n; ++s) {
    if (s < p.sources) {
      auto tt = wf::make_tt<int>(SourceBody{&cp, record, s}, wf::edges(wf::Edge<int, void>()), outs(s), "source");
      if (p.has_priomap[s]) tt->set_priomap(prio(s));
      if (!p.keymap[s].empty()) tt->set_keymap([m = p.keymap[s]](const int& k) { return m[k]; });
      sources.push_back(tt);
    } else {
      const EdgeSpec& ae = p.edges[p.agg_in[s]];
      auto tt = wf::make_tt<int>(
          [&cp, record, s](const int& k, const Payload& a, const wf::Aggregator<Payload>& b, auto& out) {
            std::vector<u64> vals;
            for (const Payload& x : b) vals.push_back(value_of(x));
            const u64 v = Program::task_value(s, k, value_of(a), vals);
            record(s, k, v);
            emit(cp, s, k, v, out);
          },
          wf::edges(p.edges[p.plain_in[s]].edge,
                    wf::make_aggregator(ae.edge, [&ae](const int& k) { return std::size_t(ae.count[k]); })),
          outs(s), "inner");
      if (p.has_priomap[s]) tt->set_priomap(prio(s));
      if (!p.keymap[s].empty()) tt->set_keymap([m = p.keymap[s]](const int& k) { return m[k]; });
      inner.push_back(tt);
    }
  }
  auto g = wf::graph(rt, sources[0]);
  ASSERT_EQ(g.size(), std::size_t(p.n)) << "seed " << p.seed;
  for (int ph = 0; ph < p.phases; ++ph) {
    for (int s = 0; s < p.sources; ++s)
      for (int k = 0; k < p.keys; ++k)
        if (p.phase[s][k] == ph && p.invoker[s][k] == my_rank()) sources[s]->invoke(k);
    if (ph + 1 < p.phases) g.fence();  // what waits for a later phase stays pending
  }
  g.wait();
#ifdef WEFT_TEST_MPI
  {  // every task ran on one rank: sums over the ranks (a value is 0 where its task did not run)
    std::vector<u64> v(res.value.size());
    std::vector<int> r(res.runs.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = res.value[i].load(), r[i] = res.runs[i].load();
    MPI_Allreduce(MPI_IN_PLACE, v.data(), int(v.size()), MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, r.data(), int(r.size()), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (std::size_t i = 0; i < v.size(); ++i) res.value[i].store(v[i]), res.runs[i].store(r[i]);
  }
#endif
  for (int s = 0; s < p.n; ++s)
    for (int k = 0; k < p.keys; ++k) {
      ASSERT_EQ(res.runs[s * p.keys + k].load(), 1) << "seed " << p.seed << " tt " << s << " key " << k;
      ASSERT_EQ(res.value[s * p.keys + k].load(), p.expected[s][k]) << "seed " << p.seed << " tt " << s << " key " << k;
    }
}

TEST(FlowDifferential, RandomGraphsMatchSequentialInterpretation) {
#ifdef WEFT_TEST_MPI
  // Ranks share the machine's cores: 1 and 2 workers per rank, fewer programs.
  // WEFT_COMM_THREAD (the jobs run with =on too): who drives MPI, the workers or a thread of its own.
  weft::Options o1 = weft_test::opts(1), o2 = weft_test::opts(2);
  o1.comm_thread = o2.comm_thread = weft::Options::from_environment().comm_thread;
  weft::Runtime rt1(o1), rt2(o2);
  const std::vector<weft::Runtime*> runtimes{&rt1, &rt2};
  const std::size_t programs = weft_test::scaled(40, 10);
#else
  weft::Runtime rt1(weft_test::opts(1)), rt2(weft_test::opts(2)), rt4(weft_test::opts(4, weft::kDefaultMaxTasks, false));
  const std::vector<weft::Runtime*> runtimes{&rt1, &rt2, &rt4};
  const std::size_t programs = weft_test::scaled(150);
#endif
  std::vector<u64> seeds;
  if (const char* e = std::getenv("WEFT_FLOW_DIFF_SEED")) {
    seeds.push_back(std::strtoull(e, nullptr, 10));
  } else {
    for (std::size_t i = 0; i < programs; ++i) seeds.push_back(0xF10Eull * 1000 + i);
  }
  for (u64 seed : seeds) {
    Program p = generate(seed);
    for (weft::Runtime* rt : runtimes) {
      run_program(p, *rt);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
