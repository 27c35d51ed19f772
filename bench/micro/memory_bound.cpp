// weft-bench-memory: one producer spawns N tasks in one of the patterns of memory_patterns.hpp and the program
// reports the peak resident memory and its growth over the run, to show that weft's memory is bounded (by
// throttling, Options::max_tasks, and by recycling what finished tasks leave behind) whatever N is.
//
//   weft-bench-memory [--tasks=N] [--pattern=P|all] [--workers=W]
// P: independent, chain, readers, writers, inoutset, commutative, weak, taskiter, flow, flow_ready (see
// memory_patterns.hpp);
// `all` runs each pattern in a fresh process (its own peak RSS). Prints one line per pattern: pattern, tasks,
// workers, seconds, ns/task, peak RSS and RSS growth from after the runtime's start-up, in MiB; exits 1 if a task
// was lost.
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <weft/weft.hpp>

#include "memory_patterns.hpp"

extern char** environ;

namespace {

// Runs this program again for one pattern; returns its exit status.
int run_child(const char* pattern, long long n, unsigned workers) {
  std::string p = std::string("--pattern=") + pattern, t = "--tasks=" + std::to_string(n),
              w = "--workers=" + std::to_string(workers);
  char* args[] = {const_cast<char*>("weft-bench-memory"), p.data(), t.data(), w.data(), nullptr};
  std::fflush(stdout);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args, environ) != 0) return 1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  long long n = 100000000;
  std::string pattern = "independent";
  unsigned workers = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--tasks=", 8) == 0)
      n = static_cast<long long>(std::strtod(a + 8, nullptr));
    else if (std::strncmp(a, "--pattern=", 10) == 0)
      pattern = a + 10;
    else if (std::strncmp(a, "--workers=", 10) == 0)
      workers = static_cast<unsigned>(std::atoi(a + 10));
    else {
      std::fprintf(stderr, "usage: %s [--tasks=N] [--pattern=P|all] [--workers=W]\n", argv[0]);
      return 2;
    }
  }
  if (n <= 0 || workers == 0 || (pattern != "all" && !weft_memory::is_pattern(pattern))) {
    std::fprintf(stderr, "weft-bench-memory: bad arguments (tasks > 0, workers > 0, pattern one of all");
    for (const char* p : weft_memory::kPatterns) std::fprintf(stderr, " %s", p);
    std::fprintf(stderr, ")\n");
    return 2;
  }
  if (pattern == "all") {
    int rc = 0;
    for (const char* p : weft_memory::kPatterns) rc |= run_child(p, n, workers);
    return rc;
  }
  weft::Options o;
  std::unique_ptr<weft::Runtime> rt;
  try {
    o = weft::Options::from_environment();
    o.num_threads = workers;
    rt = std::make_unique<weft::Runtime>(o);
  } catch (const weft::config_error& e) {  // a bad WEFT_* value or --workers, a file that cannot be created
    std::fprintf(stderr, "weft-bench-memory: %s\n", e.what());
    return 2;
  }
  weft_memory::Sampler sampler;
  weft_memory::run_pattern(*rt, pattern, 4096, sampler);  // warm-up: threads, pools, first chunks
  sampler.start();
  const auto t0 = std::chrono::steady_clock::now();
  const weft_memory::Outcome out = weft_memory::run_pattern(*rt, pattern, n, sampler);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("%-11s tasks=%lld workers=%u max_tasks=%zu seconds=%.2f ns/task=%.1f peak_rss_mib=%.1f "
              "rss_growth_mib=%.1f\n",
              pattern.c_str(), out.expected, workers, o.max_tasks, s, s * 1e9 / double(out.expected),
              double(ru.ru_maxrss) / 1024.0, sampler.growth_mib());
  if (out.ran != out.expected) {
    std::fprintf(stderr, "weft-bench-memory: %lld of %lld tasks ran\n", out.ran, out.expected);
    return 1;
  }
  return 0;
}
