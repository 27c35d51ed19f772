// taskbench-tbb: Task Bench on a oneTBB flow graph.
//
// One continue_node per task (graph, t, point), an edge from each producer to each consumer, then the nodes
// without predecessors are started and the graph is waited for. A node per task (rather than one node per point
// reused every timestep) is what keeps every pattern correct: a continue_node fires after a fixed number of
// messages, while fft and spread change the number of inputs from one timestep to the next, and in asymmetric
// patterns (dom, tree, spread) a producer can run a timestep ahead of a consumer and send it a message meant for
// the next round. Building the graph is part of the timed run: it is this system's cost of creating tasks.
//
// Outputs rotate over the graph's -field generations (default: one per timestep, so none is reused). With fewer,
// a task that overwrites a slot also waits for the readers of the output the slot held (write-after-read
// edges), or for its previous writer when that output had no reader.
//
// Threads: -workers, as tbb::global_control's max_allowed_parallelism and the concurrency of the task_arena
// that runs the graph (the main thread takes part).
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>
#include <vector>

#include "core/core.hpp"
#include "peer_common.hpp"

namespace {

using namespace taskbench;
using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;

constexpr const char* kSystem = "tbb-flow";

/// The nodes of every graph and timestep: node (g, t, point) is nodes[first[g][t] + point - offset(t)].
class FlowGraph {
 public:
  FlowGraph(const App& app, const std::vector<OutputBuffers>& buffers, peer::Runners& runners)
      : first_(app.graphs.size()) {
    for (std::size_t g = 0; g < app.graphs.size(); ++g) {
      const TaskGraph& graph = app.graphs[g];
      const OutputBuffers* outputs = &buffers[g];
      first_[g].resize(static_cast<std::size_t>(graph.timesteps));
      for (long t = 0; t < graph.timesteps; ++t) {
        first_[g][static_cast<std::size_t>(t)] = static_cast<long>(nodes_.size());
        const long offset = graph.offset_at_timestep(t), width = graph.width_at_timestep(t);
        for (long i = offset; i < offset + width; ++i)
          nodes_.emplace_back(flow_, [&runners, &graph, outputs, t, i](const tbb::flow::continue_msg&) {
            runners[tbb::this_task_arena::current_thread_index()].run(graph, *outputs, t, i);
          });
      }
    }
    has_predecessor_.assign(nodes_.size(), false);
    std::vector<long> inputs, readers;
    for (std::size_t g = 0; g < app.graphs.size(); ++g) {
      const TaskGraph& graph = app.graphs[g];
      const long depth = peer::reuse_generations(graph);  // as the buffers were made
      for (long t = 1; t < graph.timesteps; ++t) {
        const long offset = graph.offset_at_timestep(t), width = graph.width_at_timestep(t);
        for (long i = offset; i < offset + width; ++i) {
          graph.inputs_of(t, i, inputs);
          for (long p : inputs) connect(graph, g, t - 1, p, t, i);
          const long previous = t - depth;  // the timestep whose output slot (t, i) overwrites
          if (previous < 0 || !live(graph, previous, i)) continue;
          graph.consumers_of(previous, i, readers);
          for (long c : readers)
            if (previous + 1 < t - 1 || std::find(inputs.begin(), inputs.end(), c) == inputs.end())
              connect(graph, g, previous + 1, c, t, i);
          if (readers.empty()) connect(graph, g, previous, i, t, i);
        }
      }
    }
  }

  /// Starts every node without a predecessor and waits until all nodes have run.
  void run() {
    for (std::size_t k = 0; k < nodes_.size(); ++k)
      if (!has_predecessor_[k]) nodes_[k].try_put(tbb::flow::continue_msg());
    flow_.wait_for_all();
  }

 private:
  static bool live(const TaskGraph& graph, long t, long point) {
    const long offset = graph.offset_at_timestep(t);
    return point >= offset && point < offset + graph.width_at_timestep(t);
  }
  std::size_t index(const TaskGraph& graph, std::size_t g, long t, long point) const {
    return static_cast<std::size_t>(first_[g][static_cast<std::size_t>(t)] + point - graph.offset_at_timestep(t));
  }
  void connect(const TaskGraph& graph, std::size_t g, long t_from, long from, long t_to, long to) {
    const std::size_t a = index(graph, g, t_from, from), b = index(graph, g, t_to, to);
    tbb::flow::make_edge(nodes_[a], nodes_[b]);
    has_predecessor_[b] = true;
  }

  tbb::flow::graph flow_;              // declared before the nodes: they are destroyed first
  std::deque<Node> nodes_;             // a deque never moves its elements (nodes cannot move)
  std::vector<std::vector<long>> first_;
  std::vector<bool> has_predecessor_;
};

/// Makes the arena's worker threads start before the timer (the timed region measures the run, not the
/// runtime's start-up): one task per thread, each waiting (at most a second) until all have started.
void start_threads(int workers) {
  std::atomic<int> arrived{0};
  tbb::task_group group;
  for (int k = 0; k < workers; ++k)
    group.run([&] {
      arrived.fetch_add(1);
      const double give_up = now_seconds() + 1.0;
      while (arrived.load() < workers && now_seconds() < give_up) std::this_thread::yield();
    });
  group.wait();
}

}  // namespace

int main(int argc, char** argv) {
  App app(argc, argv);
  app.system_name = kSystem;
  app.display();

  const int workers = app.workers;
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(workers));
  tbb::task_arena arena(workers);
  const std::vector<OutputBuffers> buffers = peer::make_buffers(app, peer::reuse_generations);
  peer::Runners runners(app);

  double elapsed = 0;
  arena.execute([&] {
    peer::require_threads(kSystem, tbb::this_task_arena::max_concurrency(), workers);
    start_threads(workers);
    const double t0 = now_seconds();
    FlowGraph flow(app, buffers, runners);  // the graph is attached to the arena it is built in
    flow.run();
    elapsed = now_seconds() - t0;
  });
  app.report_timing(elapsed);
  return 0;
}
