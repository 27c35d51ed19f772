// Compiled by the tests, not built: broadcast<i, j, ...> needs a value that converts to every terminal's value
// type. Without BROADCAST_OK, a std::string sent to an int edge and a string edge must be refused at compile time
// with weft's message; with it, the same call to two string edges compiles.
#include <weft/flow.hpp>

#include <string>
#include <tuple>
#include <vector>

void make() {
  weft::flow::Edge<int, std::string> s("s");
#ifdef BROADCAST_OK
  weft::flow::Edge<int, std::string> other("other");
#else
  weft::flow::Edge<int, int> other("other");
#endif
  auto src = weft::flow::make_tt<int>(
      [](const int& k, auto& out) {
        weft::flow::broadcast<0, 1>(std::make_tuple(std::vector<int>{k, k + 1}, k), std::string("v"), out);
      },
      weft::flow::edges(weft::flow::Edge<int, void>()), weft::flow::edges(s, other), "src");
  (void)src;
}
