// matvec, MPI + weft: every rank spawns a task per row block and iteration. A and x are only read, so the
// tasks name only the block of y they write: a block's iterations run in order, the blocks in any order, with
// no barrier between iterations.
#include "matvec.hpp"

namespace dense {

void matvec_mpi_weft(Matvec& s, const Env& e) {
  e.rt->run([&](weft::Context& cx) {
    for (int it = 0; it < s.sz.iterations; ++it)
      for (int b = 0; b < s.blocks.count; ++b)
        cx.spawn([&s, b] { s.block(b); }, weft::out(&s.y[static_cast<std::size_t>(b) * s.sz.bs], s.sz.bs));
  });
}

}  // namespace dense
