// weft-halo-mpi — a 2D Jacobi stencil over MPI ranks with halo exchange and a global residual every iteration,
// in five variants that compute bit-identical results:
//
//   mpi-for          MPI + OpenMP `parallel for` (libgomp): blocking halo exchange (Isend/Irecv + Waitall),
//                    a parallel loop over the blocks, a blocking MPI_Allreduce of the residual.
//   weft-bracketed   MPI + weft tasks, communication bracketed by taskwaits: the halo exchange and the
//                    allreduce run on the main thread between the iterations' task phases.
//   weft-graph       MPI inside the task graph (weft/mpi.hpp): the receives, sends and the allreduce are tasks
//                    ordered by their data, so interior blocks overlap the messages and an iteration's residual
//                    reduction overlaps the next iterations; no taskwait in the loop.
//   weft-taskiter    the same graph recorded once by taskiter (unroll(2): the two grids alternate), replayed
//                    every iteration with fresh requests.
//   weft-update      the same under taskiter with the iteration captured by value and refreshed by weft::update
//                    (firstprivate updates): the body runs again for every iteration, ahead of the tasks (no
//                    barrier between iterations).
//
// The grid has `rows` x `cols` interior points per rank (rank r owns rows r*rows ... r*rows+rows-1 of the
// global grid); ranks exchange one ghost row with each neighbour (no wrap-around: the outer boundary is fixed).
// A task updates `block` rows. The residual of iteration i is the sum over every rank and block of the squared
// changes, per-block partial sums added in block order, then MPI_SUM over the ranks.
//
//   mpirun -np 2 weft-halo-mpi [--rows=512] [--cols=2048] [--block=32] [--iters=200] [--workers=1]
//                              [--reps=5] [--variant=all|mpi-for,weft-graph,...] [--imbalance=0] [--check]
//
// --imbalance=P: the even ranks do P% more work on even iterations, the odd ranks on odd ones (a synthetic
// stand-in for the noise and imbalance of real machines: with every rank on a quiet core of its own, the
// messages of this stencil take microseconds and there is nothing for overlap to hide).
//
// Prints per variant the median time per iteration over the repetitions (variants interleaved), the ratio to
// weft-bracketed, and for the variants with MPI inside tasks the overlap ratio (weft::mpi::Stats::overlap: the
// share of the time requests were outstanding during which the workers ran tasks rather than idled), and for
// the weft variants the worker time spent in the runtime per iteration (spawning, dependencies, scheduling,
// polling MPI: weft::Profile's overhead, from one extra profiled repetition) and the worker time in weft's MPI
// calls (posts in task bodies, tests by busy and idle workers). --check compares every variant with a serial
// single-process computation of the whole grid (exit 1 on a mismatch; 2 for bad options).
#include <mpi.h>
#include <omp.h>
#include <weft/mpi.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "mpi_app.hpp"

namespace {

struct Params {
  int rows = 512, cols = 2048, block = 32, iters = 200, workers = 1, reps = 5;
  int imbalance = 0;  // percent of extra work on every other iteration, alternating between ranks
  bool check = false;
  std::vector<std::string> variants;
};

int g_rank = 0, g_size = 1;
thread_local volatile double g_sink = 0;  // keeps the synthetic extra work (--imbalance) from being optimised out

// One rank's state: two grids (the source and destination alternate), each with a ghost row above and below.
struct Halo {
  int rows, cols, block, nblocks, iters, imbalance;
  int up, down;  // neighbour ranks, or MPI_PROC_NULL
  MPI_Comm comm;
  std::vector<double> g[2];
  std::vector<double> part[2];    // per-block partial residuals, by iteration parity
  double local[2] = {0, 0};       // this rank's residual, by parity
  double global[2] = {0, 0};      // the reduced residual, by parity
  std::vector<double> history;    // global residual of every iteration
  char group[2] = {0, 0};         // datum naming the residual group of a parity (members in, gatherer inout)
  char collective = 0;            // datum ordering the allreduces (every rank posts them in the same order)

  Halo(const Params& p, MPI_Comm c)
      : rows(p.rows), cols(p.cols), block(p.block), nblocks(p.rows / p.block), iters(p.iters),
        imbalance(p.imbalance),
        up(g_rank > 0 ? g_rank - 1 : MPI_PROC_NULL), down(g_rank + 1 < g_size ? g_rank + 1 : MPI_PROC_NULL),
        comm(c) {
    reset();
  }
  void reset() {
    for (auto& v : g) v.assign(static_cast<std::size_t>(rows + 2) * cols, 0.0);
    // Initial values: a smooth function of the global row and column; the outer boundary rows stay fixed.
    for (int r = 0; r < rows + 2; ++r) {
      const long gr = static_cast<long>(g_rank) * rows + r - 1;
      for (int c = 0; c < cols; ++c) {
        const double v = (gr < 0 || gr >= static_cast<long>(g_size) * rows) ? 1.0 : std::sin(0.01 * gr + 0.02 * c);
        g[0][static_cast<std::size_t>(r) * cols + c] = g[1][static_cast<std::size_t>(r) * cols + c] = v;
      }
    }
    for (auto& p : part) p.assign(static_cast<std::size_t>(nblocks), 0.0);
    history.assign(static_cast<std::size_t>(iters), 0.0);
  }
  double* row(int parity, int r) { return g[parity].data() + static_cast<std::size_t>(r) * cols; }
  // Data names: block b's first row; the ghost rows.
  double* blk(int parity, int b) { return row(parity, 1 + b * block); }
  double* ghost_top(int parity) { return row(parity, 0); }
  double* ghost_bottom(int parity) { return row(parity, rows + 1); }
  double* above(int parity, int b) { return b == 0 ? ghost_top(parity) : blk(parity, b - 1); }
  double* below(int parity, int b) { return b == nblocks - 1 ? ghost_bottom(parity) : blk(parity, b + 1); }

  // The kernel: block b of iteration parity p (source p, destination 1-p); its partial residual.
  void update(int p, int b) {
    double s = 0;
    for (int r = 1 + b * block; r < 1 + (b + 1) * block; ++r) {
      const double* n = row(p, r - 1);
      const double* c = row(p, r);
      const double* so = row(p, r + 1);
      double* d = row(1 - p, r);
      d[0] = c[0];
      d[cols - 1] = c[cols - 1];
      for (int x = 1; x < cols - 1; ++x) {
        const double v = 0.25 * (n[x] + so[x] + c[x - 1] + c[x + 1]);
        const double diff = v - c[x];
        s += diff * diff;
        d[x] = v;
      }
    }
    part[p][static_cast<std::size_t>(b)] = s;
    // Synthetic load imbalance (--imbalance): on iterations of one parity, the even ranks do that much more
    // work, on the others the odd ranks (the stencil recomputed into a sink: results are unchanged).
    if (imbalance > 0 && p == (g_rank & 1)) {
      const long extra = static_cast<long>(block) * cols * imbalance / 100;
      double acc = 0;
      const double* c = row(p, 1 + b * block);
      for (long k = 0; k < extra; ++k) acc += 0.25 * c[k % cols];
      g_sink = acc;
    }
  }
  void gather(int p) {
    double s = 0;
    for (double v : part[p]) s += v;  // block order: every variant adds the same way
    local[p] = s;
  }
  // Tags: direction and parity (receives of consecutive iterations may be posted in either order).
  static int tag(int dir, int p) { return dir * 2 + p; }
};

// --- variants ----------------------------------------------------------------------------------------------

// The halo exchange of iteration parity p outside tasks: post everything, wait for everything.
void exchange_blocking(Halo& h, int p) {
  MPI_Request q[4];
  MPI_Irecv(h.ghost_top(p), h.cols, MPI_DOUBLE, h.up, Halo::tag(0, p), h.comm, &q[0]);
  MPI_Irecv(h.ghost_bottom(p), h.cols, MPI_DOUBLE, h.down, Halo::tag(1, p), h.comm, &q[1]);
  MPI_Isend(h.row(p, 1), h.cols, MPI_DOUBLE, h.up, Halo::tag(1, p), h.comm, &q[2]);
  MPI_Isend(h.row(p, h.rows), h.cols, MPI_DOUBLE, h.down, Halo::tag(0, p), h.comm, &q[3]);
  MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
}

void run_mpi_for(Halo& h, int workers) {
  omp_set_num_threads(workers);
  for (int i = 0; i < h.iters; ++i) {
    const int p = i & 1;
    exchange_blocking(h, p);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < h.nblocks; ++b) h.update(p, b);
    h.gather(p);
    MPI_Allreduce(&h.local[p], &h.global[p], 1, MPI_DOUBLE, MPI_SUM, h.comm);
    h.history[static_cast<std::size_t>(i)] = h.global[p];
  }
}

void run_weft_bracketed(Halo& h, weft::Runtime& rt) {
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < h.iters; ++i) {
      const int p = i & 1;
      exchange_blocking(h, p);
      for (int b = 0; b < h.nblocks; ++b) cx.spawn([&h, p, b] { h.update(p, b); });
      cx.taskwait();
      h.gather(p);
      MPI_Allreduce(&h.local[p], &h.global[p], 1, MPI_DOUBLE, MPI_SUM, h.comm);
      h.history[static_cast<std::size_t>(i)] = h.global[p];
    }
  });
}

// One iteration's tasks, MPI inside the graph. `iteration(cx)` gives the iteration a task runs for (recorded
// tasks under taskiter run for many).
template <class Iteration>
void spawn_iteration(weft::Context& cx, Halo& h, int p, Iteration iteration) {
  const int last = h.nblocks - 1;
  // Edges to the neighbours (this iteration's source rows), ghosts from them.
  cx.spawn([&h, p](weft::Context& c) { weft::mpi::isend(c, h.row(p, 1), h.cols, MPI_DOUBLE, h.up, Halo::tag(1, p), h.comm); },
           weft::in(*h.blk(p, 0)), weft::label("send-up"));
  cx.spawn([&h, p](weft::Context& c) {
             weft::mpi::isend(c, h.row(p, h.rows), h.cols, MPI_DOUBLE, h.down, Halo::tag(0, p), h.comm);
           },
           weft::in(*h.blk(p, last)), weft::label("send-down"));
  cx.spawn([&h, p](weft::Context& c) {
             weft::mpi::irecv(c, h.ghost_top(p), h.cols, MPI_DOUBLE, h.up, Halo::tag(0, p), h.comm);
           },
           weft::out(*h.ghost_top(p)), weft::label("recv-up"));
  cx.spawn([&h, p](weft::Context& c) {
             weft::mpi::irecv(c, h.ghost_bottom(p), h.cols, MPI_DOUBLE, h.down, Halo::tag(1, p), h.comm);
           },
           weft::out(*h.ghost_bottom(p)), weft::label("recv-down"));
  // Interior blocks first in program order: they need no ghost, so they run while the messages travel.
  auto block_task = [&](int b) {
    cx.spawn([&h, p, b] { h.update(p, b); }, weft::in(*h.above(p, b)), weft::in(*h.blk(p, b)),
             weft::in(*h.below(p, b)), weft::out(*h.blk(1 - p, b)), weft::in(h.group[p]), weft::label("block"));
  };
  for (int b = 1; b < last; ++b) block_task(b);
  block_task(0);
  if (last > 0) block_task(last);
  // The residual: gathered in block order, reduced over the ranks by a non-blocking allreduce.
  cx.spawn([&h, p](weft::Context& c) {
             h.gather(p);
             weft::mpi::iallreduce(c, &h.local[p], &h.global[p], 1, MPI_SUM, h.comm);
           },
           weft::inout(h.group[p]), weft::inout(h.collective), weft::label("residual"));
  cx.spawn([&h, p, iteration](weft::Context& c) { h.history[static_cast<std::size_t>(iteration(c))] = h.global[p]; },
           weft::in(h.collective), weft::label("record"));
}

void run_weft_graph(Halo& h, weft::Runtime& rt) {
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < h.iters; ++i) spawn_iteration(cx, h, i & 1, [i](weft::Context&) { return i; });
  });
}

void run_weft_taskiter(Halo& h, weft::Runtime& rt) {
  rt.run([&](weft::Context& cx) {
    cx.taskiter(
        static_cast<std::uint64_t>(h.iters),
        [&](weft::Context& it, std::uint64_t i) {
          spawn_iteration(it, h, static_cast<int>(i & 1),
                          [](weft::Context& c) { return static_cast<int>(weft::taskiter_iteration(c)); });
        },
        weft::unroll(2), weft::inout(h.g[0]), weft::inout(h.g[1]), weft::inout(h.collective));
  });
}

// The same loop with the iteration captured by value and refreshed by weft::update (OpenMP's firstprivate
// updates): the body runs again for every iteration, while the tasks of the previous ones run, and each refreshed
// task starts once its predecessors have finished (the variant above records once; its tasks ask
// taskiter_iteration instead).
void run_weft_update(Halo& h, weft::Runtime& rt) {
  rt.run([&](weft::Context& cx) {
    cx.taskiter(
        static_cast<std::uint64_t>(h.iters),
        [&](weft::Context& it, std::uint64_t i) {
          spawn_iteration(it, h, static_cast<int>(i & 1), [i](weft::Context&) { return static_cast<int>(i); });
        },
        weft::unroll(2), weft::update, weft::inout(h.g[0]), weft::inout(h.g[1]), weft::inout(h.collective));
  });
}

// The whole grid on one process, serially: the reference of --check (every rank computes it).
struct Reference {
  std::vector<double> mine;  // this rank's rows of the final grid
  std::vector<double> history;
};
Reference serial_reference(const Params& p) {
  Params all = p;
  all.rows = p.rows * g_size;
  const int saved_rank = g_rank, saved_size = g_size;
  g_rank = 0;
  g_size = 1;
  Halo h(all, MPI_COMM_SELF);
  // Partial sums per rank-sized chunk of blocks, reduced in rank order as MPI_SUM would for 2 ranks; for more
  // ranks the reduction order of MPI may differ, so the residuals are compared with a tolerance.
  for (int i = 0; i < h.iters; ++i) {
    const int q = i & 1;
    for (int b = 0; b < h.nblocks; ++b) h.update(q, b);
    const int per_rank = p.rows / p.block;
    double total = 0;
    for (int r = 0; r < saved_size; ++r) {
      double s = 0;
      for (int b = r * per_rank; b < (r + 1) * per_rank; ++b) s += h.part[q][static_cast<std::size_t>(b)];
      total += s;
    }
    h.history[static_cast<std::size_t>(i)] = total;
  }
  g_rank = saved_rank;
  g_size = saved_size;
  Reference ref;
  const int fin = h.iters & 1;
  ref.mine.assign(h.row(fin, 1 + g_rank * p.rows), h.row(fin, 1 + (g_rank + 1) * p.rows));
  ref.history = h.history;
  return ref;
}

bool matches(const Halo& h, const Reference& ref, const std::string& variant) {
  const int fin = h.iters & 1;
  const double* mine = h.g[fin].data() + h.cols;
  bool ok = std::memcmp(mine, ref.mine.data(), ref.mine.size() * sizeof(double)) == 0;
  for (std::size_t i = 0; ok && i < ref.history.size(); ++i)
    ok = std::fabs(h.history[i] - ref.history[i]) <= 1e-12 * std::fabs(ref.history[i]);
  if (!ok) std::fprintf(stderr, "weft-halo-mpi: rank %d: %s does not match the serial reference\n", g_rank, variant.c_str());
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  Params p;
  mpi_app::CommandLine cli("weft-halo-mpi", "bench/apps/halo_mpi.cpp");
  cli.parse(argc, argv, [&](const std::string& arg, const std::string& key, const std::string& value, bool has_value) {
    if (key == "--rows") p.rows = cli.integer(arg, value, 1);
    else if (key == "--cols") p.cols = cli.integer(arg, value, 3);
    else if (key == "--block") p.block = cli.integer(arg, value, 1);
    else if (key == "--iters") p.iters = cli.integer(arg, value, 1);
    else if (key == "--workers") p.workers = cli.integer(arg, value, 1);
    else if (key == "--reps") p.reps = cli.integer(arg, value, 1);
    else if (key == "--imbalance") p.imbalance = cli.integer(arg, value, 0);
    else if (key == "--check" && !has_value) p.check = true;
    else return false;
    return true;
  });
  if (p.rows % p.block != 0) cli.usage_error("--rows must be a multiple of --block");
  p.variants = cli.variants({"mpi-for", "weft-bracketed", "weft-graph", "weft-taskiter", "weft-update"});

  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  Halo h(p, comm);
  const weft::Options o = mpi_app::runtime_options(cli, p.workers);
  weft::Runtime rt(o);
  const std::map<std::string, std::function<void()>> run = {
      {"mpi-for", [&] { run_mpi_for(h, p.workers); }},
      {"weft-bracketed", [&] { run_weft_bracketed(h, rt); }},
      {"weft-graph", [&] { run_weft_graph(h, rt); }},
      {"weft-taskiter", [&] { run_weft_taskiter(h, rt); }},
      {"weft-update", [&] { run_weft_update(h, rt); }},
  };
  // The same variants on a runtime that measures itself (weft::ProfileOptions): one more repetition of each
  // weft variant after the timed ones, for the time its workers spent in the runtime (spawning, dependencies,
  // scheduling, polling MPI) rather than in task bodies or idle.
  weft::Options po = o;
  po.profile.enabled = true;
  weft::Runtime prt(po);
  const std::map<std::string, std::function<void()>> profiled = {
      {"weft-bracketed", [&] { run_weft_bracketed(h, prt); }},
      {"weft-graph", [&] { run_weft_graph(h, prt); }},
      {"weft-taskiter", [&] { run_weft_taskiter(h, prt); }},
      {"weft-update", [&] { run_weft_update(h, prt); }},
  };
  std::map<std::string, double> runtime_seconds, mpi_seconds;
  Reference ref;
  if (p.check) ref = serial_reference(p);
  const mpi_app::Measured m = mpi_app::run_variants(
      p.variants, p.reps, p.check, run, [&](const std::string&) { h.reset(); }, [&](const std::string& v) { return matches(h, ref, v); });
  if (!p.check)
    for (const auto& v : p.variants) {
      if (!profiled.count(v)) continue;
      h.reset();
      MPI_Barrier(MPI_COMM_WORLD);
      profiled.at(v)();
      MPI_Barrier(MPI_COMM_WORLD);
      const weft::Profile prof = prt.profile();
      runtime_seconds[v] = prof.total.overhead_seconds;
      for (const weft::CounterSection& sec : prof.counters)
        for (const weft::Counter& c : sec.counters)
          if (sec.name == "mpi_requests" && c.name == "mpi_s" && m.overlaps.count(v)) mpi_seconds[v] = c.seconds;
    }
  int any_bad = 0;
  MPI_Allreduce(&m.mismatches, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("# weft-halo-mpi: %d ranks x %d workers, %d x %d points per rank, blocks of %d rows (%d tasks of "
                "%d points), %d iterations, imbalance %d%%%s\n",
                g_size, p.workers, p.rows, p.cols, p.block, p.rows / p.block, p.block * p.cols, p.iters,
                p.imbalance, p.check ? ", checked against the serial reference" : "");
    const auto bracketed = m.seconds.find("weft-bracketed");
    const double base = bracketed != m.seconds.end() ? mpi_app::median(bracketed->second) : 0;
    // overlap (rank 0's): the share of the time requests were outstanding during which the workers ran tasks
    // (weft::mpi::Stats::overlap; "-" for the variants that do not bind requests, or with a communication
    // thread).
    // runtime us/it (rank 0's, one profiled repetition): worker time in the runtime per iteration, summed over
    // the workers (weft::Profile: overhead_seconds); MPI us/it: in weft's MPI calls, posts inside task bodies
    // (work time) and tests by busy (overhead) and idle workers (the profile's mpi_requests mpi_s; "-"
    // for the variants whose MPI calls are the program's own).
    auto per_iteration = [&](const std::map<std::string, double>& secs, const std::string& v) {
      const auto it = secs.find(v);
      return it != secs.end() ? std::to_string(1e6 * it->second / p.iters).substr(0, 6) : std::string("-");
    };
    std::printf("%-16s %14s %12s %8s %14s %10s\n", "variant", "us/iteration", "vs bracketed", "overlap",
                "runtime us/it", "MPI us/it");
    for (const auto& v : p.variants) {
      const double t = mpi_app::median(m.seconds.at(v));
      std::printf("%-16s %14.2f %12s %8s %14s %10s\n", v.c_str(), 1e6 * t / p.iters, mpi_app::ratio(base, t).c_str(),
                  mpi_app::overlap(m, v).c_str(), per_iteration(runtime_seconds, v).c_str(),
                  per_iteration(mpi_seconds, v).c_str());
    }
    if (p.check) std::printf("check: %s\n", any_bad ? "MISMATCH" : "every variant matches the serial reference");
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return any_bad ? 1 : 0;
}
