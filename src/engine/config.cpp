// Options: defaults, WEFT_* environment variables, validation.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;  // POSIX

#include "engine/check.hpp"
#include "weft/profile.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace {

unsigned hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

// Parses a whole decimal integer in [lo, hi]; anything else is a config_error naming the variable.
unsigned long long parse_integer(const char* name, const char* text, unsigned long long lo, unsigned long long hi) {
  std::string s(text);
  auto fail = [&] {
    throw config_error(std::string("weft: ") + name + "='" + s + "' is invalid: expected an integer from " +
                       std::to_string(lo) + " to " + std::to_string(hi));
  };
  if (s.empty() || s.size() > 20) fail();
  for (char c : s)
    if (c < '0' || c > '9') fail();
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0 || v < lo || v > hi) fail();
  return v;
}

// Parses a decimal number of seconds in [0, hi] (e.g. "30", "0.5"); anything else is a config_error.
double parse_seconds(const char* name, const char* text, double hi) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() ? -1 : std::strtod(s.c_str(), &end);
  // (strtod also takes blanks, signs, hexadecimal, "inf" and "nan": only digits and one point are seconds.)
  if (s.empty() || s.find_first_not_of("0123456789.") != std::string::npos || errno != 0 || *end != '\0' ||
      !(v >= 0 && v <= hi))
    throw config_error(std::string("weft: ") + name + "='" + s + "' is invalid: expected a number of seconds from 0 to " +
                       std::to_string(static_cast<long long>(hi)) + ", in digits with at most one point (30, 0.5)");
  return v;
}

constexpr double kMaxWatchdog = 1e6;

bool parse_flag(const char* name, const char* v) {
  if (std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  throw config_error(std::string("weft: ") + name + "='" + v + "' is invalid: expected 1 or 0");
}

// A byte count with an optional K, M, G or T suffix (powers of 1024), in [lo, hi].
std::size_t parse_bytes(const char* name, const char* text, std::size_t lo, std::size_t hi) {
  std::string s(text);
  int shift = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: break;
    }
    if (shift) s.pop_back();
  }
  bool ok = !s.empty() && s.size() <= 15 && s.find_first_not_of("0123456789") == std::string::npos;
  unsigned long long v = ok ? std::strtoull(s.c_str(), nullptr, 10) : 0;
  if (ok && (v > (hi >> shift) || (v << shift) < lo)) ok = false;
  if (!ok)
    throw config_error(std::string("weft: ") + name + "='" + text + "' is invalid: expected a number of bytes from " +
                       std::to_string(lo) + " to " + std::to_string(hi) + ", with an optional K, M, G or T suffix");
  return static_cast<std::size_t>(v << shift);
}

constexpr std::size_t kMinClusterMemory = std::size_t{1} << 20;

// The variables from_environment reads (through setting(), which checks them against this list).
constexpr const char* kSettings[] = {
    "WEFT_NUM_THREADS", "WEFT_MAX_TASKS", "WEFT_STEAL_BATCH", "WEFT_IDLE_PAUSES", "WEFT_LOCAL_COUNTS",
    "WEFT_BIASED_LOCK", "WEFT_SCHEDULER", "WEFT_LFQ_BUFFER", "WEFT_BIND", "WEFT_IMMEDIATE_SUCCESSOR",
    "WEFT_PROFILE", "WEFT_TRACE", "WEFT_TRACE_EDGES", "WEFT_TRACE_BUFFER", "WEFT_WATCHDOG", "WEFT_COMM_THREAD",
    "WEFT_CLUSTER", "WEFT_OFFLOAD_POLICY", "WEFT_EAGER", "WEFT_DIRECT_SATISFY", "WEFT_CLUSTER_MEMORY",
    "WEFT_CLUSTER_HOLDER_BITS"};

// getenv for a setting: the name must be in kSettings, the list the misspelling check compares against (checked
// in the builds with WEFT_INTERNAL_CHECKS, which run every variable's tests).
const char* setting(const char* name) {
  WEFT_ASSERT(std::find_if(std::begin(kSettings), std::end(kSettings),
                           [&](const char* s) { return std::strcmp(s, name) == 0; }) != std::end(kSettings));
  return std::getenv(name);
}

// Edits (insertions, deletions, substitutions, swaps of neighbours) from a to b.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);  // two neighbours swapped
    }
  return d[a.size()][b.size()];
}

// A WEFT_* variable that is no setting but looks like one (a typo, or another runtime's name for the worker
// count) is ignored, as any unknown variable is; it gets a warning on stderr, once per name and process. Other
// WEFT_* names (a program's own) are left alone.
void warn_misspelled_settings() {
  static std::mutex m;
  static std::set<std::string> warned;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, 5) != "WEFT_") continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    const char* best = nullptr;
    std::size_t best_d = 3;  // at most 2 edits
    for (const char* s : kSettings) {
      if (name == s) {
        best = nullptr;
        best_d = 0;
        break;
      }
      const std::size_t d = edit_distance(name, s);
      if (d < best_d) best = s, best_d = d;
    }
    if (!best && best_d != 0) {
      for (std::string_view worker_count : {"WEFT_WORKERS", "WEFT_NUM_WORKERS", "WEFT_THREADS", "WEFT_NTHREADS"})
        if (name == worker_count) best = "WEFT_NUM_THREADS";
    }
    if (!best) continue;
    std::lock_guard<std::mutex> g(m);
    if (!warned.insert(std::string(name)).second) continue;
    std::fprintf(stderr, "weft: warning: %.*s is not a weft setting and is ignored; did you mean %s? (README, "
                 "Configuration)\n", static_cast<int>(name.size()), name.data(), best);
  }
}

}  // namespace

Options Options::from_environment() {
  warn_misspelled_settings();
  Options o;
  o.num_threads = hardware_threads();
  if (const char* v = setting("WEFT_NUM_THREADS"))
    o.num_threads = static_cast<unsigned>(parse_integer("WEFT_NUM_THREADS", v, 1, kMaxThreads));
  if (const char* v = setting("WEFT_MAX_TASKS"))
    o.max_tasks = static_cast<std::size_t>(parse_integer("WEFT_MAX_TASKS", v, 1, kMaxMaxTasks));
  if (const char* v = setting("WEFT_STEAL_BATCH"))
    o.steal_batch = static_cast<unsigned>(parse_integer("WEFT_STEAL_BATCH", v, 1, kMaxStealBatch));
  if (const char* v = setting("WEFT_IDLE_PAUSES"))
    o.idle_pauses = static_cast<unsigned>(parse_integer("WEFT_IDLE_PAUSES", v, 0, kMaxIdlePauses));
  if (const char* v = setting("WEFT_LOCAL_COUNTS")) o.local_counts = parse_flag("WEFT_LOCAL_COUNTS", v);
  if (const char* v = setting("WEFT_BIASED_LOCK")) o.biased_lock = parse_flag("WEFT_BIASED_LOCK", v);
  if (const char* v = setting("WEFT_SCHEDULER")) {
    if (std::strcmp(v, "llp") == 0)
      o.scheduler = Scheduler::llp;
    else if (std::strcmp(v, "lfq") == 0)
      o.scheduler = Scheduler::lfq;
    else
      throw config_error(std::string("weft: WEFT_SCHEDULER='") + v + "' is invalid: expected llp or lfq");
  }
  if (const char* v = setting("WEFT_LFQ_BUFFER"))
    o.lfq_buffer = static_cast<unsigned>(parse_integer("WEFT_LFQ_BUFFER", v, 1, kMaxLfqBuffer));
  if (const char* v = setting("WEFT_BIND")) {
    if (std::strcmp(v, "cores") == 0)
      o.bind_to_cores = true;
    else if (std::strcmp(v, "none") == 0)
      o.bind_to_cores = false;
    else
      throw config_error(std::string("weft: WEFT_BIND='") + v + "' is invalid: expected 'cores' or 'none'");
  }
  if (const char* v = setting("WEFT_IMMEDIATE_SUCCESSOR")) {
    if (std::strcmp(v, "1") == 0)
      o.immediate_successor = true;
    else if (std::strcmp(v, "0") == 0)
      o.immediate_successor = false;
    else
      throw config_error(std::string("weft: WEFT_IMMEDIATE_SUCCESSOR='") + v + "' is invalid: expected 1 or 0");
  }
  // Profiling and tracing (see ProfileOptions).
  if (const char* v = setting("WEFT_PROFILE")) {
    if (std::strcmp(v, "1") == 0) {
      o.profile.enabled = o.profile.print = true;
    } else if (std::strncmp(v, "json:", 5) == 0 && v[5] != '\0') {
      o.profile.enabled = true;
      o.profile.json_file = rank_file_name(v + 5);  // one file per rank in a job of several processes
    } else if (std::strcmp(v, "0") != 0) {
      throw config_error(std::string("weft: WEFT_PROFILE='") + v + "' is invalid: expected 1, 0 or json:FILE");
    }
  }
  if (const char* v = setting("WEFT_TRACE")) {
    // Empty is rejected as for every other variable: a script's unset file variable must not silently mean off.
    if (v[0] == '\0') throw config_error("weft: WEFT_TRACE='' is invalid: expected a file name");
    o.profile.trace_file = rank_file_name(v);
  }
  if (const char* v = setting("WEFT_TRACE_EDGES")) {
    if (std::strcmp(v, "1") == 0)
      o.profile.trace_edges = true;
    else if (std::strcmp(v, "0") == 0)
      o.profile.trace_edges = false;
    else
      throw config_error(std::string("weft: WEFT_TRACE_EDGES='") + v + "' is invalid: expected 1 or 0");
  }
  if (const char* v = setting("WEFT_TRACE_BUFFER"))
    o.profile.trace_buffer = static_cast<std::size_t>(parse_integer("WEFT_TRACE_BUFFER", v, 1, kMaxTraceBuffer));
  if (const char* v = setting("WEFT_WATCHDOG")) o.watchdog_seconds = parse_seconds("WEFT_WATCHDOG", v, kMaxWatchdog);
  if (const char* v = setting("WEFT_COMM_THREAD")) {
    if (std::strcmp(v, "auto") == 0)
      o.comm_thread = CommThread::automatic;
    else if (std::strcmp(v, "on") == 0)
      o.comm_thread = CommThread::on;
    else if (std::strcmp(v, "off") == 0)
      o.comm_thread = CommThread::off;
    else
      throw config_error(std::string("weft: WEFT_COMM_THREAD='") + v + "' is invalid: expected auto, on or off");
  }
  if (const char* v = setting("WEFT_CLUSTER")) o.cluster = parse_flag("WEFT_CLUSTER", v);
  if (const char* v = setting("WEFT_OFFLOAD_POLICY")) {
    if (std::strcmp(v, "locality") == 0)
      o.offload_policy = OffloadPolicy::locality;
    else if (std::strcmp(v, "round-robin") == 0)
      o.offload_policy = OffloadPolicy::round_robin;
    else if (std::strcmp(v, "random") == 0)
      o.offload_policy = OffloadPolicy::random;
    else
      throw config_error(std::string("weft: WEFT_OFFLOAD_POLICY='") + v +
                         "' is invalid: expected locality, round-robin or random");
  }
  if (const char* v = setting("WEFT_EAGER")) o.eager_transfers = parse_flag("WEFT_EAGER", v);
  if (const char* v = setting("WEFT_DIRECT_SATISFY")) o.direct_satisfy = parse_flag("WEFT_DIRECT_SATISFY", v);
  if (const char* v = setting("WEFT_CLUSTER_MEMORY"))
    o.cluster_memory = parse_bytes("WEFT_CLUSTER_MEMORY", v, kMinClusterMemory, kMaxClusterMemory);
  if (const char* v = setting("WEFT_CLUSTER_HOLDER_BITS"))
    o.cluster_holder_bits = static_cast<unsigned>(parse_integer("WEFT_CLUSTER_HOLDER_BITS", v, 1, 63));
  return o;
}

void Options::validate() const {
  if (num_threads < 1 || num_threads > kMaxThreads)
    throw config_error("weft: Options::num_threads=" + std::to_string(num_threads) +
                       " is invalid: expected 1 to " + std::to_string(kMaxThreads));
  if (max_tasks < 1 || max_tasks > kMaxMaxTasks)
    throw config_error("weft: Options::max_tasks=" + std::to_string(max_tasks) + " is invalid: expected 1 to " +
                       std::to_string(kMaxMaxTasks));
  if (steal_batch < 1 || steal_batch > kMaxStealBatch)
    throw config_error("weft: Options::steal_batch=" + std::to_string(steal_batch) + " is invalid: expected 1 to " +
                       std::to_string(kMaxStealBatch));
  if (idle_pauses > kMaxIdlePauses)
    throw config_error("weft: Options::idle_pauses=" + std::to_string(idle_pauses) + " is invalid: expected 0 "
                       "(automatic) to " + std::to_string(kMaxIdlePauses));
  if (scheduler != Scheduler::llp && scheduler != Scheduler::lfq)
    throw config_error("weft: Options::scheduler=" + std::to_string(static_cast<int>(scheduler)) +
                       " is invalid: expected Scheduler::llp or lfq");
  if (lfq_buffer > kMaxLfqBuffer)
    throw config_error("weft: Options::lfq_buffer=" + std::to_string(lfq_buffer) + " is invalid: expected 0 (4 x "
                       "num_threads) to " + std::to_string(kMaxLfqBuffer));
  if (!(watchdog_seconds >= 0 && watchdog_seconds <= kMaxWatchdog))
    throw config_error("weft: Options::watchdog_seconds=" + std::to_string(watchdog_seconds) +
                       " is invalid: expected 0 (off) to " + std::to_string(static_cast<long long>(kMaxWatchdog)));
  if (comm_thread != CommThread::automatic && comm_thread != CommThread::on && comm_thread != CommThread::off)
    throw config_error("weft: Options::comm_thread=" + std::to_string(static_cast<int>(comm_thread)) +
                       " is invalid: expected CommThread::automatic, on or off");
  if (offload_policy != OffloadPolicy::locality && offload_policy != OffloadPolicy::round_robin &&
      offload_policy != OffloadPolicy::random)
    throw config_error("weft: Options::offload_policy=" + std::to_string(static_cast<int>(offload_policy)) +
                       " is invalid: expected OffloadPolicy::locality, round_robin or random");
  if (cluster_memory < kMinClusterMemory || cluster_memory > kMaxClusterMemory)
    throw config_error("weft: Options::cluster_memory=" + std::to_string(cluster_memory) + " is invalid: expected " +
                       std::to_string(kMinClusterMemory) + " to " + std::to_string(kMaxClusterMemory));
  if (cluster_holder_bits < 1 || cluster_holder_bits > 63)
    throw config_error("weft: Options::cluster_holder_bits=" + std::to_string(cluster_holder_bits) +
                       " is invalid: expected 1 to 63");
  if (profile.trace_buffer < 1 || profile.trace_buffer > kMaxTraceBuffer)
    throw config_error("weft: Options::profile.trace_buffer=" + std::to_string(profile.trace_buffer) +
                       " is invalid: expected 1 to " + std::to_string(kMaxTraceBuffer));
}

}  // namespace weft
