// Compiled by the tests, not built: a broadcast's key list is a range of keys or one key. Without KEYS_OK, a
// std::string given for an int-keyed edge (meant as the key "12"?) must be refused at compile time with weft's
// message, not taken as the character keys '1' and '2'; with it, a vector of keys and one key compile.
#include <weft/flow.hpp>

#include <string>
#include <tuple>
#include <vector>

void make() {
  weft::flow::Edge<int, double> a("a"), b("b");
  auto src = weft::flow::make_tt<int>(
      [](const int& k, auto& out) {
#ifdef KEYS_OK
        weft::flow::broadcast<0, 1>(std::make_tuple(std::vector<int>{k}, k + 1), 1.0, out);
#else
        weft::flow::broadcast<0, 1>(std::make_tuple(std::vector<int>{k}, std::string("12")), 1.0, out);
#endif
      },
      weft::flow::edges(weft::flow::Edge<int, void>()), weft::flow::edges(a, b), "src");
  (void)src;
}
