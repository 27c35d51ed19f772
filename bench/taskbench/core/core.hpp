// taskbench core: a Task Bench-compatible benchmark core (command line, task graphs, kernels, validation and
// the summary), shared by every implementation (taskbench-serial, taskbench-weft and the peers).
//
// An implementation's main:
//
//   taskbench::App app(argc, argv);          // parses the flags (exit 2 on bad input; -h and --dump-graph exit 0)
//   app.system_name = "mysystem";
//   app.display();                           // the configuration block
//   double t0 = taskbench::now_seconds();
//   ... run every task (t, i) of every graph: graph.execute_point(t, i, output, ..., inputs, ...), the inputs
//       being the outputs of the points graph.inputs_of(t, i) lists, in that order, produced at t - 1 ...
//   app.report_timing(taskbench::now_seconds() - t0);   // checks every task ran exactly once, prints the summary
//
// Exactly-once check: execute_point marks its task as run (a byte per task, plain relaxed stores, no atomic
// read-modify-write so that marking costs almost nothing) and aborts at once if the task had already run;
// report_timing checks that every task of every graph has its mark, unless -skip-graph-validation was given.
// A multi-process implementation (MPI) gathers the marks of all ranks into the reporting rank first:
// TaskGraph::run_marks() on each rank, a sum (MPI_Reduce, MPI_UNSIGNED_CHAR, MPI_SUM), then set_run_marks() on
// the reporting rank; and it installs a failure handler (set_failure_handler) that ends the whole job.
//
// Buffers: execute_point validates and fills whole 16-byte records; implementations allocate output_bytes per
// output and scratch_bytes per scratch buffer (prepared once with prepare_scratch; a scratch buffer may be
// reused by any later task, since tasks leave its first word unchanged).
//
// CMake (bench/taskbench/CMakeLists.txt): the static library `taskbench_core` (include "core/core.hpp"), and
//   taskbench_add_validation_tests(<system> <executable-target> [WORKERS <n>...] [LAUNCHER <cmd>...]
//                                  [LABELS <labels>...])
// which registers one ctest test taskbench.<system>.<type>.w<n> per dependence type and worker count (default
// 1 and 2), running the executable on three graphs of that type at once at small sizes, with validation (an @WORKERS@
// in the launcher, e.g. mpirun -np @WORKERS@, takes the count instead of -workers); see the comment above the
// function.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace taskbench {

class OutputBuffers;

/// Inclusive interval of points.
struct Interval {
  long first, last;
  friend bool operator==(const Interval&, const Interval&) = default;
};

enum class DependenceType {
  trivial, no_comm, stencil_1d, stencil_1d_periodic, dom, tree, fft, all_to_all, nearest, spread, random_nearest
};
enum class KernelType {
  empty, busy_wait, memory_bound, compute_dgemm, memory_daxpy, compute_bound, compute_bound2, load_imbalance
};

/// Names as written on the command line (-type, -kernel) and in the configuration block.
const char* name_of(DependenceType type);
const char* name_of(KernelType type);

struct Kernel {
  KernelType type = KernelType::empty;
  long iterations = 0;
  long samples = 16;
  double imbalance = 0;
};

/// SipHash-2-4 of `bytes` bytes at `data` with a 16-byte key (64-bit output).
std::uint64_t siphash24(const void* data, std::size_t bytes, const unsigned char key[16]);
/// U(v[0], ..., v[n-1]) of the spec: the values as little-endian signed 64-bit integers hashed with SipHash-2-4
/// under the key 01 02 ... 0f 00, times 2^-64: a double in [0, 1).
double hash_uniform(const std::int64_t* values, std::size_t n);

/// Wall clock in seconds (steady clock), for timing runs.
double now_seconds();

/// How a failed check ends the run (a task's validation, the end-of-run exactly-once check). The default
/// prints "error: <message>" on stderr and exits the process with status 1. A multi-process implementation
/// installs a handler that names its process and ends the whole job (MPI_Abort), so that no other process is
/// left waiting for this one. A handler must not return; it may be called from any thread, once per process.
using FailureHandler = void (*)(const char* message);
void set_failure_handler(FailureHandler handler);
/// Ends the run through the failure handler (message: "validation failed: ...", without "error: ").
[[noreturn]] void fail_run(const std::string& message);

/// One task graph: shape (spec section 2), kernel (section 4) and validation (section 3). Points are absolute
/// indices 0 .. max_width-1; at timestep t the live points are offset_at_timestep(t) .. + width_at_timestep(t) - 1.
struct TaskGraph {
  long graph_index = 0;
  long timesteps = 4;
  long max_width = 4;
  DependenceType dependence = DependenceType::trivial;
  long radix = 3;
  long period = 0;
  double fraction = 0.25;
  Kernel kernel;
  std::size_t output_bytes = 16;
  std::size_t scratch_bytes = 0;
  /// -field: output buffers per point (the output of timestep t goes to buffer t mod fields, so each buffer is
  /// rewritten `fields` timesteps after it was written); 0 when -field was not given.
  long fields = 0;

  /// Output buffers each point keeps: -field when given, at most the number of timesteps (more would never be
  /// written), else `implementation_default` (each implementation's own depth: 2 behind a barrier per
  /// timestep, more where the runtime orders a rewrite after the reads of the output it replaces).
  long output_fields(long implementation_default) const {
    return fields > 0 ? std::min(fields, timesteps) : implementation_default;
  }
  /// Whether some task reads another task's output (a graph without any can keep a single buffer per point).
  bool has_dependencies() const;

  long offset_at_timestep(long t) const {  ///< 0 for t < 0
    return t >= 0 && dependence == DependenceType::dom && t + max_width > timesteps ? t + max_width - timesteps : 0;
  }
  long width_at_timestep(long t) const {  ///< 0 for t < 0 or t >= timesteps
    if (t < 0 || t >= timesteps) return 0;
    if (dependence == DependenceType::dom) return std::min({max_width, t + 1, timesteps - t});
    if (dependence == DependenceType::tree) return t >= 62 ? max_width : std::min(max_width, 1L << t);
    return max_width;
  }
  long max_dependence_sets() const;       ///< distinct dependence sets (fft: ceil(log2 W); spread etc.: period)
  long timestep_period() const;           ///< timesteps after which the dependence sets repeat
  long dependence_set_at_timestep(long t) const;

  /// Raw dependencies of point `point` in dependence set `dset` (intervals in the spec's order, not clipped
  /// to live points).
  std::vector<Interval> dependencies(long dset, long point) const;
  /// Raw reverse dependencies: the points of the next timestep that depend on `point`.
  std::vector<Interval> reverse_dependencies(long dset, long point) const;

  /// Live inputs of task (t, point), in the order the task checks them (intervals in order, ascending within,
  /// clipped to the points live at t-1); empty at t = 0. Clears `out` first (no allocation once warm).
  void inputs_of(long t, long point, std::vector<long>& out) const;
  /// Live consumers at t+1 of task (t, point), ascending (clipped to the points live at t+1).
  void consumers_of(long t, long point, std::vector<long>& out) const;
  /// Number of live inputs of task (t, point) (inputs_of(...).size(), without building the list).
  long num_inputs(long t, long point) const;

  /// Runs task (t, point): validates every input (input k must have output_bytes bytes and every 16-byte
  /// record must equal (t-1, p_k), p_k the k-th element of inputs_of), checks the scratch buffer's first word,
  /// runs the kernel and fills `output` with (t, point) records. On any mismatch prints one message to stderr
  /// naming the graph, the task, the input index, the expected and the received records, and exits the
  /// process with status 1 (thread-safe: one message even when several tasks fail at once). `scratch` may be
  /// null when scratch_bytes == 0.
  void execute_point(long t, long point, char* output, std::size_t output_bytes, const char* const* inputs,
                     const std::size_t* input_bytes, std::size_t n_inputs, char* scratch,
                     std::size_t scratch_bytes) const;
  /// Same, for an implementation whose outputs live in OutputBuffers: the inputs are the buffers of the points
  /// of inputs_of(t, point) at generation t-1, the output is the buffer of `point` at generation t (validated
  /// the same way, without building the input list: the cheapest way to run a task).
  void execute_point(long t, long point, const OutputBuffers& buffers, char* scratch,
                     std::size_t scratch_bytes) const;
  /// Fills a scratch buffer with 64-bit 0x5C4A7C8B words (call once per buffer before the run).
  static void prepare_scratch(char* scratch, std::size_t bytes);

  /// Exactly-once bookkeeping (see the top of this file): one byte per (t, point), index t * max_width + point,
  /// counting the runs of that task (saturating at 255).
  std::vector<unsigned char> run_marks() const;
  void set_run_marks(const std::vector<unsigned char>& marks);
  /// Allocates (and clears) the marks; App does it for its graphs unless -skip-graph-validation was given.
  /// Without marks execute_point does not track runs.
  void enable_run_marks();
  /// The first task (ascending t, then point) whose run count is not exactly 1: false if there is none (or
  /// the marks are not enabled), else true with the task and its count.
  bool first_unrun_task(long& t, long& point, unsigned& count) const;

  /// Throws std::invalid_argument (message for the user) if the graph violates the spec's rules: period,
  /// radix and width combinations, kernel sizes, -field 1 on a graph with dependencies, a dependency list
  /// repeating a point, reverse dependencies not mirroring the dependencies. App calls it for every graph.
  void check() const;

  /// Kernel work of task (t, point) (spec section 4).
  long long flops_of(long t, long point) const;
  long long bytes_of(long t, long point) const;

 private:
  template <class InputAt>
  friend void execute_task(const TaskGraph&, long, long, char*, std::size_t, InputAt&&, std::size_t, char*,
                           std::size_t);
  void mark_run(long t, long point) const;  // exactly-once bookkeeping of execute_point
  std::shared_ptr<std::atomic<unsigned char>[]> marks_;  // shared by copies of the graph
  std::size_t n_marks_ = 0;
};

/// Output buffers of one graph: `generations` buffers of output_bytes per point, 64-byte aligned; task (t, i)
/// writes buffer (i, t mod generations). Two generations suffice when timestep t-1 is finished before t starts;
/// a runtime that overlaps timesteps uses more so that fewer writes wait for earlier readers.
class OutputBuffers {
 public:
  OutputBuffers() = default;
  OutputBuffers(const TaskGraph& graph, long generations);
  char* get(long t, long point) const {
    return base_ + (static_cast<std::size_t>(point) * static_cast<std::size_t>(generations_) +
                    static_cast<std::size_t>(t % generations_)) * stride_;
  }
  std::size_t bytes() const { return bytes_; }
  /// Buffers per point.
  long generations() const { return generations_; }
  /// get(t, p + 1) - get(t, p): lets a caller address many points of one generation with one get().
  std::size_t point_stride() const { return static_cast<std::size_t>(generations_) * stride_; }

 private:
  std::shared_ptr<char[]> storage_;
  char* base_ = nullptr;
  long generations_ = 1;
  std::size_t bytes_ = 0, stride_ = 0;
};

/// What one thread needs to run tasks: the input list and pointers (reused from task to task, so running a task
/// allocates nothing once warm) and a prepared scratch buffer. One per worker thread.
class TaskRunner {
 public:
  /// scratch_bytes: the largest scratch_bytes of the graphs this runner will run.
  explicit TaskRunner(std::size_t scratch_bytes = 0);
  /// Runs task (t, point) of `graph`: inputs from `buffers` at generation t-1 (points graph.inputs_of(t, point)),
  /// output to generation t.
  void run(const TaskGraph& graph, const OutputBuffers& buffers, long t, long point) {
    graph.execute_point(t, point, buffers, graph.scratch_bytes ? scratch_.data() : nullptr, graph.scratch_bytes);
  }
  /// Same, with the inputs given by the caller (pointers to output_bytes bytes each, in inputs_of order).
  void run(const TaskGraph& graph, long t, long point, char* output, const char* const* inputs, std::size_t n);

 private:
  std::vector<long> points_;
  std::vector<const char*> inputs_;
  std::vector<std::size_t> sizes_;
  std::vector<char> scratch_;
};

struct App {
  /// Parses the command line (spec section 1). Bad input: "error: ..." on stderr, exit 2. -h: help on stdout,
  /// exit 0. --dump-graph: prints the graphs (spec section 6), exit 0.
  App(int argc, char** argv);

  std::vector<TaskGraph> graphs;
  int workers = 1;               ///< -workers (default: hardware threads)
  bool workers_given = false;    ///< -workers was on the command line
  int verbose = 0;               ///< 0, 1 (-v), 2 (-vv)
  long nodes = 0;                ///< -nodes, 0 if not given
  bool skip_graph_validation = false;
  const char* system_name = "unknown";  ///< set by the implementation before display()

  /// For a system that runs one thread per process (serial, MPI): exits 2 with a message naming `system` if
  /// -workers was given with a value other than 1; sets workers = 1.
  void require_single_worker(const char* system);
  /// For a system that cannot keep a given number of output buffers per point: exits 2 with a message naming
  /// `system` and `why` if a graph was given -field.
  void reject_fields(const char* system, const char* why) const;

  /// The configuration block (spec section 5), plus the per-timestep graphs with -v / -vv.
  void display() const;
  /// Checks (unless -skip-graph-validation) that every task of every graph ran exactly once (exit 1 with a
  /// message naming the first missing task otherwise), then prints the summary block (spec section 5).
  void report_timing(double elapsed_seconds) const;

  /// Totals over every graph (as in the summary).
  long long total_tasks() const;
  long long total_dependencies() const;
  long long total_flops() const;
  long long total_bytes() const;
  /// Largest number of timesteps over the graphs.
  long max_timesteps() const;
};

}  // namespace taskbench
