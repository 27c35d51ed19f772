// cholesky, MPI + weft: the same tasks with weft accesses on the tiles, and the broadcast of each panel a task
// too (weft::mpi::ibcast, bound to the task: no worker blocks), so nothing waits between the steps: a rank
// posts every broadcast up front, in step order (MPI requires the same order of collectives on every rank:
// the tasks share an inout access to `collectives`), and the updates of a step start as soon as their tiles
// of the panel have arrived. The panel tasks, on the critical path, have a higher priority.
#include <mpi.h>
#include <weft/mpi.hpp>

#include "cholesky.hpp"

namespace dense {

void cholesky_mpi_weft(Cholesky& s, const Env& e) {
  const int nt = s.nt;
  const std::size_t tile = s.sz.tile();
  char collectives = 0;
  e.rt->run([&](weft::Context& cx) {
    std::vector<weft::Access> panel;
    for (int k = 0; k < nt; ++k) {
      if (s.owns(k)) {
        cx.spawn([&s, k] { s.potrf(k); }, weft::inout(s.tile(k, k), tile), weft::priority(1));
        for (int i = k + 1; i < nt; ++i)
          cx.spawn([&s, k, i] { s.trsm(k, i); }, weft::in(s.tile(k, k), tile), weft::inout(s.tile(i, k), tile),
                   weft::priority(1));
      }
      if (e.size > 1) {  // the owner reads the panel, the others receive it
        panel.clear();
        for (int i = k; i < nt; ++i)
          panel.push_back(s.owns(k) ? weft::in(s.tile(i, k), tile) : weft::out(s.tile(i, k), tile));
        panel.push_back(weft::inout(collectives));
        cx.spawn_accesses(
            [&s, &e, k](weft::Context& c) {
              weft::mpi::ibcast(c, s.tile(k, k), s.panel_count(k), MPI_DOUBLE, s.owner(k), e.comm);
            },
            panel.data(), panel.size(), weft::priority(1));
      }
      for (int j = k + 1; j < nt; ++j) {
        if (!s.owns(j)) continue;
        cx.spawn([&s, k, j] { s.syrk(k, j); }, weft::in(s.tile(j, k), tile), weft::inout(s.tile(j, j), tile));
        for (int i = j + 1; i < nt; ++i)
          cx.spawn([&s, k, i, j] { s.gemm(k, i, j); }, weft::in(s.tile(i, k), tile), weft::in(s.tile(j, k), tile),
                   weft::inout(s.tile(i, j), tile));
      }
    }
  });
}

}  // namespace dense
