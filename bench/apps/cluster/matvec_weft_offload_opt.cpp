// matvec, one program (weft/cluster.hpp), task creation spread over the ranks: rank 0 spawns one parent task per
// rank, on that rank (weft::node), with weak accesses to the rank's row blocks; each parent creates its rank's
// block tasks there, so rank 0 neither creates nor offloads them one by one. The data as in the simple
// version: dmalloc'd on the first call, initialised where its affinity is, kept.
#include <weft/cluster.hpp>

#include <algorithm>
#include <vector>

#include "matvec.hpp"

namespace dense {

void matvec_weft_offload_opt(Matvec& s, const Env& e) {
  // Rank 0 only (the other ranks serve); a task captures local copies: a lambda does not capture a static.
  static double *a = nullptr, *x = nullptr, *y = nullptr;
  e.cluster->run([&](weft::Context& cx) {
    const int n = s.sz.n, bs = s.sz.bs, iterations = s.sz.iterations;
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
    std::vector<weft::Access> acc;
    for (int r = 0; r < weft::num_nodes(); ++r) {
      const Range mine = blocks_of(s.sz.nb(), Part{r, weft::num_nodes()});
      acc.assign(1, weft::weak_in(x, n));
      for (int b = mine.first; b < mine.first + mine.count; ++b)
        acc.push_back(weft::weak_in(a + b * rows, rows)), acc.push_back(weft::weak_out(y + b * bs, bs));
      double *aa = a, *xx = x, *yy = y;
      cx.spawn_accesses([aa, xx, yy, mine, bs, n, iterations, rows](weft::Context& c) {
        for (int it = 0; it < iterations; ++it)
          for (int b = mine.first; b < mine.first + mine.count; ++b) {
            const double* ab = aa + b * rows;
            double* yb = yy + b * bs;
            c.spawn([ab, xx, yb, bs, n] { cblas_dgemv(CblasRowMajor, CblasNoTrans, bs, n, 1.0, ab, n, xx, 1, 0.0, yb, 1); },
                    weft::in(ab, rows), weft::in(xx, n), weft::out(yb, bs));
          }
      }, acc.data(), acc.size(), weft::node(r));
    }
    for (int b = 0; b < s.sz.nb(); ++b) {  // the result into the state, here on rank 0: y comes here
      const double* yb = y + b * bs;
      cx.spawn([&s, yb, b, bs] { std::copy(yb, yb + bs, s.y.begin() + b * bs); }, weft::in(yb, bs));
    }
    cx.taskwait_noflush();  // so that the end of the run does not bring A here (it brings what was touched)
  });
}

}  // namespace dense
