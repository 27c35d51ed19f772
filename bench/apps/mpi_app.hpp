// What the applications across MPI ranks (halo_mpi.cpp, hpccg_mpi.cpp) share: their command line (--key=value
// options, a --variant list checked against the known variants, clear errors with exit status 2 on every rank)
// and their measurement (the variants interleaved over the repetitions after a warm-up round, each between two
// barriers, with the overlap ratio of those that bind requests to tasks).
#pragma once

#include <mpi.h>
#include <weft/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mpi_app {

/// One application's command line: `program` names it in messages, `source` is where its options are described.
class CommandLine {
 public:
  CommandLine(const char* program, const char* source) : program_(program), source_(source) {}

  /// Prints "program: what (see the top of source)" on rank 0 and ends every rank with status 2.
  [[noreturn]] void usage_error(const std::string& what) const {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::fprintf(stderr, "%s: %s (see the top of %s)\n", program_, what.c_str(), source_);
    MPI_Finalize();
    std::exit(2);
  }

  /// An integer option's value, in [lo, 2^24].
  int integer(const std::string& arg, const std::string& value, int lo) const {
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < lo || v > (1 << 24)) usage_error("bad value in " + arg);
    return static_cast<int>(v);
  }

  /// Calls option(arg, key, value, has_value) for every argument (key and value split at the first '='), and
  /// takes --variant=a,b,... itself; an option the callback does not know (it returns false) is an error.
  template <class Option>
  void parse(int argc, char** argv, Option&& option) {
    for (int a = 1; a < argc; ++a) {
      const std::string arg = argv[a];
      const auto eq = arg.find('=');
      const std::string key = arg.substr(0, eq), value = eq == std::string::npos ? "" : arg.substr(eq + 1);
      if (key == "--variant") {
        for (std::size_t s = 0; s <= value.size();) {
          const std::size_t e = std::min(value.find(',', s), value.size());
          variants_.push_back(value.substr(s, e - s));
          s = e + 1;
        }
      } else if (!option(arg, key, value, eq != std::string::npos)) {
        usage_error("unknown option " + arg);
      }
    }
  }

  /// The variants asked for (all of them when none or "all" was), each checked against `all`.
  std::vector<std::string> variants(const std::vector<std::string>& all) const {
    if (variants_.empty() || (variants_.size() == 1 && variants_[0] == "all")) return all;
    for (const auto& v : variants_)
      if (std::find(all.begin(), all.end(), v) == all.end()) usage_error("unknown variant " + v);
    return variants_;
  }

 private:
  const char* program_;
  const char* source_;
  std::vector<std::string> variants_;
};

/// The runtime's options: the WEFT_* variables (WEFT_COMM_THREAD and the others), with the worker count of the
/// command line; a malformed variable is a usage error.
inline weft::Options runtime_options(const CommandLine& cli, int workers) {
  weft::Options o;
  try {
    o = weft::Options::from_environment();
  } catch (const weft::config_error& e) {
    cli.usage_error(e.what());
  }
  o.num_threads = static_cast<unsigned>(workers);
  return o;
}

/// What the repetitions measured, per variant: wall seconds, and the overlap ratio of the variants that bound
/// requests to tasks (weft::mpi::Stats::overlap, this rank's).
struct Measured {
  std::map<std::string, std::vector<double>> seconds, overlaps;
  int mismatches = 0;  // --check: variants whose result differed from the reference on this rank
};

/// Runs every variant `reps` times after a warm-up round (or once, unmeasured warm-up included, with `check`),
/// interleaved (repetition r starts at variant r), each preceded by reset(variant) (untimed) and a barrier and followed by a
/// barrier. With `check`, matches(variant) compares the result with the reference. after(variant) runs after
/// each run (e.g. to keep a result for printing).
inline Measured run_variants(const std::vector<std::string>& variants, int reps, bool check,
                             const std::map<std::string, std::function<void()>>& run,
                             const std::function<void(const std::string&)>& reset,
                             const std::function<bool(const std::string&)>& matches,
                             const std::function<void(const std::string&)>& after = {}) {
  Measured m;
  for (int rep = 0; rep < (check ? 1 : reps + 1); ++rep) {  // the first round warms up (not counted)
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::string& v = variants[(k + static_cast<std::size_t>(rep)) % variants.size()];
      reset(v);
      MPI_Barrier(MPI_COMM_WORLD);
      const weft::mpi::Stats before = weft::mpi::stats();
      const auto t0 = std::chrono::steady_clock::now();
      run.at(v)();
      MPI_Barrier(MPI_COMM_WORLD);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const weft::mpi::Stats after_run = weft::mpi::stats();
      const bool counted = rep > 0 || check;
      if (after_run.requests_bound != before.requests_bound && counted) {  // MPI inside tasks
        weft::mpi::Stats d;
        d.worker_seconds = after_run.worker_seconds - before.worker_seconds;
        d.idle_seconds = after_run.idle_seconds - before.idle_seconds;
        m.overlaps[v].push_back(d.overlap());
      }
      if (check && !matches(v)) ++m.mismatches;
      if (counted) m.seconds[v].push_back(s);
      if (after) after(v);
    }
  }
  return m;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// "1.234x" (base / value), or "-" without a base.
inline std::string ratio(double base, double value) {
  return base > 0 && value > 0 ? std::to_string(base / value).substr(0, 5) + "x" : "-";
}

/// "93.5%" of a median overlap, or "-" for none (the variant bound no request, or a communication thread).
inline std::string overlap(const Measured& m, const std::string& v) {
  const auto it = m.overlaps.find(v);
  const double ov = it != m.overlaps.end() ? median(it->second) : -1;
  return ov >= 0 ? std::to_string(100 * ov).substr(0, 4) + "%" : "-";
}

}  // namespace mpi_app
