// cholesky, one program (weft/cluster.hpp), task creation spread over the ranks: rank 0 spawns, for each step
// and rank, one parent task on that rank (weft::node) with weak accesses to the tiles its tasks of the step
// touch (the panel, if the rank owns it; the panel's tiles it reads; its columns' tiles it updates), and the
// parent creates those tasks there. A parent's weak accesses order it after the previous steps only datum by
// datum, so the steps still overlap. The tiles as in the simple version: columns cyclic over the ranks, A
// written again at the start of every call (one parent per rank for that too), L copied into rank 0's state.
#include <weft/cluster.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cholesky.hpp"

namespace dense {

void cholesky_weft_offload_opt(Cholesky& s, const Env& e) {
  static double* a = nullptr;  // rank 0 only (the other ranks serve)
  e.cluster->run([&](weft::Context& cx) {
    const int nt = s.nt, bs = s.sz.bs, n = s.sz.n, nodes = weft::num_nodes();
    const std::size_t tile = s.sz.tile();
    if (!a) a = weft::dmalloc<double>(tile * nt * nt, weft::Distribution::cyclic(tile * nt * sizeof(double)));
    // Tile (i, j); trivially copyable, so that the parents' bodies take it along.
    const auto t = [a = a, nt, tile](int i, int j) { return a + (static_cast<std::size_t>(j) * nt + i) * tile; };
    std::vector<weft::Access> acc;
    for (int r = 0; r < nodes; ++r) {  // A again, each rank its columns
      acc.clear();
      for (int j = r; j < nt; j += nodes)
        for (int i = j; i < nt; ++i) acc.push_back(weft::weak_out(t(i, j), tile));
      cx.spawn_accesses([t, r, nodes, nt, bs, n, tile](weft::Context& c) {
        for (int j = r; j < nt; j += nodes)
          for (int i = j; i < nt; ++i) {
            double* aij = t(i, j);
            c.spawn([aij, i, j, bs, n] {
              for (int q = 0; q < bs; ++q)
                for (int p = 0; p < bs; ++p) aij[q * bs + p] = Cholesky::value(i * bs + p, j * bs + q, n);
            }, weft::out(aij, tile));
          }
      }, acc.data(), acc.size(), weft::node(r));
    }
    for (int k = 0; k < nt; ++k)
      for (int q = 0; q < nodes; ++q) {  // the panel's owner first: the others read what its parent writes
        const int r = (k + q) % nodes;
        const bool panel = q == 0;
        const int first = k + 1 + ((r - (k + 1) % nodes) % nodes + nodes) % nodes;  // r's first column after k
        if (!panel && first >= nt) continue;  // nothing of this step on r
        acc.clear();
        for (int i = panel ? k : (first < nt ? k + 1 : nt); i < nt; ++i)
          acc.push_back(panel ? weft::weak_inout(t(i, k), tile) : weft::weak_in(t(i, k), tile));
        for (int j = first; j < nt; j += nodes)
          for (int i = j; i < nt; ++i) acc.push_back(weft::weak_inout(t(i, j), tile));
        cx.spawn_accesses([t, k, panel, first, nodes, nt, bs, tile](weft::Context& c) {
          if (panel) {
            double* akk = t(k, k);
            c.spawn([akk, k, bs] {
              if (const int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', bs, akk, bs); info != 0)
                throw std::runtime_error("dpotrf of tile " + std::to_string(k) + ": info " + std::to_string(info));
            }, weft::inout(akk, tile), weft::priority(1));
            for (int i = k + 1; i < nt; ++i) {
              double* aik = t(i, k);
              c.spawn([akk, aik, bs] {
                cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, bs, bs, 1.0, akk, bs, aik,
                            bs);
              }, weft::in(akk, tile), weft::inout(aik, tile), weft::priority(1));
            }
          }
          for (int j = first; j < nt; j += nodes) {
            double *ajk = t(j, k), *ajj = t(j, j);
            c.spawn([ajk, ajj, bs] {
              cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, bs, bs, -1.0, ajk, bs, 1.0, ajj, bs);
            }, weft::in(ajk, tile), weft::inout(ajj, tile));
            for (int i = j + 1; i < nt; ++i) {
              double *aik = t(i, k), *aij = t(i, j);
              c.spawn([aik, ajk, aij, bs] {
                cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, bs, bs, bs, -1.0, aik, bs, ajk, bs, 1.0, aij, bs);
              }, weft::in(aik, tile), weft::in(ajk, tile), weft::inout(aij, tile));
            }
          }
        }, acc.data(), acc.size(), weft::node(r));
      }
    for (int j = 0; j < nt; ++j)  // L into the state, here on rank 0: the tiles come here
      for (int i = j; i < nt; ++i) {
        const double* aij = t(i, j);
        cx.spawn([&s, aij, i, j, tile] { std::copy(aij, aij + tile, s.tile(i, j)); }, weft::in(aij, tile));
      }
  });  // the end of the run would bring every tile here anyway: the copy above only names them
}

}  // namespace dense
