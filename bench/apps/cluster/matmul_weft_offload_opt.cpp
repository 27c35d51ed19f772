// matmul, one program (weft/cluster.hpp), task creation spread over the ranks: rank 0 spawns one parent task per
// rank, on that rank (weft::node), with weak accesses to the rank's rows of tiles of A and C and to its copy of
// B; each parent creates its rank's tile tasks there. The data as in the simple version (MatmulOffload,
// matmul.hpp).
#include <weft/cluster.hpp>

#include <vector>

#include "matmul.hpp"

namespace dense {

void matmul_weft_offload_opt(Matmul& s, const Env& e) {
  e.cluster->run([&](weft::Context& cx) {
    const int nb = s.sz.nb(), bs = s.sz.bs, iterations = s.sz.iterations;
    const std::size_t tile = s.sz.tile(), line = MatmulOffload::line(s);
    double *a = MatmulOffload::a, *c = MatmulOffload::c;
    std::vector<weft::Access> acc;
    for (int r = 0; r < weft::num_nodes(); ++r) {
      const Range mine = blocks_of(nb, Part{r, weft::num_nodes()});
      acc.clear();
      double* bb = MatmulOffload::b_column(s, r, 0);  // rank r's B
      for (int j = 0; j < nb; ++j) acc.push_back(weft::weak_in(bb + j * line, line));
      for (int i = mine.first; i < mine.first + mine.count; ++i) {
        acc.push_back(weft::weak_in(a + i * line, line));
        for (int j = 0; j < nb; ++j) acc.push_back(weft::weak_out(c + (static_cast<std::size_t>(i) * nb + j) * tile, tile));
      }
      cx.spawn_accesses([a, bb, c, mine, nb, bs, tile, line, iterations](weft::Context& p) {
        for (int it = 0; it < iterations; ++it)
          for (int i = mine.first; i < mine.first + mine.count; ++i)
            for (int j = 0; j < nb; ++j) {
              const double *ai = a + i * line, *bj = bb + j * line;
              double* cij = c + (static_cast<std::size_t>(i) * nb + j) * tile;
              p.spawn([ai, bj, cij, nb, bs, tile] {
                for (int k = 0; k < nb; ++k)
                  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bs, bs, bs, 1.0, ai + k * tile, bs,
                              bj + k * tile, bs, k == 0 ? 0.0 : 1.0, cij, bs);
              }, weft::in(ai, line), weft::in(bj, line), weft::out(cij, tile));
            }
      }, acc.data(), acc.size(), weft::node(r));
    }
    cx.taskwait_noflush();  // C stays where it was computed, as mpi-omp's (collect brings it to rank 0)
  });
}

}  // namespace dense
