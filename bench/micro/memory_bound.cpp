// weft-bench-memory: one producer spawns N tasks (independent, or a chain ordered by inout on one datum) and
// the program reports the peak resident memory, to show that throttling (Options::max_tasks) bounds memory
// whatever N is.
//
//   weft-bench-memory [--tasks=N] [--pattern=independent|chain] [--workers=W]
// Prints one line: pattern, tasks, workers, seconds, ns/task, peak RSS in MiB; exits 1 if a task was lost.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <weft/weft.hpp>

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
      std::fprintf(stderr, "usage: %s [--tasks=N] [--pattern=independent|chain] [--workers=W]\n", argv[0]);
      return 2;
    }
  }
  if (n <= 0 || workers == 0 || (pattern != "independent" && pattern != "chain")) {
    std::fprintf(stderr, "weft-bench-memory: bad arguments (tasks > 0, workers > 0, pattern independent|chain)\n");
    return 2;
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
  std::vector<long long> per_worker(workers * 8, 0);  // one counter per worker, 64 bytes apart
  long long chain = 0;
  const auto t0 = std::chrono::steady_clock::now();
  rt->run([&](weft::Context& cx) {
    if (pattern == "chain") {
      for (long long i = 0; i < n; ++i) cx.spawn([&chain] { ++chain; }, weft::inout(chain));
    } else {
      long long* c = per_worker.data();
      for (long long i = 0; i < n; ++i) cx.spawn([c](weft::Context& t) { ++c[t.worker_id() * 8]; });
    }
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long long done = chain;
  for (unsigned w = 0; w < workers; ++w) done += per_worker[w * 8];
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("%s tasks=%lld workers=%u max_tasks=%zu seconds=%.2f ns/task=%.1f peak_rss_mib=%.1f\n",
              pattern.c_str(), n, workers, o.max_tasks, s, s * 1e9 / double(n), double(ru.ru_maxrss) / 1024.0);
  if (done != n) {
    std::fprintf(stderr, "weft-bench-memory: %lld of %lld tasks ran\n", done, n);
    return 1;
  }
  return 0;
}
