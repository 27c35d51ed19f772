// The job as an MPI launcher (mpirun, mpiexec) describes it in the environment of the processes it starts, read
// before MPI is initialised (or when the program is built without MPI): this process's rank and the number of
// processes, 0 and 1 when started without a launcher; and the block distribution of a graph's points over the
// ranks that the multi-process programs share (Task Bench's MPI implementations use the same one).
#pragma once

#include <algorithm>
#include <cstdlib>

namespace taskbench {

inline int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

/// The same variables weft reads to decide whether a flow graph runs on several processes (src/flow/remote.cpp).
inline int launcher_size() {
  int size = 1;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const char* value = std::getenv(name)) size = std::max(size, std::atoi(value));
  return size;
}

namespace mpi {

/// The points of one graph owned by one rank: [first(rank), first(rank + 1)), first(r) = r * W / ranks.
struct Block {
  long lo, hi;
  Block(long width, int rank, int ranks)
      : lo(static_cast<long>(static_cast<long long>(rank) * width / ranks)),
        hi(static_cast<long>(static_cast<long long>(rank + 1) * width / ranks)) {}
  bool owns(long point) const { return point >= lo && point < hi; }
};

/// The rank whose block holds `point`: the largest r with r * W / ranks <= point.
inline int owner_of(long point, long width, int ranks) {
  return static_cast<int>(((static_cast<long long>(point) + 1) * ranks - 1) / width);
}

}  // namespace mpi

}  // namespace taskbench
