// hello: four tasks ordered only by the data they declare. Prints the sum 1 + 2 + ... + 1000.
#include <cstdio>
#include <vector>
#include <weft/weft.hpp>

int main() {
  weft::Runtime rt;  // worker count etc. from WEFT_* environment variables
  std::vector<long> v(1000);
  long lo = 0, hi = 0, total = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { for (int i = 0; i < 1000; ++i) v[i] = i + 1; }, weft::out(v));
    cx.spawn([&] { for (int i = 0; i < 500; ++i) lo += v[i]; }, weft::in(v), weft::out(lo));
    cx.spawn([&] { for (int i = 500; i < 1000; ++i) hi += v[i]; }, weft::in(v), weft::out(hi));
    cx.spawn([&] { total = lo + hi; }, weft::in(lo), weft::in(hi), weft::out(total));
  });  // returns once every task has finished; the two sums may run in parallel
  std::printf("sum 1..1000 = %ld on %u workers\n", total, rt.num_workers());
  return total == 500500 ? 0 : 1;
}
