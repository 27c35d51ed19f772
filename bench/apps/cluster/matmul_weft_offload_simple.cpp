// matmul, one program (weft/cluster.hpp): rank 0 runs the serial loops, each tile of C a task offloaded to
// where its inputs are (the default policy: where most of the task's input bytes are: its row of A and the B
// of that rank). A, B and C live in dmalloc memory (MatmulOffload in matmul.hpp: A and C blocked over the
// ranks as mpi-omp's shares are, a copy of B per rank).
#include <weft/cluster.hpp>

#include "matmul.hpp"

namespace dense {

void matmul_weft_offload_simple(Matmul& s, const Env& e) {
  e.cluster->run([&](weft::Context& cx) {
    const int nb = s.sz.nb(), bs = s.sz.bs, nodes = weft::num_nodes();
    const std::size_t tile = s.sz.tile(), line = MatmulOffload::line(s);
    auto rank_of = [&](int i) {  // the rank of row of tiles i (blocked, as mpi-omp's shares)
      int r = nodes - 1;
      while (blocks_of(nb, Part{r, nodes}).first > i) --r;
      return r;
    };
    for (int it = 0; it < s.sz.iterations; ++it)
      for (int i = 0; i < nb; ++i)
        for (int j = 0; j < nb; ++j) {
          const double *ai = MatmulOffload::a + i * line, *bj = MatmulOffload::b_column(s, rank_of(i), j);
          double* cij = MatmulOffload::c_tile(s, i, j);
          cx.spawn([ai, bj, cij, nb, bs, tile] {
            for (int k = 0; k < nb; ++k)
              cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bs, bs, bs, 1.0, ai + k * tile, bs,
                          bj + k * tile, bs, k == 0 ? 0.0 : 1.0, cij, bs);
          }, weft::in(ai, line), weft::in(bj, line), weft::out(cij, tile), weft::offload);
        }
    cx.taskwait_noflush();  // C stays where it was computed, as mpi-omp's (collect brings it to rank 0)
  });
}

}  // namespace dense
