// heat_ranks: one flow graph, one process or several. The 1D heat equation on N cells in B blocks, T explicit
// time steps: the task of key (t, b) computes block b at step t + 1 from its block and one ghost cell from each
// neighbour. Blocks are distributed in contiguous ranges over the processes (keymap), so ghost cells cross
// processes where two ranges meet, and the blocks themselves (std::vector<double>: serialized) travel once, to
// the collecting task on process 0, which checks the result against a sequential computation.
//
//   ./weft-heat-ranks                  one process
//   mpirun -np 2 ./weft-heat-ranks     two processes (weft built with MPI)
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>
#include <weft/weft.hpp>

namespace wf = weft::flow;

constexpr int N = 4096, B = 16, T = 200, W = N / B;  // cells, blocks, steps, cells per block
constexpr double kAlpha = 0.25;

// One step of a block, given the ghost cells left (of cell 0) and right (of cell W - 1).
std::vector<double> advance(const std::vector<double>& u, double left, double right) {
  std::vector<double> v(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) {
    const double l = i == 0 ? left : u[i - 1], r = i + 1 == u.size() ? right : u[i + 1];
    v[i] = u[i] + kAlpha * (l - 2 * u[i] + r);
  }
  return v;
}

double initial(int i) { return std::sin(3.14159265358979 * i / N) + (i % 97 == 0 ? 1.0 : 0.0); }

int main() {
  using Key = std::pair<int, int>;  // (step, block)
  using Block = std::pair<int, std::vector<double>>;
  const int P = wf::num_processes(), me = wf::process_id();
  auto owner = [P](const Key& k) { return k.second * P / B; };  // contiguous ranges of blocks

  wf::Edge<Key, std::vector<double>> block("block");
  wf::Edge<Key, double> from_left("from-left"), from_right("from-right");
  wf::Edge<int, Block> done("done");
  auto step = wf::make_tt<Key>(
      [](const Key& k, const std::vector<double>& u, double left, double right, auto& out) {
        const auto [t, b] = k;
        if (t == T) {
          wf::send<3>(0, Block{b, u}, out);
          return;
        }
        std::vector<double> v = advance(u, left, right);
        // Ghost cells of step t + 1: this block's edge cells go to its neighbours; outside the rod, 0.
        if (b == 0) wf::send<1>(Key{t + 1, b}, 0.0, out);
        if (b > 0) wf::send<2>(Key{t + 1, b - 1}, v.front(), out);
        if (b + 1 < B) wf::send<1>(Key{t + 1, b + 1}, v.back(), out);
        if (b + 1 == B) wf::send<2>(Key{t + 1, b}, 0.0, out);
        wf::send<0>(Key{t + 1, b}, std::move(v), out);
      },
      wf::edges(block, from_left, from_right), wf::edges(block, from_left, from_right, done), "step");
  step->set_keymap(owner);

  std::vector<double> result(N);
  auto collect = wf::make_tt<int>(
      [&](const int&, const wf::Aggregator<Block>& blocks) {
        for (const Block& bl : blocks)
          for (int i = 0; i < W; ++i) result[bl.first * W + i] = bl.second[i];
      },
      wf::edges(wf::make_aggregator(done, B)), wf::edges(), "collect");
  collect->set_keymap([](const int&) { return 0; });

  auto g = wf::graph(step);  // collective: every process builds the same graph
  for (int b = 0; b < B; ++b) {
    if (owner(Key{0, b}) != me) continue;  // each process seeds the blocks it owns
    std::vector<double> u(W);
    for (int i = 0; i < W; ++i) u[i] = initial(b * W + i);
    const double left = b == 0 ? 0.0 : initial(b * W - 1), right = b + 1 == B ? 0.0 : initial((b + 1) * W);
    step->invoke(Key{0, b}, std::move(u), left, right);
  }
  g.wait();  // returns on every process once the whole graph has finished

  if (me == 0) {
    std::vector<double> u(N);
    for (int i = 0; i < N; ++i) u[i] = initial(i);
    for (int t = 0; t < T; ++t) u = advance(u, 0.0, 0.0);
    double diff = 0;
    for (int i = 0; i < N; ++i) diff = std::fmax(diff, std::fabs(u[i] - result[i]));
    std::printf("heat: %d cells in %d blocks, %d steps, %d process%s: max difference from the sequential "
                "computation %g (%s)\n",
                N, B, T, P, P == 1 ? "" : "es", diff, diff == 0 ? "ok" : "WRONG");
    return diff == 0 ? 0 : 1;
  }
  return 0;
}
