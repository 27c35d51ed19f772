// matvec, one program (weft/cluster.hpp), task creation spread over the ranks: rank 0 spawns one parent task per
// rank, on that rank (weft::node), with weak accesses to the rank's row blocks; each parent creates its rank's
// block tasks there, so rank 0 neither creates nor offloads them one by one. The data as in the simple
// version (MatvecOffload, matvec.hpp).
#include <weft/cluster.hpp>

#include <vector>

#include "matvec.hpp"

namespace dense {

void matvec_weft_offload_opt(Matvec& s, const Env& e) {
  e.cluster->run([&](weft::Context& cx) {
    const int n = s.sz.n, bs = s.sz.bs, iterations = s.sz.iterations;
    const std::size_t rows = MatvecOffload::block_size(s);
    double *a = MatvecOffload::a, *x = MatvecOffload::x, *y = MatvecOffload::y;
    std::vector<weft::Access> acc;
    for (int r = 0; r < weft::num_nodes(); ++r) {
      const Range mine = blocks_of(s.sz.nb(), Part{r, weft::num_nodes()});
      acc.assign(1, weft::weak_in(x, n));
      for (int b = mine.first; b < mine.first + mine.count; ++b)
        acc.push_back(weft::weak_in(a + b * rows, rows)), acc.push_back(weft::weak_out(y + b * bs, bs));
      cx.spawn_accesses([a, x, y, mine, bs, n, iterations, rows](weft::Context& c) {
        for (int it = 0; it < iterations; ++it)
          for (int b = mine.first; b < mine.first + mine.count; ++b) {
            const double* ab = a + b * rows;
            double* yb = y + b * bs;
            c.spawn([ab, x, yb, bs, n] { cblas_dgemv(CblasRowMajor, CblasNoTrans, bs, n, 1.0, ab, n, x, 1, 0.0, yb, 1); },
                    weft::in(ab, rows), weft::in(x, n), weft::out(yb, bs));
          }
      }, acc.data(), acc.size(), weft::node(r));
    }
    cx.taskwait_noflush();  // y stays where it was computed, as mpi-omp's (collect brings it to rank 0)
  });
}

}  // namespace dense
