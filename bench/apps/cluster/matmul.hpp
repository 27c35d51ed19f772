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

/// The data of the weft-offload versions, in the common address space (weft/cluster.hpp): A and C in tiles by
/// rows, blocked over the ranks (dmalloc's default distribution) as mpi-omp's shares are; B in tiles by
/// columns, so that the column of tiles a task reads is one datum, and one copy per rank, as mpi-omp has: the
/// default policy weighs the bytes a task reads, and with one B read everywhere, its column would weigh as much
/// as the row of A on every rank, and a tie keeps a task on the spawning rank. The first prepare makes them and
/// writes A and B with `out` tasks where they are used, and leaves them there (taskwait_noflush); A and B never
/// change. collect copies C into rank 0's state. Neither is timed, as the constructor and result() are not.
struct MatmulOffload {
  inline static double *a = nullptr, *b = nullptr, *c = nullptr;  // on rank 0 (the other ranks serve)
  static std::size_t line(const Matmul& s) { return s.sz.tile() * s.sz.nb(); }  // a row (or column) of tiles
  /// Column j of rank r's B.
  static double* b_column(const Matmul& s, int r, int j) {
    return b + (static_cast<std::size_t>(r) * s.sz.nb() + j) * line(s);
  }
  static double* c_tile(const Matmul& s, int i, int j) {
    return c + (static_cast<std::size_t>(i) * s.sz.nb() + j) * s.sz.tile();
  }
  static void prepare(Matmul& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      if (a) return;
      const int nb = s.sz.nb(), bs = s.sz.bs, nodes = weft::num_nodes();
      const std::size_t ln = line(s);
      a = weft::dmalloc<double>(ln * nb), c = weft::dmalloc<double>(ln * nb), b = weft::dmalloc<double>(ln * nb * nodes);
      for (int i = 0; i < nb; ++i) {
        double* ai = a + i * ln;
        cx.spawn([ai, i, nb, bs] {
          for (int k = 0; k < nb; ++k)  // tile (i, k), column-major
            for (int q = 0; q < bs; ++q)
              for (int r = 0; r < bs; ++r) ai[(static_cast<std::size_t>(k) * bs + q) * bs + r] = entry(i * bs + r, k * bs + q, 2);
        }, weft::out(ai, ln), weft::offload);
        for (int r = 0; r < nodes; ++r) {
          double* bj = b_column(s, r, i);
          cx.spawn([bj, j = i, nb, bs] {
            for (int k = 0; k < nb; ++k)  // tile (k, j), column-major
              for (int q = 0; q < bs; ++q)
                for (int r = 0; r < bs; ++r) bj[(static_cast<std::size_t>(k) * bs + q) * bs + r] = entry(k * bs + r, j * bs + q, 3);
          }, weft::out(bj, ln), weft::node(r));
        }
      }
      cx.taskwait_noflush();
    });
  }
  static void collect(Matmul& s, const Env& e) {
    e.cluster->run([&](weft::Context& cx) {
      const std::size_t tile = s.sz.tile();
      for (int i = 0; i < s.sz.nb(); ++i)
        for (int j = 0; j < s.sz.nb(); ++j) {
          const double* cij = c_tile(s, i, j);
          cx.spawn([&s, cij, i, j, tile] { std::copy(cij, cij + tile, s.c.tile(i, j)); }, weft::in(cij, tile));
        }
    });
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
    {"weft-offload-simple", Layout::whole, matmul_weft_offload_simple, MatmulOffload::prepare, MatmulOffload::collect},
    {"weft-offload-opt", Layout::whole, matmul_weft_offload_opt, MatmulOffload::prepare, MatmulOffload::collect},
};

}  // namespace dense
