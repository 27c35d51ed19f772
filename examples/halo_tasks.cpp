// MPI inside tasks: a 1D heat equation split over the ranks, each rank's cells in blocks, the halo exchange as
// tasks of the graph (weft/mpi.hpp), the time loop recorded once by taskiter and replayed with fresh requests.
// Checked against the same computation done sequentially on every rank.
//
//   mpirun -np 3 weft-halo-tasks
#include <mpi.h>
#include <weft/mpi.hpp>
#include <weft/weft.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

constexpr int kCells = 64, kBlock = 16, kBlocks = kCells / kBlock, kSteps = 100;

// One step of block b: cells [b*kBlock, (b+1)*kBlock) of `next` from `cur`, which holds ghost cells at both ends.
void relax(const std::vector<double>& cur, std::vector<double>& next, int b) {
  for (int i = 1 + b * kBlock; i <= (b + 1) * kBlock; ++i) next[i] = cur[i] + 0.25 * (cur[i - 1] - 2 * cur[i] + cur[i + 1]);
}

int main(int argc, char** argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int left = rank > 0 ? rank - 1 : MPI_PROC_NULL, right = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
  auto initial = [](long g) { return std::sin(0.1 * static_cast<double>(g)); };
  // u[s] with s = step parity: cells 1..kCells, ghosts at 0 and kCells+1 (fixed at 0 on the outer ends).
  std::vector<double> u[2];
  for (auto& v : u) {
    v.assign(kCells + 2, 0.0);
    for (int i = 1; i <= kCells; ++i) v[i] = initial(static_cast<long>(rank) * kCells + i - 1);
  }
  MPI_Comm comm = MPI_COMM_WORLD;
  weft::Runtime rt;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(
        kSteps,
        [&](weft::Context& it, std::uint64_t step) {
          auto& cur = u[step % 2];
          auto& next = u[(step + 1) % 2];
          const int tag = static_cast<int>(step % 2);  // receives of consecutive steps may be posted either way
          // Halo exchange: each task completes when its request has; the ghosts are data like any other.
          it.spawn([&, tag](weft::Context& c) { weft::mpi::isend(c, &cur[1], 1, MPI_DOUBLE, left, tag, comm); },
                   weft::in(cur[1]));
          it.spawn([&, tag](weft::Context& c) { weft::mpi::isend(c, &cur[kCells], 1, MPI_DOUBLE, right, tag, comm); },
                   weft::in(cur[1 + (kBlocks - 1) * kBlock]));
          it.spawn([&, tag](weft::Context& c) { weft::mpi::irecv(c, &cur[0], 1, MPI_DOUBLE, left, tag, comm); },
                   weft::out(cur[0]));
          it.spawn([&, tag](weft::Context& c) { weft::mpi::irecv(c, &cur[kCells + 1], 1, MPI_DOUBLE, right, tag, comm); },
                   weft::out(cur[kCells + 1]));
          // Blocks name their first cell; a block reads its neighbours (or the ghosts) and writes its cells.
          for (int b = 0; b < kBlocks; ++b) {
            const double& above = b == 0 ? cur[0] : cur[1 + (b - 1) * kBlock];
            const double& below = b == kBlocks - 1 ? cur[kCells + 1] : cur[1 + (b + 1) * kBlock];
            it.spawn([&, b] { relax(cur, next, b); }, weft::in(above), weft::in(cur[1 + b * kBlock]),
                     weft::in(below), weft::out(next[1 + b * kBlock]));
          }
        },
        weft::unroll(2), weft::inout(u[0]), weft::inout(u[1]));
  });
  // The same steps sequentially over the whole rod, on every rank.
  std::vector<double> a(static_cast<std::size_t>(size) * kCells + 2, 0.0), b = a;
  for (std::size_t i = 1; i + 1 < a.size(); ++i) a[i] = initial(static_cast<long>(i) - 1);
  for (int s = 0; s < kSteps; ++s) {
    for (std::size_t i = 1; i + 1 < a.size(); ++i) b[i] = a[i] + 0.25 * (a[i - 1] - 2 * a[i] + a[i + 1]);
    std::swap(a, b);
  }
  double diff = 0;
  for (int i = 1; i <= kCells; ++i) diff = std::fmax(diff, std::fabs(u[kSteps % 2][i] - a[static_cast<std::size_t>(rank) * kCells + i]));
  double worst = 0;
  MPI_Reduce(&diff, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
  if (rank == 0)
    std::printf("%d processes, %d steps: max difference from the sequential computation %g (%s)\n", size, kSteps, worst,
                worst == 0 ? "ok" : "WRONG");
  MPI_Finalize();
  return worst == 0 ? 0 : 1;
}
