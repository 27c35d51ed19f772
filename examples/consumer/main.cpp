// Out-of-tree check of an installed weft: a small dependency graph whose result is known.
//   a = 1 .. 16 (16 independent writers of disjoint blocks, named by their first element)
//   b[i] = 2 * a[i]    (each waits for its block of a)
//   c = sum(b)         (commutative updates: any order, never two at once)
//   d = c + 1          (waits for every update of c)
#include <cstdio>
#include <weft/weft.hpp>

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
  std::printf("weft-consumer: d = %ld (expected %ld), %llu tasks on %u workers\n", d, expected,
              static_cast<unsigned long long>(st.tasks_executed), rt.num_workers());
  if (d != expected || st.tasks_executed < 3 * kBlocks + 1 || st.tasks_cancelled != 0) {
    std::printf("weft-consumer: FAILED\n");
    return 1;
  }
  std::printf("weft-consumer: OK\n");
  return 0;
}
