// matmul, MPI + weft: every rank spawns a task per tile of its C and iteration. A and B are only read, so the
// tasks name only the tile they write: a tile's iterations run in order, with no barrier between iterations.
#include "matmul.hpp"

namespace dense {

void matmul_mpi_weft(Matmul& s, const Env& e) {
  e.rt->run([&](weft::Context& cx) {
    for (int it = 0; it < s.sz.iterations; ++it)
      for (int i = 0; i < s.c.rows; ++i)
        for (int j = 0; j < s.c.cols; ++j)
          cx.spawn([&s, i, j] { s.tile(i, j); }, weft::out(s.c.tile(i, j), s.sz.tile()));
  });
}

}  // namespace dense
