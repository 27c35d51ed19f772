// Compiled by the tests, not built: sendk<i> (control only) is for a control edge (Edge<K, void>). Without
// SEND_OK, sendk on an edge of doubles must be refused with weft's message alone; with it, sendk on a control
// edge compiles.
#include <weft/flow.hpp>

void make() {
#ifdef SEND_OK
  weft::flow::Edge<int, void> e("e");
#else
  weft::flow::Edge<int, double> e("e");
#endif
  auto src = weft::flow::make_tt<int>([](const int& k, auto& out) { weft::flow::sendk<0>(k, out); },
                                      weft::flow::edges(weft::flow::Edge<int, void>()), weft::flow::edges(e), "src");
  (void)src;
}
