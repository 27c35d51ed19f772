// Two builds of one program in one job (`mpiexec -n 1 A : -n 1 B`, A and B built from this file with different
// WEFT_TEST_BUILD values, so their segments have the same sizes and only their bytes differ): constructing a
// cluster Runtime refuses them on every rank with a clear message. Task bodies are named by their offset in the
// executable; two builds accepted as one would run each other's code. With a size as argument (one build, a
// different Options::cluster_memory per process) it is refused too: each rank's lmalloc range depends on it.
#include <mpi.h>
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

#ifndef WEFT_TEST_BUILD
#error "built twice, with -DWEFT_TEST_BUILD=1 and 2"
#endif

// Different in the two builds, of the same size.
#if WEFT_TEST_BUILD == 1
const char* const build_mark = "build one";
#else
const char* const build_mark = "build two";
#endif

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int rc = 1;
  try {
    weft::Options o;
    o.num_threads = 1;
    o.cluster = true;
    o.cluster_memory = std::size_t{1} << 29;
    if (argc > 1) o.cluster_memory = std::stoull(argv[1]);  // the same build, a size per process
    weft::Runtime rt(o);
    std::printf("rank %d (%s): not refused\n", rank, build_mark);
  } catch (const std::runtime_error& e) {
    std::printf("rank %d (%s): refused: %s\n", rank, build_mark, e.what());
    rc = 0;
  }
  std::fflush(stdout);
  MPI_Finalize();
  return rc;
}
