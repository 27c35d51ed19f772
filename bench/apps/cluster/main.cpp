// weft-dense-mpi — the dense applications of the OmpSs-2@Cluster benchmarks across MPI ranks, every version of
// one application side by side, checked against the serial reference:
//
//   --app=matvec     y = A x repeated, A row-distributed            (matvec.hpp)
//   --app=matmul     C = A B in tiles, one cblas_dgemm per tile pair (matmul.hpp)
//   --app=jacobi     Jacobi steps on a dense system, x all-gathered  (jacobi.hpp)
//   --app=cholesky   tiled Cholesky, tile columns cyclic over ranks  (cholesky.hpp)
//
// Versions (one source file each, <app>_<version>.cpp; the table at the end of <app>.hpp lists them):
//   serial     the reference: the whole problem on rank 0, one thread (the other ranks wait).
//   mpi-omp    MPI + OpenMP (libgomp), the usual baseline: `for` loops (matvec, matmul, jacobi) or tasks with
//              depend clauses (cholesky), MPI between them.
//   mpi-weft   MPI + weft dependency tasks, the same distribution; MPI between taskwaits (jacobi) or inside
//              tasks (cholesky's panel broadcasts, weft::mpi).
//   weft-offload-simple  one program (weft/cluster.hpp): rank 0 runs the serial loops as tasks offloaded to
//              the rank where their data is; no MPI in the application.
//   weft-offload-opt     the same with one weak parent task per rank that creates that rank's tasks there.
//
//   mpirun -np 2 weft-dense-mpi --app=NAME [--n=N] [--block=B] [--iterations=I] [--workers=1] [--reps=5]
//                               [--variant=all|serial,mpi-omp,...] [--quick] [--check]
//
// --n, --block, --iterations default to a benchmark size per application, or to a tiny one with --quick (for
// tests); --n must be a multiple of --block. --workers: threads per rank, for OpenMP and weft alike (BLAS runs
// single-threaded inside them). Prints per version the median seconds of one run over the repetitions
// (versions interleaved, after a warm-up round), GFLOP/s and the speed relative to mpi-omp. --check runs each
// version once and compares its result, gathered on rank 0, with the serial reference, itself checked
// independently first (exit 1 on a mismatch; 2 for bad options).
#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../mpi_app.hpp"
#include "cholesky.hpp"
#include "jacobi.hpp"
#include "matmul.hpp"
#include "matvec.hpp"

namespace {

constexpr const char* kProgram = "weft-dense-mpi";

struct Options {
  std::string app;
  int n = 0, block = 0, iterations = 0;  // 0: the application's default
  int workers = 1, reps = 5;
  bool check = false, quick = false;
};

template <class State>
int run_app(const std::vector<dense::Variant<State>>& table, const mpi_app::CommandLine& cli, const Options& o,
            dense::Env env, const weft::Options& wo) {
  dense::Sizes sz = State::defaults(o.quick);
  if (o.n) sz.n = o.n;
  if (o.block) sz.bs = o.block;
  if (o.iterations) sz.iterations = o.iterations;
  if (sz.bs > sz.n || sz.n % sz.bs != 0)
    cli.usage_error("--n (" + std::to_string(sz.n) + ") must be a multiple of --block (" + std::to_string(sz.bs) + ")");
  std::vector<std::string> names;
  for (const auto& v : table) names.push_back(v.name);
  const std::vector<std::string> variants = cli.variants(names);
  weft::Runtime rt(wo);  // after the checks of the options: a usage error ends MPI, which must outlive no runtime
  env.rt = &rt;
  // The cluster runtime (collective: every rank makes it, since every rank asks for the same variants) only
  // when a weft-offload version runs: its ranks poll while it runs, and it reserves the common address space.
  std::optional<weft::Runtime> cluster;
  if (std::any_of(variants.begin(), variants.end(), [](const std::string& v) { return v.starts_with("weft-offload"); })) {
    weft::Options co = wo;
    co.cluster = true;
    cluster.emplace(co);
    env.cluster = &*cluster;
  }

  const dense::Part whole_part{0, 1, env.rank == 0}, dist_part{env.rank, env.size, true};
  State whole(sz, whole_part), dist(sz, dist_part);
  std::map<std::string, std::function<void()>> run;
  std::map<std::string, const dense::Variant<State>*> variant;
  for (const auto& v : table) {
    variant[v.name] = &v;
    run[v.name] = [&, v] { v.run(v.layout == dense::Layout::whole ? whole : dist, env); };
  }
  // Untimed, as every version's: the states' reset, then the version's own preparation (its input written
  // where it lives), and its collection of the result before a check.
  const auto reset = [&](const std::string& v) {
    whole.reset(), dist.reset();
    if (const dense::Variant<State>* d = variant.at(v); d->prepare) d->prepare(d->layout == dense::Layout::whole ? whole : dist, env);
  };

  // The reference: the first version of the table (serial), checked on its own.
  std::vector<double> ref;
  int bad_reference = 0;
  if (o.check) {
    table[0].run(whole, env);
    ref = whole.result(whole_part, env);
    if (env.rank == 0) {
      const std::string why = whole.validate();
      if (!why.empty()) {
        std::fprintf(stderr, "%s: %s: the serial reference is wrong: %s\n", kProgram, State::name, why.c_str());
        bad_reference = 1;
      }
    }
  }
  const auto matches = [&](const std::string& v) {
    const bool w = variant.at(v)->layout == dense::Layout::whole;
    if (variant.at(v)->collect) variant.at(v)->collect(w ? whole : dist, env);
    const std::vector<double> got = (w ? whole : dist).result(w ? whole_part : dist_part, env);
    std::string why;
    if (env.rank != 0 || dense::compare(got, ref, State::tolerance, why)) return true;
    std::fprintf(stderr, "%s: %s: %s differs from the serial reference: %s\n", kProgram, State::name, v.c_str(),
                 why.c_str());
    return false;
  };
  const mpi_app::Measured m = mpi_app::run_variants(
      variants, o.reps, o.check, run, reset, matches);
  int bad = m.mismatches + bad_reference, any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, env.comm);

  if (env.rank == 0) {
    std::printf("# %s: %s, n %d, blocks of %d (%d per side), %d iteration%s; %d rank%s x %d worker%s; %s\n", kProgram,
                State::name, sz.n, sz.bs, sz.nb(), sz.iterations, sz.iterations == 1 ? "" : "s", env.size,
                env.size == 1 ? "" : "s", env.workers, env.workers == 1 ? "" : "s",
                o.check ? "one checked run each" : ("median of " + std::to_string(o.reps) + " runs, interleaved").c_str());
    const auto base_it = m.seconds.find("mpi-omp");
    const double base = base_it != m.seconds.end() ? mpi_app::median(base_it->second) : 0;
    std::printf("%-20s %12s %10s %10s\n", "version", "seconds", "GFLOP/s", "vs mpi-omp");
    for (const auto& v : variants) {
      const double t = mpi_app::median(m.seconds.at(v));
      std::printf("%-20s %12.5f %10.2f %10s\n", v.c_str(), t, t > 0 ? dist.flops() / t * 1e-9 : 0.0,
                  mpi_app::ratio(base, t).c_str());
    }
    if (o.check) std::printf("check: %s\n", any_bad ? "MISMATCH" : "every variant matches the serial reference");
  }
  return any_bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  dense::Env env;
  MPI_Comm_rank(MPI_COMM_WORLD, &env.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &env.size);
  Options o;
  mpi_app::CommandLine cli(kProgram, "bench/apps/cluster/main.cpp");
  cli.parse(argc, argv, [&](const std::string& arg, const std::string& key, const std::string& value, bool has_value) {
    if (key == "--app" && has_value) o.app = value;
    else if (key == "--n") o.n = cli.integer(arg, value, 1);
    else if (key == "--block") o.block = cli.integer(arg, value, 1);
    else if (key == "--iterations") o.iterations = cli.integer(arg, value, 1);
    else if (key == "--workers") o.workers = cli.integer(arg, value, 1);
    else if (key == "--reps") o.reps = cli.integer(arg, value, 1);
    else if (key == "--check" && !has_value) o.check = true;
    else if (key == "--quick" && !has_value) o.quick = true;
    else return false;
    return true;
  });
  if (o.app.empty()) cli.usage_error("missing --app=matvec|matmul|jacobi|cholesky");
  if (o.app != "matvec" && o.app != "matmul" && o.app != "jacobi" && o.app != "cholesky")
    cli.usage_error("unknown application '" + o.app + "' (matvec, matmul, jacobi, cholesky)");

  // Parallelism comes from the ranks and their workers: BLAS runs one thread inside each task or loop body.
  openblas_set_num_threads(1);
  omp_set_num_threads(o.workers);
  MPI_Comm_dup(MPI_COMM_WORLD, &env.comm);
  env.workers = o.workers;
  const weft::Options wo = mpi_app::runtime_options(cli, o.workers);
  int status = 0;  // run_app's runtime ends with it, before MPI does
  if (o.app == "matvec") status = run_app(dense::matvec_variants, cli, o, env, wo);
  else if (o.app == "matmul") status = run_app(dense::matmul_variants, cli, o, env, wo);
  else if (o.app == "jacobi") status = run_app(dense::jacobi_variants, cli, o, env, wo);
  else status = run_app(dense::cholesky_variants, cli, o, env, wo);
  MPI_Comm_free(&env.comm);
  MPI_Finalize();
  return status;
}
