// Compiled by the tests, not built: an offloaded body (weft::offload, weft::node) must be trivially copyable.
// Without OFFLOAD_OK the capture of a std::vector must be refused at compile time with weft's message; with it,
// a body capturing values and a pointer compiles (so that the refusal is known to come from the capture).
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

#include <vector>

void spawn_one(weft::Context& cx, double* data) {
#ifdef OFFLOAD_OK
  const int n = 10;
  cx.spawn([n, data] { data[0] = n; }, weft::out(*data), weft::offload);
#else
  std::vector<double> v(10);
  cx.spawn([v, data] { data[0] = v[0]; }, weft::out(*data), weft::node(1));
#endif
}
