// matvec, serial reference: the whole problem on one process.
#include "matvec.hpp"

namespace dense {

void matvec_serial(Matvec& s, const Env&) {
  for (int it = 0; it < s.sz.iterations; ++it)
    for (int b = 0; b < s.blocks.count; ++b) s.block(b);
}

}  // namespace dense
