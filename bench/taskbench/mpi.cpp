// taskbench-mpi: Task Bench on MPI, one rank per core, in the communicating-sequential-processes style of the
// Task Bench paper: no tasks, no threads; each rank owns a contiguous block of the points of every graph and, per
// timestep, exchanges the outputs its block needs or provides (nonblocking receives and sends, then one wait),
// then runs its tasks of that timestep. Inputs produced by the rank itself are read in place, not copied. What a
// timestep receives, sends and reads is planned once per dependence set before the timer (StepPlan), for the
// timesteps that have every point live, and at the others as they come.
//
// Against Task Bench's own MPI implementation (mpi/nonblock.cc; its pattern is taskbench-mpi-nonblock): the same
// nonblocking receive and send per dependency that crosses ranks and one wait per timestep, no barrier; but the
// graphs of -and share each timestep's wait (the original runs them one after another), local inputs are not
// copied, and no tags are needed. Planning every timestep anew (the lists rebuilt and sorted at each step) cost
// about 280 instructions per task more than the original's pattern; planned once, a few fewer (BENCHMARKS.md,
// section 10).
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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <utility>
#include <vector>

#include "core/core.hpp"
#include "mpi_common.hpp"
#include "peer_common.hpp"  // max_scratch_bytes

namespace {

using namespace taskbench;

constexpr const char* kSystem = "mpi";

using mpi::Block;
using mpi::owner_of;

/// One rank's state for one graph: its block and the outputs of its points, -field timesteps deep, by default
/// two (timestep t overwrites the outputs of t-2, whose sends completed and whose local readers ran during
/// timestep t-1).
struct LocalGraph {
  const TaskGraph* graph;
  Block block;
  long fields;
  std::vector<char> outputs;
  LocalGraph(const TaskGraph& g, int rank, int ranks)
      : graph(&g),
        block(g.max_width, rank, ranks),
        fields(g.output_fields(2)),
        outputs(static_cast<std::size_t>(fields) * static_cast<std::size_t>(block.hi - block.lo) * g.output_bytes) {}
  char* output(long t, long point) {
    return outputs.data() +
           (static_cast<std::size_t>(t % fields) * static_cast<std::size_t>(block.hi - block.lo) +
            static_cast<std::size_t>(point - block.lo)) *
               graph->output_bytes;
  }
  bool owns(long point) const { return block.owns(point); }
};

/// What one rank does for one graph at one timestep t, in the order it does it: the inputs of its live tasks
/// (inputs_of order; each a local output of t-1 or a receive), the receives and the sends of its outputs of t-1,
/// both in (producer, consumer) order.
struct StepPlan {
  struct Input {
    long point;          // the producer
    std::int32_t recv;   // its index among `recv_from`, or -1: a local output, read in place
  };
  std::vector<std::size_t> first_input;  // per live local task, in point order: its first input; then the end
  std::vector<Input> inputs;
  std::vector<int> recv_from;            // per receive: the producer's rank
  std::vector<std::pair<long, int>> sends;  // (local producer, the consumer's rank)

  void build(const LocalGraph& local, long t, int ranks, std::vector<long>& points) {
    const TaskGraph& graph = *local.graph;
    first_input.clear();
    inputs.clear();
    recv_from.clear();
    sends.clear();
    struct Remote {
      long producer, consumer;
      std::size_t input;
    };
    std::vector<Remote> remote;
    const long offset = graph.offset_at_timestep(t), end = offset + graph.width_at_timestep(t);
    for (long i = std::max(offset, local.block.lo); i < std::min(end, local.block.hi); ++i) {
      first_input.push_back(inputs.size());
      graph.inputs_of(t, i, points);
      for (long p : points) {
        if (!local.owns(p)) remote.push_back({p, i, inputs.size()});
        inputs.push_back({p, -1});
      }
    }
    first_input.push_back(inputs.size());
    // Receives in the order the producers' ranks send.
    std::sort(remote.begin(), remote.end(), [](const Remote& a, const Remote& b) {
      return std::tie(a.producer, a.consumer) < std::tie(b.producer, b.consumer);
    });
    for (const Remote& r : remote) {
      inputs[r.input].recv = static_cast<std::int32_t>(recv_from.size());
      recv_from.push_back(owner_of(r.producer, graph.max_width, ranks));
    }
    if (t > 0 && t - 1 < graph.timesteps) {
      const long o = graph.offset_at_timestep(t - 1), e = o + graph.width_at_timestep(t - 1);
      for (long p = std::max(o, local.block.lo); p < std::min(e, local.block.hi); ++p) {
        graph.consumers_of(t - 1, p, points);
        for (long c : points)
          if (!local.owns(c)) sends.push_back({p, owner_of(c, graph.max_width, ranks)});
      }
    }
  }
};

class Rank {
 public:
  Rank(const App& app, int rank, int ranks) : ranks_(ranks), runner_(peer::max_scratch_bytes(app)) {
    for (const TaskGraph& g : app.graphs) graphs_.emplace_back(g, rank, ranks);
    // Most timesteps have every point live, at t-1 too: their plans depend only on the dependence set. One per
    // set, made before the timer (as Task Bench's MPI implementation lists its dependencies before its loop);
    // the other timesteps (the ramps of dom and tree, the first one) are planned when they come.
    plans_.resize(graphs_.size());
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      const TaskGraph& graph = *graphs_[g].graph;
      const long sets = graph.max_dependence_sets();
      std::vector<StepPlan>& plans = plans_[g];
      plans.resize(static_cast<std::size_t>(sets));
      std::vector<char> built(static_cast<std::size_t>(sets), 0);
      std::size_t entries = 0, left = static_cast<std::size_t>(sets);
      for (long t = 1; t < graph.timesteps && left > 0; ++t) {
        const std::size_t d = static_cast<std::size_t>(graph.dependence_set_at_timestep(t));
        if (built[d] || !full(graph, t)) continue;
        plans[d].build(graphs_[g], t, ranks_, points_);
        built[d] = 1;
        --left;
        entries += plans[d].inputs.size() + plans[d].sends.size();
        if (entries > kMaxPlanEntries) {  // very wide graphs: plan every timestep instead
          plans.clear();
          break;
        }
      }
      cached_.push_back(std::move(built));  // a set without a full timestep is planned at each of its steps
    }
    scratch_plans_.resize(graphs_.size());
  }

  void run(long steps) {
    for (long t = 0; t < steps; ++t) {
      exchange(t);
      execute(t);
    }
  }

 private:
  static constexpr std::size_t kMaxPlanEntries = std::size_t{1} << 22;

  /// Every point live at t and t-1: the plan of t depends only on t's dependence set.
  static bool full(const TaskGraph& g, long t) {
    const long w = g.max_width;
    return t >= 1 && t < g.timesteps && g.width_at_timestep(t) == w && g.width_at_timestep(t - 1) == w &&
           g.offset_at_timestep(t) == 0 && g.offset_at_timestep(t - 1) == 0;
  }

  const StepPlan& plan(std::size_t g, long t) {
    const TaskGraph& graph = *graphs_[g].graph;
    if (full(graph, t) && !plans_[g].empty()) {
      const std::size_t d = static_cast<std::size_t>(graph.dependence_set_at_timestep(t));
      if (cached_[g][d]) return plans_[g][d];
    }
    scratch_plans_[g].build(graphs_[g], t, ranks_, points_);
    return scratch_plans_[g];
  }

  /// Posts the receives of the remote inputs of the local tasks of timestep t and the sends of the local
  /// outputs of t-1 that remote tasks of t read (each in (graph, producer, consumer) order, see the top of this
  /// file), points the tasks' inputs at them or, for local ones, at the local outputs, and waits for all of it.
  void exchange(long t) {
    requests_.clear();
    current_.clear();
    std::size_t recv_bytes = 0;
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      if (t >= graphs_[g].graph->timesteps) {
        current_.push_back(nullptr);
        continue;
      }
      current_.push_back(&plan(g, t));
      recv_bytes += current_.back()->recv_from.size() * graphs_[g].graph->output_bytes;
    }
    if (recv_bytes > recv_.size()) recv_.resize(recv_bytes);

    inputs_.clear();
    char* at = recv_.data();
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      const StepPlan* p = current_[g];
      if (!p) continue;
      LocalGraph& local = graphs_[g];
      const std::size_t bytes = local.graph->output_bytes;
      for (int from : p->recv_from) {
        requests_.emplace_back();
        MPI_Irecv(at, static_cast<int>(bytes), MPI_BYTE, from, kTag, MPI_COMM_WORLD, &requests_.back());
        at += bytes;
      }
    }
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      const StepPlan* p = current_[g];
      if (!p) continue;
      LocalGraph& local = graphs_[g];
      const int bytes = static_cast<int>(local.graph->output_bytes);
      for (const auto& [producer, to] : p->sends) {
        requests_.emplace_back();
        MPI_Isend(local.output(t - 1, producer), bytes, MPI_BYTE, to, kTag, MPI_COMM_WORLD, &requests_.back());
      }
    }
    // The inputs' addresses, while the messages travel.
    at = recv_.data();
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      const StepPlan* p = current_[g];
      if (!p) continue;
      LocalGraph& local = graphs_[g];
      const std::size_t bytes = local.graph->output_bytes;
      for (const StepPlan::Input& in : p->inputs)
        inputs_.push_back(in.recv >= 0 ? at + static_cast<std::size_t>(in.recv) * bytes : local.output(t - 1, in.point));
      at += p->recv_from.size() * bytes;
    }
    if (!requests_.empty())
      MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }

  /// Runs the local tasks of timestep t, in the order of their plans.
  void execute(long t) {
    std::size_t base = 0;
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      const StepPlan* p = current_[g];
      if (!p) continue;
      LocalGraph& local = graphs_[g];
      const TaskGraph& graph = *local.graph;
      const long first = std::max(graph.offset_at_timestep(t), local.block.lo);
      for (std::size_t k = 0; k + 1 < p->first_input.size(); ++k) {
        const std::size_t begin = p->first_input[k];
        runner_.run(graph, t, first + static_cast<long>(k), local.output(t, first + static_cast<long>(k)),
                    inputs_.data() + base + begin, p->first_input[k + 1] - begin);
      }
      base += p->inputs.size();
    }
  }

  static constexpr int kTag = 0;
  int ranks_;
  std::vector<LocalGraph> graphs_;
  TaskRunner runner_;
  std::vector<std::vector<StepPlan>> plans_;  // [graph][dependence set], for the full timesteps
  std::vector<std::vector<char>> cached_;     // [graph][dependence set]: plans_ holds that set's plan
  std::vector<StepPlan> scratch_plans_;       // [graph]: the plan of a timestep that is not full
  // Per timestep, reused: each graph's plan (null when the graph has ended), the inputs of every local task
  // (graph by graph, each task's from its plan's first_input), the receive buffer and the pending requests.
  std::vector<const StepPlan*> current_;
  std::vector<const char*> inputs_;
  std::vector<char> recv_;
  std::vector<MPI_Request> requests_;
  std::vector<long> points_;
};

}  // namespace

int main(int argc, char** argv) {
  App app = mpi::parse_command_line(argc, argv, [](App& a) { a.require_single_worker(kSystem); });
  app.system_name = kSystem;

  const auto [rank, ranks] = mpi::start_job(argc, argv);
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
