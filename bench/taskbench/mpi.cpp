// taskbench-mpi: Task Bench on MPI, one rank per core, in the communicating-sequential-processes style of the
// Task Bench paper: no tasks, no threads; each rank owns a contiguous block of the points of every graph and, per
// timestep, exchanges the outputs its block needs or provides (nonblocking receives and sends, then one wait),
// then runs its tasks of that timestep. Inputs produced by the rank itself are read in place, not copied.
//
//   mpirun -np <ranks> taskbench-mpi <flags>        (rank 0 prints; -workers other than 1 is rejected)
//
// Message matching: every message between two ranks has the same tag, and MPI delivers the messages of one
// sender in the order they were sent; a rank sends its outputs of timestep t-1 ordered by (graph, producer,
// consumer) and posts its receives of timestep t in that same order, so each receive gets the output it
// names. A rank with bad input exits before MPI_Init (every rank does: they parse the same flags); a rank that
// fails validation ends the job with MPI_Abort and a rank-tagged message.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "core/core.hpp"
#include "mpi_common.hpp"
#include "peer_common.hpp"  // max_scratch_bytes

namespace {

using namespace taskbench;

constexpr const char* kSystem = "mpi";

using mpi::Block;
using mpi::owner_of;

/// One rank's state for one graph: its block and the outputs of its points, two timesteps deep (timestep t
/// overwrites the outputs of t-2, whose sends completed and whose local readers ran during timestep t-1).
struct LocalGraph {
  const TaskGraph* graph;
  Block block;
  std::vector<char> outputs;
  LocalGraph(const TaskGraph& g, int rank, int ranks)
      : graph(&g),
        block(g.max_width, rank, ranks),
        outputs(2 * static_cast<std::size_t>(block.hi - block.lo) * g.output_bytes) {}
  char* output(long t, long point) {
    return outputs.data() +
           (static_cast<std::size_t>(t % 2) * static_cast<std::size_t>(block.hi - block.lo) +
            static_cast<std::size_t>(point - block.lo)) *
               graph->output_bytes;
  }
  bool owns(long point) const { return block.owns(point); }
};

class Rank {
 public:
  Rank(const App& app, int rank, int ranks) : ranks_(ranks), runner_(peer::max_scratch_bytes(app)) {
    for (const TaskGraph& g : app.graphs) graphs_.emplace_back(g, rank, ranks);
  }

  void run(long steps) {
    for (long t = 0; t < steps; ++t) {
      exchange(t);
      execute(t);
    }
  }

 private:
  /// A remote input of a local task: the output of producer `point` of graph `graph`, read by local task
  /// `consumer` as inputs_[input].
  struct RemoteInput {
    std::size_t graph;
    long point, consumer;
    std::size_t input;
  };

  /// Collects the inputs of the local tasks of timestep t (local ones in place, remote ones received), sends
  /// the local outputs of t-1 that remote tasks of t read, and waits for all of it.
  void exchange(long t) {
    inputs_.clear();
    task_inputs_.clear();
    remote_.clear();
    requests_.clear();
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      LocalGraph& local = graphs_[g];
      const TaskGraph& graph = *local.graph;
      if (t >= graph.timesteps) continue;
      const long offset = graph.offset_at_timestep(t), end = offset + graph.width_at_timestep(t);
      for (long i = std::max(offset, local.block.lo); i < std::min(end, local.block.hi); ++i) {
        task_inputs_.push_back(inputs_.size());
        graph.inputs_of(t, i, points_);
        for (long p : points_) {
          if (local.owns(p)) {
            inputs_.push_back(local.output(t - 1, p));
          } else {
            remote_.push_back({g, p, i, inputs_.size()});
            inputs_.push_back(nullptr);  // set once the receive buffer has its final size
          }
        }
      }
    }
    task_inputs_.push_back(inputs_.size());

    // Receives, in the order the producers' ranks send (graph, producer, consumer).
    std::sort(remote_.begin(), remote_.end(), [](const RemoteInput& a, const RemoteInput& b) {
      return std::tie(a.graph, a.point, a.consumer) < std::tie(b.graph, b.point, b.consumer);
    });
    std::size_t recv_bytes = 0;
    for (const RemoteInput& r : remote_) recv_bytes += graphs_[r.graph].graph->output_bytes;
    if (recv_bytes > recv_.size()) recv_.resize(recv_bytes);
    std::size_t at = 0;
    for (const RemoteInput& r : remote_) {
      const LocalGraph& local = graphs_[r.graph];
      const int bytes = static_cast<int>(local.graph->output_bytes);
      inputs_[r.input] = recv_.data() + at;
      requests_.emplace_back();
      MPI_Irecv(recv_.data() + at, bytes, MPI_BYTE, owner_of(r.point, local.graph->max_width, ranks_), kTag,
                MPI_COMM_WORLD, &requests_.back());
      at += local.graph->output_bytes;
    }

    // Sends of the outputs of t-1, ordered by (graph, producer, consumer).
    if (t > 0) {
      for (std::size_t g = 0; g < graphs_.size(); ++g) {
        LocalGraph& local = graphs_[g];
        const TaskGraph& graph = *local.graph;
        if (t - 1 >= graph.timesteps) continue;
        const long offset = graph.offset_at_timestep(t - 1), end = offset + graph.width_at_timestep(t - 1);
        for (long p = std::max(offset, local.block.lo); p < std::min(end, local.block.hi); ++p) {
          graph.consumers_of(t - 1, p, points_);
          for (long c : points_) {
            if (local.owns(c)) continue;
            requests_.emplace_back();
            MPI_Isend(local.output(t - 1, p), static_cast<int>(graph.output_bytes), MPI_BYTE,
                      owner_of(c, graph.max_width, ranks_), kTag, MPI_COMM_WORLD, &requests_.back());
          }
        }
      }
    }
    if (!requests_.empty())
      MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }

  /// Runs the local tasks of timestep t, in the order exchange() listed their inputs.
  void execute(long t) {
    std::size_t task = 0;
    for (LocalGraph& local : graphs_) {
      const TaskGraph& graph = *local.graph;
      if (t >= graph.timesteps) continue;
      const long offset = graph.offset_at_timestep(t), end = offset + graph.width_at_timestep(t);
      for (long i = std::max(offset, local.block.lo); i < std::min(end, local.block.hi); ++i, ++task) {
        const std::size_t begin = task_inputs_[task];
        runner_.run(graph, t, i, local.output(t, i), inputs_.data() + begin, task_inputs_[task + 1] - begin);
      }
    }
  }

  static constexpr int kTag = 0;
  int ranks_;
  std::vector<LocalGraph> graphs_;
  TaskRunner runner_;
  // Per timestep, reused: the inputs of every local task (task k's are inputs_[task_inputs_[k] ..
  // task_inputs_[k+1]]), the remote ones among them, the receive buffer and the pending requests.
  std::vector<const char*> inputs_;
  std::vector<std::size_t> task_inputs_;
  std::vector<RemoteInput> remote_;
  std::vector<char> recv_;
  std::vector<MPI_Request> requests_;
  std::vector<long> points_;
};

}  // namespace

int main(int argc, char** argv) {
  App app = mpi::parse_command_line(argc, argv, [](App& a) { a.require_single_worker(kSystem); });
  app.system_name = kSystem;

  MPI_Init(&argc, &argv);
  // The default, made explicit: an MPI error aborts the whole job rather than leaving the other ranks waiting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  mpi::abort_job_on_failure(rank);
  if (rank == 0) app.display();

  {
    Rank me(app, rank, ranks);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    me.run(app.max_timesteps());
    MPI_Barrier(MPI_COMM_WORLD);
    const double elapsed = now_seconds() - t0;
    mpi::gather_run_marks(app, rank);
    if (rank == 0) app.report_timing(elapsed);
  }
  MPI_Finalize();
  return 0;
}
