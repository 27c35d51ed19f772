// jacobi, MPI + OpenMP: every rank updates its row blocks (a `for` loop over them), then the ranks exchange
// their new parts of x with a collective (MPI_Allgatherv in place) before the next step.
#include <mpi.h>

#include "jacobi.hpp"

namespace dense {

void jacobi_mpi_omp(Jacobi& s, const Env& e) {
  std::vector<int> counts(static_cast<std::size_t>(e.size)), displs(counts.size());
  for (int r = 0; r < e.size; ++r) {
    const Range g = blocks_of(s.sz.nb(), Part{r, e.size});
    counts[static_cast<std::size_t>(r)] = g.count * s.sz.bs;
    displs[static_cast<std::size_t>(r)] = g.first * s.sz.bs;
  }
  for (int it = 0; it < s.sz.iterations; ++it) {
#pragma omp parallel for schedule(static)
    for (int b = 0; b < s.blocks.count; ++b) s.block(b);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DOUBLE, s.next.data(), counts.data(), displs.data(), MPI_DOUBLE, e.comm);
    s.x.swap(s.next);
  }
}

}  // namespace dense
