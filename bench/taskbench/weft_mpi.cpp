// taskbench-weft-mpi: Task Bench in the "MPI + tasks" style: one rank per core (or per group of cores), each
// owning the block of points of every graph that taskbench-mpi gives it (mpi::Block), and on each rank weft
// dependency tasks with MPI inside them (weft/mpi.hpp). Per (graph, t, local point) one compute task; per input
// produced on another rank one receive task (weft::mpi::irecv, out: a receive buffer); per consumer on another
// rank one send task (weft::mpi::isend, in: the producer's output buffer). A receive or send task completes only
// when its request has, so the dependencies alone order everything: no wait or barrier per timestep, the
// messages of one timestep overlap the tasks of others, and weft polls MPI from its workers.
//
//   mpirun -np <ranks> taskbench-weft-mpi <flags> [-workers W]   (rank 0 prints; default W: the rank's cores)
//
// Buffers: each point's output rotates over `gens` generations (as in taskbench-weft: enough that a write's
// earlier readers have almost always finished when it is spawned), each receive buffer, one per (local consumer,
// remote producer) pair that any dependence set has, over kRecvGens (3: a receive is posted at most about two
// timesteps ahead, so that few requests wait in weft's polls); `gens` is a multiple of kRecvGens. Receives of one
// pair that share a buffer are ordered (each writes what the previous one's reader has read), and so are the
// sends of one output generation (the producer's next write of it waits for the send task, which ends with the
// send). Tags: a message is named by its producer's and consumer's offsets in their blocks and by the producer's
// timestep modulo `gens`, on a communicator per graph. Two messages of one tag between two ranks are therefore
// t and t + k*gens of one pair: their sends are posted in that order and so are their receives (above), and MPI
// matches them in order, whatever order the other tasks are posted in.
//
// Validation as everywhere: every task checks its inputs (execute_point), rank 0 checks that every task ran
// exactly once; a failure on any rank ends the job with a rank-tagged message. Bad flags exit every rank with
// status 2 before MPI starts. TASKBENCH_WEFT_MPI_FAULT=graph:t:point makes that task's output wrong (its first
// record names point + 1), for the tests' check that a consumer on another rank catches it.
#include <mpi.h>

#include <weft/mpi.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "core/core.hpp"
#include "mpi_common.hpp"
#include "peer_common.hpp"  // max_scratch_bytes
#include "weft_runtime.hpp"

namespace {

using namespace taskbench;

constexpr const char* kSystem = "weft-mpi";

/// Generations of each receive buffer: a receive is posted only once the reader of the buffer's previous use
/// has run, so at most about this many timesteps ahead. Few on purpose: every posted receive is a request that
/// weft's polls test, and with one per timestep of the throttling window outstanding (taskbench-weft's count of
/// generations) 2 ranks x 1 worker took 1.7x the time on stencil_1d at -iter 1, 1.4x at -iter 1024 and 1.05x at
/// -iter 16384 (1000 steps, medians of 5 runs on 2 cores).
constexpr long kRecvGens = 3;

/// A wrong output on purpose (TASKBENCH_WEFT_MPI_FAULT=graph:t:point): task (t, point) of graph `graph` writes
/// (t, point + 1) as its first record.
struct Fault {
  long graph = -1, t = -1, point = -1;
};

/// TASKBENCH_WEFT_MPI_FAULT, or no fault; exits 2 on a malformed value (before MPI starts, on every rank alike).
Fault fault_from_environment() {
  Fault f;
  const char* text = std::getenv("TASKBENCH_WEFT_MPI_FAULT");
  if (!text) return f;
  char end = 0;
  if (std::sscanf(text, "%ld:%ld:%ld%c", &f.graph, &f.t, &f.point, &end) != 3 || f.graph < 0 || f.t < 0 ||
      f.point < 0) {
    std::fprintf(stderr, "error: TASKBENCH_WEFT_MPI_FAULT='%s': expected graph:t:point\n", text);
    std::exit(2);
  }
  return f;
}

/// One graph on one rank: its block, the output buffers of its points, the receive buffers of its remote inputs
/// and the communicator its messages travel on.
class RankGraph {
 public:
  RankGraph(const TaskGraph& g, long graph_index, int rank, int ranks, long wanted_gens, int tag_ub,
            const Fault& fault)
      : graph(&g), block(g.max_width, rank, ranks), ranks_(ranks) {
    for (int r = 0; r < ranks; ++r) {
      const mpi::Block b(g.max_width, r, ranks);
      stride_ = std::max(stride_, b.hi - b.lo);
    }
    // As many generations as wanted, as far as the tags allow; at least 3 (consecutive steps never share one).
    const long pairs = stride_ * stride_;
    if (3 * pairs - 1 > tag_ub) {
      std::fprintf(stderr, "error: %s: blocks of %ld points need tags up to %ld, above this MPI's %d\n", kSystem,
                   stride_, 3 * pairs - 1, tag_ub);
      mpi::wait_until_stderr_read();
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    gens = std::max(3L, std::min(wanted_gens, (static_cast<long>(tag_ub) + 1) / pairs));
    gens = gens / kRecvGens * kRecvGens;  // a multiple of kRecvGens: see the top of this file
    outputs = OutputBuffers(g, gens);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm.c);
    if (fault.graph == graph_index) fault_ = fault;

    // Every remote producer a local consumer may read, over all dependence sets, sorted per consumer.
    remote_start_.push_back(0);
    for (long c = block.lo; c < block.hi; ++c) {
      const std::size_t first = remote_.size();
      for (long d = 0, sets = g.max_dependence_sets(); d < sets; ++d)
        for (const Interval& in : g.dependencies(d, c))
          for (long p = std::max(0L, in.first); p <= std::min(g.max_width - 1, in.last); ++p)
            if (!block.owns(p)) remote_.push_back(p);
      std::sort(remote_.begin() + static_cast<std::ptrdiff_t>(first), remote_.end());
      remote_.erase(std::unique(remote_.begin() + static_cast<std::ptrdiff_t>(first), remote_.end()), remote_.end());
      remote_start_.push_back(remote_.size());
    }
    // Receive buffers a cache line apart, each named by its own start address.
    recv_stride_ = (g.output_bytes + 63) / 64 * 64;
    recv_.assign(remote_.size() * static_cast<std::size_t>(kRecvGens) * recv_stride_ + 64, 0);
    recv_base_ = recv_.data() + (64 - reinterpret_cast<std::uintptr_t>(recv_.data()) % 64) % 64;
  }

  /// The buffer that receives the output of remote `producer` at timestep s for local `consumer`.
  char* recv(long consumer, long producer, long s) const {
    const std::size_t c = static_cast<std::size_t>(consumer - block.lo);
    const auto first = remote_.begin() + static_cast<std::ptrdiff_t>(remote_start_[c]);
    const auto last = remote_.begin() + static_cast<std::ptrdiff_t>(remote_start_[c + 1]);
    const std::size_t pair = static_cast<std::size_t>(std::lower_bound(first, last, producer) - remote_.begin());
    return recv_base_ + (pair * static_cast<std::size_t>(kRecvGens) + static_cast<std::size_t>(s % kRecvGens)) * recv_stride_;
  }
  int owner(long point) const { return mpi::owner_of(point, graph->max_width, ranks_); }
  /// The tag of the message from `producer` (timestep s) to `consumer` (see the top of this file).
  int tag(long producer, long consumer, long s) const {
    const long p = producer - mpi::Block(graph->max_width, owner(producer), ranks_).lo;
    const long c = consumer - mpi::Block(graph->max_width, owner(consumer), ranks_).lo;
    return static_cast<int>(((s % gens) * stride_ + p) * stride_ + c);
  }
  bool faulty(long t, long point) const { return t == fault_.t && point == fault_.point; }

  const TaskGraph* graph;
  mpi::Block block;
  long gens = 3;
  OutputBuffers outputs;  // every point's (only the block's are used): addressed like taskbench-weft's
  /// The graph's communicator (a duplicate of MPI_COMM_WORLD, freed with the graph, before MPI_Finalize).
  struct Comm {
    MPI_Comm c = MPI_COMM_NULL;
    Comm() = default;
    Comm(Comm&& o) noexcept : c(std::exchange(o.c, MPI_COMM_NULL)) {}
    Comm& operator=(Comm&&) = delete;
    ~Comm() {
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    }
  } comm;

 private:
  int ranks_;
  long stride_ = 1;  // the widest block
  Fault fault_;
  std::vector<long> remote_;              // per local consumer, its remote producers, ascending
  std::vector<std::size_t> remote_start_;  // consumer c's: remote_[remote_start_[c - lo] .. remote_start_[c - lo + 1])
  std::vector<char> recv_;
  char* recv_base_ = nullptr;
  std::size_t recv_stride_ = 64;
};

/// What one worker needs to run compute tasks, a cache line apart from the others' (workers write theirs).
struct alignas(64) Worker {
  TaskRunner runner;
  std::vector<long> points;
  std::vector<const char*> inputs;
  explicit Worker(std::size_t scratch) : runner(scratch) {}
};

/// Compute task (t, c) of `rg`: its inputs from the local outputs of t-1 or its receive buffers, in inputs_of
/// order, validated and run by the core.
void compute(const RankGraph& rg, Worker& w, long t, long c) {
  const TaskGraph& g = *rg.graph;
  g.inputs_of(t, c, w.points);
  w.inputs.clear();
  for (long p : w.points) w.inputs.push_back(rg.block.owns(p) ? rg.outputs.get(t - 1, p) : rg.recv(c, p, t - 1));
  char* out = rg.outputs.get(t, c);
  w.runner.run(g, t, c, out, w.inputs.data(), w.inputs.size());
  if (rg.faulty(t, c)) [[unlikely]] {
    const std::int64_t wrong[2] = {t, c + 1};
    std::memcpy(out, wrong, sizeof wrong);
  }
}

/// Spawns every task of this rank, timestep by timestep, the graphs interleaved: per graph the receives of the
/// timestep's remote inputs (posted first, so they are waiting when the messages come), the compute tasks, then
/// the sends of their outputs to remote consumers.
void spawn_all(weft::Context& cx, const App& app, std::vector<RankGraph>& graphs, std::vector<Worker>& workers) {
  std::vector<long> points;
  std::vector<weft::Access> accesses;
  Worker* const ws = workers.data();
  for (long t = 0, steps = app.max_timesteps(); t < steps; ++t) {
    for (RankGraph& rg : graphs) {
      const TaskGraph& g = *rg.graph;
      const long o = g.offset_at_timestep(t), w = g.width_at_timestep(t);
      if (w == 0) continue;
      const long lo = std::max(o, rg.block.lo), hi = std::min(o + w, rg.block.hi);
      const std::size_t bytes = g.output_bytes;
      const int count = static_cast<int>(bytes);
      for (long c = lo; c < hi; ++c) {
        g.inputs_of(t, c, points);
        for (long p : points) {
          if (rg.block.owns(p)) continue;
          char* buf = rg.recv(c, p, t - 1);
          const int from = rg.owner(p), tag = rg.tag(p, c, t - 1);
          const MPI_Comm comm = rg.comm.c;
          cx.spawn([buf, count, from, tag, comm](weft::Context& x) {
                     weft::mpi::irecv(x, buf, count, MPI_BYTE, from, tag, comm);
                   },
                   weft::out(buf, bytes), weft::label("recv"));
        }
      }
      for (long c = lo; c < hi; ++c) {
        g.inputs_of(t, c, points);
        accesses.clear();
        for (long p : points)
          accesses.push_back(weft::in(rg.block.owns(p) ? rg.outputs.get(t - 1, p) : rg.recv(c, p, t - 1), bytes));
        accesses.push_back(weft::out(rg.outputs.get(t, c), bytes));
        const RankGraph* r = &rg;
        cx.spawn_accesses([r, ws, t, c](weft::Context& x) { compute(*r, ws[x.worker_id()], t, c); },
                          accesses.data(), accesses.size(), weft::label("task"));
      }
      if (t + 1 >= g.timesteps) continue;
      for (long p = lo; p < hi; ++p) {
        g.consumers_of(t, p, points);
        const char* buf = rg.outputs.get(t, p);
        for (long c : points) {
          if (rg.block.owns(c)) continue;
          const int to = rg.owner(c), tag = rg.tag(p, c, t);
          const MPI_Comm comm = rg.comm.c;
          cx.spawn([buf, count, to, tag, comm](weft::Context& x) {
                     weft::mpi::isend(x, buf, count, MPI_BYTE, to, tag, comm);
                   },
                   weft::in(buf, bytes), weft::label("send"));
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  App app = mpi::parse_command_line(argc, argv, [](App& a) {
    a.reject_fields("taskbench-weft-mpi", "it picks its own output generations (a multiple of its receive "
                                          "buffers' generations, within the MPI tag space)");
  });
  app.system_name = kSystem;
  const Fault fault = fault_from_environment();

  // MPI_THREAD_MULTIPLE, as weft asks for it; it can work with SERIALIZED too (the program's own MPI calls
  // below are made while no run is in progress), and refuses anything lower at the first request.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  mpi::abort_job_on_failure(rank);
  if (!app.workers_given) app.workers = mpi::default_workers_per_rank();

  const weft::Options options = weft_options(app);
  weft::Runtime rt = make_runtime(options);
  if (rank == 0) app.display();

  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  // Generations as taskbench-weft chooses them (enough that a write's earlier readers have almost always
  // finished when it is spawned), counting the points of the widest block of each graph: the same number on
  // every rank, as the tags need.
  long block_width = 0;
  for (const TaskGraph& g : app.graphs) block_width += (g.max_width + ranks - 1) / ranks;
  const long wanted_gens = static_cast<long>(options.max_tasks) / std::max(1L, block_width) + 2;
  {
    std::vector<RankGraph> graphs;
    graphs.reserve(app.graphs.size());
    for (std::size_t k = 0; k < app.graphs.size(); ++k)
      graphs.emplace_back(app.graphs[k], static_cast<long>(k), rank, ranks, wanted_gens,
                          has_tag_ub ? *tag_ub : 32767, fault);
    std::vector<Worker> workers;
    workers.reserve(static_cast<std::size_t>(app.workers));
    for (int w = 0; w < app.workers; ++w) workers.emplace_back(peer::max_scratch_bytes(app));

    start_runtime(rt);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    try {
      rt.run([&](weft::Context& cx) { spawn_all(cx, app, graphs, workers); });
    } catch (const std::exception& e) {  // an MPI error in a task: the other ranks would wait for this one
      fail_run(e.what());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double elapsed = now_seconds() - t0;
    mpi::gather_run_marks(app, rank);
    if (rank == 0) app.report_timing(elapsed);
    if (app.verbose > 0) {
      // After the summary, so that scripts parsing it are not disturbed; one line per rank, written at once so
      // that the ranks' lines do not interleave.
      const weft::Stats s = rt.stats();
      const weft::mpi::Stats m = weft::mpi::stats();
      std::fflush(stdout);
      char line[256];
      std::snprintf(line, sizeof line, "weft (rank %d): tasks %llu, stolen %llu, requests %llu, polls %llu, overlap %.2f\n",
                    rank, static_cast<unsigned long long>(s.tasks_executed),
                    static_cast<unsigned long long>(s.tasks_stolen), static_cast<unsigned long long>(m.requests_completed),
                    static_cast<unsigned long long>(m.polls), m.overlap());
      std::fputs(line, stdout);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
