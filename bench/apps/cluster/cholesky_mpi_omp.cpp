// cholesky, MPI + OpenMP tasks: one thread creates the tasks of every step with depend clauses on the tiles,
// and the panels travel between the steps: at step k the owner of column k creates the tasks of panel k, every
// rank runs what it has created so far (taskwait), then takes part in the broadcast of panel k (MPI_Bcast
// from the creating thread) and creates the updates of its columns with it.
// The taskwait on every rank was the fastest of the forms measured with one thread per rank (2 ranks, n 4096,
// blocks of 256): without it, a rank whose threads are all in MPI_Bcast holds back the updates it has created
// until the other waits in turn, and the ranks take turns instead of working together (no faster than the
// serial version); waiting on the owner only for the tasks of its panel (taskwait depend) leaves it idle in
// MPI_Bcast, a blocking send, until the receiver has run its own backlog (1.3x slower than this form).
#include <mpi.h>

#include "cholesky.hpp"

namespace dense {

void cholesky_mpi_omp(Cholesky& s, const Env& e) {
  const int nt = s.nt;
#pragma omp parallel
#pragma omp single
  for (int k = 0; k < nt; ++k) {
    if (s.owns(k)) {
#pragma omp task depend(inout : s.tile(k, k)[0])
      s.potrf(k);
      for (int i = k + 1; i < nt; ++i) {
#pragma omp task depend(in : s.tile(k, k)[0]) depend(inout : s.tile(i, k)[0])
        s.trsm(k, i);
      }
    }
#pragma omp taskwait
    if (e.size > 1) MPI_Bcast(s.tile(k, k), s.panel_count(k), MPI_DOUBLE, s.owner(k), e.comm);
    for (int j = k + 1; j < nt; ++j) {
      if (!s.owns(j)) continue;
#pragma omp task depend(in : s.tile(j, k)[0]) depend(inout : s.tile(j, j)[0])
      s.syrk(k, j);
      for (int i = j + 1; i < nt; ++i) {
#pragma omp task depend(in : s.tile(i, k)[0], s.tile(j, k)[0]) depend(inout : s.tile(i, j)[0])
        s.gemm(k, i, j);
      }
    }
  }
}

}  // namespace dense
