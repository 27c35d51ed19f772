// jacobi, one program (weft/cluster.hpp): rank 0 runs the serial loops, each row block of a step a task
// offloaded to where its rows of A are (the default policy: where most of the task's input bytes are). It
// reads every block of x (one access each: a block is one datum), so each step's new blocks travel to the
// ranks that read them, as the runtime finds them needed: no collective. A, b, x and the next x live in dmalloc
// memory (JacobiOffload in jacobi.hpp: blocked over the ranks as mpi-omp's shares are).
#include <weft/cluster.hpp>

#include <utility>
#include <vector>

#include "jacobi.hpp"

namespace dense {

void jacobi_weft_offload_simple(Jacobi& s, const Env& e) {
  e.cluster->run([&](weft::Context& cx) {
    const int n = s.sz.n, bs = s.sz.bs, nb = s.sz.nb();
    const std::size_t rows = JacobiOffload::block_size(s);
    std::vector<weft::Access> acc;
    double *cur = JacobiOffload::x, *nxt = JacobiOffload::next;
    for (int it = 0; it < s.sz.iterations; ++it) {
      for (int k = 0; k < nb; ++k) {
        const double *ak = JacobiOffload::a + k * rows, *bk = JacobiOffload::b + k * bs, *xx = cur;
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
    cx.taskwait_noflush();  // x stays where it was computed (collect brings it to rank 0)
  });
}

}  // namespace dense
