// A cluster on some processes only (`mpiexec -n 1 P cluster : -n 1 P plain`): the plain process never sets up
// MPI, so the cluster process's MPI_Init_thread waits for it forever. weft says why after 10 s and, with
// WEFT_WATCHDOG (the test sets 11 s), ends that process with status 1, so that the launcher ends the job. The
// plain process stays 30 s: Open MPI ends a job by itself when a process that never called MPI_Init exits while
// another waits in it, which would race with the watchdog (seen under load: the job ended after 1 s, without
// weft's lines).
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

#include <chrono>
#include <cstdio>
#include <thread>
#include <string>

int main(int argc, char** argv) {
  const bool cluster = argc > 1 && std::string(argv[1]) == "cluster";
  weft::Options o;
  o.num_threads = 1;
  o.cluster = cluster;
  weft::Runtime rt(o);
  long sum = 0;
  rt.run([&](weft::Context& cx) {
    for (int i = 1; i <= 4; ++i) cx.spawn([&sum, i] { sum += i; }, weft::inout(sum));
  });
  std::printf("%s process: sum %ld\n", cluster ? "cluster" : "plain", sum);
  std::fflush(stdout);
  if (!cluster) std::this_thread::sleep_for(std::chrono::seconds(30));  // ended by the launcher before
  return 0;
}
