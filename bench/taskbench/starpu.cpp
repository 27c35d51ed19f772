// taskbench-starpu: Task Bench on StarPU's task API.
//
// Every output slot (graph, point, generation) is registered once as a StarPU vector handle on the buffer it
// lives in (main memory, used in place: no copies on a CPU-only run). One codelet runs the Task Bench kernel on
// a point; task (t, i) accesses the handles of its inputs at t-1 in STARPU_R mode and its own slot at t in
// STARPU_W mode, and StarPU's sequential consistency derives the graph from the submission order: read after
// write for the inputs, and, when -field makes a slot hold several timesteps' outputs, write after read (and
// after write) for the reuse. The main thread submits the tasks timestep by timestep with the -and graphs
// interleaved, as the other peers do, and waits for all of them; StarPU's -workers CPU worker threads run them.
//
// Configuration: -workers CPU workers (starpu_conf::ncpus), no CUDA, OpenCL or other accelerator, no forced bus
// recalibration or performance-model calibration, and the scheduler `lws` (locality work stealing) unless
// STARPU_SCHED names another: of StarPU's schedulers that need no performance model, the fastest or within 2% of
// it near the METG of stencil_1d on 2 cores (BENCHMARKS.md, section 15). The configuration takes precedence over
// STARPU_NCPU and the like, so that -workers is what runs. STARPU_HOME defaults to a per-run directory under
// $TMPDIR (removed at exit) unless set: StarPU keeps its bus samples and performance models there, and a benchmark
// run should not write to $HOME (with no sample there StarPU samples the bus at start-up, which with no
// accelerator takes milliseconds). STARPU_SILENT defaults to 1: StarPU announces that sampling on stderr.
// StarPU's start-up and shut-down, handle registration and unregistration are outside the timed region.
#include <starpu.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "core/core.hpp"
#include "peer_common.hpp"

namespace {

using namespace taskbench;

constexpr const char* kSystem = "starpu";

/// What the codelet needs besides its buffers: the graph, the task's point and the runners (one per worker).
struct TaskArgs {
  const TaskGraph* graph;
  peer::Runners* runners;
  long t, point;
};

/// The codelet's CPU function. buffers[0] is the task's output, buffers[1..] its inputs in inputs_of order.
void run_point(void* buffers[], void* cl_arg) {
  const TaskArgs& a = *static_cast<const TaskArgs*>(cl_arg);
  const std::size_t n = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current()) - 1;
  // Inputs of a task: at most the width of the graph; the common sizes without a heap allocation.
  constexpr std::size_t kLocal = 16;
  const char* local[kLocal];
  std::vector<const char*> heap;
  const char** inputs = local;
  if (n > kLocal) {
    heap.resize(n);
    inputs = heap.data();
  }
  for (std::size_t k = 0; k < n; ++k)
    inputs[k] = reinterpret_cast<const char*>(STARPU_VECTOR_GET_PTR(buffers[k + 1]));
  char* output = reinterpret_cast<char*>(STARPU_VECTOR_GET_PTR(buffers[0]));
  (*a.runners)[starpu_worker_get_id()].run(*a.graph, a.t, a.point, output, inputs, n);
}

starpu_codelet make_codelet() {
  starpu_codelet cl;
  std::memset(&cl, 0, sizeof cl);  // what starpu_codelet_init does; every field not set here unused
  cl.where = STARPU_CPU;
  cl.cpu_funcs[0] = run_point;
  cl.nbuffers = STARPU_VARIABLE_NBUFFERS;  // inputs vary by pattern, timestep and point; modes set per task
  cl.name = "taskbench_point";
  return cl;
}

/// The handles of one graph's output slots, registered on its OutputBuffers: handle (t, point) is the slot
/// task (t, point) writes.
class Handles {
 public:
  Handles(const TaskGraph& graph, const OutputBuffers& buffers)
      : generations_(peer::reuse_generations(graph)),
        handles_(static_cast<std::size_t>(graph.max_width * generations_)) {
    for (long i = 0; i < graph.max_width; ++i)
      for (long gen = 0; gen < generations_; ++gen)
        starpu_vector_data_register(&handles_[index(gen, i)], STARPU_MAIN_RAM,
                                    reinterpret_cast<std::uintptr_t>(buffers.get(gen, i)),
                                    static_cast<std::uint32_t>(buffers.bytes()), 1);
  }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  ~Handles() {
    for (starpu_data_handle_t h : handles_) starpu_data_unregister(h);
  }
  starpu_data_handle_t at(long t, long point) const { return handles_[index(t % generations_, point)]; }

 private:
  std::size_t index(long gen, long point) const { return static_cast<std::size_t>(point * generations_ + gen); }
  long generations_;
  std::vector<starpu_data_handle_t> handles_;
};

/// Submits task (t, point) of a graph: output slot in W mode, input slots in R mode.
void submit(starpu_codelet* cl, const TaskGraph& graph, const Handles& handles, peer::Runners& runners, long t,
            long point, const std::vector<long>& inputs) {
  starpu_task* task = starpu_task_create();  // detached, destroyed by StarPU once run
  task->cl = cl;
  // Freed by StarPU with the task (cl_arg_free), hence malloc.
  auto* args = static_cast<TaskArgs*>(std::malloc(sizeof(TaskArgs)));
  if (!args) {
    std::fprintf(stderr, "error: %s: out of memory\n", kSystem);
    std::exit(1);
  }
  *args = TaskArgs{&graph, &runners, t, point};
  task->cl_arg = args;
  task->cl_arg_size = sizeof(TaskArgs);
  task->cl_arg_free = 1;
  const int n = static_cast<int>(inputs.size()) + 1;
  task->nbuffers = n;
  starpu_data_handle_t* h = task->handles;
  starpu_data_access_mode* modes = task->modes;
  if (n > STARPU_NMAXBUFS) {
    // More buffers than the task's fixed arrays hold: StarPU frees dynamic arrays with the task.
    task->dyn_handles = static_cast<starpu_data_handle_t*>(std::malloc(n * sizeof(starpu_data_handle_t)));
    task->dyn_modes = static_cast<starpu_data_access_mode*>(std::malloc(n * sizeof(starpu_data_access_mode)));
    if (!task->dyn_handles || !task->dyn_modes) {
      std::fprintf(stderr, "error: %s: out of memory\n", kSystem);
      std::exit(1);
    }
    h = task->dyn_handles;
    modes = task->dyn_modes;
  }
  h[0] = handles.at(t, point);
  modes[0] = STARPU_W;
  for (int k = 1; k < n; ++k) {
    h[k] = handles.at(t - 1, inputs[static_cast<std::size_t>(k - 1)]);
    modes[k] = STARPU_R;
  }
  const int rc = starpu_task_submit(task);
  if (rc != 0) {
    std::fprintf(stderr, "error: %s: starpu_task_submit failed: %s\n", kSystem, std::strerror(-rc));
    std::exit(1);
  }
}

/// STARPU_HOME for this run when the environment sets none: a fresh directory under the temporary directory,
/// removed at exit (an empty string if it cannot be made; StarPU then uses its default).
class ScratchHome {
 public:
  ScratchHome() {
    if (std::getenv("STARPU_HOME")) return;
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) return;
    std::string pattern = (base / "taskbench-starpu.XXXXXX").string();
    if (!mkdtemp(pattern.data())) return;
    dir_ = pattern;
    setenv("STARPU_HOME", dir_.c_str(), 1);
  }
  ScratchHome(const ScratchHome&) = delete;
  ScratchHome& operator=(const ScratchHome&) = delete;
  ~ScratchHome() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::string dir_;
};

}  // namespace

int main(int argc, char** argv) {
  App app(argc, argv);
  app.system_name = kSystem;
  app.display();

  const int workers = app.workers;
  if (workers > STARPU_MAXCPUS) {
    std::fprintf(stderr, "error: %s: this StarPU is built for at most %d CPU workers (STARPU_MAXCPUS), -workers %d\n",
                 kSystem, STARPU_MAXCPUS, workers);
    return 1;
  }

  ScratchHome home;
  // StarPU announces each bus sampling on stderr, which with a fresh STARPU_HOME is every run; the message says
  // nothing about the run. STARPU_SILENT set in the environment wins.
  setenv("STARPU_SILENT", "1", 0);
  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.precedence_over_environment_variables = 1;
  conf.ncpus = workers;
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.nmic = 0;
  conf.nmpi_ms = 0;
  conf.bus_calibrate = 0;
  conf.calibrate = 0;
  const char* sched = std::getenv("STARPU_SCHED");
  conf.sched_policy_name = sched && *sched ? sched : "lws";
  if (const int rc = starpu_init(&conf); rc != 0) {
    std::fprintf(stderr, "error: %s: starpu_init failed: %s\n", kSystem, std::strerror(-rc));
    return 1;
  }
  peer::require_threads(kSystem, static_cast<int>(starpu_cpu_worker_get_count()), workers);

  double elapsed = 0;
  {
    const std::vector<OutputBuffers> buffers = peer::make_buffers(app, peer::reuse_generations);
    peer::Runners runners(app);
    std::vector<std::unique_ptr<Handles>> handles;
    for (std::size_t g = 0; g < app.graphs.size(); ++g)
      handles.push_back(std::make_unique<Handles>(app.graphs[g], buffers[g]));
    starpu_codelet cl = make_codelet();
    const long steps = app.max_timesteps();

    std::vector<long> inputs;
    const double t0 = now_seconds();
    for (long t = 0; t < steps; ++t) {
      for (std::size_t g = 0; g < app.graphs.size(); ++g) {
        const TaskGraph& graph = app.graphs[g];
        const long offset = graph.offset_at_timestep(t), width = graph.width_at_timestep(t);
        for (long i = offset; i < offset + width; ++i) {
          graph.inputs_of(t, i, inputs);
          submit(&cl, graph, *handles[g], runners, t, i, inputs);
        }
      }
    }
    starpu_task_wait_for_all();
    elapsed = now_seconds() - t0;
  }  // handles unregistered (after the timer), then the buffers freed
  starpu_shutdown();
  app.report_timing(elapsed);
  return 0;
}
