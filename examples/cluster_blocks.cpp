// One program on every process of an MPI job (weft/cluster.hpp): y += 0.5 x over blocks, each block's tasks
// offloaded to the rank where its data is; the sum comes back to rank 0. Without mpirun (or with one process) it is
// an ordinary weft program.
//
//   mpirun -np 2 build/release/examples/weft-cluster-blocks
//   # cluster: 16 blocks, 10 updates, 2 processes: sum 671416320 (ok), tasks offloaded by rank 0: 88
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

#include <cstdio>

constexpr int B = 16, N = 4096, T = 10;  // blocks, block length, updates

int main() {
  weft::Options o = weft::Options::from_environment();
  o.cluster = true;  // or WEFT_CLUSTER=1
  weft::Runtime rt(o);  // collective: every process constructs it
  double total = 0;
  rt.run([&](weft::Context& cx) {  // runs on rank 0; the other ranks run its offloaded tasks
    double* x = weft::dmalloc<double>(B * N);  // the same address on every rank; blocked: block b's affinity is
    double* y = weft::dmalloc<double>(B * N);  // rank b * ranks / B
    for (int b = 0; b < B; ++b) {
      double *xb = x + b * N, *yb = y + b * N;  // captured by value: the body is copied to another rank
      cx.spawn([=] { for (int i = 0; i < N; ++i) xb[i] = i, yb[i] = b; },
               weft::out(xb, N), weft::out(yb, N), weft::offload);     // runs where the blocks' affinity is
      for (int t = 0; t < T; ++t)
        cx.spawn([=] { for (int i = 0; i < N; ++i) yb[i] += 0.5 * xb[i]; },
                 weft::in(xb, N), weft::inout(yb, N), weft::offload);  // where xb and yb are: nothing moves
    }
    for (int b = 0; b < B; ++b) {
      const double* yb = y + b * N;
      cx.spawn([&total, yb] { for (int i = 0; i < N; ++i) total += yb[i]; },  // here: yb comes to rank 0
               weft::in(yb, N), weft::inout(total));
    }
    cx.taskwait();
    weft::dfree(x);
    weft::dfree(y);
  });
  if (weft::node_id() == 0) {
    const double expect = double(N) * B * (B - 1) / 2 + 0.5 * T * B * (double(N) * (N - 1) / 2);
    std::printf("cluster: %d blocks, %d updates, %d process%s: sum %.0f (%s), tasks offloaded by rank 0: %llu\n", B, T,
                weft::num_nodes(), weft::num_nodes() == 1 ? "" : "es", total, total == expect ? "ok" : "WRONG",
                static_cast<unsigned long long>(rt.cluster_stats().tasks_offloaded));
    return total == expect ? 0 : 1;
  }
}
