// taskbench-mpi-nonblock: the pattern of Task Bench's own MPI implementation (mpi/nonblock.cc in the Task Bench
// repository), rebuilt on this core as the reference that taskbench-mpi is measured against (BENCHMARKS.md,
// section 10). One rank per core, each owning a contiguous block of the points of every graph (the block
// distribution of taskbench-mpi). The graphs run one after another. Per timestep, for each of its points a rank
// posts a receive per input produced on another rank (the tag names the producer's and the consumer's offsets
// in their blocks), copies each input produced locally into the task's input buffer, and posts a send of its
// previous output per consumer on another rank; then one MPI_Waitall, then it runs its points. One output
// buffer per point, overwritten every timestep (its sends completed in the wait before). The dependencies of
// every dependence set are listed before the timer starts, as the original lists them before its loop.
//
//   mpirun -np <ranks> taskbench-mpi-nonblock <flags>        (rank 0 prints; -workers other than 1 is rejected)
//
// What taskbench-mpi does differently: one wait per timestep for all graphs (their timesteps interleave),
// local inputs read in place, and one tag for all messages (order of posting instead of tags).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/core.hpp"
#include "mpi_common.hpp"
#include "peer_common.hpp"  // max_scratch_bytes

namespace {

using namespace taskbench;

constexpr const char* kSystem = "mpi-nonblock";

/// One graph on one rank: its block, the points of every dependence set (dependencies and consumers, not
/// clipped: each timestep clips them to its live points), and the buffers.
class LocalGraph {
 public:
  LocalGraph(const TaskGraph& g, int rank, int ranks, int max_tag) : g_(g), ranks_(ranks), block_(g.max_width, rank, ranks) {
    const long n = block_.hi - block_.lo;
    long widest = 0;
    for (int r = 0; r < ranks; ++r) {
      const mpi::Block b(g.max_width, r, ranks);
      widest = std::max(widest, b.hi - b.lo);
    }
    tag_stride_ = std::max(1L, widest);
    if (tag_stride_ * tag_stride_ - 1 > max_tag) {
      std::fprintf(stderr, "error: %s: blocks of %ld points need tags up to %ld, above this MPI's %d\n", kSystem,
                   tag_stride_, tag_stride_ * tag_stride_ - 1, max_tag);
      mpi::wait_until_stderr_read();
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const long sets = g.max_dependence_sets();
    deps_.resize(static_cast<std::size_t>(sets));
    consumers_.resize(static_cast<std::size_t>(sets));
    long max_deps = 0;
    for (long d = 0; d < sets; ++d) {
      for (long p = block_.lo; p < block_.hi; ++p) {
        deps_[d].push_back(flatten(g.dependencies(d, p)));
        consumers_[d].push_back(flatten(g.reverse_dependencies(d, p)));
        max_deps = std::max(max_deps, static_cast<long>(deps_[d].back().size()));
      }
    }
    inputs_.assign(static_cast<std::size_t>(n * max_deps) * g.output_bytes, 0);
    input_ptrs_.resize(static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i)
      for (long k = 0; k < max_deps; ++k)
        input_ptrs_[static_cast<std::size_t>(i)].push_back(inputs_.data() +
                                                           static_cast<std::size_t>(i * max_deps + k) * g.output_bytes);
    n_inputs_.assign(static_cast<std::size_t>(n), 0);
    outputs_.assign(static_cast<std::size_t>(n) * g.output_bytes, 0);
  }

  /// Posts the receives and sends of timestep t, copies the local inputs.
  void exchange(long t, std::vector<MPI_Request>& requests) {
    const TaskGraph& g = g_;
    const long offset = g.offset_at_timestep(t), width = g.width_at_timestep(t);
    const long last_offset = g.offset_at_timestep(t - 1), last_width = g.width_at_timestep(t - 1);
    const std::size_t d = static_cast<std::size_t>(g.dependence_set_at_timestep(t));
    const int bytes = static_cast<int>(g.output_bytes);
    for (long p = block_.lo; p < block_.hi; ++p) {
      const std::size_t i = static_cast<std::size_t>(p - block_.lo);
      long& n = n_inputs_[i];
      n = 0;
      if (p >= offset && p < offset + width) {
        for (long dep : deps_[d][i]) {
          if (dep < last_offset || dep >= last_offset + last_width) continue;
          char* slot = input_ptrs_[i][static_cast<std::size_t>(n++)];
          if (block_.owns(dep)) {
            std::memcpy(slot, output(dep), g.output_bytes);
          } else {
            requests.emplace_back();
            MPI_Irecv(slot, bytes, MPI_BYTE, owner(dep), tag(dep, p), MPI_COMM_WORLD, &requests.back());
          }
        }
      }
      if (p >= last_offset && p < last_offset + last_width) {
        for (long c : consumers_[d][i]) {
          if (c < offset || c >= offset + width || block_.owns(c)) continue;
          requests.emplace_back();
          MPI_Isend(output(p), bytes, MPI_BYTE, owner(c), tag(p, c), MPI_COMM_WORLD, &requests.back());
        }
      }
    }
  }

  /// Runs this rank's tasks of timestep t.
  void execute(long t, TaskRunner& runner) {
    const long offset = g_.offset_at_timestep(t), width = g_.width_at_timestep(t);
    for (long p = std::max(block_.lo, offset); p < std::min(block_.hi, offset + width); ++p) {
      const std::size_t i = static_cast<std::size_t>(p - block_.lo);
      runner.run(g_, t, p, output(p), input_ptrs_[i].data(), static_cast<std::size_t>(n_inputs_[i]));
    }
  }

 private:
  static std::vector<long> flatten(const std::vector<Interval>& intervals) {
    std::vector<long> points;
    for (const Interval& iv : intervals)
      for (long p = iv.first; p <= iv.last; ++p) points.push_back(p);
    return points;
  }
  char* output(long p) { return outputs_.data() + static_cast<std::size_t>(p - block_.lo) * g_.output_bytes; }
  int owner(long p) const { return mpi::owner_of(p, g_.max_width, ranks_); }
  /// The message from point `from` to point `to`: their offsets in their owners' blocks.
  int tag(long from, long to) const {
    const long from_offset = from - mpi::Block(g_.max_width, owner(from), ranks_).lo;
    const long to_offset = to - mpi::Block(g_.max_width, owner(to), ranks_).lo;
    return static_cast<int>(from_offset * tag_stride_ + to_offset);
  }

  const TaskGraph& g_;
  int ranks_;
  mpi::Block block_;
  long tag_stride_ = 1;
  std::vector<std::vector<std::vector<long>>> deps_, consumers_;  // [dependence set][local point]
  std::vector<char> inputs_, outputs_;
  std::vector<std::vector<char*>> input_ptrs_;  // [local point][input]
  std::vector<long> n_inputs_;
};

}  // namespace

int main(int argc, char** argv) {
  App app = mpi::parse_command_line(argc, argv, [](App& a) {
    a.require_single_worker(kSystem);
    a.reject_fields("taskbench-mpi-nonblock",
                    "as Task Bench's MPI implementation, it keeps one output buffer per point and copies the inputs");
  });
  app.system_name = kSystem;

  const auto [rank, ranks] = mpi::start_job(argc, argv);
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  const int max_tag = has_tag_ub && tag_ub ? *tag_ub : 32767;
  if (rank == 0) app.display();

  {
    std::vector<LocalGraph> graphs;
    graphs.reserve(app.graphs.size());
    for (const TaskGraph& g : app.graphs) graphs.emplace_back(g, rank, ranks, max_tag);
    TaskRunner runner(peer::max_scratch_bytes(app));
    std::vector<MPI_Request> requests;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    for (std::size_t k = 0; k < graphs.size(); ++k) {
      for (long t = 0; t < app.graphs[k].timesteps; ++t) {
        requests.clear();
        graphs[k].exchange(t, requests);
        if (!requests.empty())
          MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
        graphs[k].execute(t, runner);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double elapsed = now_seconds() - t0;
    mpi::gather_run_marks(app, rank);
    if (rank == 0) app.report_timing(elapsed);
  }
  MPI_Finalize();
  return 0;
}
