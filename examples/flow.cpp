// flow: a template task graph. "step" doubles a value along the keys 0, 1, ..., N (each task sends to the task
// of the next key); the last one sends the result to "sink". Prints 2^N.
#include <cstdio>
#include <weft/weft.hpp>

int main() {
  constexpr int N = 20;
  double result = 0;
  weft::flow::Edge<int, double> e, done;  // key type, value type
  auto step = weft::flow::make_tt<int>(   // key type
      [](const int& k, double x, auto& out) {
        if (k < N)
          weft::flow::send<0>(k + 1, x * 2, out);  // output terminal 0: edge e, to the task of key k + 1
        else
          weft::flow::send<1>(k, x, out);  // output terminal 1: edge done
      },
      weft::flow::edges(e), weft::flow::edges(e, done), "step");
  auto sink = weft::flow::make_tt<int>([&](const int&, double x) { result = x; }, weft::flow::edges(done),
                                       weft::flow::edges(), "sink");
  auto g = weft::flow::graph(step);  // step, and sink through edge done; its own weft::Runtime
  g.invoke(0, 1.0);                  // seeds the task of key 0 of step
  g.wait();                          // runs until no task is left
  std::printf("2^%d = %.0f on %u workers\n", N, result, g.runtime().num_workers());
  return result == 1048576.0 ? 0 : 1;
}
