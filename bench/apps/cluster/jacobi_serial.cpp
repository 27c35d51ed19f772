// jacobi, serial reference: the whole problem on one process.
#include "jacobi.hpp"

namespace dense {

void jacobi_serial(Jacobi& s, const Env&) {
  for (int it = 0; it < s.sz.iterations; ++it) {
    for (int b = 0; b < s.blocks.count; ++b) s.block(b);
    s.x.swap(s.next);
  }
}

}  // namespace dense
