// weft-bench-micro — the oneTBB kernels (compiled only when find_package(TBB) found oneTBB).
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#include <oneapi/tbb/version.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "kernels.hpp"

namespace wbench::tbbk {
namespace {

// One arena per worker count (the calling thread is one of them), initialised outside the timed region.
tbb::task_arena& arena(int workers) {
  static std::map<int, std::unique_ptr<tbb::task_arena>> arenas;
  auto& a = arenas[workers];
  if (!a) {
    a = std::make_unique<tbb::task_arena>(workers);
    a->initialize();
  }
  return *a;
}

template <int K>
inline void bump(Slot* s) {
  for (int j = 0; j < K; ++j) s[j].v++;
}

using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;

template <int K>
void chain_run(long long n, long long block, Slot* s) {
  tbb::flow::graph g;
  std::vector<std::unique_ptr<Node>> nodes(static_cast<std::size_t>(block));
  for (long long done = 0; done < n;) {
    const long long m = std::min(block, n - done);
    for (long long i = 0; i < m; ++i) {
      nodes[i] = std::make_unique<Node>(g, [s](const tbb::flow::continue_msg&) {
        bump<K>(s);
        return tbb::flow::continue_msg();
      });
      if (i > 0) tbb::flow::make_edge(*nodes[i - 1], *nodes[i]);
    }
    nodes[0]->try_put(tbb::flow::continue_msg());
    g.wait_for_all();
    for (long long i = 0; i < m; ++i) nodes[i].reset();
    done += m;
  }
}

void tree_node(int depth, long long* out, std::uint64_t cycles) {
  busy_cycles(cycles);  // every task works (TTG paper, Fig. 6), then spawns its children
  if (depth == 0) {
    *out = 1;
    return;
  }
  long long l = 0, r = 0;
  tbb::task_group g;
  g.run([&] { tree_node(depth - 1, &l, cycles); });
  g.run([&] { tree_node(depth - 1, &r, cycles); });
  g.wait();
  *out = l + r;
}

}  // namespace

Result chain(int deps, long long n, long long block) {
  Slot slots[kMaxDeps] = {};
  Slot* s = slots;
  if (block < 1) block = 1;
  tbb::task_arena& a = arena(1);
  const double t0 = now_s();
  a.execute([&] {
    switch (deps) {
      case 1: chain_run<1>(n, block, s); break;
      case 2: chain_run<2>(n, block, s); break;
      case 3: chain_run<3>(n, block, s); break;
      case 4: chain_run<4>(n, block, s); break;
      case 5: chain_run<5>(n, block, s); break;
      case 6: chain_run<6>(n, block, s); break;
      default: break;
    }
  });
  const double t1 = now_s();
  if (deps < 1 || deps > kMaxDeps) return checked(t1 - t0, deps, 1);  // unsupported count: fail the check
  return chain_result(t1 - t0, slots, deps, n);
}

Result tree(int height, std::uint64_t cycles, int workers) {
  long long leaves = 0;
  tbb::task_arena& a = arena(workers);
  const double t0 = now_s();
  a.execute([&] {
    tbb::task_group g;
    g.run([&] { tree_node(height, &leaves, cycles); });
    g.wait();
  });
  const double t1 = now_s();
  return checked(t1 - t0, leaves, 1LL << height);
}

Result independent(long long n, int workers) {
  std::vector<unsigned char> done(static_cast<std::size_t>(n), 0);
  unsigned char* d = done.data();
  tbb::task_arena& a = arena(workers);
  const double t0 = now_s();
  a.execute([&] {
    tbb::task_group g;
    for (long long i = 0; i < n; ++i) g.run([d, i] { d[i] = 1; });
    g.wait();
  });
  const double t1 = now_s();
  return independent_result(t1 - t0, done);
}

void wake(int workers) {
  if (workers < 2) return;
  std::atomic<int> arrived{0};
  arena(workers).execute([&] {
    tbb::task_group g;
    for (int k = 0; k < workers; ++k) g.run([&] { rendezvous(arrived, workers); });
    g.wait();
  });
}

std::string describe() {
  return std::string("oneTBB ") + TBB_VERSION_STRING + " (runtime " + TBB_runtime_version() + ")";
}

}  // namespace wbench::tbbk
