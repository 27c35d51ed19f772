// matvec, one program (weft/cluster.hpp): rank 0 runs the serial loops, each block a task offloaded to where
// its row block of A is (the default policy: where most of the task's input bytes are). A, x and y live in
// dmalloc memory (MatvecOffload in matvec.hpp: A and y blocked over the ranks, as mpi-omp's shares are).
#include <weft/cluster.hpp>

#include "matvec.hpp"

namespace dense {

void matvec_weft_offload_simple(Matvec& s, const Env& e) {
  e.cluster->run([&](weft::Context& cx) {
    const int n = s.sz.n, bs = s.sz.bs;
    const std::size_t rows = MatvecOffload::block_size(s);
    for (int it = 0; it < s.sz.iterations; ++it)
      for (int b = 0; b < s.sz.nb(); ++b) {
        const double *ab = MatvecOffload::a + b * rows, *xx = MatvecOffload::x;
        double* yb = MatvecOffload::y + b * bs;
        cx.spawn([ab, xx, yb, bs, n] { cblas_dgemv(CblasRowMajor, CblasNoTrans, bs, n, 1.0, ab, n, xx, 1, 0.0, yb, 1); },
                 weft::in(ab, rows), weft::in(xx, n), weft::out(yb, bs), weft::offload);
      }
    cx.taskwait_noflush();  // y stays where it was computed, as mpi-omp's (collect brings it to rank 0)
  });
}

}  // namespace dense
