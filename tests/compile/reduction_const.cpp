// Compiled by the tests, not built: a reduction's datum must be modifiable. Without REDUCTION_OK a const datum
// must be refused with weft's message alone; with it, a modifiable one compiles.
#include <weft/weft.hpp>

void spawn_one(weft::Context& cx, long& total) {
#ifdef REDUCTION_OK
  long& datum = total;
#else
  const long& datum = total;
#endif
  cx.spawn([] {}, weft::reduction(datum, weft::sum));
}
