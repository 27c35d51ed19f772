// The job as an MPI launcher (mpirun, mpiexec) describes it in the environment of the processes it starts, read
// before MPI is initialised (or when the program is built without MPI): this process's rank and the number of
// processes; 0 and 1 when started without a launcher.
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

}  // namespace taskbench
