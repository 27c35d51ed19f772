// cholesky: the tiled Cholesky factorisation A = L L^T (lower, right-looking) of a symmetric, strictly
// diagonally dominant (so positive definite) n x n matrix, in tiles of bs x bs, in place. For each step k:
//   potrf  A_kk = L_kk L_kk^T                            (LAPACKE_dpotrf)
//   trsm   A_ik = A_ik L_kk^-T              for i > k    (cblas_dtrsm)
//   syrk   A_jj -= A_jk A_jk^T              for j > k    (cblas_dsyrk)
//   gemm   A_ij -= A_ik A_jk^T              for i > j > k (cblas_dgemm)
// Distribution: tile columns are dealt cyclically over the ranks (column j on rank j mod size). The owner of
// column k factorises panel k (potrf, trsm) and sends it to every rank; the owner of column j applies every
// update to column j. Each rank keeps storage for every tile (the upper ones unused; the panels it receives
// land in their columns); the tiles are stored column by column, so that panel k (tiles k..nt-1 of column k) is contiguous
// and travels as one message.
#pragma once

#include <cblas.h>
#include <lapacke.h>

#include <stdexcept>
#include <string>

#include "dense.hpp"

namespace dense {

struct Cholesky {
  static constexpr const char* name = "cholesky";
  static constexpr double tolerance = 1e-10;
  static Sizes defaults(bool quick) { return quick ? Sizes{192, 32, 1} : Sizes{4096, 256, 1}; }

  Sizes sz;
  Part part;
  int nt;  // tiles per side (0: an empty state)
  Tiles t;

  static double value(int i, int j, int n) { return i == j ? n : entry(std::min(i, j), std::max(i, j), 8); }
  Cholesky(const Sizes& s, const Part& p)
      : sz(s), part(p), nt(p.holds ? s.nb() : 0), t(nt, nt, s.bs, Tiles::Order::by_columns) {
    reset();
  }
  int owner(int j) const { return j % part.size; }
  bool owns(int j) const { return owner(j) == part.rank; }
  double* tile(int i, int j) { return t.tile(i, j); }
  // The factorisation is in place: a run starts from A again (the owned columns; the others are received).
  void reset() {
    for (int j = 0; j < nt; ++j)
      if (owns(j))
        for (int i = j; i < nt; ++i) fill(tile(i, j), i, j, sz.bs, sz.n);
  }

  // The kernels on tiles given by address (bs x bs, column-major), for every version's storage.
  /// Tile (i, j) of A.
  static void fill(double* aij, int i, int j, int bs, int n) {
    for (int c = 0; c < bs; ++c)
      for (int r = 0; r < bs; ++r) aij[static_cast<std::size_t>(c) * bs + r] = value(i * bs + r, j * bs + c, n);
  }
  /// dpotrf's info (0: done).
  static int potrf(double* akk, int bs) { return LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', bs, akk, bs); }
  /// dpotrf of tile k, a std::runtime_error if it fails (for the task-based versions: it reaches the caller).
  static void potrf_or_throw(double* akk, int k, int bs) {
    if (const int info = potrf(akk, bs); info != 0)
      throw std::runtime_error("dpotrf of tile " + std::to_string(k) + ": info " + std::to_string(info));
  }
  static void trsm(const double* akk, double* aik, int bs) {
    cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, bs, bs, 1.0, akk, bs, aik, bs);
  }
  static void syrk(const double* ajk, double* ajj, int bs) {
    cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, bs, bs, -1.0, ajk, bs, 1.0, ajj, bs);
  }
  static void gemm(const double* aik, const double* ajk, double* aij, int bs) {
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, bs, bs, bs, -1.0, aik, bs, ajk, bs, 1.0, aij, bs);
  }

  void potrf(int k) {
    if (const int info = potrf(tile(k, k), sz.bs); info != 0) {  // cannot happen for this matrix unless a variant
      std::fprintf(stderr, "cholesky: dpotrf of tile %d failed (info %d)\n", k, info);  // is wrong: end the job
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
  void trsm(int k, int i) { trsm(tile(k, k), tile(i, k), sz.bs); }
  void syrk(int k, int j) { syrk(tile(j, k), tile(j, j), sz.bs); }
  void gemm(int k, int i, int j) { gemm(tile(i, k), tile(j, k), tile(i, j), sz.bs); }
  /// Panel k: tiles k..nt-1 of column k, contiguous.
  int panel_count(int k) const { return (nt - k) * sz.bs * sz.bs; }

  /// L on rank 0: the lower tiles column by column (each owner sends its columns), the diagonal tiles' upper
  /// triangles (A's, untouched by dpotrf) zeroed.
  std::vector<double> result(const Part&, const Env& e) {
    std::vector<double> all;
    for (int j = 0; j < nt; ++j) {
      if (part.size > 1 && e.rank != 0) {
        if (owns(j)) MPI_Send(tile(j, j), panel_count(j), MPI_DOUBLE, 0, j, e.comm);
        continue;
      }
      const std::size_t at = all.size();
      all.resize(at + static_cast<std::size_t>(panel_count(j)));
      if (owns(j)) std::copy(tile(j, j), tile(j, j) + panel_count(j), all.begin() + static_cast<long>(at));
      else MPI_Recv(&all[at], panel_count(j), MPI_DOUBLE, owner(j), j, e.comm, MPI_STATUS_IGNORE);
      for (int c = 1; c < sz.bs; ++c)
        for (int r = 0; r < c; ++r) all[at + static_cast<std::size_t>(c) * sz.bs + r] = 0;
    }
    return all;
  }
  double flops() const { return static_cast<double>(sz.n) * sz.n * sz.n / 3.0; }
  /// The reference checked on its own: L L^T (cblas_dsyrk over the whole L) against A, lower triangle.
  std::string validate() {
    const int n = sz.n;
    std::vector<double> l(static_cast<std::size_t>(n) * n, 0.0), llt(l.size(), 0.0), a(l.size(), 0.0);
    for (int j = 0; j < nt; ++j)
      for (int i = j; i < nt; ++i)
        for (int c = 0; c < sz.bs; ++c)
          for (int r = (i == j ? c : 0); r < sz.bs; ++r) {
            const std::size_t at = static_cast<std::size_t>(j * sz.bs + c) * n + i * sz.bs + r;
            l[at] = t.at(i, j, r, c);
            a[at] = value(i * sz.bs + r, j * sz.bs + c, n);
          }
    cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, n, n, 1.0, l.data(), n, 0.0, llt.data(), n);
    for (int c = 0; c < n; ++c)  // dsyrk writes the lower triangle only
      for (int r = 0; r < c; ++r) llt[static_cast<std::size_t>(c) * n + r] = 0;
    std::string why;
    return compare(llt, a, 1e-12, why) ? "" : "L L^T differs from A: " + why;
  }
};

/// The tiles of the weft-offload versions, in the common address space (weft/cluster.hpp): stored as above,
/// the columns dealt cyclically over the ranks (Distribution::cyclic), allocated by the first prepare.
/// prepare writes A, a task per tile on its column's rank, and leaves it there (taskwait_noflush); collect
/// copies L into rank 0's state (the tiles come to rank 0). Neither is timed, as reset() and result() are not.
struct CholeskyOffload {
  inline static double* a = nullptr;  // on rank 0 (the other ranks serve)
  static double* tile(const Cholesky& s, int i, int j) {
    return a + (static_cast<std::size_t>(j) * s.nt + i) * s.sz.tile();
  }
  static void prepare(Cholesky& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      const int nt = s.nt, bs = s.sz.bs, n = s.sz.n;
      const std::size_t size = s.sz.tile();
      if (!a) a = weft::dmalloc<double>(size * nt * nt, weft::Distribution::cyclic(size * nt * sizeof(double)));
      for (int j = 0; j < nt; ++j)
        for (int i = j; i < nt; ++i) {
          double* aij = tile(s, i, j);
          cx.spawn([aij, i, j, bs, n] { Cholesky::fill(aij, i, j, bs, n); }, weft::out(aij, size),
                   weft::node(j % weft::num_nodes()));
        }
      cx.taskwait_noflush();
    });
  }
  static void collect(Cholesky& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      const std::size_t size = s.sz.tile();
      for (int j = 0; j < s.nt; ++j)
        for (int i = j; i < s.nt; ++i) {
          const double* aij = tile(s, i, j);
          cx.spawn([&s, aij, i, j, size] { std::copy(aij, aij + size, s.tile(i, j)); }, weft::in(aij, size));
        }
    });
  }
};

void cholesky_serial(Cholesky&, const Env&);
void cholesky_mpi_omp(Cholesky&, const Env&);
void cholesky_mpi_weft(Cholesky&, const Env&);
void cholesky_weft_offload_simple(Cholesky&, const Env&);
void cholesky_weft_offload_opt(Cholesky&, const Env&);

// The versions of cholesky (one source file each, cholesky_<version>.cpp). The first is the reference.
inline const std::vector<Variant<Cholesky>> cholesky_variants = {
    {"serial", Layout::whole, cholesky_serial},
    {"mpi-omp", Layout::distributed, cholesky_mpi_omp},
    {"mpi-weft", Layout::distributed, cholesky_mpi_weft},
    {"weft-offload-simple", Layout::whole, cholesky_weft_offload_simple, CholeskyOffload::prepare, CholeskyOffload::collect},
    {"weft-offload-opt", Layout::whole, cholesky_weft_offload_opt, CholeskyOffload::prepare, CholeskyOffload::collect},
};

}  // namespace dense
