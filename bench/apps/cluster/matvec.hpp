// matvec: y = A x, repeated `iterations` times (the iterations do not depend on each other, as in the
// OmpSs-2@Cluster benchmark: it measures how well the repeated row-block tasks are distributed and run).
// A is n x n, row-major, its rows split into blocks of bs rows; a rank holds a contiguous range of row blocks
// of A and of y, and the whole x.
#pragma once

#include <cblas.h>

#include "dense.hpp"

namespace dense {

struct Matvec {
  static constexpr const char* name = "matvec";
  static constexpr double tolerance = 1e-12;  // the same kernel on the same rows: equal up to rounding
  static Sizes defaults(bool quick) { return quick ? Sizes{192, 32, 3} : Sizes{8192, 256, 20}; }

  Sizes sz;
  Range blocks;  // this share's row blocks
  int rows = 0;  // blocks.count * bs
  std::vector<double> a, x, y;

  Matvec(const Sizes& s, const Part& p) : sz(s), blocks(blocks_of(s.nb(), p)), rows(blocks.count * s.bs) {
    const int row0 = blocks.first * s.bs;
    a.resize(static_cast<std::size_t>(rows) * s.n);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < s.n; ++c) a[static_cast<std::size_t>(r) * s.n + c] = entry(row0 + r, c, 0);
    x.resize(p.holds ? static_cast<std::size_t>(s.n) : 0);
    for (std::size_t c = 0; c < x.size(); ++c) x[c] = entry(c, 0, 1);
    reset();
  }
  void reset() { y.assign(static_cast<std::size_t>(rows), 0.0); }
  /// Rows [b * bs, (b + 1) * bs) of this share: y_b = A_b x.
  void block(int b) {
    cblas_dgemv(CblasRowMajor, CblasNoTrans, sz.bs, sz.n, 1.0, &a[static_cast<std::size_t>(b) * sz.bs * sz.n], sz.n,
                x.data(), 1, 0.0, &y[static_cast<std::size_t>(b) * sz.bs], 1);
  }
  std::vector<double> result(const Part& p, const Env& e) const { return p.size == 1 ? y : gather(y, e); }
  double flops() const { return 2.0 * sz.n * sz.n * sz.iterations; }
  /// The reference checked on its own: y against a plain dot product per row.
  std::string validate() const {
    std::vector<double> ref(y.size());
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (int c = 0; c < sz.n; ++c) s += a[static_cast<std::size_t>(r) * sz.n + c] * x[static_cast<std::size_t>(c)];
      ref[static_cast<std::size_t>(r)] = s;
    }
    std::string why;
    return compare(y, ref, 1e-12 * sz.n, why) ? "" : why;
  }
};

/// The data of the weft-offload versions, in the common address space (weft/cluster.hpp): A and y blocked
/// over the ranks (dmalloc's default distribution), as mpi-omp's shares are, and x. The first prepare makes
/// them and writes A and x with `out` tasks placed where their memory is, and leaves them there
/// (taskwait_noflush); A and x never change. collect copies y into rank 0's state (y comes to rank 0).
/// Neither is timed, as the constructor and result() are not.
struct MatvecOffload {
  inline static double *a = nullptr, *x = nullptr, *y = nullptr;  // on rank 0 (the other ranks serve)
  static std::size_t block_size(const Matvec& s) { return static_cast<std::size_t>(s.sz.bs) * s.sz.n; }
  static void prepare(Matvec& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      if (a) return;
      const int n = s.sz.n, bs = s.sz.bs;
      const std::size_t rows = block_size(s);
      a = weft::dmalloc<double>(rows * s.sz.nb()), x = weft::dmalloc<double>(n), y = weft::dmalloc<double>(n);
      cx.spawn([xx = x, n] { for (int c = 0; c < n; ++c) xx[c] = entry(c, 0, 1); }, weft::out(x, n), weft::offload);
      for (int b = 0; b < s.sz.nb(); ++b) {
        double* ab = a + b * rows;
        cx.spawn([ab, b, bs, n] {
          for (int r = 0; r < bs; ++r)
            for (int c = 0; c < n; ++c) ab[static_cast<std::size_t>(r) * n + c] = entry(b * bs + r, c, 0);
        }, weft::out(ab, rows), weft::offload);
      }
      cx.taskwait_noflush();
    });
  }
  static void collect(Matvec& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      const int bs = s.sz.bs;
      for (int b = 0; b < s.sz.nb(); ++b) {
        const double* yb = y + b * bs;
        cx.spawn([&s, yb, b, bs] { std::copy(yb, yb + bs, s.y.begin() + b * bs); }, weft::in(yb, bs));
      }
    });
  }
};

void matvec_serial(Matvec&, const Env&);
void matvec_mpi_omp(Matvec&, const Env&);
void matvec_mpi_weft(Matvec&, const Env&);
void matvec_weft_offload_simple(Matvec&, const Env&);
void matvec_weft_offload_opt(Matvec&, const Env&);

// The versions of matvec (one source file each, matvec_<version>.cpp). The first is the reference.
inline const std::vector<Variant<Matvec>> matvec_variants = {
    {"serial", Layout::whole, matvec_serial},
    {"mpi-omp", Layout::distributed, matvec_mpi_omp},
    {"mpi-weft", Layout::distributed, matvec_mpi_weft},
    {"weft-offload-simple", Layout::whole, matvec_weft_offload_simple, MatvecOffload::prepare, MatvecOffload::collect},
    {"weft-offload-opt", Layout::whole, matvec_weft_offload_opt, MatvecOffload::prepare, MatvecOffload::collect},
};

}  // namespace dense
