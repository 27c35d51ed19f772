// Out-of-tree check of an installed weft: a small dependency graph whose result is known.
//   a = 1 .. 16 (16 independent writers of disjoint blocks, named by their first element)
//   b[i] = 2 * a[i]    (each waits for its block of a)
//   c = sum(b)         (commutative updates: any order, never two at once)
//   d = c + 1          (waits for every update of c)
// then the templates a user's compiler instantiates from the other headers (built with GCC and, by
// scripts/check-install.sh, with Clang when installed): a taskiter, an offloadable task, a flow graph with an
// aggregator of over-aligned values.
#include <atomic>
#include <cstdio>
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

struct alignas(32) Wide {
  double v;
};

constexpr int kBlocks = 16, kBlock = 64, kN = kBlocks * kBlock;
long a[kN], b[kN];

int main() {
  long c = 0, d = 0;

  weft::Options options;
  options.num_threads = 2;
  weft::Runtime rt(options);
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < kN; k += kBlock) {
      cx.spawn([k] { for (int i = k; i < k + kBlock; ++i) a[i] = i + 1; }, weft::out(a[k]));
      cx.spawn([k] { for (int i = k; i < k + kBlock; ++i) b[i] = 2 * a[i]; }, weft::in(a[k]), weft::out(b[k]));
      cx.spawn([k, &c] { long s = 0; for (int i = k; i < k + kBlock; ++i) s += b[i]; c += s; },
               weft::in(b[k]), weft::commutative(c));
    }
    cx.spawn([&] { d = c + 1; }, weft::in(c), weft::out(d), weft::label("final"));
    cx.taskwait();
  });

  const long expected = long{kN} * (kN + 1) + 1;  // 2 * (1 + ... + kN) + 1
  const weft::Stats st = rt.stats();

  long iterated = 0, offloaded = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(10, [&](weft::Context& it) { it.spawn([&] { ++iterated; }, weft::inout(iterated)); },
                weft::inout(iterated));
    long* x = weft::dmalloc<long>(1);
    long factor = 6;  // a captured value, copied with the closure
    cx.spawn([x, factor] { *x = 7 * factor; }, weft::out(*x), weft::offload);
    cx.taskwait();
    offloaded = *x;
    weft::dfree(x);
  });
  // Keys 0 .. 15 each send one value to the task of key k / 4, which waits for 4 of them.
  std::atomic<double> aggregated{0};
  {
    weft::flow::Edge<int, int> seeds;
    weft::flow::Edge<int, Wide> parts;
    auto make = weft::flow::make_tt<int>(
        [](const int& k, int v, auto& out) { weft::flow::send<0>(k / 4, Wide{static_cast<double>(v)}, out); },
        weft::flow::edges(seeds), weft::flow::edges(parts), "make");
    auto sum = weft::flow::make_tt<int>(
        [&aggregated](const int&, const weft::flow::Aggregator<Wide>& values) {
          double s = 0;
          for (const Wide& w : values) s += w.v;
          aggregated.fetch_add(s);
        },
        weft::flow::edges(weft::flow::make_aggregator(parts, 4)), weft::flow::edges(), "sum");
    auto g = weft::flow::graph(rt, make);
    for (int k = 0; k < 16; ++k) make->invoke(k, k + 1);
    g.wait();
  }

  std::printf("weft-consumer: d = %ld (expected %ld), %llu tasks on %u workers\n", d, expected,
              static_cast<unsigned long long>(st.tasks_executed), rt.num_workers());
  std::printf("weft-consumer: taskiter %ld (expected 10), offloaded %ld (expected 42), aggregated %g (expected "
              "136)\n", iterated, offloaded, aggregated.load());
  if (d != expected || st.tasks_executed < 3 * kBlocks + 1 || st.tasks_cancelled != 0 || iterated != 10 ||
      offloaded != 42 || aggregated.load() != 136) {
    std::printf("weft-consumer: FAILED\n");
    return 1;
  }
  std::printf("weft-consumer: OK\n");
  return 0;
}
