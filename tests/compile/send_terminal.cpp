// Compiled by the tests, not built: send<i> names an output terminal of the template task. Without SEND_OK,
// send<3> from a task with one output must be refused with weft's message alone (no error from std::tuple);
// with it, send<0> compiles.
#include <weft/flow.hpp>

#ifdef SEND_OK
constexpr int kTerminal = 0;
#else
constexpr int kTerminal = 3;
#endif

void make() {
  weft::flow::Edge<int, double> e("e");
  auto src = weft::flow::make_tt<int>([](const int& k, auto& out) { weft::flow::send<kTerminal>(k, 1.0, out); },
                                      weft::flow::edges(weft::flow::Edge<int, void>()), weft::flow::edges(e), "src");
  (void)src;
}
