// cholesky, MPI + OpenMP tasks: one thread creates the tasks of every step with depend clauses on the tiles;
// the panels travel between the task phases. At step k the owner of column k waits only for the tasks that
// produce panel k (taskwait with depend: the earlier steps' updates elsewhere go on meanwhile), then every
// rank takes part in the broadcast of panel k (MPI_Bcast from the creating thread) and creates the updates of
// its columns with it.
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
      for (int i = k; i < nt; ++i) {
#pragma omp taskwait depend(in : s.tile(i, k)[0])
      }
    }
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
