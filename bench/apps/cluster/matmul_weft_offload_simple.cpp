// matmul, one program (weft/cluster.hpp): rank 0 runs the serial loops, each tile of C a task offloaded to
// where its inputs are (the default policy: where most of the task's input bytes are: its row of A and the B
// of that rank). A and C live in dmalloc memory in tiles by rows, blocked over the ranks as mpi-omp's shares
// are; B in tiles by columns, so that the column of tiles a task reads is one datum, and one copy per rank, as
// mpi-omp has: with one B, each call would send it again to the ranks other than 0, since the end of a run
// leaves rank 0 the only holder of what it holds (weft/cluster.hpp). They are made on the first call and
// initialised by `out` tasks where they are used, then kept: A and B never change.
#include <weft/cluster.hpp>

#include <algorithm>

#include "matmul.hpp"

namespace dense {

void matmul_weft_offload_simple(Matmul& s, const Env& e) {
  static double *a = nullptr, *b = nullptr, *c = nullptr;  // rank 0 only (the other ranks serve)
  e.cluster->run([&](weft::Context& cx) {
    const int nb = s.sz.nb(), bs = s.sz.bs;
    const int nodes = weft::num_nodes();
    const std::size_t tile = s.sz.tile(), line = tile * nb;  // a tile, a row (or column) of tiles
    auto rank_of = [&](int i) {  // the rank of row of tiles i (blocked, as mpi-omp's shares)
      int r = nodes - 1;
      while (blocks_of(nb, Part{r, nodes}).first > i) --r;
      return r;
    };
    if (!a) {
      a = weft::dmalloc<double>(line * nb), c = weft::dmalloc<double>(line * nb);
      b = weft::dmalloc<double>(line * nb * nodes);
      for (int i = 0; i < nb; ++i) {
        double* ai = a + i * line;
        cx.spawn([ai, i, nb, bs] {
          for (int k = 0; k < nb; ++k)  // tile (i, k), column-major
            for (int q = 0; q < bs; ++q)
              for (int r = 0; r < bs; ++r) ai[(static_cast<std::size_t>(k) * bs + q) * bs + r] = entry(i * bs + r, k * bs + q, 2);
        }, weft::out(ai, line), weft::offload);
        for (int r = 0; r < nodes; ++r) {
          double* bj = b + (static_cast<std::size_t>(r) * nb + i) * line;  // column i of rank r's B
          cx.spawn([bj, j = i, nb, bs] {
            for (int k = 0; k < nb; ++k)  // tile (k, j), column-major
              for (int q = 0; q < bs; ++q)
                for (int r = 0; r < bs; ++r) bj[(static_cast<std::size_t>(k) * bs + q) * bs + r] = entry(k * bs + r, j * bs + q, 3);
          }, weft::out(bj, line), weft::node(r));
        }
      }
    }
    for (int it = 0; it < s.sz.iterations; ++it)
      for (int i = 0; i < nb; ++i)
        for (int j = 0; j < nb; ++j) {
          const double *ai = a + i * line, *bj = b + (static_cast<std::size_t>(rank_of(i)) * nb + j) * line;
          double* cij = c + (static_cast<std::size_t>(i) * nb + j) * tile;
          cx.spawn([ai, bj, cij, nb, bs, tile] {
            for (int k = 0; k < nb; ++k)
              cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bs, bs, bs, 1.0, ai + k * tile, bs,
                          bj + k * tile, bs, k == 0 ? 0.0 : 1.0, cij, bs);
          }, weft::in(ai, line), weft::in(bj, line), weft::out(cij, tile), weft::offload);
        }
    for (int i = 0; i < nb; ++i)  // the result into the state, here on rank 0: C comes here
      for (int j = 0; j < nb; ++j) {
        const double* cij = c + (static_cast<std::size_t>(i) * nb + j) * tile;
        cx.spawn([&s, cij, i, j, tile] { std::copy(cij, cij + tile, s.c.tile(i, j)); }, weft::in(cij, tile));
      }
    cx.taskwait_noflush();  // so that the end of the run does not bring A and B here
  });
}

}  // namespace dense
