// cholesky, one program (weft/cluster.hpp): rank 0 runs the serial loops, each kernel a task on the tiles it
// names. The tiles live in dmalloc memory, column by column, the columns dealt cyclically over the ranks as
// mpi-omp's are (Distribution::cyclic); a task runs on the rank that owns the column of the tile it updates
// (weft::node: see below), the tiles of the panel it reads come to it. The factorisation is in place, so every
// call first writes A again, with a task per tile on its owner: part of the timed call (mpi-omp's reset is not
// timed), but spread over the ranks and overlapped with the first steps.
#include <weft/cluster.hpp>

#include <algorithm>
#include <stdexcept>

#include "cholesky.hpp"

namespace dense {

void cholesky_weft_offload_simple(Cholesky& s, const Env& e) {
  static double* a = nullptr;  // rank 0 only (the other ranks serve)
  e.cluster->run([&](weft::Context& cx) {
    const int nt = s.nt, bs = s.sz.bs, n = s.sz.n, nodes = weft::num_nodes();
    const std::size_t tile = s.sz.tile();
    if (!a) a = weft::dmalloc<double>(tile * nt * nt, weft::Distribution::cyclic(tile * nt * sizeof(double)));
    auto t = [&](int i, int j) { return a + (static_cast<std::size_t>(j) * nt + i) * tile; };
    // The owner of the column written (owner computes, as in the MPI versions), not weft::offload: the locality
    // policy weighs the bytes a task reads, and an update reads as much of the panel as of the tile it writes
    // (a tie stays on the spawning rank), so the tiles would follow the panels or gather on rank 0.
    auto on = [&](int j) { return weft::node(j % nodes); };
    for (int j = 0; j < nt; ++j)
      for (int i = j; i < nt; ++i) {
        double* aij = t(i, j);
        cx.spawn([aij, i, j, bs, n] { Cholesky::fill(aij, i, j, bs, n); }, weft::out(aij, tile), on(j));
      }
    for (int k = 0; k < nt; ++k) {
      double* akk = t(k, k);
      cx.spawn([akk, k, bs] {
        if (const int info = Cholesky::potrf(akk, bs); info != 0)
          throw std::runtime_error("dpotrf of tile " + std::to_string(k) + ": info " + std::to_string(info));
      }, weft::inout(akk, tile), on(k));
      for (int i = k + 1; i < nt; ++i) {
        double* aik = t(i, k);
        cx.spawn([akk, aik, bs] { Cholesky::trsm(akk, aik, bs); }, weft::in(akk, tile), weft::inout(aik, tile), on(k));
      }
      for (int j = k + 1; j < nt; ++j) {
        double *ajk = t(j, k), *ajj = t(j, j);
        cx.spawn([ajk, ajj, bs] { Cholesky::syrk(ajk, ajj, bs); }, weft::in(ajk, tile), weft::inout(ajj, tile), on(j));
        for (int i = j + 1; i < nt; ++i) {
          double *aik = t(i, k), *aij = t(i, j);
          cx.spawn([aik, ajk, aij, bs] { Cholesky::gemm(aik, ajk, aij, bs); }, weft::in(aik, tile), weft::in(ajk, tile),
                   weft::inout(aij, tile), on(j));
        }
      }
    }
    for (int j = 0; j < nt; ++j)  // L into the state, here on rank 0: the tiles come here
      for (int i = j; i < nt; ++i) {
        const double* aij = t(i, j);
        cx.spawn([&s, aij, i, j, tile] { std::copy(aij, aij + tile, s.tile(i, j)); }, weft::in(aij, tile));
      }
  });  // the end of the run would bring every tile here anyway: the copy above only names them
}

}  // namespace dense
