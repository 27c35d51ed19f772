// weft-bench-micro-libomp — the LLVM OpenMP peer: omp_kernels.cpp built by clang++-16 -fopenmp=libomp, run by
// weft-bench-micro as a subprocess (libgomp and libomp cannot share one process: both export the omp_* and
// GOMP_* entry points). One request per line on stdin, one reply per line on stdout:
//
//   describe                          -> ok <compiler and OpenMP description>
//   chain <deps> <tasks> <mode>       -> ok <seconds> <check 0|1> <got> <want>     mode 1: one thread, 2: two
//   tree <height> <cycles> <workers>  -> ok <seconds> <check 0|1> <got> <want>
//   independent <tasks> <workers>     -> ok <seconds> <check 0|1> <got> <want>
//   wake <workers>                    -> ok awake   (a parallel region of `workers` threads: wbench::omp::wake)
//   quiesce                           -> ok idle|busy   (once this process's threads have stopped spinning
//                                      (see wbench::quiesce: libomp's idle threads spin for KMP_BLOCKTIME),
//                                      or "busy" if they still spin after 2 s)
//   quit
#include <cstdio>
#include <cstring>
#include <string>

#include "omp_kernels.hpp"

int main(int argc, char** argv) {
  bool server = false;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--server") == 0) server = true;
  if (!server) {
    std::fprintf(stderr,
                 "weft-bench-micro-libomp: the LLVM OpenMP peer of weft-bench-micro; it is started by "
                 "weft-bench-micro (protocol: see omp_server.cpp).\n%s\n",
                 wbench::omp::describe().c_str());
    return 2;
  }
  char line[512];
  while (std::fgets(line, sizeof line, stdin)) {
    char cmd[32] = {};
    long long a = 0, b = 0, c = 0;
    const int got = std::sscanf(line, "%31s %lld %lld %lld", cmd, &a, &b, &c);
    if (got < 1) continue;
    wbench::Result r;
    bool measured = true;
    if (std::strcmp(cmd, "quit") == 0) {
      return 0;
    } else if (std::strcmp(cmd, "quiesce") == 0) {
      std::printf(wbench::quiesce() ? "ok idle\n" : "ok busy\n");
      measured = false;
    } else if (std::strcmp(cmd, "wake") == 0 && got == 2) {
      wbench::omp::wake(int(a));
      std::printf("ok awake\n");
      measured = false;
    } else if (std::strcmp(cmd, "describe") == 0) {
      std::printf("ok %s\n", wbench::omp::describe().c_str());
      measured = false;
    } else if (std::strcmp(cmd, "chain") == 0 && got == 4) {
      r = wbench::omp::chain(int(a), b, static_cast<wbench::omp::ChainMode>(c));
    } else if (std::strcmp(cmd, "tree") == 0 && got == 4) {
      r = wbench::omp::tree(int(a), static_cast<std::uint64_t>(b), int(c));
    } else if (std::strcmp(cmd, "independent") == 0 && got == 3) {
      r = wbench::omp::independent(a, int(b));
    } else {
      std::printf("error bad request: %s", line);
      measured = false;
    }
    if (measured) {
      std::printf("ok %.9f %d %lld %lld\n", r.seconds, r.ok ? 1 : 0, r.got, r.want);
    }
    std::fflush(stdout);
  }
  return 0;
}
