// matmul: C = A B, repeated `iterations` times (each overwrites C). The matrices are n x n in tiles of
// bs x bs; a rank holds a contiguous range of tile rows of A and C, and the whole B. One task or loop
// iteration computes one tile of C: C_ij = sum over k of A_ik B_kj, one cblas_dgemm per k.
#pragma once

#include <cblas.h>

#include "dense.hpp"

namespace dense {

struct Matmul {
  static constexpr const char* name = "matmul";
  static constexpr double tolerance = 1e-12;
  static Sizes defaults(bool quick) { return quick ? Sizes{192, 32, 2} : Sizes{2048, 256, 1}; }

  Sizes sz;
  Range blocks;  // this share's tile rows
  Tiles a, b, c;

  Matmul(const Sizes& s, const Part& p)
      : sz(s), blocks(blocks_of(s.nb(), p)), a(blocks.count, s.nb(), s.bs, Tiles::Order::by_rows),
        b(p.holds ? s.nb() : 0, s.nb(), s.bs, Tiles::Order::by_rows), c(blocks.count, s.nb(), s.bs, Tiles::Order::by_rows) {
    for (int i = 0; i < a.rows; ++i)
      for (int j = 0; j < a.cols; ++j)
        for (int r = 0; r < s.bs; ++r)
          for (int q = 0; q < s.bs; ++q) a.at(i, j, r, q) = entry((blocks.first + i) * s.bs + r, j * s.bs + q, 2);
    for (int i = 0; i < b.rows; ++i)
      for (int j = 0; j < b.cols; ++j)
        for (int r = 0; r < s.bs; ++r)
          for (int q = 0; q < s.bs; ++q) b.at(i, j, r, q) = entry(i * s.bs + r, j * s.bs + q, 3);
    reset();
  }
  void reset() { std::fill(c.data.begin(), c.data.end(), 0.0); }
  /// Tile (i, j) of this share's C.
  void tile(int i, int j) {
    for (int k = 0; k < sz.nb(); ++k)
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, sz.bs, sz.bs, sz.bs, 1.0, a.tile(i, k), sz.bs,
                  b.tile(k, j), sz.bs, k == 0 ? 0.0 : 1.0, c.tile(i, j), sz.bs);
  }
  // Tiles by rows, tile rows contiguous by rank: gathering in rank order gives the whole C's tiles in order.
  std::vector<double> result(const Part& p, const Env& e) const { return p.size == 1 ? c.data : gather(c.data, e); }
  double flops() const { return 2.0 * sz.n * sz.n * sz.n * sz.iterations; }
  /// The reference checked on its own (Freivalds): C v against A (B v) for a vector v, O(n^2).
  std::string validate() const {
    auto times = [&](const Tiles& m, const std::vector<double>& v) {
      std::vector<double> out(static_cast<std::size_t>(sz.n), 0.0);
      for (int i = 0; i < m.rows; ++i)
        for (int j = 0; j < m.cols; ++j)
          for (int q = 0; q < sz.bs; ++q)
            for (int r = 0; r < sz.bs; ++r)
              out[static_cast<std::size_t>(i) * sz.bs + r] +=
                  m.tile(i, j)[static_cast<std::size_t>(q) * sz.bs + r] * v[static_cast<std::size_t>(j) * sz.bs + q];
      return out;
    };
    std::vector<double> v(static_cast<std::size_t>(sz.n));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = entry(k, 7, 4);
    std::string why;
    return compare(times(c, v), times(a, times(b, v)), 1e-12 * sz.n, why) ? "" : why;
  }
};

void matmul_serial(Matmul&, const Env&);
void matmul_mpi_omp(Matmul&, const Env&);
void matmul_mpi_weft(Matmul&, const Env&);
void matmul_weft_offload_simple(Matmul&, const Env&);
void matmul_weft_offload_opt(Matmul&, const Env&);

// The versions of matmul (one source file each, matmul_<version>.cpp). The first is the reference.
inline const std::vector<Variant<Matmul>> matmul_variants = {
    {"serial", Layout::whole, matmul_serial},
    {"mpi-omp", Layout::distributed, matmul_mpi_omp},
    {"mpi-weft", Layout::distributed, matmul_mpi_weft},
    {"weft-offload-simple", Layout::whole, matmul_weft_offload_simple},
    {"weft-offload-opt", Layout::whole, matmul_weft_offload_opt},
};

}  // namespace dense
