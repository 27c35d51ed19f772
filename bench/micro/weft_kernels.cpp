// weft-bench-micro — the weft kernels.
#include <weft/weft.hpp>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "kernels.hpp"

namespace wbench::weftk {

// One Runtime per worker count, created outside the timed region and kept (its threads sleep between runs).
weft::Runtime& runtime(int workers) {
  static std::map<int, std::unique_ptr<weft::Runtime>> runtimes;
  auto& rt = runtimes[workers];
  if (!rt) {
    weft::Options o = weft::Options::from_environment();
    o.num_threads = static_cast<unsigned>(workers);
    rt = std::make_unique<weft::Runtime>(o);
  }
  return *rt;
}

namespace {

template <int K>
inline void bump(Slot* s) {
  for (int j = 0; j < K; ++j) s[j].v++;
}

template <std::size_t... J>
void chain_produce(weft::Context& cx, long long n, Slot* s, std::index_sequence<J...>) {
  constexpr int K = sizeof...(J);
  for (long long i = 0; i < n; ++i) cx.spawn([s] { bump<K>(s); }, weft::inout(s[J].v)...);
  cx.taskwait();
}

struct TreeNode {
  int depth;
  std::uint64_t cycles;
  long long* out;
  void operator()(weft::Context& cx) const {
    busy_cycles(cycles);  // every task works (TTG paper, Fig. 6), then spawns its children
    if (depth == 0) {
      *out = 1;
      return;
    }
    long long l = 0, r = 0;
    cx.spawn(TreeNode{depth - 1, cycles, &l});
    cx.spawn(TreeNode{depth - 1, cycles, &r});
    cx.taskwait();
    *out = l + r;
  }
};

}  // namespace

Result chain(int deps, long long n) {
  Slot slots[kMaxDeps] = {};
  Slot* s = slots;
  weft::Runtime& rt = runtime(1);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    switch (deps) {
      case 1: chain_produce(cx, n, s, std::make_index_sequence<1>{}); break;
      case 2: chain_produce(cx, n, s, std::make_index_sequence<2>{}); break;
      case 3: chain_produce(cx, n, s, std::make_index_sequence<3>{}); break;
      case 4: chain_produce(cx, n, s, std::make_index_sequence<4>{}); break;
      case 5: chain_produce(cx, n, s, std::make_index_sequence<5>{}); break;
      case 6: chain_produce(cx, n, s, std::make_index_sequence<6>{}); break;
      default: break;
    }
  });
  const double t1 = now_s();
  if (deps < 1 || deps > kMaxDeps) return checked(t1 - t0, deps, 1);  // unsupported count: fail the check
  return chain_result(t1 - t0, slots, deps, n);
}

Result tree(int height, std::uint64_t cycles, int workers) {
  long long leaves = 0;
  weft::Runtime& rt = runtime(workers);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    cx.spawn(TreeNode{height, cycles, &leaves});
    cx.taskwait();
  });
  const double t1 = now_s();
  return checked(t1 - t0, leaves, 1LL << height);
}

Result independent(long long n, int workers) {
  std::vector<unsigned char> done(static_cast<std::size_t>(n), 0);
  unsigned char* d = done.data();
  weft::Runtime& rt = runtime(workers);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    for (long long i = 0; i < n; ++i) cx.spawn([d, i] { d[i] = 1; });
    cx.taskwait();
  });
  const double t1 = now_s();
  return independent_result(t1 - t0, done);
}

Result replay(ReplayGraph g, ReplayMode mode, long long m, long long iters, int workers) {
  std::vector<Slot> slots(g == ReplayGraph::chain ? 1 : static_cast<std::size_t>(m));
  Slot* s = slots.data();
  const bool chain = g == ReplayGraph::chain;
  // One iteration's tasks; `cx` is the loop's Context (recording under taskiter).
  auto iteration = [s, m, chain](weft::Context& cx) {
    if (chain)
      for (long long j = 0; j < m; ++j) cx.spawn([s] { s->v++; }, weft::inout(s->v));
    else
      for (long long j = 0; j < m; ++j) cx.spawn([p = &s[j]] { p->v++; }, weft::inout(s[j].v));
  };
  weft::Runtime& rt = runtime(workers);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    switch (mode) {
      case ReplayMode::tasks:
        for (long long i = 0; i < iters; ++i) iteration(cx);
        break;
      case ReplayMode::taskiter: cx.taskiter(static_cast<std::uint64_t>(iters), iteration); break;
      case ReplayMode::barrier: cx.taskiter(static_cast<std::uint64_t>(iters), iteration, weft::replay_barrier); break;
    }
  });
  const double t1 = now_s();
  long long got = 0;
  for (const Slot& x : slots) got += x.v;
  return checked(t1 - t0, got, m * iters);
}

std::string describe() {
  const weft::Options o = weft::Options::from_environment();
  return "weft (max_tasks " + std::to_string(o.max_tasks) + ", immediate_successor " +
         (o.immediate_successor ? "on" : "off") + ")";
}

}  // namespace wbench::weftk
