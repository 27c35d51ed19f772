// weft-apps — the iterative applications of bench/apps in every variant, over a sweep of block sizes, each run
// checked against the serial reference. See bench/apps/README.md, or run with --help.
//
// The same file builds two executables: weft-apps (project compiler: serial, weft variants, and GNU OpenMP
// when the compiler is GCC) and weft-apps-libomp (clang++-16: serial and LLVM OpenMP variants).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "drivers.hpp"

#if WAPPS_HAVE_WEFT
#include <weft/runtime.hpp>
#endif

#ifndef WAPPS_HAVE_WEFT
#define WAPPS_HAVE_WEFT 0
#endif
#ifndef WAPPS_HAVE_OMP
#define WAPPS_HAVE_OMP 0
#endif
#ifndef WAPPS_OMP_NAME
#define WAPPS_OMP_NAME "omp"
#endif
#ifndef WAPPS_PROGRAM
#define WAPPS_PROGRAM "weft-apps"
#endif

namespace {

using namespace wapps;

const char* const kUsage = R"(usage: )" WAPPS_PROGRAM R"( [options]

Runs the iterative applications (multisaxpy, heat, heat-while, nbody, hpccg, hpcg) in several variants over a
sweep of block sizes, checks every run against the serial reference, and prints the figure of merit (median
of the repetitions; variants interleaved) and the wall time per task.

  --app=LIST          multisaxpy,heat,heat-while,nbody,hpccg,hpcg or all (default all)
  --variant=LIST      variants to run, or all (default: all of this executable; see below)
  --workers=N         threads (default: hardware threads)
  --blocks=LIST       block sizes to sweep (the app's unit: see below; default per app)
  --block-size=N      a single block size (same as --blocks=N)
  --size=N            problem size (default per app; --quick: small)
  --iters=N           iterations (heat-while: the upper bound; default per app)
  --tol=X             heat-while: stop once the residual (sum of squared changes over the grid) is <= X
                      (default 0.5: about 30 iterations; --quick 0.05)
  --unroll=K          heat-while: iterations in flight, taskiter unroll(K) (1..8, default 2)
  --reps=R            timed repetitions per variant (default 3)
  --quick             small sizes and iterations
  --check             run each variant once per block size and report only whether it matches the serial
                      reference (the tests use this)
  --csv=FILE          also write every run to FILE (CSV)
  --no-warmup         no untimed warm-up run of each variant
  -h, --help

Units: multisaxpy elements per task; heat block edge (blocks are edge x edge cells); nbody particles per
block; hpccg rows per block (size = grid edge, rows = edge^3); hpcg rows per block on the finest level, rounded
down to whole x-lines of one xy-plane (size = grid edge, a multiple of 8).
Exit status: 0; 1 if a run did not match the serial reference; 2 for bad options.
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "%s: %s (try --help)\n", WAPPS_PROGRAM, msg.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t p = s.find(',', start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}

long parse_count(const std::string& s, const char* what, long max) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !(v >= 1) || v > double(max) || v != std::floor(v))
    usage_error(std::string("bad ") + what + " '" + s + "' (an integer from 1 to " + std::to_string(max) + ")");
  return long(v);
}

// --- variants --------------------------------------------------------------------------------------------------
enum class Kind {
  serial,
  weft_tasks,
  weft_taskiter,
  weft_taskiter_is,
  weft_taskiter_is_overlap,
  weft_replay,
  weft_update,
  weft_update_barrier,
  omp_tasks,
  omp_for
};
struct Variant {
  Kind kind;
  std::string name;
  bool available;
  std::string why_not;  // when not available
};

std::vector<Variant> all_variants() {
  std::vector<Variant> v{{Kind::serial, "serial", true, ""}};
  const struct {
    Kind kind;
    const char* name;
    WeftMode mode;
  } weft_variants[] = {{Kind::weft_tasks, "weft-tasks", WeftMode::tasks},
                       {Kind::weft_taskiter, "weft-taskiter", WeftMode::taskiter},
                       {Kind::weft_taskiter_is, "weft-taskiter-is", WeftMode::taskiter},
                       {Kind::weft_taskiter_is_overlap, "weft-taskiter-is-overlap", WeftMode::overlap},
                       {Kind::weft_replay, "weft-replay", WeftMode::replay},
                       {Kind::weft_update, "weft-update", WeftMode::update},
                       {Kind::weft_update_barrier, "weft-update-barrier", WeftMode::update_barrier}};
  for (const auto& w : weft_variants) {
#if WAPPS_HAVE_WEFT
    std::string why;
    const bool ok = weft_mode_available(w.mode, &why);
    v.push_back({w.kind, w.name, ok, why});
#else
    (void)w.mode;
    v.push_back({w.kind, w.name, false, "weft variants are in weft-apps"});
#endif
  }
  for (const char* suffix : {"-tasks", "-for"}) {
    const Kind k = suffix[1] == 't' ? Kind::omp_tasks : Kind::omp_for;
    v.push_back({k, std::string(WAPPS_OMP_NAME) + suffix, WAPPS_HAVE_OMP != 0,
                 WAPPS_HAVE_OMP ? "" : "no OpenMP in this build"});
  }
  return v;
}

template <class App>
RunOutcome run_variant(Kind k, App& app, const RunConfig& c) {
  switch (k) {
    case Kind::serial:
      return run_serial(app, c);
#if WAPPS_HAVE_WEFT
    case Kind::weft_tasks:
      return run_weft(app, c, WeftMode::tasks, true);
    case Kind::weft_taskiter:
      return run_weft(app, c, WeftMode::taskiter, false);
    case Kind::weft_taskiter_is:
      return run_weft(app, c, WeftMode::taskiter, true);
    case Kind::weft_taskiter_is_overlap:
      return run_weft(app, c, WeftMode::overlap, true);
    case Kind::weft_replay:
      return run_weft(app, c, WeftMode::replay, true);
    case Kind::weft_update:
      return run_weft(app, c, WeftMode::update, true);
    case Kind::weft_update_barrier:
      return run_weft(app, c, WeftMode::update_barrier, true);
#endif
#if WAPPS_HAVE_OMP
    case Kind::omp_tasks:
      return run_omp_tasks(app, c);
    case Kind::omp_for:
      return run_omp_for(app, c);
#endif
    default:
      break;
  }
  std::fprintf(stderr, "%s: internal error: variant not built\n", WAPPS_PROGRAM);
  std::exit(1);
}

// --- command line ----------------------------------------------------------------------------------------------
const char* const kApps[] = {"multisaxpy", "heat", "heat-while", "nbody", "hpccg", "hpcg"};

struct Cli {
  std::vector<std::string> apps;
  std::vector<Variant> variants;
  int workers = 0;
  std::vector<long> blocks;
  long size = 0, iters = 0;
  double tol = -1;
  int unroll = 2;
  int reps = 3;
  bool quick = false, check = false, warmup = true;
  std::string csv;
};

Cli parse(int argc, char** argv) {
  Cli c;
  c.workers = int(std::max(1u, std::thread::hardware_concurrency()));
  std::string variants = "all", apps = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::size_t eq = a.find('=');
    const std::string key = a.substr(0, eq), val = eq == std::string::npos ? "" : a.substr(eq + 1);
    const bool has_val = eq != std::string::npos && !val.empty();
    auto need = [&] {
      if (!has_val) usage_error("option " + key + " needs a value: " + key + "=...");
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--quick") {
      c.quick = true;
    } else if (a == "--check") {
      c.check = true;
    } else if (a == "--no-warmup") {
      c.warmup = false;
    } else if (key == "--app") {
      need();
      apps = val;
    } else if (key == "--variant") {
      need();
      variants = val;
    } else if (key == "--workers") {
      need();
      c.workers = int(parse_count(val, "--workers", 4096));
    } else if (key == "--blocks" || key == "--block-size") {
      need();
      c.blocks.clear();
      for (const auto& s : split(val)) c.blocks.push_back(parse_count(s, key.c_str(), 1L << 30));
    } else if (key == "--size") {
      need();
      c.size = parse_count(val, "--size", 1L << 30);
    } else if (key == "--iters") {
      need();
      c.iters = parse_count(val, "--iters", 1L << 30);
    } else if (key == "--tol") {
      need();
      char* end = nullptr;
      c.tol = std::strtod(val.c_str(), &end);
      if (*end != '\0' || !(c.tol >= 0) || !std::isfinite(c.tol)) usage_error("bad --tol '" + val + "'");
    } else if (key == "--unroll") {
      need();
      c.unroll = int(parse_count(val, "--unroll", 8));
    } else if (key == "--reps") {
      need();
      c.reps = int(parse_count(val, "--reps", 1000));
    } else if (key == "--csv") {
      need();
      c.csv = val;
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  for (const auto& s : split(apps)) {
    if (s == "all") {
      c.apps.assign(std::begin(kApps), std::end(kApps));
      continue;
    }
    if (std::find(std::begin(kApps), std::end(kApps), s) == std::end(kApps))
      usage_error("unknown app '" + s + "' (multisaxpy, heat, heat-while, nbody, hpccg, hpcg, all)");
    c.apps.push_back(s);
  }
  const std::vector<Variant> known = all_variants();
  for (const auto& s : split(variants)) {
    if (s == "all") {
      for (const auto& v : known)
        if (v.available) c.variants.push_back(v);
      continue;
    }
    auto it = std::find_if(known.begin(), known.end(), [&](const Variant& v) { return v.name == s; });
    if (it == known.end()) {
      std::string names;
      for (const auto& v : known) names += (names.empty() ? "" : ", ") + v.name;
      usage_error("unknown variant '" + s + "' for " WAPPS_PROGRAM " (" + names + ")");
    }
    if (!it->available) usage_error("variant '" + s + "' is not available: " + it->why_not);
    c.variants.push_back(*it);
  }
  if (c.check) c.reps = 1;
  return c;
}

// --- running and reporting -------------------------------------------------------------------------------------
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Csv {
  std::FILE* f = nullptr;
  ~Csv() {
    if (f) std::fclose(f);
  }
};

template <class App>
double default_tol(bool quick) {
  if constexpr (requires { App::kDefaultTol; })
    return quick ? App::kQuickTol : App::kDefaultTol;
  else
    return 0;
}

/// Runs one application over the block sweep; returns the number of runs that did not match the reference.
template <class App>
int run_app(const Cli& cli, Csv& csv) {
  Params p;
  p.size = cli.size ? cli.size : (cli.quick ? App::kQuickSize : App::kDefaultSize);
  p.tol = cli.tol >= 0 ? cli.tol : default_tol<App>(cli.quick);
  p.period = cli.unroll;
  const long iters = cli.iters ? cli.iters : (cli.quick ? App::kQuickIters : App::kDefaultIters);
  const std::vector<long> blocks = cli.blocks.empty() ? App::default_blocks(cli.quick) : cli.blocks;
  if (std::string(App::kName) == "hpccg" && p.size > 1290)
    usage_error("hpccg: --size is the grid edge; at most 1290 (rows = edge^3 must fit 32-bit column indices)");
  if constexpr (requires { App::size_problem(p.size); })
    if (const char* why = App::size_problem(p.size)) usage_error(why);
  if constexpr (requires { App::kDefaultTol; })
    if (iters < p.period)
      usage_error(std::string(App::kName) + ": --iters (" + std::to_string(iters) + ") must be at least --unroll (" +
                  std::to_string(p.period) + "): that many iterations are in flight from the start");
  const RunConfig rc{iters, cli.workers};

  {
    App probe(Params{p.size, blocks[0], p.tol, p.period});
    std::printf("\n== %s: %s %ld, %ld iterations%s, %d workers; %s (median of %d), wall time per task\n",
                App::kName, App::kSize, p.size, iters, probe.has_condition() ? " at most" : "", cli.workers,
                probe.merit().unit, cli.reps);
    std::printf("   block = %s", App::kBlock);
    if (probe.has_condition()) std::printf("; tol %g, %d iterations in flight", p.tol, p.period);
    std::printf("\n");
  }
  const int w = 16;
  std::printf("%9s %9s %8s %5s", "block", "tasks/it", "task_us", "iters");
  for (const auto& v : cli.variants) std::printf(" %*s", w, v.name.c_str());
  std::printf("\n");

  int failures = 0;
  bool warm = !cli.warmup || cli.check;
  for (const long block : blocks) {
    p.block = block;
    App ref(p);
    const RunOutcome r = run_serial(ref, rc);
    const long tasks = ref.tasks_per_iteration() * r.iterations;
    const double task_us = r.seconds / double(tasks) * 1e6;
    if (!warm) {
      for (const auto& v : cli.variants) {
        App a(p);
        run_variant(v.kind, a, rc);
        wbench::quiesce();
      }
      warm = true;
    }
    // The reference loop checks the residual of iteration it-period+1 after issuing iteration it (period
    // iterations in flight). A variant that checks differently (replay with barrier: the last iteration of each
    // period, once per period) may stop up to period-1 iterations earlier or 2*period-1 later; it is checked
    // against exactly as many sequential iterations.
    std::vector<std::pair<long, std::unique_ptr<App>>> longer_refs;
    auto reference_for = [&](long iterations) -> const App* {
      if (iterations == r.iterations) return &ref;
      if (!ref.has_condition() || iterations <= r.iterations - ref.period() ||
          iterations >= r.iterations + 2L * ref.period())
        return nullptr;
      for (auto& [n, a] : longer_refs)
        if (n == iterations) return a.get();
      auto a = std::make_unique<App>(p);
      run_serial(*a, RunConfig{iterations, 1}, false);
      longer_refs.emplace_back(iterations, std::move(a));
      return longer_refs.back().second.get();
    };
    std::vector<std::vector<double>> secs(cli.variants.size());
    std::vector<long> its(cli.variants.size(), r.iterations);
    std::vector<std::string> bad(cli.variants.size());
    for (int rep = 0; rep < cli.reps; ++rep)
      for (std::size_t k = 0; k < cli.variants.size(); ++k) {
        App a(p);
        const RunOutcome o = run_variant(cli.variants[k].kind, a, rc);
        const App* want = reference_for(o.iterations);
        Verdict vd = want ? a.compare(*want)
                          : Verdict{false, std::to_string(o.iterations) + " iterations, serial reference " +
                                               std::to_string(r.iterations)};
        secs[k].push_back(o.seconds);
        its[k] = o.iterations;
        if (!vd.ok && bad[k].empty()) bad[k] = vd.why;
        if (csv.f)
          std::fprintf(csv.f, "%s,%s,%ld,%ld,%ld,%d,%d,%.9g,%.9g,%ld,%.6g,%d\n", App::kName,
                       cli.variants[k].name.c_str(), block, p.size, o.iterations, cli.workers, rep, o.seconds,
                       a.merit().per_iteration * double(o.iterations) / o.seconds / a.merit().scale, a.tasks_per_iteration() * o.iterations, task_us,
                       vd.ok ? 1 : 0);
        if (!cli.check) wbench::quiesce();
      }
    std::printf("%9ld %9ld %8.3f %5ld", block, ref.tasks_per_iteration(), task_us, r.iterations);
    for (std::size_t k = 0; k < cli.variants.size(); ++k) {
      const double s = median(secs[k]);
      const double fom = ref.merit().per_iteration * double(its[k]) / s / ref.merit().scale;
      char cell[64];
      if (!bad[k].empty())
        std::snprintf(cell, sizeof cell, "WRONG");
      else if (cli.check)
        std::snprintf(cell, sizeof cell, "ok");
      else
        std::snprintf(cell, sizeof cell, "%.4g %.3gus", fom,
                      s / double(ref.tasks_per_iteration() * its[k]) * 1e6);
      std::printf(" %*s", w, cell);
    }
    std::printf("\n");
    for (std::size_t k = 0; k < cli.variants.size(); ++k)
      if (!bad[k].empty()) {
        ++failures;
        std::printf("   %s %s block %ld: does not match the serial reference: %s\n", App::kName,
                    cli.variants[k].name.c_str(), block, bad[k].c_str());
      }
    std::fflush(stdout);
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const Cli cli = parse(argc, argv);
#if WAPPS_HAVE_WEFT
  try {  // a bad WEFT_* value is bad input, refused before anything runs
    (void)weft::Options::from_environment();
  } catch (const weft::config_error& e) {
    std::fprintf(stderr, "%s: %s\n", WAPPS_PROGRAM, e.what());
    return 2;
  }
#endif
  Csv csv;
  if (!cli.csv.empty()) {
    csv.f = std::fopen(cli.csv.c_str(), "w");
    if (!csv.f) usage_error("cannot write --csv file '" + cli.csv + "'");
    std::fprintf(csv.f, "app,variant,block,size,iterations,workers,rep,seconds,fom,tasks,task_us,ok\n");
  }
  std::printf("%s: %u hardware threads", WAPPS_PROGRAM, std::thread::hardware_concurrency());
  if (std::ifstream la("/proc/loadavg"); la) {
    double l1 = 0;
    la >> l1;
    std::printf(", load average %.2f", l1);
  }
  std::printf("\n");
#if WAPPS_HAVE_WEFT
  std::printf("  %s\n", weft_describe().c_str());
#endif
#if WAPPS_HAVE_OMP
  std::printf("  %s\n", omp_describe().c_str());
#endif
  for (const auto& v : all_variants())
    if (!v.available && v.why_not.find("weft-apps") == std::string::npos)
      std::printf("  skipped: %s: %s\n", v.name.c_str(), v.why_not.c_str());
  std::printf("  cells: figure of merit, then wall time per task; task_us = serial time per task (granularity)\n");

  int failures = 0;
  try {
    for (const auto& app : cli.apps) {
      if (app == "multisaxpy") failures += run_app<Multisaxpy>(cli, csv);
      else if (app == "heat") failures += run_app<HeatFixed>(cli, csv);
      else if (app == "heat-while") failures += run_app<HeatWhile>(cli, csv);
      else if (app == "nbody") failures += run_app<Nbody>(cli, csv);
      else if (app == "hpccg") failures += run_app<Hpccg>(cli, csv);
      else failures += run_app<Hpcg>(cli, csv);
    }
#if WAPPS_HAVE_WEFT
  } catch (const weft::config_error& e) {  // a profile or trace file that cannot be created
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", WAPPS_PROGRAM, e.what());
    return 2;
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", WAPPS_PROGRAM, e.what());
    return 1;
  }
  if (failures) std::printf("\n%d run(s) did not match the serial reference\n", failures);
  return failures ? 1 : 0;
}
