// matmul, serial reference: the whole problem on one process.
#include "matmul.hpp"

namespace dense {

void matmul_serial(Matmul& s, const Env&) {
  for (int it = 0; it < s.sz.iterations; ++it)
    for (int i = 0; i < s.c.rows; ++i)
      for (int j = 0; j < s.c.cols; ++j) s.tile(i, j);
}

}  // namespace dense
