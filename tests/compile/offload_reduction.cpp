// Compiled by the tests, not built: a task with a reduction clause cannot be offloaded. Without OFFLOAD_OK the
// spawn must be refused with weft's message alone; with it, the same task without its offload clause compiles.
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

void spawn_one(weft::Context& cx, long& total) {
#ifdef OFFLOAD_OK
  cx.spawn([](weft::Context& c) { (void)c; }, weft::reduction(total, weft::sum));
#else
  cx.spawn([](weft::Context& c) { (void)c; }, weft::reduction(total, weft::sum), weft::offload);
#endif
}
