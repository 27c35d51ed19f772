// weft-bench-micro — the weft flow-graph kernels (weft/flow.hpp), the TTG paper's benchmarks (Fig. 5, Fig. 6):
//  * chain: template task "step" of key k (0..N-1) has D input edges and sends one int along each of its D
//    output edges (the same edges) to key k + 1: each task waits for D flows from its predecessor. D = 0: one
//    control edge (sendk). Move variant: send<i>(k + 1, std::move(x), out); copy variant: send<i>(k + 1, x, out).
//  * tree: key k (from 1) busy-waits C cycles, then sends a control token to keys 2k and 2k + 1 unless it is a
//    leaf; one input edge, so no pending-task table (as in the paper).
// The timed region is Graph::wait() (seeding included); the graph is built before it.
#include <weft/weft.hpp>

#include <utility>

#include "kernels.hpp"

namespace wbench::flowk {
namespace {

namespace wf = weft::flow;

template <std::size_t>
using IntOf = int;
template <std::size_t>
using EdgeOf = wf::Edge<long, int>;

template <class Seq>
struct ChainBody;
template <std::size_t... I>
struct ChainBody<std::index_sequence<I...>> {
  long long n;
  Slot* s;
  bool copy;
  template <class Out>
  void operator()(const long& k, IntOf<I>... x, Out& out) const {
    ((s[I].v += (x == k)), ...);  // every flow carries its key: the check counts correct arrivals
    if (k + 1 < n) {
      if (copy) {
        ((x += 1), ...);
        (wf::send<I>(k + 1, x, out), ...);  // lvalues: copied
      } else {
        (wf::send<I>(k + 1, std::move(x += 1), out), ...);
      }
    }
  }
};

template <std::size_t... I>
Result chain_d(long long n, bool copy, std::index_sequence<I...> seq) {
  Slot slots[kMaxDeps] = {};
  std::tuple<EdgeOf<I>...> es;
  auto step = wf::make_tt<long>(ChainBody<decltype(seq)>{n, slots, copy}, wf::edges(std::get<I>(es)...),
                                wf::edges(std::get<I>(es)...), "step");
  auto g = wf::graph(weftk::runtime(1), step);
  const double t0 = now_s();
  g.invoke(0L, IntOf<I>(0)...);
  g.wait();
  const double t1 = now_s();
  return chain_result(t1 - t0, slots, int(sizeof...(I)), n);
}

Result chain_control(long long n) {
  long long ran = 0;
  wf::Edge<long, void> e;
  auto step = wf::make_tt<long>(
      [n, &ran](const long& k, auto& out) {
        ++ran;
        if (k + 1 < n) wf::sendk<0>(k + 1, out);
      },
      wf::edges(e), wf::edges(e), "step");
  auto g = wf::graph(weftk::runtime(1), step);
  const double t0 = now_s();
  g.invoke(0L);
  g.wait();
  const double t1 = now_s();
  return checked(t1 - t0, ran, n);
}

}  // namespace

Result chain(int flows, long long n, bool copy) {
  switch (flows) {
    case 0: return chain_control(n);
    case 1: return chain_d(n, copy, std::make_index_sequence<1>{});
    case 2: return chain_d(n, copy, std::make_index_sequence<2>{});
    case 3: return chain_d(n, copy, std::make_index_sequence<3>{});
    case 4: return chain_d(n, copy, std::make_index_sequence<4>{});
    case 5: return chain_d(n, copy, std::make_index_sequence<5>{});
    case 6: return chain_d(n, copy, std::make_index_sequence<6>{});
    default: return checked(0, flows, 0);  // unsupported count: fail the check
  }
}

Result tree(int height, std::uint64_t cycles, int workers) {
  weft::Runtime& rt = weftk::runtime(workers);
  std::vector<Slot> leaves(rt.num_workers());  // per worker: no shared counter in the timed region
  Slot* lv = leaves.data();
  const long first_leaf = 1L << height;
  wf::Edge<long, void> e;
  auto node = wf::make_tt<long>(
      [=](const long& k, auto& out) {
        busy_cycles(cycles);
        if (k >= first_leaf) {
          ++lv[weft::detail::current_worker_index()].v;
          return;
        }
        wf::sendk<0>(2 * k, out);
        wf::sendk<0>(2 * k + 1, out);
      },
      wf::edges(e), wf::edges(e), "node");
  auto g = wf::graph(rt, node);
  const double t0 = now_s();
  g.invoke(1L);
  g.wait();
  const double t1 = now_s();
  long long total = 0;
  for (const Slot& s : leaves) total += s.v;
  return checked(t1 - t0, total, 1LL << height);
}

}  // namespace wbench::flowk
