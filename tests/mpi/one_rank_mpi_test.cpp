// weft::mpi on some ranks only: the program initialised MPI itself; rank 0 sends from a weft task, the other
// ranks receive with plain MPI and never call weft. The first weft::mpi call sets up weft's MPI environment,
// which must not include a collective (the other ranks would never join it: the job hung in MPI_Comm_dup).
// Then rank 0 receives an answer from a task while the others send with plain MPI.
#include <mpi.h>

#include <cstdio>
#include <span>
#include <utility>
#include <vector>

#include <weft/mpi.hpp>
#include <weft/weft.hpp>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int failures = 0;
  if (rank == 0) {
    weft::Options o;
    o.num_threads = 1;
    weft::Runtime rt(o);
    std::vector<std::vector<int>> out(static_cast<std::size_t>(size), std::vector<int>(64));
    std::vector<int> back(static_cast<std::size_t>(size), -1);
    rt.run([&](weft::Context& cx) {
      for (int d = 1; d < size; ++d) {
        auto& v = out[static_cast<std::size_t>(d)];
        for (int i = 0; i < 64; ++i) v[static_cast<std::size_t>(i)] = d * 1000 + i;
        cx.spawn([&, d](weft::Context& c) { weft::mpi::isend(c, std::span(std::as_const(v)), d, 7, MPI_COMM_WORLD); });
        cx.spawn([&, d](weft::Context& c) {
          weft::mpi::irecv(c, std::span(&back[static_cast<std::size_t>(d)], 1), d, 8, MPI_COMM_WORLD);
        });
      }
    });
    for (int d = 1; d < size; ++d)
      if (back[static_cast<std::size_t>(d)] != d * 1000 + 63 + d) {
        std::fprintf(stderr, "rank 0: answer of rank %d is %d\n", d, back[static_cast<std::size_t>(d)]);
        ++failures;
      }
  } else {
    std::vector<int> in(64, -1);
    MPI_Recv(in.data(), 64, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < 64; ++i)
      if (in[static_cast<std::size_t>(i)] != rank * 1000 + i) ++failures;
    int answer = in[63] + rank;
    MPI_Send(&answer, 1, MPI_INT, 0, 8, MPI_COMM_WORLD);
  }
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("weft::mpi on rank 0 only, %d ranks: %s\n", size, all ? "FAILED" : "ok");
  MPI_Finalize();
  return all ? 1 : 0;
}
