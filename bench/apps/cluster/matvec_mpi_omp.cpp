// matvec, MPI + OpenMP: every rank multiplies its row blocks, a `for` loop over them per iteration. A, x and y
// stay where they are: nothing to communicate.
#include "matvec.hpp"

namespace dense {

void matvec_mpi_omp(Matvec& s, const Env&) {
#pragma omp parallel
  for (int it = 0; it < s.sz.iterations; ++it) {
#pragma omp for schedule(static)
    for (int b = 0; b < s.blocks.count; ++b) s.block(b);
  }
}

}  // namespace dense
