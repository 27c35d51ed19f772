// The process's rank in a job of several processes, from the launcher's environment (no MPI call: the engine
// and the recorder do not link MPI), and the per-rank names of the profile and trace files.
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "weft/profile.hpp"

namespace weft {
namespace {

// A whole decimal integer in [0, 2^31 - 1), or -1 (unset, empty or anything else: not ours to reject).
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || *v < '0' || *v > '9') return -1;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || x >= 0x7fffffffLL) return -1;
  return static_cast<int>(x);
}

}  // namespace

ProcessRank process_rank() {
  // Launchers by family: Open MPI's mpirun, MPICH's and Intel MPI's Hydra (PMI), then PMIx alone (e.g. srun
  // --mpi=pmix), which names the rank but not the job's size.
  struct Family {
    const char* rank;
    const char* size;
  };
  for (const Family f : {Family{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, Family{"PMI_RANK", "PMI_SIZE"},
                         Family{"PMIX_RANK", nullptr}}) {
    const int rank = env_int(f.rank);
    if (rank < 0) continue;
    // Processes on this node: Open MPI's count, or Hydra's (MPICH, Intel MPI); neither: unknown.
    int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local < 1) local = env_int("MPI_LOCALNRANKS");
    if (local < 1) local = 0;
    if (!f.size) return ProcessRank{rank, 0, local};
    const int size = env_int(f.size);
    if (size > rank) return ProcessRank{rank, size, local};
  }
  return ProcessRank{};
}

std::string rank_file_name(const std::string& path, const ProcessRank& r) {
  if (!r.several() || path.empty()) return path;
  // A device or a pipe (/dev/null, a FIFO) is shared as it is: a suffix would name a file that is not there.
  struct stat st;
  if (path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0 ||
      (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)))
    return path;
  // ".rR" before the extension of the last path component ("prof.json" -> "prof.r1.json"); a name without
  // one, or whose only dot leads it (".prof"), gets it at the end.
  const std::size_t slash = path.find_last_of('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  std::size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || dot <= base) dot = path.size();
  return path.substr(0, dot) + ".r" + std::to_string(r.rank) + path.substr(dot);
}

}  // namespace weft
