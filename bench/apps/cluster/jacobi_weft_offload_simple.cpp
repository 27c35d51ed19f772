// jacobi, one program (weft/cluster.hpp): rank 0 runs the serial loops, each row block of a step a task
// offloaded to where its rows of A are (the default policy: where most of the task's input bytes are). It
// reads every block of x (one access each: a block is one datum), so each step's new blocks travel to the
// ranks that read them, as the runtime finds them needed: no collective. A, b, x and the next x live in dmalloc
// memory, blocked over the ranks as mpi-omp's shares are; A and b are made and initialised where their affinity
// is on the first call, then kept; x starts from 0 in every call.
#include <weft/cluster.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "jacobi.hpp"

namespace dense {

void jacobi_weft_offload_simple(Jacobi& s, const Env& e) {
  static double *a = nullptr, *b = nullptr, *x = nullptr, *next = nullptr;  // rank 0 only (the others serve)
  e.cluster->run([&](weft::Context& cx) {
    const int n = s.sz.n, bs = s.sz.bs, nb = s.sz.nb();
    const std::size_t rows = static_cast<std::size_t>(bs) * n;  // the elements of a row block of A
    if (!a) {
      a = weft::dmalloc<double>(rows * nb), b = weft::dmalloc<double>(n);
      x = weft::dmalloc<double>(n), next = weft::dmalloc<double>(n);
      for (int k = 0; k < nb; ++k) {
        double *ak = a + k * rows, *bk = b + k * bs;
        cx.spawn([ak, bk, k, bs, n] {
          for (int r = 0; r < bs; ++r) {
            for (int c = 0; c < n; ++c) ak[static_cast<std::size_t>(r) * n + c] = Jacobi::value(k * bs + r, c, n);
            bk[r] = entry(k * bs + r, 0, 6);
          }
        }, weft::out(ak, rows), weft::out(bk, bs), weft::offload);
      }
    }
    for (int k = 0; k < nb; ++k) {
      double* xk = x + k * bs;
      cx.spawn([xk, bs] { std::fill(xk, xk + bs, 0.0); }, weft::out(xk, bs), weft::offload);
    }
    std::vector<weft::Access> acc;
    double *cur = x, *nxt = next;
    for (int it = 0; it < s.sz.iterations; ++it) {
      for (int k = 0; k < nb; ++k) {
        const double *ak = a + k * rows, *bk = b + k * bs, *xx = cur;
        double* out = nxt + k * bs;
        acc.assign({weft::in(ak, rows), weft::in(bk, bs), weft::out(out, bs)});
        for (int c = 0; c < nb; ++c) acc.push_back(weft::in(cur + c * bs, bs));
        cx.spawn_accesses([ak, bk, xx, out, k, bs, n] {
          cblas_dgemv(CblasRowMajor, CblasNoTrans, bs, n, 1.0, ak, n, xx, 1, 0.0, out, 1);
          for (int r = 0; r < bs; ++r) {
            const int gi = k * bs + r;
            out[r] = xx[gi] + (bk[r] - out[r]) / ak[static_cast<std::size_t>(r) * n + gi];
          }
        }, acc.data(), acc.size(), weft::offload);
      }
      std::swap(cur, nxt);
    }
    for (int k = 0; k < nb; ++k) {  // the result into the state, here on rank 0: x comes here
      const double* xk = cur + k * bs;
      cx.spawn([&s, xk, k, bs] { std::copy(xk, xk + bs, s.x.begin() + k * bs); }, weft::in(xk, bs));
    }
    cx.taskwait_noflush();  // so that the end of the run does not bring A here (it brings what was touched)
  });
}

}  // namespace dense
