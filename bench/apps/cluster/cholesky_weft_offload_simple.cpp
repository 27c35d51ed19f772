// cholesky, one program (weft/cluster.hpp): rank 0 runs the serial loops, each kernel a task on the tiles it
// names, offloaded by the default policy (where most of the task's bytes are). The tiles live in dmalloc
// memory (CholeskyOffload in cholesky.hpp: columns dealt cyclically over the ranks, as mpi-omp's are).
#include <weft/cluster.hpp>

#include "cholesky.hpp"

namespace dense {

void cholesky_weft_offload_simple(Cholesky& s, const Env& e) {
  e.cluster->run([&](weft::Context& cx) {
    const int nt = s.nt, bs = s.sz.bs;
    const std::size_t tile = s.sz.tile();
    auto t = [&](int i, int j) { return CholeskyOffload::tile(s, i, j); };
    for (int k = 0; k < nt; ++k) {
      double* akk = t(k, k);
      cx.spawn([=] { Cholesky::potrf_or_throw(akk, k, bs); }, weft::inout(akk, tile), weft::offload);
      for (int i = k + 1; i < nt; ++i)
        cx.spawn([=, aik = t(i, k)] { Cholesky::trsm(akk, aik, bs); }, weft::in(akk, tile), weft::inout(t(i, k), tile),
                 weft::offload);
      for (int j = k + 1; j < nt; ++j) {
        double *ajk = t(j, k), *ajj = t(j, j);
        cx.spawn([=] { Cholesky::syrk(ajk, ajj, bs); }, weft::in(ajk, tile), weft::inout(ajj, tile), weft::offload);
        for (int i = j + 1; i < nt; ++i)
          cx.spawn([=, aik = t(i, k), aij = t(i, j)] { Cholesky::gemm(aik, ajk, aij, bs); }, weft::in(t(i, k), tile),
                   weft::in(ajk, tile), weft::inout(t(i, j), tile), weft::offload);
      }
    }
    cx.taskwait_noflush();  // L stays where it was computed, as mpi-omp's (collect brings it to rank 0)
  });
}

}  // namespace dense
