// matmul, MPI + OpenMP: every rank computes its tile rows of C, a `for` loop over its tiles per iteration.
// Every rank holds the B it needs: nothing to communicate.
#include "matmul.hpp"

namespace dense {

void matmul_mpi_omp(Matmul& s, const Env&) {
#pragma omp parallel
  for (int it = 0; it < s.sz.iterations; ++it) {
#pragma omp for collapse(2) schedule(static)
    for (int i = 0; i < s.c.rows; ++i)
      for (int j = 0; j < s.c.cols; ++j) s.tile(i, j);
  }
}

}  // namespace dense
