// Compiled by the tests, not built: a template task's input edges have its key type. Without KEY_OK, an
// Edge<long, double> into a template task of int keys must be refused with weft's message alone; with it, an
// Edge<int, double> compiles.
#include <weft/flow.hpp>

void make() {
#ifdef KEY_OK
  weft::flow::Edge<int, double> in("in");
#else
  weft::flow::Edge<long, double> in("in");
#endif
  auto sink = weft::flow::make_tt<int>([](const int&, double) {}, weft::flow::edges(in), weft::flow::edges(), "sink");
  (void)sink;
}
