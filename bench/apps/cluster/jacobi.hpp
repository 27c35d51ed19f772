// jacobi: `iterations` Jacobi steps x' = D^-1 (b - R x) for a dense, strictly diagonally dominant system
// A x = b (A = D + R, D its diagonal), from x = 0. A and b are split into blocks of bs rows; a rank holds a
// contiguous range of row blocks and the whole x: every step needs all of x, so the ranks exchange their new
// parts after each step (all-to-all: MPI_Allgatherv).
#pragma once

#include <cblas.h>

#include "dense.hpp"

namespace dense {

struct Jacobi {
  static constexpr const char* name = "jacobi";
  static constexpr double tolerance = 1e-12;
  static Sizes defaults(bool quick) { return quick ? Sizes{192, 32, 4} : Sizes{8192, 256, 20}; }

  Sizes sz;
  Range blocks;          // this share's row blocks
  int rows = 0, row0 = 0;
  bool holds;  // false: an empty state (whole layout, ranks other than 0)
  std::vector<double> a, b, x, next;  // A's rows, b's rows, x, and the next x (this share's rows written)

  static double value(int i, int j, int n) { return i == j ? n / 2 + 1.0 : entry(i, j, 5); }  // |row sum| < n/2
  Jacobi(const Sizes& s, const Part& p)
      : sz(s), blocks(blocks_of(s.nb(), p)), rows(blocks.count * s.bs), row0(blocks.first * s.bs), holds(p.holds) {
    a.resize(static_cast<std::size_t>(rows) * s.n);
    b.resize(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < s.n; ++c) a[static_cast<std::size_t>(r) * s.n + c] = value(row0 + r, c, s.n);
      b[static_cast<std::size_t>(r)] = entry(row0 + r, 0, 6);
    }
    reset();
  }
  void reset() {
    const std::size_t n = holds ? static_cast<std::size_t>(sz.n) : 0;
    x.assign(n, 0.0);
    next.assign(n, 0.0);
  }
  /// Block bb of this share's rows: next_i = x_i + (b_i - (A x)_i) / a_ii (the same as D^-1 (b - R x)).
  void block(int bb) {
    const int r0 = bb * sz.bs;
    double* out = &next[static_cast<std::size_t>(row0 + r0)];
    cblas_dgemv(CblasRowMajor, CblasNoTrans, sz.bs, sz.n, 1.0, &a[static_cast<std::size_t>(r0) * sz.n], sz.n,
                x.data(), 1, 0.0, out, 1);
    for (int r = 0; r < sz.bs; ++r) {
      const int gi = row0 + r0 + r;
      out[r] = x[static_cast<std::size_t>(gi)] +
               (b[static_cast<std::size_t>(r0 + r)] - out[r]) / a[static_cast<std::size_t>(r0 + r) * sz.n + gi];
    }
  }
  // Every rank ends with the whole x.
  std::vector<double> result(const Part&, const Env&) const { return x; }
  double flops() const { return 2.0 * sz.n * sz.n * sz.iterations; }
  /// The reference checked on its own: the same steps with plain loops (x' = D^-1 (b - R x)).
  std::string validate() const {
    const std::size_t n = static_cast<std::size_t>(sz.n);
    std::vector<double> u(n, 0.0), v(n);
    for (int it = 0; it < sz.iterations; ++it) {
      for (std::size_t i = 0; i < n; ++i) {
        double s = b[i];
        for (std::size_t j = 0; j < n; ++j)
          if (j != i) s -= a[i * n + j] * u[j];
        v[i] = s / a[i * n + i];
      }
      u.swap(v);
    }
    std::string why;
    return compare(x, u, 1e-12, why) ? "" : why;
  }
};

/// The data of the weft-offload version, in the common address space (weft/cluster.hpp): A, b, x and the next x,
/// blocked over the ranks (dmalloc's default distribution) as mpi-omp's shares are. The first prepare makes them
/// and writes A and b with `out` tasks placed where their memory is; every prepare sets x to 0 the same way, and
/// leaves it there (taskwait_noflush). collect copies the last x into rank 0's state. Neither is timed, as
/// reset() and result() are not.
struct JacobiOffload {
  inline static double *a = nullptr, *b = nullptr, *x = nullptr, *next = nullptr;  // on rank 0 (the others serve)
  static std::size_t block_size(const Jacobi& s) { return static_cast<std::size_t>(s.sz.bs) * s.sz.n; }
  static void prepare(Jacobi& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      const int n = s.sz.n, bs = s.sz.bs, nb = s.sz.nb();
      const std::size_t rows = block_size(s);
      if (!a) {
        a = weft::dmalloc<double>(rows * nb), b = weft::dmalloc<double>(n);
        x = weft::dmalloc<double>(n), next = weft::dmalloc<double>(n);
        for (int k = 0; k < nb; ++k) {
          double *ak = a + k * rows, *bk = b + k * bs;
          cx.spawn([ak, bk, k, bs, n] {
            for (int r = 0; r < bs; ++r) {
              for (int c = 0; c < n; ++c) ak[static_cast<std::size_t>(r) * n + c] = Jacobi::value(k * bs + r, c, n);
              bk[r] = entry(k * bs + r, 0, 6);
            }
          }, weft::out(ak, rows), weft::out(bk, bs), weft::offload);
        }
      }
      for (int k = 0; k < nb; ++k) {
        double* xk = x + k * bs;
        cx.spawn([xk, bs] { std::fill(xk, xk + bs, 0.0); }, weft::out(xk, bs), weft::offload);
      }
      cx.taskwait_noflush();
    });
  }
  static void collect(Jacobi& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      const int bs = s.sz.bs;
      const double* last = s.sz.iterations % 2 == 0 ? x : next;  // the steps alternate between x and next
      for (int k = 0; k < s.sz.nb(); ++k) {
        const double* xk = last + k * bs;
        cx.spawn([&s, xk, k, bs] { std::copy(xk, xk + bs, s.x.begin() + k * bs); }, weft::in(xk, bs));
      }
    });
  }
};

void jacobi_serial(Jacobi&, const Env&);
void jacobi_mpi_omp(Jacobi&, const Env&);
void jacobi_mpi_weft(Jacobi&, const Env&);
void jacobi_weft_offload_simple(Jacobi&, const Env&);

// The versions of jacobi (one source file each, jacobi_<version>.cpp). The first is the reference.
inline const std::vector<Variant<Jacobi>> jacobi_variants = {
    {"serial", Layout::whole, jacobi_serial},
    {"mpi-omp", Layout::distributed, jacobi_mpi_omp},
    {"mpi-weft", Layout::distributed, jacobi_mpi_weft},
    {"weft-offload-simple", Layout::whole, jacobi_weft_offload_simple, JacobiOffload::prepare, JacobiOffload::collect},
};

}  // namespace dense
