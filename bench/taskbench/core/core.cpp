// taskbench core: command line (spec section 1), configuration block and summary (section 5), --dump-graph
// (section 6).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/core.hpp"
#include "core/internal.hpp"

namespace taskbench {

namespace {

struct TypeName {
  DependenceType type;
  const char* name;
};
constexpr TypeName kTypes[] = {
    {DependenceType::trivial, "trivial"},
    {DependenceType::no_comm, "no_comm"},
    {DependenceType::stencil_1d, "stencil_1d"},
    {DependenceType::stencil_1d_periodic, "stencil_1d_periodic"},
    {DependenceType::dom, "dom"},
    {DependenceType::tree, "tree"},
    {DependenceType::fft, "fft"},
    {DependenceType::all_to_all, "all_to_all"},
    {DependenceType::nearest, "nearest"},
    {DependenceType::spread, "spread"},
    {DependenceType::random_nearest, "random_nearest"},
};

struct KernelName {
  KernelType type;
  const char* name;
};
constexpr KernelName kKernels[] = {
    {KernelType::empty, "empty"},
    {KernelType::busy_wait, "busy_wait"},
    {KernelType::memory_bound, "memory_bound"},
    {KernelType::compute_dgemm, "compute_dgemm"},
    {KernelType::memory_daxpy, "memory_daxpy"},
    {KernelType::compute_bound, "compute_bound"},
    {KernelType::compute_bound2, "compute_bound2"},
    {KernelType::load_imbalance, "load_imbalance"},
};

// Upper bounds that keep every product the core computes (points, iterations, byte counts) within 64 bits.
constexpr long kMaxSteps = 1L << 40;
constexpr long kMaxWidth = 1L << 24;  // the start-up check keeps a word per point
constexpr long kMaxRadix = 1L << 40;
constexpr long kMaxIterations = 1L << 40;
constexpr long kMaxOutput = 1L << 30;
constexpr long kMaxScratch = 1L << 36;
constexpr long kMaxNodes = 1L << 20;
constexpr long kMaxWorkers = 4096;
// Exactly-once marks take one byte per (timestep, point) of the widest timestep.
constexpr long long kMaxMarkedTasks = 1LL << 32;

const char* kHelp =
    "Usage: %s [flags]\n"
    "A Task Bench-compatible benchmark: runs task graphs with validated dependencies and prints a summary.\n"
    "Graph flags (apply to the graph being configured; -and starts the next graph):\n"
    "  -steps N          timesteps (> 0, default 4)\n"
    "  -width N          maximum width (> 0, default 4)\n"
    "  -type T           dependence type (default trivial): trivial no_comm stencil_1d stencil_1d_periodic dom\n"
    "                    tree fft all_to_all nearest spread random_nearest\n"
    "  -radix N          dependencies per task for nearest, spread, random_nearest (>= 0, default 3)\n"
    "  -period N         dependence sets of spread and random_nearest (default 3; others take 0)\n"
    "  -fraction F       connection probability of random_nearest (0..1, default 0.25)\n"
    "  -kernel K         empty busy_wait compute_bound compute_bound2 memory_bound load_imbalance\n"
    "                    compute_dgemm memory_daxpy (default empty)%s\n"
    "  -iter N           kernel iterations (>= 0, default 0)\n"
    "  -output N         bytes each task outputs (>= 16, default 16)\n"
    "  -scratch N        scratch bytes per task (0, or >= 8; default 0)\n"
    "  -sample N         samples of the memory kernel (>= 0, default 16)\n"
    "  -imbalance F      load imbalance (0..2, default 0)\n"
    "  -field N          output buffers per point: timestep t writes buffer t mod N, so a point's output is\n"
    "                    rewritten N timesteps later (memory: width x N x output bytes per graph). >= 2 when\n"
    "                    tasks have inputs (1 only for graphs without dependencies); values above -steps keep\n"
    "                    -steps buffers. Default: the implementation's own depth (2 where a barrier separates\n"
    "                    timesteps). taskbench-weft-flow, -weft-mpi and -mpi-nonblock reject it.\n"
    "  -and              next graph\n"
    "Run flags:\n"
    "  -workers N        worker threads (default: hardware threads)\n"
    "  -nodes N          nodes, for the local/nonlocal estimates of the summary\n"
    "  -skip-graph-validation   skip the end-of-run check that every task ran exactly once\n"
    "  -v, -vv           print the graphs (points and dependencies; -vv adds reverse dependencies)\n"
    "  --dump-graph      print the graphs as 't i : deps | reverse deps' lines and exit\n"
    "  -h                this help\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "error: %s (see -h)\n", message.c_str());
  std::exit(2);
}

// The large buffers are sized by the flags (outputs: -width x -output per generation; scratch: -scratch per
// worker), so an allocation they make impossible is bad input: one line and status 2, not an uncaught bad_alloc.
[[noreturn]] void out_of_memory() {
  std::fflush(stdout);
  std::fputs("error: out of memory: the graphs' buffers (-width, -output, -scratch per worker) do not fit; "
             "use smaller values (see -h)\n", stderr);
  std::_Exit(2);
}

long parse_long(const char* flag, const char* text, long min, long max) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0')
    usage_error(std::string(flag) + " expects an integer, got '" + text + "'");
  if (errno == ERANGE || v < min || v > max)
    usage_error(std::string(flag) + " must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                text);
  return v;
}

double parse_double(const char* flag, const char* text, double min, double max) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v))
    usage_error(std::string(flag) + " expects a number, got '" + text + "'");
  if (v < min || v > max) {
    char range[64];
    std::snprintf(range, sizeof range, "%g..%g", min, max);
    usage_error(std::string(flag) + " must be in " + range + ", got " + text);
  }
  return v;
}

DependenceType parse_type(const char* text) {
  for (const auto& t : kTypes)
    if (std::strcmp(t.name, text) == 0) return t.type;
  if (std::strcmp(text, "random_spread") == 0)
    usage_error("-type random_spread is not implemented (the reference Task Bench does not implement it either)");
  std::string names;
  for (const auto& t : kTypes) names += std::string(" ") + t.name;
  usage_error(std::string("unknown -type '") + text + "'; known types:" + names);
}

KernelType parse_kernel(const char* text) {
  if (std::strcmp(text, "io_bound") == 0)
    usage_error("-kernel io_bound is not implemented (the reference Task Bench does not implement it either)");
  for (const auto& k : kKernels) {
    if (std::strcmp(k.name, text) != 0) continue;
    if ((k.type == KernelType::compute_dgemm || k.type == KernelType::memory_daxpy) && !blas_available())
      usage_error(std::string("-kernel ") + text +
                  " needs BLAS, which this build does not have (OpenBLAS was not found when it was configured)");
    return k.type;
  }
  std::string names;
  for (const auto& k : kKernels) names += std::string(" ") + k.name;
  usage_error(std::string("unknown -kernel '") + text + "'; known kernels:" + names);
}

// Per-graph flag state that the graph itself does not keep.
struct GraphFlags {
  bool period_given = false;
};

}  // namespace

const char* name_of(DependenceType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t.name;
  return "?";
}

const char* name_of(KernelType type) {
  for (const auto& k : kKernels)
    if (k.type == type) return k.name;
  return "?";
}

App::App(int argc, char** argv) {
  std::set_new_handler(out_of_memory);
  const unsigned hw = std::thread::hardware_concurrency();
  workers = hw == 0 ? 1 : static_cast<int>(hw);
  bool dump = false;

  std::vector<GraphFlags> flags(1);
  graphs.emplace_back();
  for (int a = 1; a < argc; ++a) {
    const char* arg = argv[a];
    auto value = [&]() -> const char* {
      if (a + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      return argv[++a];
    };
    TaskGraph& g = graphs.back();
    GraphFlags& f = flags.back();
    if (!std::strcmp(arg, "-h") || !std::strcmp(arg, "--help")) {
      std::printf(kHelp, argc > 0 ? argv[0] : "taskbench",
                  blas_available() ? "" : "\n                    (compute_dgemm, memory_daxpy need BLAS, not in this build)");
      std::exit(0);
    } else if (!std::strcmp(arg, "-v")) {
      verbose = std::max(verbose, 1);
    } else if (!std::strcmp(arg, "-vv")) {
      verbose = 2;
    } else if (!std::strcmp(arg, "--dump-graph")) {
      dump = true;
    } else if (!std::strcmp(arg, "-skip-graph-validation")) {
      skip_graph_validation = true;
    } else if (!std::strcmp(arg, "-and")) {
      graphs.emplace_back();
      graphs.back().graph_index = static_cast<long>(graphs.size()) - 1;
      flags.emplace_back();
    } else if (!std::strcmp(arg, "-nodes")) {
      nodes = parse_long(arg, value(), 1, kMaxNodes);
    } else if (!std::strcmp(arg, "-workers")) {
      workers = static_cast<int>(parse_long(arg, value(), 1, kMaxWorkers));
      workers_given = true;
    } else if (!std::strcmp(arg, "-steps")) {
      g.timesteps = parse_long(arg, value(), 1, kMaxSteps);
    } else if (!std::strcmp(arg, "-width")) {
      g.max_width = parse_long(arg, value(), 1, kMaxWidth);
    } else if (!std::strcmp(arg, "-type")) {
      g.dependence = parse_type(value());
    } else if (!std::strcmp(arg, "-radix")) {
      g.radix = parse_long(arg, value(), 0, kMaxRadix);
    } else if (!std::strcmp(arg, "-period")) {
      g.period = parse_long(arg, value(), 0, kMaxSteps);
      f.period_given = true;
    } else if (!std::strcmp(arg, "-fraction")) {
      g.fraction = parse_double(arg, value(), 0, 1);
    } else if (!std::strcmp(arg, "-kernel")) {
      g.kernel.type = parse_kernel(value());
    } else if (!std::strcmp(arg, "-iter")) {
      g.kernel.iterations = parse_long(arg, value(), 0, kMaxIterations);
    } else if (!std::strcmp(arg, "-output")) {
      g.output_bytes = static_cast<std::size_t>(parse_long(arg, value(), 16, kMaxOutput));
    } else if (!std::strcmp(arg, "-scratch")) {
      g.scratch_bytes = static_cast<std::size_t>(parse_long(arg, value(), 0, kMaxScratch));
    } else if (!std::strcmp(arg, "-sample")) {
      g.kernel.samples = parse_long(arg, value(), 0, kMaxIterations);
    } else if (!std::strcmp(arg, "-imbalance")) {
      g.kernel.imbalance = parse_double(arg, value(), 0, 2);
    } else if (!std::strcmp(arg, "-field")) {
      g.fields = parse_long(arg, value(), 1, kMaxSteps);
    } else {
      usage_error(std::string("unknown flag '") + arg + "'");
    }
  }

  for (std::size_t k = 0; k < graphs.size(); ++k) {
    TaskGraph& g = graphs[k];
    const bool periodic = g.dependence == DependenceType::spread || g.dependence == DependenceType::random_nearest;
    if (!flags[k].period_given) g.period = periodic ? 3 : 0;
    try {
      g.check();
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      // The period came from the default, not from the command line: say so (and how to change it).
      if (periodic && !flags[k].period_given && what.find("-period") != std::string::npos)
        what += " (the default period of -type " + std::string(name_of(g.dependence)) + " is 3: give -period)";
      usage_error(graphs.size() > 1 ? "graph " + std::to_string(k) + ": " + what : what);
    }
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const unsigned long long memory = pages > 0 && page > 0 ? static_cast<unsigned long long>(pages) * page : 0;
    if (memory && g.scratch_bytes > memory)
      usage_error("-scratch " + std::to_string(g.scratch_bytes) + " is more than this machine's memory (" +
                  std::to_string(memory) + " bytes)");
    if (!skip_graph_validation) {
      if (static_cast<long double>(g.timesteps) * static_cast<long double>(g.max_width) >
          static_cast<long double>(kMaxMarkedTasks))
        usage_error("graph " + std::to_string(k) + " has too many tasks to check that each ran exactly once (" +
                    std::to_string(g.timesteps) + " x " + std::to_string(g.max_width) +
                    "); add -skip-graph-validation");
      g.enable_run_marks();
    }
  }

  for (const auto& g : graphs)
    if (g.kernel.type == KernelType::compute_dgemm || g.kernel.type == KernelType::memory_daxpy) {
      use_single_threaded_blas();  // before any worker thread starts
      break;
    }

  if (dump) {
    for (const auto& g : graphs) dump_graph(g, stdout);
    std::fflush(stdout);
    std::exit(0);
  }
}

void App::require_single_worker(const char* system) {
  if (workers_given && workers != 1)
    usage_error(std::string(system) + " runs on one worker: -workers must be 1, got " + std::to_string(workers));
  workers = 1;
}

void App::reject_fields(const char* system, const char* why) const {
  for (const auto& g : graphs)
    if (g.fields > 0) usage_error(std::string(system) + " does not support -field: " + why);
}

long App::max_timesteps() const {
  long m = 0;
  for (const auto& g : graphs) m = std::max(m, g.timesteps);
  return m;
}

namespace {

void print_points(const char* label, const std::vector<long>& points) {
  std::printf("%s", label);
  for (long p : points) std::printf(" %ld", p);
}

void display_verbose(const TaskGraph& g, int verbose) {
  std::vector<long> deps, consumers;
  for (long t = 0; t < g.timesteps; ++t) {
    const long o = g.offset_at_timestep(t), w = g.width_at_timestep(t);
    std::printf("      Timestep %ld (offset %ld, width %ld, dependence set %ld):\n", t, o, w,
                g.dependence_set_at_timestep(t));
    for (long i = o; i < o + w; ++i) {
      std::printf("        Point %ld:", i);
      g.inputs_of(t, i, deps);
      print_points(" dependencies", deps);
      if (verbose > 1) {
        g.consumers_of(t, i, consumers);
        print_points("; reverse dependencies", consumers);
      }
      std::printf("\n");
    }
  }
}

}  // namespace

void App::display() const {
  std::printf("Running Task Benchmark\n");
  std::printf("  Configuration:\n");
  for (std::size_t k = 0; k < graphs.size(); ++k) {
    const TaskGraph& g = graphs[k];
    std::printf("    Task Graph %zu:\n", k + 1);
    std::printf("      Time Steps: %ld\n", g.timesteps);
    std::printf("      Max Width: %ld\n", g.max_width);
    std::printf("      Dependence Type: %s\n", name_of(g.dependence));
    std::printf("      Radix: %ld\n", g.radix);
    std::printf("      Period: %ld\n", g.period);
    std::printf("      Fraction Connected: %f\n", g.fraction);
    std::printf("      Kernel:\n");
    std::printf("        Type: %s\n", name_of(g.kernel.type));
    std::printf("        Iterations: %ld\n", g.kernel.iterations);
    std::printf("        Samples: %ld\n", g.kernel.samples);
    std::printf("        Imbalance: %f\n", g.kernel.imbalance);
    std::printf("      Output Bytes: %zu\n", g.output_bytes);
    std::printf("      Scratch Bytes: %zu\n", g.scratch_bytes);
    if (verbose > 0) display_verbose(g, verbose);
  }
  if (verbose > 0) std::printf("  System: %s, workers: %d\n", system_name, workers);
  std::fflush(stdout);
}

long long App::total_tasks() const {
  long long n = 0;
  for (const auto& g : graphs)
    for (long t = 0; t < g.timesteps; ++t) n += g.width_at_timestep(t);
  return n;
}

long long App::total_dependencies() const {
  long long n = 0;
  for (const auto& g : graphs) n += count_dependencies(g, 0).total;
  return n;
}

namespace {

// Sum of f(t, point) over the tasks of g; kernels whose work does not vary per task take one sample per step.
template <class F>
long long sum_over_tasks(const TaskGraph& g, F&& f) {
  long long s = 0;
  const bool per_task = g.kernel.type == KernelType::load_imbalance;
  for (long t = 0; t < g.timesteps; ++t) {
    const long o = g.offset_at_timestep(t), w = g.width_at_timestep(t);
    if (per_task)
      for (long i = o; i < o + w; ++i) s += f(t, i);
    else
      s += f(t, o) * w;
  }
  return s;
}

}  // namespace

long long App::total_flops() const {
  long long n = 0;
  for (const auto& g : graphs) n += sum_over_tasks(g, [&](long t, long i) { return g.flops_of(t, i); });
  return n;
}

long long App::total_bytes() const {
  long long n = 0;
  for (const auto& g : graphs) n += sum_over_tasks(g, [&](long t, long i) { return g.bytes_of(t, i); });
  return n;
}

void App::report_timing(double elapsed) const {
  if (!skip_graph_validation) {
    for (const auto& g : graphs) {
      long t = 0, p = 0;
      unsigned count = 0;
      if (g.first_unrun_task(t, p, count))
        fail_run("validation failed: graph " + std::to_string(g.graph_index) + ", task (t " + std::to_string(t) +
                 ", point " + std::to_string(p) + ") ran " + std::to_string(count) + " times, expected once");
    }
  }

  long long deps = 0, local = 0, local_bytes = 0, nonlocal_bytes = 0;
  for (const auto& g : graphs) {
    const DependenceCounts c = count_dependencies(g, nodes);
    deps += c.total;
    local += c.local;
    local_bytes += c.local * static_cast<long long>(g.output_bytes);
    nonlocal_bytes += (c.total - c.local) * static_cast<long long>(g.output_bytes);
  }
  const long long flops = total_flops(), bytes = total_bytes();

  std::printf("Total Tasks %lld\n", total_tasks());
  std::printf("Total Dependencies %lld\n", deps);
  if (nodes > 0) {
    std::printf("  Local Dependencies %lld (estimated)\n", local);
    std::printf("  Nonlocal Dependencies %lld (estimated)\n", deps - local);
    std::printf("  Number of Nodes (used for estimate) %ld\n", nodes);
  } else {
    std::printf("  Unable to estimate local/nonlocal dependencies\n");
  }
  std::printf("Total FLOPs %lld\n", flops);
  std::printf("Total Bytes %lld\n", bytes);
  std::printf("Elapsed Time %e seconds\n", elapsed);
  std::printf("FLOP/s %e\n", static_cast<double>(flops) / elapsed);
  std::printf("B/s %e\n", static_cast<double>(bytes) / elapsed);
  std::printf("Transfer (estimated):\n");
  if (nodes > 0) {
    std::printf("  Local Bytes %lld\n", local_bytes);
    std::printf("  Nonlocal Bytes %lld\n", nonlocal_bytes);
    std::printf("  Local Bandwidth %e B/s\n", static_cast<double>(local_bytes) / elapsed);
    std::printf("  Nonlocal Bandwidth %e B/s\n", static_cast<double>(nonlocal_bytes) / elapsed);
  } else {
    std::printf("  Unable to estimate local/nonlocal transfer\n");
  }
  std::fflush(stdout);
}

}  // namespace taskbench
