// cholesky, one program (weft/cluster.hpp), task creation spread over the ranks: rank 0 spawns, per step, one
// parent task for the panel on its owner and one per rank for that rank's updates (weft::node), each with weak
// accesses to the tiles its tasks touch; the parents create the kernels' tasks there. A weak access is released
// on its own, when the children on its tile have ended (weft/cluster.hpp), so a parent that holds a whole step
// of a rank's work does not hold back the next step's tasks on the tiles it has finished. One update parent per
// rank, not per column: each panel tile goes to a rank once per step. The tiles as in the simple version
// (CholeskyOffload, cholesky.hpp).
#include <weft/cluster.hpp>

#include <vector>

#include "cholesky.hpp"

namespace dense {

void cholesky_weft_offload_opt(Cholesky& s, const Env& e) {
  e.cluster->run([&](weft::Context& cx) {
    const int nt = s.nt, bs = s.sz.bs, nodes = weft::num_nodes();
    const std::size_t tile = s.sz.tile();
    // Tile (i, j); trivially copyable, so that the parents' bodies take it along.
    const auto t = [a = CholeskyOffload::a, nt, tile](int i, int j) { return a + (static_cast<std::size_t>(j) * nt + i) * tile; };
    std::vector<weft::Access> acc;
    for (int k = 0; k < nt; ++k) {
      acc.clear();  // the panel, on its owner
      for (int i = k; i < nt; ++i) acc.push_back(weft::weak_inout(t(i, k), tile));
      cx.spawn_accesses([t, k, nt, bs, tile](weft::Context& c) {
        double* akk = t(k, k);
        c.spawn([akk, k, bs] { Cholesky::potrf_or_throw(akk, k, bs); }, weft::inout(akk, tile));
        for (int i = k + 1; i < nt; ++i) {
          double* aik = t(i, k);
          c.spawn([akk, aik, bs] { Cholesky::trsm(akk, aik, bs); }, weft::in(akk, tile), weft::inout(aik, tile));
        }
      }, acc.data(), acc.size(), weft::node(k % nodes), weft::priority(1));
      for (int r = 0; r < nodes; ++r) {  // the updates of the columns j > k that rank r owns (j % nodes == r)
        int first = k + 1;
        while (first < nt && first % nodes != r) ++first;
        if (first >= nt) continue;
        acc.clear();
        for (int i = first; i < nt; ++i) acc.push_back(weft::weak_in(t(i, k), tile));  // the panel tiles read
        for (int j = first; j < nt; j += nodes)
          for (int i = j; i < nt; ++i) acc.push_back(weft::weak_inout(t(i, j), tile));
        cx.spawn_accesses([t, k, first, nodes, nt, bs, tile](weft::Context& c) {
          for (int j = first; j < nt; j += nodes) {
            double *ajk = t(j, k), *ajj = t(j, j);
            c.spawn([ajk, ajj, bs] { Cholesky::syrk(ajk, ajj, bs); }, weft::in(ajk, tile), weft::inout(ajj, tile));
            for (int i = j + 1; i < nt; ++i) {
              double *aik = t(i, k), *aij = t(i, j);
              c.spawn([aik, ajk, aij, bs] { Cholesky::gemm(aik, ajk, aij, bs); }, weft::in(aik, tile),
                      weft::in(ajk, tile), weft::inout(aij, tile));
            }
          }
        }, acc.data(), acc.size(), weft::node(r));
      }
    }
    cx.taskwait_noflush();  // L stays where it was computed, as mpi-omp's (collect brings it to rank 0)
  });
}

}  // namespace dense
