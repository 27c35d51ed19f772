// weft-hpccg-mpi — HPCCG's conjugate gradient over MPI ranks: a halo exchange of the direction vector and two
// global dot products every iteration, in four variants that compute bit-identical results and two that
// reduce the dot products with task reductions:
//
//   mpi-for          MPI + OpenMP `parallel for` (libgomp): blocking plane exchange (Isend/Irecv + Waitall), a
//                    parallel loop per phase over the blocks, blocking MPI_Allreduce for the dot products.
//   weft-bracketed   MPI + weft tasks, communication bracketed by taskwaits: the exchange and the allreduces run
//                    on the main thread between the iterations' task phases.
//   weft-graph       MPI inside the task graph (weft/mpi.hpp): receives, sends and the two allreduces are tasks
//                    ordered by their data; no taskwait in the loop. Interior SpMV blocks overlap the plane
//                    exchange, a block's SpMV starts as soon as its own and its neighbours' blocks of p are
//                    updated (no barrier between the phases), and the next iteration's exchange starts as soon
//                    as its boundary blocks of p are.
//   weft-taskiter    the same graph recorded once by taskiter (unroll(2): p and the scalars alternate between
//                    two buffers), replayed every iteration with fresh requests.
//   weft-reduction, weft-taskiter-reduction   the last two with the dot products as task reductions
//                    (weft::reduction(acc, weft::sum) on the blocks' tasks, cx.local(acc) += partial), the
//                    combined value then reduced over the ranks by an iallreduce task: the rounding differs from
//                    the others (the private copies are combined in no fixed order), so --check compares these
//                    two within a relative tolerance.
//
// The problem (after Mantevo's HPCCG): every rank owns a box of nx x ny x nz grid points, the ranks stacked along
// z (rank r owns global planes r*nz ... r*nz+nz-1). One matrix row per point: 27 on the diagonal and -1 for
// each of the up to 26 neighbours inside the global grid (a 27-point stencil); the right-hand side is A times
// the all-ones vector, so the exact solution is all ones. Unpreconditioned CG from x = 0 for --iters
// iterations (no convergence test: every variant does the same work), the residual norm after each.
//
// The matrix is stored once in CSR (row pointers, column indices, values), as HPCCG stores its rows; columns
// index a local copy of p with one ghost plane below and one above (the neighbours' boundary planes), so the
// exchange receives straight into p and the SpMV needs no index translation.
//
// A task covers `block` xy-planes (nx*ny*block rows). Per iteration k (beta = r.r_k / r.r_{k-1}, alpha =
// r.r_k / p.Ap):
//   p_k   = r + beta p_{k-1}                per block        (p alternates between two buffers by parity)
//   exchange the boundary planes of p_k     receives into the ghost planes, sends from the first/last plane
//   Ap    = A p_k, partial p.Ap             per block (fused: one pass)
//   p.Ap  = sum of the partials in block order, then summed over the ranks
//   r    -= alpha Ap, partial r.r, x += alpha p_k   per block (one pass)
//   r.r   = likewise
// (x could be updated by separate tasks: nothing reads it before the end, so they could fill the waits for the
// allreduces. Measured here they did not pay: the allreduces of 2-3 ranks on one machine take microseconds, and
// at fine grain the extra task per block cost more than they filled.)
// Dot products: every block writes its partial sum into its slot, one task adds the slots in block order, and
// the ranks' sums are combined by an allreduce of a vector with one slot per rank (this rank's sum in its slot,
// zeros elsewhere: adding zeros is exact, so the result is every rank's sum, whatever order MPI adds in), added
// in rank order. The dot products, hence alpha, beta and every vector, are then bit-identical in every variant,
// on any number of ranks, and equal to the serial computation, which groups its sums the same way. (weft's
// task reductions, weft::reduction, combine private copies in an unspecified order: not reproducible.) The
// vector grows with the ranks: nothing for the few ranks here; a large job would reduce one value per dot
// product and compare the variants within a tolerance.
//
//   mpirun -np 2 weft-hpccg-mpi [--nx=64] [--ny=64] [--nz=64] [--block=4] [--iters=50] [--workers=1]
//                               [--reps=5] [--variant=all|mpi-for,weft-graph,...] [--check]
//
// Prints per variant the median time per iteration over the repetitions (variants interleaved), the ratio to
// weft-bracketed, the overlap ratio for the variants with MPI inside tasks (weft::mpi::Stats::overlap: the
// share of the time requests were outstanding during which the workers ran tasks rather than idled), and the
// final residual norm. --check compares every variant with a serial single-process CG over the whole global
// grid, bitwise but for the reduction variants (exit 1 on a mismatch; 2 for bad options).
#include <mpi.h>
#include <omp.h>
#include <weft/mpi.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
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
  int nx = 64, ny = 64, nz = 64, block = 4, iters = 50, workers = 1, reps = 5;
  bool check = false;
  std::vector<std::string> variants;
};

int g_rank = 0, g_size = 1;

// A global dot product: the per-rank sums as a vector with one slot per rank (see the top of the file).
struct Dot {
  std::vector<double> mine;  // this rank's sum in its slot, zeros elsewhere (the allreduce's input)
  std::vector<double> all;   // every rank's sum (the allreduce's output)
  double value() const {     // added in rank order: the same in every variant and in the serial reference
    double s = 0;
    for (double v : all) s += v;
    return s;
  }
};

// One rank's part of the problem (or, for the serial reference, the whole grid with `ranks` virtual ranks).
struct Cg {
  int nx, ny, nz, block, nblocks, iters;
  long plane, nrow;
  int rank, ranks;     // this rank and the ranks whose sums a dot product adds (see gather)
  bool reference;      // the serial reference: the whole grid, `ranks` virtual ranks of nz / ranks planes
  int below, above;    // neighbour ranks, or MPI_PROC_NULL
  MPI_Comm comm;
  // CSR over the local rows; columns index p with its ghost planes (p[0 .. plane) is the plane below).
  std::vector<std::int64_t> row_ptr;
  std::vector<std::int32_t> col;
  std::vector<double> val;
  std::vector<double> b, x, r, ap;
  // p_k in p[k & 1], with ghost planes; p_{k-1} in the other. Two buffers: the receives of an iteration's ghost
  // planes then wait only for the SpMV of two iterations before, not of the previous one.
  std::vector<double> p[2];
  std::vector<double> pap_part, rr_part;  // per-block partial sums
  Dot pap[2], rr[2];                   // p.Ap of iteration k in pap[k & 1]; r.r_k in rr[k & 1]
  std::vector<double> norm;            // residual norm after each iteration
  // Data that name a dependency but hold nothing: the partial-sum groups (members in, gatherer inout) and the
  // order of the collectives (every rank posts them in the same order).
  char pap_group = 0, rr_group = 0, collective = 0;
  // The variants with task reductions (weft::reduction): the blocks' partials are combined into these, by
  // parity as pap and rr; the allreduce sends a copy (the accumulator is zeroed for the next group).
  double pap_acc[2] = {0, 0}, rr_acc[2] = {0, 0}, pap_send[2] = {0, 0}, rr_send[2] = {0, 0};

  // nz_rows planes from global plane z0 of a grid of gnz planes.
  Cg(const Params& o, int nz_rows, long z0, long gnz, int rank_, int ranks_, bool reference_, MPI_Comm c)
      : nx(o.nx), ny(o.ny), nz(nz_rows), block(o.block), nblocks(nz_rows / o.block), iters(o.iters),
        plane(static_cast<long>(o.nx) * o.ny), nrow(plane * nz_rows), rank(rank_), ranks(ranks_),
        reference(reference_), below(!reference && rank > 0 ? rank - 1 : MPI_PROC_NULL),
        above(!reference && rank + 1 < ranks ? rank + 1 : MPI_PROC_NULL), comm(c) {
    row_ptr.assign(static_cast<std::size_t>(nrow) + 1, 0);
    col.reserve(static_cast<std::size_t>(nrow) * 27);
    val.reserve(static_cast<std::size_t>(nrow) * 27);
    b.assign(static_cast<std::size_t>(nrow), 0.0);
    for (long z = 0; z < nz; ++z)
      for (long y = 0; y < ny; ++y)
        for (long xx = 0; xx < nx; ++xx) {
          const long row = (z * ny + y) * nx + xx;
          int n = 0;
          // The same neighbour order everywhere: a row sums its terms in the same order in every variant and
          // in the reference (a rank's ghost plane holds exactly the neighbour's values).
          for (long dz = -1; dz <= 1; ++dz)
            for (long dy = -1; dy <= 1; ++dy)
              for (long dx = -1; dx <= 1; ++dx) {
                const long gz = z0 + z + dz, yy = y + dy, xc = xx + dx;
                if (gz < 0 || gz >= gnz || yy < 0 || yy >= ny || xc < 0 || xc >= nx) continue;
                col.push_back(static_cast<std::int32_t>(((z + dz + 1) * ny + yy) * nx + xc));
                val.push_back(dz == 0 && dy == 0 && dx == 0 ? 27.0 : -1.0);
                ++n;
              }
          row_ptr[static_cast<std::size_t>(row) + 1] = row_ptr[static_cast<std::size_t>(row)] + n;
          b[static_cast<std::size_t>(row)] = 27.0 - (n - 1);  // A * ones
        }
    reset();
  }

  // The starting state: x = 0, r = b, p_{-1} = 0, and r.r_0; r.r_{-1} = 1, so that the first iteration sets
  // p = r + beta * 0 = r exactly, like HPCCG's copy, with no special case.
  void reset() {
    x.assign(static_cast<std::size_t>(nrow), 0.0);
    r = b;
    ap.assign(static_cast<std::size_t>(nrow), 0.0);
    for (auto& v : p) v.assign(static_cast<std::size_t>(nrow + 2 * plane), 0.0);
    pap_part.assign(static_cast<std::size_t>(nblocks), 0.0);
    rr_part.assign(static_cast<std::size_t>(nblocks), 0.0);
    for (Dot* d : {&pap[0], &pap[1], &rr[0], &rr[1]}) {
      d->mine.assign(static_cast<std::size_t>(ranks), 0.0);
      d->all.assign(static_cast<std::size_t>(ranks), 0.0);
    }
    for (int blk = 0; blk < nblocks; ++blk) {
      double s = 0;
      for (long i = row0(blk); i < row0(blk + 1); ++i) s += r[static_cast<std::size_t>(i)] * r[static_cast<std::size_t>(i)];
      rr_part[static_cast<std::size_t>(blk)] = s;
    }
    gather(rr_part, rr[0]);
    if (reference) rr[0].all = rr[0].mine;
    else MPI_Allreduce(rr[0].mine.data(), rr[0].all.data(), ranks, MPI_DOUBLE, MPI_SUM, comm);
    rr[1].all[0] = 1.0;
    norm.assign(static_cast<std::size_t>(iters), 0.0);
    for (int q = 0; q < 2; ++q) pap_acc[q] = rr_acc[q] = pap_send[q] = rr_send[q] = 0;
  }

  long row0(int blk) const { return static_cast<long>(blk) * block * plane; }
  // Data names: block blk of p_k (its first interior element), the ghost planes, the vectors' blocks.
  double* pblk(int q, int blk) { return p[q].data() + plane + row0(blk); }
  double* ghost_below(int q) { return p[q].data(); }
  double* ghost_above(int q) { return p[q].data() + plane + nrow; }
  double* p_below(int q, int blk) { return blk == 0 ? ghost_below(q) : pblk(q, blk - 1); }
  double* p_above(int q, int blk) { return blk == nblocks - 1 ? ghost_above(q) : pblk(q, blk + 1); }
  double* at(std::vector<double>& v, int blk) { return v.data() + row0(blk); }

  // --- kernels (the same code in every variant and the reference) ---
  // p_k = r + beta p_{k-1}, block blk, iteration parity q.
  void update_p(int q, int blk) {
    const double beta = rr[q].value() / rr[1 - q].value();
    const double* __restrict rv = r.data();
    const double* __restrict old = p[1 - q].data() + plane;
    double* __restrict cur = p[q].data() + plane;
    for (long i = row0(blk); i < row0(blk + 1); ++i) cur[i] = rv[i] + beta * old[i];
  }
  // Ap = A p_k and the partial p.Ap, block blk.
  void spmv(int q, int blk) {
    const double* __restrict pv = p[q].data();
    const std::int64_t* __restrict rp = row_ptr.data();
    const std::int32_t* __restrict c = col.data();
    const double* __restrict v = val.data();
    double* __restrict out = ap.data();
    double d = 0;
    for (long i = row0(blk); i < row0(blk + 1); ++i) {
      double s = 0;
      for (std::int64_t k = rp[i]; k < rp[i + 1]; ++k) s += v[k] * pv[c[k]];
      out[i] = s;
      d += pv[plane + i] * s;
    }
    pap_part[static_cast<std::size_t>(blk)] = d;
  }
  double alpha(int q) const { return rr[q].value() / pap[q].value(); }
  // r -= alpha Ap and the partial r.r, block blk.
  void update_r(int q, int blk) {
    const double a = alpha(q);
    const double* __restrict apv = ap.data();
    double* __restrict rv = r.data();
    double d = 0;
    for (long i = row0(blk); i < row0(blk + 1); ++i) {
      rv[i] -= a * apv[i];
      d += rv[i] * rv[i];
    }
    rr_part[static_cast<std::size_t>(blk)] = d;
  }
  // x += alpha p_k, block blk.
  void update_x(int q, int blk) {
    const double a = alpha(q);
    const double* __restrict pv = p[q].data() + plane;
    double* __restrict xv = x.data();
    for (long i = row0(blk); i < row0(blk + 1); ++i) xv[i] += a * pv[i];
  }
  // This rank's sum of the partials, in block order, into its slot of d.mine (the reference: one slot per
  // virtual rank, each the sum of that rank's blocks, as the ranks would compute them).
  void gather(const std::vector<double>& part, Dot& d) const {
    const int per = reference ? nblocks / ranks : nblocks;
    for (int k = 0; k < ranks; ++k) {
      if (!reference && k != rank) continue;
      double s = 0;
      const int first = reference ? k * per : 0;
      for (int blk = first; blk < first + per; ++blk) s += part[static_cast<std::size_t>(blk)];
      d.mine[static_cast<std::size_t>(k)] = s;
    }
  }
  void record(int k) { norm[static_cast<std::size_t>(k)] = std::sqrt(rr[(k + 1) & 1].value()); }

  // Tags: direction and parity (the planes of consecutive iterations travel in separate buffers).
  static int tag(int dir, int q) { return dir * 2 + q; }
};

// --- variants ----------------------------------------------------------------------------------------------

// The plane exchange of p_k outside tasks: post everything, wait for everything.
void exchange_blocking(Cg& c, int q) {
  MPI_Request req[4];
  const int n = static_cast<int>(c.plane);
  MPI_Irecv(c.ghost_below(q), n, MPI_DOUBLE, c.below, Cg::tag(0, q), c.comm, &req[0]);
  MPI_Irecv(c.ghost_above(q), n, MPI_DOUBLE, c.above, Cg::tag(1, q), c.comm, &req[1]);
  MPI_Isend(c.pblk(q, 0), n, MPI_DOUBLE, c.below, Cg::tag(1, q), c.comm, &req[2]);
  MPI_Isend(c.ghost_above(q) - c.plane, n, MPI_DOUBLE, c.above, Cg::tag(0, q), c.comm, &req[3]);
  MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
}

void allreduce_blocking(Cg& c, Dot& d) {
  MPI_Allreduce(d.mine.data(), d.all.data(), c.ranks, MPI_DOUBLE, MPI_SUM, c.comm);
}

void run_mpi_for(Cg& c, int workers) {
  omp_set_num_threads(workers);
  for (int k = 0; k < c.iters; ++k) {
    const int q = k & 1;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < c.nblocks; ++blk) c.update_p(q, blk);
    exchange_blocking(c, q);
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < c.nblocks; ++blk) c.spmv(q, blk);
    c.gather(c.pap_part, c.pap[q]);
    allreduce_blocking(c, c.pap[q]);
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < c.nblocks; ++blk) {
      c.update_r(q, blk);
      c.update_x(q, blk);
    }
    c.gather(c.rr_part, c.rr[1 - q]);
    allreduce_blocking(c, c.rr[1 - q]);
    c.record(k);
  }
}

void run_weft_bracketed(Cg& c, weft::Runtime& rt) {
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < c.iters; ++k) {
      const int q = k & 1;
      for (int blk = 0; blk < c.nblocks; ++blk) cx.spawn([&c, q, blk] { c.update_p(q, blk); });
      cx.taskwait();
      exchange_blocking(c, q);
      for (int blk = 0; blk < c.nblocks; ++blk) cx.spawn([&c, q, blk] { c.spmv(q, blk); });
      cx.taskwait();
      c.gather(c.pap_part, c.pap[q]);
      allreduce_blocking(c, c.pap[q]);
      for (int blk = 0; blk < c.nblocks; ++blk)
        cx.spawn([&c, q, blk] {
          c.update_r(q, blk);
          c.update_x(q, blk);
        });
      cx.taskwait();
      c.gather(c.rr_part, c.rr[1 - q]);
      allreduce_blocking(c, c.rr[1 - q]);
      c.record(k);
    }
  });
}

// One iteration's tasks, MPI inside the graph. `iteration(cx)` gives the iteration a task runs for (recorded
// tasks under taskiter run for many).
// How the dot products are reduced: each block's partial into its slot, summed in block order by the allreduce
// task (bit-identical to the reference), or by a task reduction (weft::reduction: combined in no fixed order).
enum class Dots { slots, reduction };

// Posts the allreduce of one dot product made by a task reduction: the combined value (a copy, as the
// accumulator is zeroed for the next group) into the first slot of d.all, the others zero.
void allreduce_reduced(weft::Context& t, Cg& c, double& acc, double& send, Dot& d) {
  send = acc;
  acc = 0;
  std::fill(d.all.begin(), d.all.end(), 0.0);
  weft::mpi::iallreduce(t, &send, d.all.data(), 1, MPI_SUM, c.comm);
}

template <Dots dots = Dots::slots, class Iteration>
void spawn_iteration(weft::Context& cx, Cg& c, int q, Iteration iteration) {
  const int s = 1 - q, last = c.nblocks - 1;
  const int n = static_cast<int>(c.plane);
  // The ghost planes of p_k. They wait only for the SpMV of two iterations ago (the last readers of p[q]'s
  // ghosts), so they are posted well before the neighbours send.
  cx.spawn([&c, q, n](weft::Context& t) {
             weft::mpi::irecv(t, c.ghost_below(q), n, MPI_DOUBLE, c.below, Cg::tag(0, q), c.comm);
           },
           weft::out(*c.ghost_below(q)), weft::label("recv-below"));
  cx.spawn([&c, q, n](weft::Context& t) {
             weft::mpi::irecv(t, c.ghost_above(q), n, MPI_DOUBLE, c.above, Cg::tag(1, q), c.comm);
           },
           weft::out(*c.ghost_above(q)), weft::label("recv-above"));
  // p_k: the boundary blocks first and ahead of the others (priority), so that the sends start early.
  auto p_task = [&](int blk, int prio) {
    cx.spawn([&c, q, blk] { c.update_p(q, blk); }, weft::in(*c.at(c.r, blk)), weft::in(*c.pblk(s, blk)),
             weft::out(*c.pblk(q, blk)), weft::in(c.rr[q]), weft::in(c.rr[s]), weft::priority(prio),
             weft::label("update-p"));
  };
  p_task(0, 1);
  if (last > 0) p_task(last, 1);
  cx.spawn([&c, q, n](weft::Context& t) {
             weft::mpi::isend(t, c.pblk(q, 0), n, MPI_DOUBLE, c.below, Cg::tag(1, q), c.comm);
           },
           weft::in(*c.pblk(q, 0)), weft::priority(1), weft::label("send-below"));
  cx.spawn([&c, q, n](weft::Context& t) {
             weft::mpi::isend(t, c.ghost_above(q) - c.plane, n, MPI_DOUBLE, c.above, Cg::tag(0, q), c.comm);
           },
           weft::in(*c.pblk(q, last)), weft::priority(1), weft::label("send-above"));
  for (int blk = 1; blk < last; ++blk) p_task(blk, 0);
  // Ap = A p_k: interior blocks first in program order (they need no ghost plane: they run while the planes
  // travel), then the boundary blocks.
  auto spmv_task = [&](int blk) {
    if constexpr (dots == Dots::slots)
      cx.spawn([&c, q, blk] { c.spmv(q, blk); }, weft::in(*c.p_below(q, blk)), weft::in(*c.pblk(q, blk)),
               weft::in(*c.p_above(q, blk)), weft::out(*c.at(c.ap, blk)), weft::in(c.pap_group), weft::label("spmv"));
    else
      cx.spawn(
          [&c, q, blk](weft::Context& t) {
            c.spmv(q, blk);
            t.local(c.pap_acc[q]) += c.pap_part[static_cast<std::size_t>(blk)];
          },
          weft::in(*c.p_below(q, blk)), weft::in(*c.pblk(q, blk)), weft::in(*c.p_above(q, blk)),
          weft::out(*c.at(c.ap, blk)), weft::reduction(c.pap_acc[q], weft::sum), weft::label("spmv"));
  };
  for (int blk = 1; blk < last; ++blk) spmv_task(blk);
  spmv_task(0);
  if (last > 0) spmv_task(last);
  // p.Ap: the partials in block order, then over the ranks (or the combined task reduction, over the ranks).
  if constexpr (dots == Dots::slots)
    cx.spawn([&c, q](weft::Context& t) {
               c.gather(c.pap_part, c.pap[q]);
               weft::mpi::iallreduce(t, c.pap[q].mine.data(), c.pap[q].all.data(), c.ranks, MPI_SUM, c.comm);
             },
             weft::inout(c.pap_group), weft::inout(c.collective), weft::inout(c.pap[q]), weft::priority(1),
             weft::label("allreduce-pAp"));
  else
    cx.spawn([&c, q](weft::Context& t) { allreduce_reduced(t, c, c.pap_acc[q], c.pap_send[q], c.pap[q]); },
             weft::inout(c.pap_acc[q]), weft::inout(c.collective), weft::inout(c.pap[q]), weft::priority(1),
             weft::label("allreduce-pAp"));
  // r, its partial r.r_{k+1}, and x.
  for (int blk = 0; blk <= last; ++blk) {
    if constexpr (dots == Dots::slots)
      cx.spawn(
          [&c, q, blk] {
            c.update_r(q, blk);
            c.update_x(q, blk);
          },
          weft::in(*c.at(c.ap, blk)), weft::inout(*c.at(c.r, blk)), weft::in(*c.pblk(q, blk)),
          weft::inout(*c.at(c.x, blk)), weft::in(c.pap[q]), weft::in(c.rr[q]), weft::in(c.rr_group),
          weft::label("update-r-x"));
    else
      cx.spawn(
          [&c, q, s, blk](weft::Context& t) {
            c.update_r(q, blk);
            c.update_x(q, blk);
            t.local(c.rr_acc[s]) += c.rr_part[static_cast<std::size_t>(blk)];
          },
          weft::in(*c.at(c.ap, blk)), weft::inout(*c.at(c.r, blk)), weft::in(*c.pblk(q, blk)),
          weft::inout(*c.at(c.x, blk)), weft::in(c.pap[q]), weft::in(c.rr[q]),
          weft::reduction(c.rr_acc[s], weft::sum), weft::label("update-r-x"));
  }
  if constexpr (dots == Dots::slots)
    cx.spawn([&c, s](weft::Context& t) {
               c.gather(c.rr_part, c.rr[s]);
               weft::mpi::iallreduce(t, c.rr[s].mine.data(), c.rr[s].all.data(), c.ranks, MPI_SUM, c.comm);
             },
             weft::inout(c.rr_group), weft::inout(c.collective), weft::inout(c.rr[s]), weft::priority(1),
             weft::label("allreduce-rr"));
  else
    cx.spawn([&c, s](weft::Context& t) { allreduce_reduced(t, c, c.rr_acc[s], c.rr_send[s], c.rr[s]); },
             weft::inout(c.rr_acc[s]), weft::inout(c.collective), weft::inout(c.rr[s]), weft::priority(1),
             weft::label("allreduce-rr"));
  cx.spawn([&c, iteration](weft::Context& t) { c.record(iteration(t)); }, weft::in(c.rr[s]), weft::label("record"));
}

template <Dots dots>
void run_weft_graph(Cg& c, weft::Runtime& rt) {
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < c.iters; ++k) spawn_iteration<dots>(cx, c, k & 1, [k](weft::Context&) { return k; });
  });
}

template <Dots dots>
void run_weft_taskiter(Cg& c, weft::Runtime& rt) {
  rt.run([&](weft::Context& cx) {
    cx.taskiter(
        static_cast<std::uint64_t>(c.iters),
        [&](weft::Context& it, std::uint64_t k) {
          spawn_iteration<dots>(it, c, static_cast<int>(k & 1),
                                [](weft::Context& t) { return static_cast<int>(weft::taskiter_iteration(t)); });
        },
        weft::unroll(2), weft::inout(c));
  });
}

// The whole grid on one process, serially: the reference of --check (every rank computes it). Its dot
// products group the blocks by the rank that owns them, as the ranks do.
struct Reference {
  std::vector<double> x, r;  // this rank's rows
  std::vector<double> norm;
  double initial_norm = 0;   // |r_0|: the scale of r and of the norms (see matches)
};
Reference serial_reference(const Params& o) {
  Cg c(o, o.nz * g_size, 0, static_cast<long>(o.nz) * g_size, 0, g_size, true, MPI_COMM_SELF);
  const double initial_norm = std::sqrt(c.rr[0].value());
  for (int k = 0; k < c.iters; ++k) {
    const int q = k & 1;
    for (int blk = 0; blk < c.nblocks; ++blk) c.update_p(q, blk);
    for (int blk = 0; blk < c.nblocks; ++blk) c.spmv(q, blk);
    c.gather(c.pap_part, c.pap[q]);
    c.pap[q].all = c.pap[q].mine;
    for (int blk = 0; blk < c.nblocks; ++blk) {
      c.update_r(q, blk);
      c.update_x(q, blk);
    }
    c.gather(c.rr_part, c.rr[1 - q]);
    c.rr[1 - q].all = c.rr[1 - q].mine;
    c.record(k);
  }
  Reference ref;
  const long n = c.plane * o.nz, first = n * g_rank;
  ref.x.assign(c.x.begin() + first, c.x.begin() + first + n);
  ref.r.assign(c.r.begin() + first, c.r.begin() + first + n);
  ref.norm = c.norm;
  ref.initial_norm = initial_norm;
  return ref;
}

// Bitwise for the variants that sum the partials in block order; within a tolerance for those with task
// reductions (their sums are rounded in another order): 1e-9 of the solution's scale (its largest value) for x,
// of the initial residual norm for r and the norms (once CG has converged, r is round-off of that scale). It
// leaves room for the iterations of CG amplifying the differences.
bool matches(const Cg& c, const Reference& ref, const std::string& variant) {
  const bool exact = variant.find("reduction") == std::string::npos;
  auto same = [&](const std::vector<double>& a, const std::vector<double>& b, double scale) {
    if (a.size() != b.size()) return false;
    if (exact) return std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!(std::fabs(a[i] - b[i]) <= 1e-9 * scale)) return false;
    return true;
  };
  double x_scale = 0;
  for (double v : ref.x) x_scale = std::max(x_scale, std::fabs(v));
  const bool ok = same(c.x, ref.x, x_scale) && same(c.r, ref.r, ref.initial_norm) &&
                  same(c.norm, ref.norm, ref.initial_norm);
  if (!ok)
    std::fprintf(stderr, "weft-hpccg-mpi: rank %d: %s does not match the serial reference\n", g_rank, variant.c_str());
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  Params o;
  mpi_app::CommandLine cli("weft-hpccg-mpi", "bench/apps/hpccg_mpi.cpp");
  cli.parse(argc, argv, [&](const std::string& arg, const std::string& key, const std::string& value, bool has_value) {
    if (key == "--nx") o.nx = cli.integer(arg, value, 1);
    else if (key == "--ny") o.ny = cli.integer(arg, value, 1);
    else if (key == "--nz") o.nz = cli.integer(arg, value, 1);
    else if (key == "--block") o.block = cli.integer(arg, value, 1);
    else if (key == "--iters") o.iters = cli.integer(arg, value, 1);
    else if (key == "--workers") o.workers = cli.integer(arg, value, 1);
    else if (key == "--reps") o.reps = cli.integer(arg, value, 1);
    else if (key == "--check" && !has_value) o.check = true;
    else return false;
    return true;
  });
  if (o.nz % o.block != 0) cli.usage_error("--nz must be a multiple of --block (planes per task)");
  // Columns are 32-bit indices into p with its ghost planes (and the reference holds the whole grid).
  if (static_cast<double>(o.nx) * o.ny * (static_cast<double>(o.nz) * g_size + 2) >= 2147483647.0)
    cli.usage_error("grid too large (nx * ny * (nz * ranks + 2) must stay below 2^31)");
  o.variants = cli.variants({"mpi-for", "weft-bracketed", "weft-graph", "weft-taskiter", "weft-reduction",
                             "weft-taskiter-reduction"});

  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  Cg c(o, o.nz, static_cast<long>(g_rank) * o.nz, static_cast<long>(o.nz) * g_size, g_rank, g_size, false, comm);
  weft::Runtime rt(mpi_app::runtime_options(cli, o.workers));
  const std::map<std::string, std::function<void()>> run = {
      {"mpi-for", [&] { run_mpi_for(c, o.workers); }},
      {"weft-bracketed", [&] { run_weft_bracketed(c, rt); }},
      {"weft-graph", [&] { run_weft_graph<Dots::slots>(c, rt); }},
      {"weft-taskiter", [&] { run_weft_taskiter<Dots::slots>(c, rt); }},
      {"weft-reduction", [&] { run_weft_graph<Dots::reduction>(c, rt); }},
      {"weft-taskiter-reduction", [&] { run_weft_taskiter<Dots::reduction>(c, rt); }},
  };
  Reference ref;
  if (o.check) ref = serial_reference(o);
  const double initial_norm = std::sqrt(c.rr[0].value());
  std::map<std::string, double> final_norm;
  const mpi_app::Measured m = mpi_app::run_variants(
      o.variants, o.reps, o.check, run, [&](const std::string&) { c.reset(); }, [&](const std::string& v) { return matches(c, ref, v); },
      [&](const std::string& v) { final_norm[v] = c.norm.back(); });
  int any_bad = 0;
  MPI_Allreduce(&m.mismatches, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("# weft-hpccg-mpi: %d ranks x %d workers, %d x %d x %d rows per rank (global %d x %d x %d), "
                "blocks of %d planes (%d tasks of %ld rows), %d iterations%s\n",
                g_size, o.workers, o.nx, o.ny, o.nz, o.nx, o.ny, o.nz * g_size, o.block, c.nblocks,
                c.plane * o.block, o.iters, o.check ? ", checked against the serial reference" : "");
    const auto bracketed = m.seconds.find("weft-bracketed");
    const double base = bracketed != m.seconds.end() ? mpi_app::median(bracketed->second) : 0;
    // overlap (rank 0's): the share of the time requests were outstanding during which the workers ran tasks
    // ("-" for the variants that do not bind requests, or with a communication thread).
    std::printf("%-24s %14s %12s %8s %14s\n", "variant", "us/iteration", "vs bracketed", "overlap", "final |r|");
    for (const auto& v : o.variants) {
      const double t = mpi_app::median(m.seconds.at(v));
      std::printf("%-24s %14.2f %12s %8s %14.6e\n", v.c_str(), 1e6 * t / o.iters, mpi_app::ratio(base, t).c_str(),
                  mpi_app::overlap(m, v).c_str(), final_norm[v]);
    }
    std::printf("residual norm: %.6e at the start, %.6e after %d iterations\n", initial_norm,
                final_norm[o.variants.front()], o.iters);
    if (o.check) std::printf("check: %s\n", any_bad ? "MISMATCH" : "every variant matches the serial reference");
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return any_bad ? 1 : 0;
}
