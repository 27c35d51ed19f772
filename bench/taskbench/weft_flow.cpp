// taskbench-weft-flow: Task Bench on weft's flow graphs; the graph and its run are in weft_flow.hpp. This file
// holds main() and the single-process instantiation for outputs above 16 bytes; the others (Packet outputs) are
// compiled apart, in weft_flow_small.cpp and weft_flow_ranks.cpp: in this file they made GCC inline less of the
// single-process graph (5% more instructions per task, callgrind).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/core.hpp"
#include "launcher.hpp"
#include "weft_flow.hpp"

namespace {

using namespace taskbench::weft_flow;

/// Exits 2 with a message if a graph asks for -field (no buffers per point here) or does not fit the 32-bit
/// fields of PointKey and Output (or, on several processes, the largest Packet).
void check_limits(const taskbench::App& app, bool several) {
  app.reject_fields("taskbench-weft-flow", "outputs travel to their consumers as values of the flow graph, with no "
                                           "buffers per point");
  constexpr long kMax = std::numeric_limits<std::int32_t>::max();
  if (static_cast<long>(app.graphs.size()) > kMax) {
    std::fprintf(stderr, "error: taskbench-weft-flow supports at most %ld graphs (-and)\n", kMax);
    std::exit(2);
  }
  for (const auto& g : app.graphs) {
    if (g.max_width > kMax) {
      std::fprintf(stderr, "error: taskbench-weft-flow supports -width up to %ld (got %ld)\n", kMax, g.max_width);
      std::exit(2);
    }
    if (g.output_bytes > std::numeric_limits<std::uint32_t>::max()) {
      std::fprintf(stderr, "error: taskbench-weft-flow supports -output up to %u bytes (got %zu)\n",
                   std::numeric_limits<std::uint32_t>::max(), g.output_bytes);
      std::exit(2);
    }
    if (several && g.output_bytes > kMaxPacket) {
      std::fprintf(stderr,
                   "error: taskbench-weft-flow on several processes supports -output up to %zu bytes (got %zu): "
                   "outputs cross processes inline\n",
                   kMaxPacket, g.output_bytes);
      std::exit(2);
    }
  }
}

/// TASKBENCH_WEFT_FLOW_FAULT=graph:t:point (see Fault), or no fault; exits 2 on a malformed value.
Fault fault_from_environment(bool several) {
  Fault f;
  const char* text = std::getenv("TASKBENCH_WEFT_FLOW_FAULT");
  if (!text) return f;
  char end = 0;
  if (std::sscanf(text, "%ld:%ld:%ld%c", &f.graph, &f.t, &f.point, &end) != 3 || f.graph < 0 || f.t < 0 ||
      f.point < 0) {
    std::fprintf(stderr, "error: TASKBENCH_WEFT_FLOW_FAULT='%s': expected graph:t:point\n", text);
    std::exit(2);
  }
  if (!several) {
    std::fprintf(stderr, "error: TASKBENCH_WEFT_FLOW_FAULT applies to runs on several processes only\n");
    std::exit(2);
  }
  return f;
}


}  // namespace

int main(int argc, char** argv) {
  // Several processes when a launcher started several (mpirun -np N, N > 1): the same test as weft's.
  const int launched = taskbench::launcher_size();
  const bool several = launched > 1;
#ifdef TASKBENCH_WEFT_FLOW_MPI
  // The program initialises MPI itself (weft accepts it at MPI_THREAD_MULTIPLE and then leaves it alone),
  // because it needs MPI before weft does (its rank for the report and the seeds, the barriers around the timer,
  // the marks gathered on rank 0) and after weft is done with it (the graph's transport is freed collectively,
  // before MPI_Finalize). The flags are parsed before MPI_Init, as taskbench-mpi does, so that bad input ends
  // every rank alike with status 2, only rank 0 saying why. On one process MPI is not initialised at all.
  taskbench::App app = several ? taskbench::mpi::parse_command_line(argc, argv,
                                                                    [](taskbench::App& a) { check_limits(a, true); })
                               : taskbench::App(argc, argv);
#else
  // Built without MPI: the launcher's processes would each run the whole graph and report; refuse instead.
  if (several) {
    std::fprintf(stderr, "error: taskbench-weft-flow was built without MPI: it runs on one process only, not %d\n",
                 launched);
    return 2;
  }
  taskbench::App app(argc, argv);
#endif
  app.system_name = "weft-flow";
  check_limits(app, several);
  const Fault fault = fault_from_environment(several);

  Job job;
#ifdef TASKBENCH_WEFT_FLOW_MPI
  if (several) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job.ranks);
    taskbench::mpi::abort_job_on_failure(job.rank);
    if (!app.workers_given) app.workers = taskbench::mpi::default_workers_per_rank();
  }
#endif
  // One process: Packet<16> outputs (one copy per consumer) when every -output fits, else shared Outputs.
  const auto run_here = [&] {
    const bool small = std::all_of(app.graphs.begin(), app.graphs.end(),
                                   [](const taskbench::TaskGraph& g) { return g.output_bytes <= Output::kInline; });
    return small ? run_small_outputs(app, job, fault) : run<Output>(app, job, fault);
  };
#ifdef TASKBENCH_WEFT_FLOW_MPI
  const int status = job.several() ? run_on_ranks(app, job, fault) : run_here();
#else
  const int status = run_here();
#endif
#ifdef TASKBENCH_WEFT_FLOW_MPI
  if (several) MPI_Finalize();
#endif
  return status;
}
