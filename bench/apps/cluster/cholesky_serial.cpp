// cholesky, serial reference: the whole matrix on one process, the steps in order.
#include "cholesky.hpp"

namespace dense {

void cholesky_serial(Cholesky& s, const Env&) {
  for (int k = 0; k < s.nt; ++k) {
    s.potrf(k);
    for (int i = k + 1; i < s.nt; ++i) s.trsm(k, i);
    for (int j = k + 1; j < s.nt; ++j) {
      s.syrk(k, j);
      for (int i = j + 1; i < s.nt; ++i) s.gemm(k, i, j);
    }
  }
}

}  // namespace dense
