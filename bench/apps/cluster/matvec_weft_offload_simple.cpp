// matvec, one program (weft/cluster.hpp): rank 0 runs the serial loops, each block a task offloaded to where
// its row block of A is (the default policy: where most of the task's input bytes are). A, x and y live in
// dmalloc memory, A and y blocked over the ranks as mpi-omp's shares are; they are made on the first call and
// initialised by offloaded `out` tasks (each block where its affinity is), then kept: A and x never change.
#include <weft/cluster.hpp>

#include <algorithm>

#include "matvec.hpp"

namespace dense {

void matvec_weft_offload_simple(Matvec& s, const Env& e) {
  // Rank 0 only (the other ranks serve); a task captures local copies: a lambda does not capture a static.
  static double *a = nullptr, *x = nullptr, *y = nullptr;
  e.cluster->run([&](weft::Context& cx) {
    const int n = s.sz.n, bs = s.sz.bs;
    const std::size_t rows = static_cast<std::size_t>(bs) * n;  // the elements of a row block of A
    if (!a) {
      a = weft::dmalloc<double>(rows * s.sz.nb()), x = weft::dmalloc<double>(n), y = weft::dmalloc<double>(n);
      cx.spawn([xx = x, n] { for (int c = 0; c < n; ++c) xx[c] = entry(c, 0, 1); }, weft::out(x, n), weft::offload);
      for (int b = 0; b < s.sz.nb(); ++b) {
        double* ab = a + b * rows;
        cx.spawn([ab, b, bs, n] {
          for (int r = 0; r < bs; ++r)
            for (int c = 0; c < n; ++c) ab[static_cast<std::size_t>(r) * n + c] = entry(b * bs + r, c, 0);
        }, weft::out(ab, rows), weft::offload);
      }
    }
    for (int it = 0; it < s.sz.iterations; ++it)
      for (int b = 0; b < s.sz.nb(); ++b) {
        const double *ab = a + b * rows, *xx = x;
        double* yb = y + b * bs;
        cx.spawn([ab, xx, yb, bs, n] { cblas_dgemv(CblasRowMajor, CblasNoTrans, bs, n, 1.0, ab, n, xx, 1, 0.0, yb, 1); },
                 weft::in(ab, rows), weft::in(xx, n), weft::out(yb, bs), weft::offload);
      }
    for (int b = 0; b < s.sz.nb(); ++b) {  // the result into the state, here on rank 0: y comes here
      const double* yb = y + b * bs;
      cx.spawn([&s, yb, b, bs] { std::copy(yb, yb + bs, s.y.begin() + b * bs); }, weft::in(yb, bs));
    }
    cx.taskwait_noflush();  // so that the end of the run does not bring A here (it brings what was touched)
  });
}

}  // namespace dense
