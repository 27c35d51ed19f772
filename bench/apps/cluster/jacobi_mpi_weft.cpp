// jacobi, MPI + weft: every rank spawns a task per row block, and the ranks exchange their new parts of x
// with a collective between taskwaits (every block of a step needs the whole x of the step before: there is
// nothing for the exchange to overlap within a rank). The blocks of a step write disjoint rows and the
// taskwait orders the steps, so the tasks need no accesses.
#include <mpi.h>

#include "jacobi.hpp"

namespace dense {

void jacobi_mpi_weft(Jacobi& s, const Env& e) {
  std::vector<int> counts(static_cast<std::size_t>(e.size)), displs(counts.size());
  for (int r = 0; r < e.size; ++r) {
    const Range g = blocks_of(s.sz.nb(), Part{r, e.size});
    counts[static_cast<std::size_t>(r)] = g.count * s.sz.bs;
    displs[static_cast<std::size_t>(r)] = g.first * s.sz.bs;
  }
  e.rt->run([&](weft::Context& cx) {
    for (int it = 0; it < s.sz.iterations; ++it) {
      for (int b = 0; b < s.blocks.count; ++b) cx.spawn([&s, b] { s.block(b); });
      cx.taskwait();
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DOUBLE, s.next.data(), counts.data(), displs.data(), MPI_DOUBLE, e.comm);
      s.x.swap(s.next);
    }
  });
}

}  // namespace dense
