// reduction: a histogram and a maximum computed by concurrent tasks, each adding to its worker's private copy;
// the copies are combined once, before the task that reads the results runs.
#include <array>
#include <cstdio>
#include <weft/weft.hpp>

int main() {
  weft::Runtime rt;  // worker count etc. from WEFT_* environment variables
  long total = 0, largest = 0;
  std::array<long, 4> hist{};
  auto add = weft::reducer(std::array<long, 4>{}, [](std::array<long, 4>& into, const std::array<long, 4>& from) {
    for (std::size_t k = 0; k < into.size(); ++k) into[k] += from[k];
  });
  rt.run([&](weft::Context& cx) {
    for (long i = 1; i <= 1000; ++i)
      cx.spawn([&, i](weft::Context& t) {
        t.local(total) += i;                        // this worker's copy of total
        t.local(hist)[static_cast<std::size_t>(i % 4)] += 1;
        long& m = t.local(largest);
        if (i * 7919 % 1009 > m) m = i * 7919 % 1009;  // a maximum
      }, weft::reduction(total, weft::sum), weft::reduction(hist, add), weft::reduction(largest, weft::maximum));
    cx.spawn([&] { std::printf("sum 1..1000 = %ld, max = %ld, bins = %ld %ld %ld %ld\n", total, largest, hist[0],
                               hist[1], hist[2], hist[3]); },
             weft::in(total), weft::in(largest), weft::in(hist));  // after the combination
  });
  return total == 500500 && largest == 1008 && hist[0] == 250 ? 0 : 1;
}
