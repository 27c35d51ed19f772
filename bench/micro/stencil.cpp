// weft-bench-stencil: a D-point stencil of dependency tasks on one worker, the pattern where every task has D
// distinct predecessors (the chain of weft-bench-micro has one, however many addresses it touches). Used by
// atomics.sh to count the atomic instructions of a task with D predecessors.
//
//   weft-bench-stencil D TASKS
//
// W = 32 cells per step, each step in cells of its own: task (step r, cell j) reads cells j - D/2 .. j - D/2 + D - 1
// (periodic) of step r - 1 and writes cell j of step r, so its predecessors are exactly D tasks of step r - 1
// (fresh cells: no write-after-read edges). Steps: TASKS / W, rounded up. Options::max_tasks is above the task
// count, so every task is spawned before any runs: no edge is skipped because its predecessor finished first.
// Exit status 1 if the result differs from a sequential run, 2 for bad arguments.
#include <weft/weft.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kCells = 32;

int cell(int j, int k, int d) { return ((j + k - d / 2) % kCells + kCells) % kCells; }

std::uint64_t step_value(const std::uint64_t* prev, int j, int d) {
  std::uint64_t v = 1;
  for (int k = 0; k < d; ++k) v = v * 31 + prev[cell(j, k, d)];
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int d = argc == 3 ? std::atoi(argv[1]) : 0;
  const long long tasks = argc == 3 ? std::atoll(argv[2]) : 0;
  if (d < 1 || d > kCells || tasks < 1) {
    std::fprintf(stderr, "usage: weft-bench-stencil D TASKS  (1 <= D <= %d)\n", kCells);
    return 2;
  }
  const long long steps = (tasks + kCells - 1) / kCells;
  std::vector<std::uint64_t> cells(static_cast<std::size_t>((steps + 1) * kCells), 0);

  weft::Options o;
  o.num_threads = 1;
  o.max_tasks = static_cast<std::size_t>(steps * kCells + 1);
  weft::Runtime rt(o);
  rt.run([&](weft::Context& cx) {
    std::vector<weft::Access> acc;
    for (long long r = 1; r <= steps; ++r) {
      std::uint64_t* cur = &cells[static_cast<std::size_t>(r * kCells)];
      const std::uint64_t* prev = cur - kCells;
      for (int j = 0; j < kCells; ++j) {
        acc.clear();
        acc.push_back(weft::out(cur[j]));
        for (int k = 0; k < d; ++k) acc.push_back(weft::in(prev[cell(j, k, d)]));
        cx.spawn_accesses([cur, prev, j, d] { cur[j] = step_value(prev, j, d); }, acc.data(), acc.size());
      }
    }
    cx.taskwait();
  });

  std::vector<std::uint64_t> want(cells.size(), 0);
  for (long long r = 1; r <= steps; ++r)
    for (int j = 0; j < kCells; ++j) {
      const std::size_t at = static_cast<std::size_t>(r * kCells + j);
      want[at] = step_value(&want[at - static_cast<std::size_t>(j) - kCells], j, d);
    }
  if (want != cells) {
    std::fprintf(stderr, "weft-bench-stencil: wrong result\n");
    return 1;
  }
  std::printf("stencil D=%d: %lld tasks\n", d, steps * kCells);
  return 0;
}
