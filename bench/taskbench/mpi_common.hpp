// What the Task Bench programs that run on several MPI processes share (taskbench-mpi, taskbench-mpi-nonblock,
// taskbench-weft-mpi, and taskbench-weft-flow under mpirun), besides launcher.hpp: the command line parsed on every rank with only rank
// 0's messages shown, the exactly-once marks gathered on rank 0, and failures that end the whole job.
#pragma once

#include <mpi.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>
#include <utility>
#include <vector>

#include "core/core.hpp"
#include "launcher.hpp"

namespace taskbench::mpi {

/// Parses the command line before MPI_Init, then runs `check(app)` (which may exit too), so that a rank that
/// exits (bad flags, -h, --dump-graph) leaves MPI untouched and mpirun returns its exit status. Every rank
/// parses; only rank 0's messages are shown.
template <class Check>
App parse_command_line(int argc, char** argv, Check&& check) {
  struct Silence {
    int saved_out = -1, saved_err = -1;
    explicit Silence(bool on) {
      if (!on) return;
      std::fflush(stdout);
      std::fflush(stderr);
      const int null = ::open("/dev/null", O_WRONLY);
      if (null < 0) return;
      saved_out = ::dup(1);
      saved_err = ::dup(2);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::close(null);
    }
    ~Silence() {
      if (saved_out < 0) return;
      std::fflush(stdout);
      std::fflush(stderr);
      ::dup2(saved_out, 1);
      ::dup2(saved_err, 2);
      ::close(saved_out);
      ::close(saved_err);
    }
  } silence(launcher_rank() != 0);
  App app(argc, argv);
  check(app);
  return app;
}

/// Sums every rank's exactly-once marks into rank 0's graphs, for its end-of-run check (collective).
inline void gather_run_marks(App& app, int rank) {
  if (app.skip_graph_validation) return;
  for (TaskGraph& graph : app.graphs) {
    const std::vector<unsigned char> mine = graph.run_marks();
    std::vector<unsigned char> sum(mine.size());
    MPI_Reduce(mine.data(), sum.data(), static_cast<int>(mine.size()), MPI_UNSIGNED_CHAR, MPI_SUM, 0,
               MPI_COMM_WORLD);
    if (rank == 0) graph.set_run_marks(sum);
  }
}

/// When stderr is a pipe (the launcher's), waits until the launcher has read what this process wrote to it, for
/// at most about a second: MPICH's mpiexec (Hydra) exits as soon as an abort reaches it and drops the output its
/// proxy has not read from the rank's pipe by then (as src/comm/mpi_env.cpp, before MPI_Abort).
inline void wait_until_stderr_read() {
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0 || !S_ISFIFO(st.st_mode)) return;
  for (int i = 0; i < 1000; ++i) {
    int unread = 0;
    if (ioctl(STDERR_FILENO, FIONREAD, &unread) != 0 || unread <= 0) return;
    const timespec one_ms{0, 1000000};
    nanosleep(&one_ms, nullptr);
  }
}

inline int g_failing_rank = 0;

/// A failed check on this rank ends the whole job: "error: rank R: <message>" on stderr, then MPI_Abort (a
/// plain exit would leave the other ranks waiting for this one's messages until mpirun noticed).
inline void abort_job_on_failure(int rank) {
  g_failing_rank = rank;
  set_failure_handler([](const char* message) {
    std::fprintf(stderr, "error: rank %d: %s\n", g_failing_rank, message);
    std::fflush(stderr);
    wait_until_stderr_read();
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; in case it does
  });
}

/// The start of a job of the MPI programs: MPI_Init, MPI errors fatal (the default, made explicit: an MPI error
/// aborts the whole job rather than leaving the other ranks waiting), failed checks ending the job. Returns
/// {rank, ranks}.
inline std::pair<int, int> start_job(int& argc, char**& argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  abort_job_on_failure(rank);
  return {rank, ranks};
}

/// -workers by default for a program of weft workers on several processes: the cores this rank may use, not all
/// of the machine's (which every rank of the node would take, and which a rank bound to one core would run on
/// that core). Those the launcher bound it to; unbound, the machine's shared by the ranks of this node.
/// Collective (after MPI_Init).
inline int default_workers_per_rank() {
  cpu_set_t mask;
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) < hardware) return std::max(1, CPU_COUNT(&mask));
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 1;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  return std::max(1, hardware / local);
}

}  // namespace taskbench::mpi
