// matmul, one program (weft/cluster.hpp), task creation spread over the ranks: rank 0 spawns one parent task per
// rank, on that rank (weft::node), with weak accesses to the rank's rows of tiles of A and C and to its copy of
// B; each parent creates its rank's tile tasks there. The data as in the simple version: dmalloc'd on the first
// call, initialised where it is used, kept; a copy of B per rank (see the simple version).
#include <weft/cluster.hpp>

#include <algorithm>
#include <vector>

#include "matmul.hpp"

namespace dense {

void matmul_weft_offload_opt(Matmul& s, const Env& e) {
  static double *a = nullptr, *b = nullptr, *c = nullptr;  // rank 0 only (the other ranks serve)
  e.cluster->run([&](weft::Context& cx) {
    const int nb = s.sz.nb(), bs = s.sz.bs, iterations = s.sz.iterations;
    const int nodes = weft::num_nodes();
    const std::size_t tile = s.sz.tile(), line = tile * nb;  // a tile, a row (or column) of tiles
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
    std::vector<weft::Access> acc;
    for (int r = 0; r < weft::num_nodes(); ++r) {
      const Range mine = blocks_of(nb, Part{r, weft::num_nodes()});
      acc.clear();
      double *aa = a, *bb = b + static_cast<std::size_t>(r) * nb * line, *cc = c;  // bb: rank r's B
      for (int j = 0; j < nb; ++j) acc.push_back(weft::weak_in(bb + j * line, line));
      for (int i = mine.first; i < mine.first + mine.count; ++i) {
        acc.push_back(weft::weak_in(a + i * line, line));
        for (int j = 0; j < nb; ++j) acc.push_back(weft::weak_out(c + (static_cast<std::size_t>(i) * nb + j) * tile, tile));
      }
      cx.spawn_accesses([aa, bb, cc, mine, nb, bs, tile, line, iterations](weft::Context& p) {
        for (int it = 0; it < iterations; ++it)
          for (int i = mine.first; i < mine.first + mine.count; ++i)
            for (int j = 0; j < nb; ++j) {
              const double *ai = aa + i * line, *bj = bb + j * line;
              double* cij = cc + (static_cast<std::size_t>(i) * nb + j) * tile;
              p.spawn([ai, bj, cij, nb, bs, tile] {
                for (int k = 0; k < nb; ++k)
                  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bs, bs, bs, 1.0, ai + k * tile, bs,
                              bj + k * tile, bs, k == 0 ? 0.0 : 1.0, cij, bs);
              }, weft::in(ai, line), weft::in(bj, line), weft::out(cij, tile));
            }
      }, acc.data(), acc.size(), weft::node(r));
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
