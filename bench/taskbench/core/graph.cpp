// taskbench core: graph shape, dependencies (spec section 2), validation and bookkeeping (section 3).
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <map>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/core.hpp"
#include "core/internal.hpp"

namespace taskbench {

namespace {

long ceil_log2(long w) { return w <= 1 ? 0 : static_cast<long>(std::bit_width(static_cast<unsigned long>(w - 1))); }

bool needs_period(DependenceType d) {
  return d == DependenceType::spread || d == DependenceType::random_nearest;
}

// Connection test of random_nearest for the edge producer -> consumer (both sides hash the same five values,
// so dependencies and reverse dependencies agree).
bool random_edge(const TaskGraph& g, long dset, long producer, long consumer) {
  if (producer == consumer) return true;
  const std::int64_t v[5] = {g.graph_index, g.radix, dset, producer, consumer};
  return hash_uniform(v, 5) < g.fraction;
}

}  // namespace

// Forces a visitor lambda inline into visit_dependencies' cases (GCC and clang otherwise often leave the
// lambda out of line, a call per interval on the hot paths inputs_of and execute_task).
#define WEFT_TB_INLINE __attribute__((always_inline))

// visit(first, last) for every raw dependency interval of `point` in set `dset`, in the spec's order. Inlined
// into every caller so that walking the dependencies allocates nothing.
template <class F>
WEFT_TB_INLINE inline void visit_dependencies(const TaskGraph& g, long dset, long i, F&& visit) {
  const long W = g.max_width;
  const long r = g.radix;
  switch (g.dependence) {
    case DependenceType::trivial:
      break;
    case DependenceType::no_comm:
      visit(i, i);
      break;
    case DependenceType::stencil_1d:
      visit(std::max(0L, i - 1), std::min(i + 1, W - 1));
      break;
    case DependenceType::stencil_1d_periodic:
      visit(std::max(0L, i - 1), std::min(i + 1, W - 1));
      if (i - 1 < 0) visit(W - 1, W - 1);
      if (i + 1 >= W) visit(0, 0);
      break;
    case DependenceType::dom:
      visit(std::max(0L, i - 1), i);
      break;
    case DependenceType::tree:
      visit(i / 2, i / 2);
      break;
    case DependenceType::fft: {
      const long s = 1L << dset;
      if (i - s >= 0) visit(i - s, i - s);
      visit(i, i);
      if (i + s < W) visit(i + s, i + s);
      break;
    }
    case DependenceType::all_to_all:
      visit(0, W - 1);
      break;
    case DependenceType::nearest:
      if (r > 0) visit(std::max(0L, i - r / 2), std::min(i + (r - 1) / 2, W - 1));
      break;
    case DependenceType::spread:
      for (long k = 0; k < r; ++k) {
        const long p = (i + (k * W) / r + (k > 0 ? dset : 0)) % W;
        visit(p, p);
      }
      break;
    case DependenceType::random_nearest:
      if (r > 0) {
        const long hi = std::min(i + (r - 1) / 2, W - 1);
        for (long j = std::max(0L, i - r / 2); j <= hi; ++j)
          if (random_edge(g, dset, j, i)) visit(j, j);
      }
      break;
  }
}

template <class F>
inline void visit_reverse_dependencies(const TaskGraph& g, long dset, long i, F&& visit) {
  const long W = g.max_width;
  const long r = g.radix;
  switch (g.dependence) {
    case DependenceType::trivial:
      break;
    case DependenceType::no_comm:
    case DependenceType::stencil_1d:
    case DependenceType::stencil_1d_periodic:
    case DependenceType::fft:
    case DependenceType::all_to_all:
      visit_dependencies(g, dset, i, visit);
      break;
    case DependenceType::dom:
      visit(i, std::min(W - 1, i + 1));
      break;
    case DependenceType::tree:
      if (2 * i + 1 < W)
        visit(2 * i, 2 * i + 1);
      else if (2 * i < W)
        visit(2 * i, 2 * i);
      break;
    case DependenceType::nearest:
      if (r > 0) visit(std::max(0L, i - (r - 1) / 2), std::min(i + r / 2, W - 1));
      break;
    case DependenceType::spread:
      for (long k = 0; k < r; ++k) {
        long p = (i - (k * W) / r - (k > 0 ? dset : 0)) % W;
        if (p < 0) p += W;
        visit(p, p);
      }
      break;
    case DependenceType::random_nearest:
      if (r > 0) {
        const long hi = std::min(i + r / 2, W - 1);
        for (long j = std::max(0L, i - (r - 1) / 2); j <= hi; ++j)
          if (random_edge(g, dset, i, j)) visit(j, j);
      }
      break;
  }
}

// --- shape -------------------------------------------------------------------------------------------------

long TaskGraph::max_dependence_sets() const {
  if (dependence == DependenceType::fft) return ceil_log2(max_width);
  if (needs_period(dependence)) return period;
  return 1;
}

long TaskGraph::timestep_period() const { return max_dependence_sets(); }

// Inlined into the per-task paths (inputs_of, execute_task); the member is the public spelling.
inline long dependence_set_of(const TaskGraph& g, long t) {
  if (g.dependence == DependenceType::fft) [[unlikely]] {
    const long k = ceil_log2(g.max_width);
    return (t + k - 1) % k;
  }
  if (needs_period(g.dependence)) return t % g.period;
  return 0;
}

long TaskGraph::dependence_set_at_timestep(long t) const { return dependence_set_of(*this, t); }

std::vector<Interval> TaskGraph::dependencies(long dset, long point) const {
  std::vector<Interval> out;
  visit_dependencies(*this, dset, point, [&](long a, long b) { out.push_back({a, b}); });
  return out;
}

std::vector<Interval> TaskGraph::reverse_dependencies(long dset, long point) const {
  std::vector<Interval> out;
  visit_reverse_dependencies(*this, dset, point, [&](long a, long b) { out.push_back({a, b}); });
  return out;
}

void TaskGraph::inputs_of(long t, long point, std::vector<long>& out) const {
  out.clear();
  if (t <= 0 || t >= timesteps) return;
  const long lo = offset_at_timestep(t - 1), hi = lo + width_at_timestep(t - 1) - 1;
  visit_dependencies(*this, dependence_set_of(*this, t), point, [&](long a, long b) WEFT_TB_INLINE {
    for (long p = std::max(a, lo), e = std::min(b, hi); p <= e; ++p) out.push_back(p);
  });
}

long TaskGraph::num_inputs(long t, long point) const {
  if (t <= 0 || t >= timesteps) return 0;
  const long lo = offset_at_timestep(t - 1), hi = lo + width_at_timestep(t - 1) - 1;
  long n = 0;
  visit_dependencies(*this, dependence_set_at_timestep(t), point, [&](long a, long b) {
    n += std::max(0L, std::min(b, hi) - std::max(a, lo) + 1);
  });
  return n;
}

void TaskGraph::consumers_of(long t, long point, std::vector<long>& out) const {
  out.clear();
  if (t < 0 || t + 1 >= timesteps) return;
  const long lo = offset_at_timestep(t + 1), hi = lo + width_at_timestep(t + 1) - 1;
  visit_reverse_dependencies(*this, dependence_set_at_timestep(t + 1), point, [&](long a, long b) {
    for (long p = std::max(a, lo), e = std::min(b, hi); p <= e; ++p) out.push_back(p);
  });
  std::sort(out.begin(), out.end());
}

bool TaskGraph::has_dependencies() const {
  if (timesteps < 2 || dependence == DependenceType::trivial) return false;
  const bool windowed = dependence == DependenceType::nearest || dependence == DependenceType::random_nearest ||
                        dependence == DependenceType::spread;
  return !(windowed && radix == 0);
}

// --- start-up checks ----------------------------------------------------------------------------------------

void TaskGraph::check() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  const std::string type = name_of(dependence);
  if (timesteps <= 0) fail("-steps must be > 0");
  if (max_width <= 0) fail("-width must be > 0");
  if (needs_period(dependence) && period <= 0)
    fail("-type " + type + " needs -period > 0 (got " + std::to_string(period) + ")");
  if (!needs_period(dependence) && period != 0)
    fail("-period applies only to -type spread and random_nearest (got -period " + std::to_string(period) +
         " with -type " + type + ")");
  if (dependence == DependenceType::fft && max_width < 2) fail("-type fft needs -width >= 2 (got 1)");
  if (dependence == DependenceType::stencil_1d_periodic && max_width < 3)
    fail("-type stencil_1d_periodic needs -width >= 3 (got " + std::to_string(max_width) +
         "): with fewer points the wrap-around repeats a neighbour");
  if (dependence == DependenceType::spread) {
    if (radix <= 0) fail("-type spread needs -radix > 0");
    if (radix > max_width)
      fail("-type spread needs -radix <= -width (got radix " + std::to_string(radix) + ", width " +
           std::to_string(max_width) + "): the spread points would repeat");
    const long max_period = (max_width + radix - 1) / radix;
    if (period > max_period)
      fail("-type spread needs -period <= ceil(width / radix) = " + std::to_string(max_period) + " (got " +
           std::to_string(period) + ")");
  }
  if (scratch_bytes > 0 && scratch_bytes < 8)
    fail("-scratch must be 0 or at least 8 (got " + std::to_string(scratch_bytes) +
         "): a task checks the first 64-bit word of its scratch buffer");
  if (kernel.type == KernelType::memory_bound || kernel.type == KernelType::memory_daxpy) {
    const std::string k = name_of(kernel.type);
    if (kernel.samples <= 0) fail("-kernel " + k + " needs -sample > 0");
    if (scratch_bytes / static_cast<std::size_t>(kernel.samples) < 16)
      fail("-kernel " + k + " needs -scratch >= 16 * -sample (got scratch " + std::to_string(scratch_bytes) +
           ", samples " + std::to_string(kernel.samples) + "): each sample slice " +
           (kernel.type == KernelType::memory_bound ? "copies its first half" : "adds its first half to its second"));
  }
  if (kernel.type == KernelType::compute_dgemm) {
    if (scratch_bytes < 24)
      fail("-kernel compute_dgemm needs -scratch >= 24 (got " + std::to_string(scratch_bytes) +
           "): the scratch holds three N x N matrices of doubles, N = floor(sqrt(scratch / 24))");
    // The summary counts 2 N^3 FLOPs per iteration and task in 64 bits.
    const long double n = static_cast<long double>(matrix_order(scratch_bytes));
    if (2 * n * n * n * static_cast<long double>(kernel.iterations) * static_cast<long double>(timesteps) *
            static_cast<long double>(max_width) > 0x1p62L)
      fail("-kernel compute_dgemm: the graph's FLOP count (2 N^3 x -iter x tasks) does not fit in 64 bits; use "
           "a smaller -scratch, -iter, -steps or -width");
  }
  if (fields < 0) fail("-field must be > 0");
  if (fields == 1 && has_dependencies())
    fail("-field 1 keeps one output buffer per point, which a task would overwrite while the tasks of the next "
         "timestep still read it; use -field 2 or more (1 suits only graphs without dependencies)");

  // Every dependency list: points in range and no repeats; reverse dependencies mirror dependencies exactly.
  // Membership is tested against the other side's intervals, so the cost is O(edges x intervals), no set.
  const long W = max_width;
  std::vector<long> stamp(static_cast<std::size_t>(W), -1);
  for (long d = 0; d < max_dependence_sets(); ++d) {
    long edges = 0, reverse_edges = 0;
    for (long i = 0; i < W; ++i) {
      auto no_repeat = [&](const char* what, long stamp_value) {
        return [&, what, stamp_value](long a, long b) {
          for (long p = a; p <= b; ++p) {
            if (p < 0 || p >= W)
              fail(std::string(what) + " of point " + std::to_string(i) + " (set " + std::to_string(d) +
                   ") name point " + std::to_string(p) + ", outside 0.." + std::to_string(W - 1));
            if (stamp[p] == stamp_value)
              fail(std::string(what) + " of point " + std::to_string(i) + " (set " + std::to_string(d) +
                   ") repeat point " + std::to_string(p) + " (-type " + type + ", -width " + std::to_string(W) +
                   ", -radix " + std::to_string(radix) + ")");
            stamp[p] = stamp_value;
          }
        };
      };
      visit_dependencies(*this, d, i, no_repeat("dependencies", 2 * i));
      visit_reverse_dependencies(*this, d, i, no_repeat("reverse dependencies", 2 * i + 1));
      visit_dependencies(*this, d, i, [&](long a, long b) {
        for (long p = a; p <= b; ++p) {
          ++edges;
          bool found = false;
          visit_reverse_dependencies(*this, d, p, [&](long c, long e) { found = found || (c <= i && i <= e); });
          if (!found)
            fail("point " + std::to_string(i) + " depends on point " + std::to_string(p) + " (set " +
                 std::to_string(d) + ") but is not among its reverse dependencies");
        }
      });
      visit_reverse_dependencies(*this, d, i, [&](long a, long b) { reverse_edges += b - a + 1; });
    }
    if (edges != reverse_edges)
      fail("dependence set " + std::to_string(d) + " has " + std::to_string(edges) + " dependencies but " +
           std::to_string(reverse_edges) + " reverse dependencies");
  }
}

// --- execution and validation -------------------------------------------------------------------------------

namespace {

std::atomic<bool> g_failing{false};
std::atomic<FailureHandler> g_failure_handler{nullptr};

}  // namespace

void set_failure_handler(FailureHandler handler) { g_failure_handler.store(handler); }

// One message, then the end of the process (or of the job): a second failing thread waits for the first one's
// exit instead of printing too.
void fail_run(const std::string& message) {
  if (g_failing.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fflush(stdout);
  if (const FailureHandler handler = g_failure_handler.load()) {
    handler(message.c_str());
    std::abort();  // a handler that returns breaks its contract; never carry on after a failed check
  }
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

namespace {

[[noreturn]] void validation_failure(const std::string& message) { fail_run("validation failed: " + message); }

std::string task_name(const TaskGraph& g, long t, long point) {
  return "graph " + std::to_string(g.graph_index) + ", task (t " + std::to_string(t) + ", point " +
         std::to_string(point) + ")";
}

std::string record(long a, long b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "(%ld, %ld)", a, b);
  return buf;
}

// Failure paths of execute_task, out of line and cold so that the checks of a task that passes cost a few
// compares each.
[[noreturn, gnu::cold, gnu::noinline]] void not_a_task(const TaskGraph& g, long t, long point) {
  const long o = g.offset_at_timestep(t);
  validation_failure(task_name(g, t, point) + " is not a task of the graph (timesteps " + std::to_string(g.timesteps) +
                     ", live points " + std::to_string(o) + ".." + std::to_string(o + g.width_at_timestep(t) - 1) +
                     ")");
}
[[noreturn, gnu::cold, gnu::noinline]] void missing_input(const TaskGraph& g, long t, long point, std::size_t k,
                                                          long p, std::size_t n_inputs) {
  validation_failure(task_name(g, t, point) + ": input " + std::to_string(k) + " (from point " + std::to_string(p) +
                     " at timestep " + std::to_string(t - 1) + ") is missing: got " + std::to_string(n_inputs) +
                     " inputs, expected " + std::to_string(g.num_inputs(t, point)));
}
[[noreturn, gnu::cold, gnu::noinline]] void bad_input_size(const TaskGraph& g, long t, long point, std::size_t k,
                                                           long p, const char* in, std::size_t in_bytes) {
  validation_failure(task_name(g, t, point) + ": input " + std::to_string(k) + " (from point " + std::to_string(p) +
                     ") has " + std::to_string(in ? in_bytes : 0) + " bytes, expected " +
                     std::to_string(g.output_bytes));
}
// Names the first record of input k that is not (t-1, p).
[[noreturn, gnu::cold, gnu::noinline]] void bad_input_record(const TaskGraph& g, long t, long point, std::size_t k,
                                                             long p, const char* in) {
  for (std::size_t r = 0; r + 16 <= g.output_bytes; r += 16) {
    std::int64_t got[2];
    std::memcpy(got, in + r, 16);
    if (got[0] != t - 1 || got[1] != p)
      validation_failure(task_name(g, t, point) + ": input " + std::to_string(k) + ", record " +
                         std::to_string(r / 16) + ": expected " + record(t - 1, p) + ", received " +
                         record(got[0], got[1]));
  }
  std::abort();  // unreachable: called only when a record differs
}
[[noreturn, gnu::cold, gnu::noinline]] void ran_twice(const TaskGraph& g, long t, long point) {
  validation_failure(task_name(g, t, point) + " ran more than once");
}
[[noreturn, gnu::cold, gnu::noinline]] void wrong_input_count(const TaskGraph& g, long t, long point,
                                                              std::size_t n_inputs, std::size_t k) {
  validation_failure(task_name(g, t, point) + ": received " + std::to_string(n_inputs) + " inputs, expected " +
                     std::to_string(k));
}
[[noreturn, gnu::cold, gnu::noinline]] void bad_scratch(const TaskGraph& g, long t, long point, const char* scratch,
                                                        std::size_t scr_bytes) {
  if (scratch == nullptr || scr_bytes != g.scratch_bytes)
    validation_failure(task_name(g, t, point) + ": scratch buffer has " + std::to_string(scratch ? scr_bytes : 0) +
                       " bytes, expected " + std::to_string(g.scratch_bytes));
  std::uint64_t first;
  std::memcpy(&first, scratch, sizeof first);
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%" PRIx64, first);
  validation_failure(task_name(g, t, point) + ": scratch buffer starts with " + hex + ", expected 0x5c4a7c8b");
}
[[noreturn, gnu::cold, gnu::noinline]] void bad_output(const TaskGraph& g, long t, long point, const char* output,
                                                       std::size_t out_bytes) {
  validation_failure(task_name(g, t, point) + ": output buffer has " + std::to_string(output ? out_bytes : 0) +
                     " bytes, expected " + std::to_string(g.output_bytes));
}

// Every whole 16-byte record of `in` (bytes long) is (want_t, p): the first record is compared, then the rest
// against their predecessor in one memcmp (equal to the previous record all along = equal to the first).
inline bool records_match(const char* in, std::size_t bytes, std::int64_t want_t, std::int64_t p) {
  std::int64_t got[2];
  std::memcpy(got, in, 16);
  if (got[0] != want_t || got[1] != p) return false;
  const std::size_t whole = bytes & ~std::size_t{15};
  return whole == 16 || std::memcmp(in + 16, in, whole - 16) == 0;
}

}  // namespace

// Validates and runs task (t, point). input_at(k, p) gives the k-th input (from point p) as a pointer and a size;
// n_inputs is the number the caller passed, or kExactInputs when the caller derives its inputs from the graph
// itself (then no count can be wrong).
constexpr std::size_t kExactInputs = ~std::size_t{0};

template <class InputAt>
void execute_task(const TaskGraph& g, long t, long point, char* output, std::size_t out_bytes, InputAt&& input_at,
                  std::size_t n_inputs, char* scratch, std::size_t scr_bytes) {
  const long o = g.offset_at_timestep(t);
  if (t < 0 || t >= g.timesteps || point < o || point >= o + g.width_at_timestep(t)) [[unlikely]]
    not_a_task(g, t, point);
  g.mark_run(t, point);

  // Inputs, in inputs_of order.
  std::size_t k = 0;
  const std::size_t bytes = g.output_bytes;
  if (t > 0) {
    const long lo = g.offset_at_timestep(t - 1), hi = lo + g.width_at_timestep(t - 1) - 1;
    visit_dependencies(g, dependence_set_of(g, t), point, [&](long a, long b) WEFT_TB_INLINE {
      for (long p = std::max(a, lo), e = std::min(b, hi); p <= e; ++p, ++k) {
        if (k >= n_inputs) [[unlikely]]
          missing_input(g, t, point, k, p, n_inputs);
        const auto [in, in_bytes] = input_at(k, p);
        if (in_bytes != bytes || in == nullptr) [[unlikely]]
          bad_input_size(g, t, point, k, p, in, in_bytes);
        if (!records_match(in, bytes, t - 1, p)) [[unlikely]]
          bad_input_record(g, t, point, k, p, in);
      }
    });
  }
  if (n_inputs != kExactInputs && k != n_inputs) [[unlikely]]
    wrong_input_count(g, t, point, n_inputs, k);

  if (g.scratch_bytes > 0) {
    if (scratch == nullptr || scr_bytes != g.scratch_bytes) [[unlikely]]
      bad_scratch(g, t, point, scratch, scr_bytes);
    std::uint64_t first;
    std::memcpy(&first, scratch, sizeof first);
    if (first != kScratchMagic) [[unlikely]]
      bad_scratch(g, t, point, scratch, scr_bytes);
  }
  if (output == nullptr || out_bytes != bytes) [[unlikely]]
    bad_output(g, t, point, output, out_bytes);

  if (g.kernel.type != KernelType::empty) run_kernel(g, t, point, scratch);

  const std::int64_t rec[2] = {t, point};
  std::memcpy(output, rec, 16);
  for (std::size_t r = 16; r + 16 <= bytes; r += 16) std::memcpy(output + r, rec, 16);
}

void TaskGraph::mark_run(long t, long point) const {
  if (!marks_) return;
  auto& m = marks_[static_cast<std::size_t>(t) * static_cast<std::size_t>(max_width) + point];
  if (m.load(std::memory_order_relaxed) != 0) [[unlikely]]
    ran_twice(*this, t, point);
  m.store(1, std::memory_order_relaxed);
}

void TaskGraph::execute_point(long t, long point, char* output, std::size_t out_bytes, const char* const* inputs,
                              const std::size_t* input_bytes, std::size_t n_inputs, char* scratch,
                              std::size_t scr_bytes) const {
  execute_task(
      *this, t, point, output, out_bytes,
      [&](std::size_t k, long) { return std::pair<const char*, std::size_t>(inputs[k], input_bytes[k]); }, n_inputs,
      scratch, scr_bytes);
}

void TaskGraph::execute_point(long t, long point, const OutputBuffers& buffers, char* scratch,
                              std::size_t scr_bytes) const {
  execute_task(
      *this, t, point, buffers.get(t, point), buffers.bytes(),
      [&](std::size_t, long p) { return std::pair<const char*, std::size_t>(buffers.get(t - 1, p), buffers.bytes()); },
      kExactInputs, scratch, scr_bytes);
}

void TaskGraph::prepare_scratch(char* scratch, std::size_t bytes) {
  const std::uint64_t v = kScratchMagic;
  for (std::size_t r = 0; r + 8 <= bytes; r += 8) std::memcpy(scratch + r, &v, 8);
}

// --- exactly-once bookkeeping -------------------------------------------------------------------------------

void TaskGraph::enable_run_marks() {
  n_marks_ = static_cast<std::size_t>(timesteps) * static_cast<std::size_t>(max_width);
  marks_ = std::shared_ptr<std::atomic<unsigned char>[]>(new std::atomic<unsigned char>[n_marks_]);
  for (std::size_t k = 0; k < n_marks_; ++k) marks_[k].store(0, std::memory_order_relaxed);
}

std::vector<unsigned char> TaskGraph::run_marks() const {
  std::vector<unsigned char> v(n_marks_);
  for (std::size_t k = 0; k < n_marks_; ++k) v[k] = marks_[k].load(std::memory_order_relaxed);
  return v;
}

void TaskGraph::set_run_marks(const std::vector<unsigned char>& v) {
  if (v.size() != n_marks_)
    throw std::invalid_argument("set_run_marks: " + std::to_string(v.size()) + " marks, graph has " +
                                std::to_string(n_marks_));
  for (std::size_t k = 0; k < n_marks_; ++k) marks_[k].store(v[k], std::memory_order_relaxed);
}

bool TaskGraph::first_unrun_task(long& t_out, long& point_out, unsigned& count_out) const {
  if (!marks_) return false;
  for (long t = 0; t < timesteps; ++t) {
    const long o = offset_at_timestep(t), w = width_at_timestep(t);
    for (long p = o; p < o + w; ++p) {
      const unsigned c = marks_[static_cast<std::size_t>(t) * static_cast<std::size_t>(max_width) + p].load(
          std::memory_order_relaxed);
      if (c != 1) {
        t_out = t;
        point_out = p;
        count_out = c;
        return true;
      }
    }
  }
  return false;
}

// --- work counts ----------------------------------------------------------------------------------------------

long long TaskGraph::flops_of(long t, long point) const {
  switch (kernel.type) {
    case KernelType::compute_bound:
      return 2LL * 64 * kernel.iterations + 64;
    case KernelType::compute_bound2:
      return 2LL * 32 * kernel.iterations;
    case KernelType::load_imbalance:
      return 2LL * 64 * imbalanced_iterations(*this, t, point) + 64;
    case KernelType::compute_dgemm: {
      const long long n = matrix_order(scratch_bytes);
      return 2 * n * n * n * kernel.iterations;
    }
    default:
      return 0;
  }
}

long long TaskGraph::bytes_of(long, long) const {
  switch (kernel.type) {
    case KernelType::memory_bound:
    case KernelType::memory_daxpy:
      return kernel.samples > 0
                 ? static_cast<long long>(scratch_bytes) * kernel.iterations / kernel.samples
                 : 0;
    default:
      return 0;
  }
}

// --- graph dump and counts used by App ---------------------------------------------------------------------------

void dump_graph(const TaskGraph& g, std::FILE* f) {
  std::fprintf(f, "graph %ld\n", g.graph_index);
  std::vector<long> deps, consumers;
  for (long t = 0; t < g.timesteps; ++t) {
    const long o = g.offset_at_timestep(t), w = g.width_at_timestep(t);
    for (long i = o; i < o + w; ++i) {
      g.inputs_of(t, i, deps);
      std::sort(deps.begin(), deps.end());
      g.consumers_of(t, i, consumers);
      std::fprintf(f, "%ld %ld :", t, i);
      for (long p : deps) std::fprintf(f, " %ld", p);
      std::fputs(" |", f);
      for (long q : consumers) std::fprintf(f, " %ld", q);
      std::fputc('\n', f);
    }
  }
}

DependenceCounts count_dependencies(const TaskGraph& g, long nodes) {
  // The counts of timestep t depend only on its dependence set and the live ranges at t and t-1; most graphs
  // repeat the same few combinations, so each is counted once.
  using Key = std::array<long, 5>;  // dependence set, offset, width, previous offset, previous width
  std::map<Key, DependenceCounts> memo;
  DependenceCounts total;
  const long W = g.max_width;
  auto node_of = [&](long p) { return ((p + 1) * nodes - 1) / W; };
  auto node_first = [&](long n) { return n * W / nodes; };
  for (long t = 1; t < g.timesteps; ++t) {
    const Key key{g.dependence_set_at_timestep(t), g.offset_at_timestep(t), g.width_at_timestep(t),
                  g.offset_at_timestep(t - 1), g.width_at_timestep(t - 1)};
    auto it = memo.find(key);
    if (it == memo.end()) {
      DependenceCounts c;
      const long lo = key[3], hi = key[3] + key[4] - 1;
      for (long i = key[1]; i < key[1] + key[2]; ++i) {
        long n_first = 0, n_last = -1;
        if (nodes > 0) {
          const long n = node_of(i);
          n_first = node_first(n);
          n_last = node_first(n + 1) - 1;
        }
        visit_dependencies(g, key[0], i, [&](long a, long b) {
          const long s = std::max(a, lo), e = std::min(b, hi);
          if (s > e) return;
          c.total += e - s + 1;
          if (nodes > 0) c.local += std::max(0L, std::min(e, n_last) - std::max(s, n_first) + 1);
        });
      }
      it = memo.emplace(key, c).first;
    }
    total.total += it->second.total;
    total.local += it->second.local;
  }
  return total;
}

}  // namespace taskbench
