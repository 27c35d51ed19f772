// What the dense applications across ranks (weft-dense-mpi: matvec, matmul, jacobi, cholesky) share: the
// problem sizes, the environment a variant runs in, the variant tables, the distribution of blocks over the
// ranks, deterministic inputs (a function of the global indices only, so that every rank builds its own share
// and the serial reference the whole, with identical values), tiles, and the comparison of a result with the
// serial reference.
//
// A variant is one source file, `<app>_<version>.cpp`, defining one function `void f(State&, const Env&)`,
// plus one line in its application's table (`<app>.hpp`) and its suffix in CMakeLists.txt's version list. Its layout says which state it receives:
//   whole        rank 0 holds the whole problem, the other ranks an empty state (the serial reference; the
//                versions where one program offloads tasks to the other ranks, weft-offload-*: they keep
//                their own data in dmalloc memory, made by the variant's untimed `prepare`, and their
//                `collect` copies the result into rank 0's state).
//   distributed  every rank holds its share (MPI + OpenMP, MPI + weft).
#pragma once

#include <mpi.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dense {

struct Sizes {
  int n = 0;           // matrix order
  int bs = 0;          // block (rows, or tile side)
  int iterations = 1;  // repetitions of the kernel inside one run (matvec, matmul, jacobi)
  int nb() const { return n / bs; }
  std::size_t tile() const { return static_cast<std::size_t>(bs) * bs; }
};

/// Which share of the problem a state holds: part `rank` of `size`, or nothing (`holds` false: the ranks other
/// than 0 in the whole layout).
struct Part {
  int rank = 0, size = 1;
  bool holds = true;
};

/// What a variant runs with: the communicator of the job, the worker count per rank (OpenMP threads, weft
/// workers), and the weft runtimes (created once per job: creating workers is not what is measured): `rt` on
/// each rank alone, `cluster` the one program of every rank (weft/cluster.hpp; only when a weft-offload
/// version runs).
struct Env {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, size = 1;
  int workers = 1;
  weft::Runtime* rt = nullptr;
  weft::Runtime* cluster = nullptr;
};

enum class Layout { whole, distributed };

template <class State>
struct Variant {
  const char* name;
  Layout layout;
  void (*run)(State&, const Env&);  // the timed call
  // The untimed steps of the versions that keep their data in the common address space (weft-offload-*), the
  // counterparts of the MPI versions' constructor, reset() and result(), which are not timed either: `prepare`
  // writes the input where it lives before every timed call, `collect` copies the result into rank 0's state
  // after a checked one. Called on every rank (each is a run of the cluster runtime).
  void (*prepare)(State&, const Env&) = nullptr;
  void (*collect)(State&, const Env&) = nullptr;
};

/// The blocks [first, first + count) of `nb` blocks that part `rank` of `size` owns: contiguous, counts
/// differing by at most one.
struct Range {
  int first = 0, count = 0;
};
inline Range blocks_of(int nb, const Part& p) {
  if (!p.holds) return {};
  const long lo = static_cast<long>(nb) * p.rank / p.size, hi = static_cast<long>(nb) * (p.rank + 1) / p.size;
  return {static_cast<int>(lo), static_cast<int>(hi - lo)};
}

/// A deterministic value in [-0.5, 0.5) for the global index pair (i, j) and a stream `s` (splitmix64: every
/// rank draws the same value for the same entry, whatever its share).
inline double entry(std::uint64_t i, std::uint64_t j, std::uint64_t s) {
  std::uint64_t z = (i * 0x9E3779B97F4A7C15ull) ^ (j + 0x632BE59BD9B4E019ull * (s + 1));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 - 0.5;
}

/// Square tiles of side bs, each column-major (leading dimension bs, as BLAS and LAPACK take them), the tiles
/// stored one after the other in `order`: tile (i, j) of a `rows` x `cols` grid of tiles starts at
/// index(i, j) * bs * bs.
struct Tiles {
  enum class Order { by_rows, by_columns };
  int rows = 0, cols = 0, bs = 0;
  Order order = Order::by_rows;
  std::vector<double> data;

  Tiles() = default;
  Tiles(int r, int c, int b, Order o)
      : rows(r), cols(c), bs(b), order(o), data(static_cast<std::size_t>(r) * c * b * b, 0.0) {}
  std::size_t index(int i, int j) const {
    return order == Order::by_rows ? static_cast<std::size_t>(i) * cols + j : static_cast<std::size_t>(j) * rows + i;
  }
  double* tile(int i, int j) { return data.data() + index(i, j) * bs * bs; }
  const double* tile(int i, int j) const { return data.data() + index(i, j) * bs * bs; }
  /// Element (r, c) of tile (i, j).
  double& at(int i, int j, int r, int c) { return tile(i, j)[static_cast<std::size_t>(c) * bs + r]; }
};

/// Gathers every rank's `mine` on rank 0, in rank order (contiguous shares then give the global order).
inline std::vector<double> gather(const std::vector<double>& mine, const Env& e) {
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(e.size)), displs(static_cast<std::size_t>(e.size));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, e.comm);
  std::vector<double> all;
  if (e.rank == 0) {
    int total = 0;
    for (int r = 0; r < e.size; ++r) {
      displs[static_cast<std::size_t>(r)] = total;
      total += counts[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, e.comm);
  return all;
}

/// Compares `got` with `ref` elementwise: |got - ref| <= tol * max(1, max |ref|). On a mismatch writes to
/// `why` what differs (the first such element, the largest difference) and returns false.
inline bool compare(const std::vector<double>& got, const std::vector<double>& ref, double tol, std::string& why) {
  if (got.size() != ref.size()) {
    why = "result has " + std::to_string(got.size()) + " values, the reference " + std::to_string(ref.size());
    return false;
  }
  double scale = 1, worst = 0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  std::size_t first = got.size();
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double d = std::fabs(got[k] - ref[k]);
    if (!(d <= tol * scale) && first == got.size()) first = k;  // !(<=) also catches NaN
    if (!(d <= worst)) worst = d;
  }
  if (first == got.size()) return true;
  char buf[200];
  std::snprintf(buf, sizeof buf, "value %zu is %.17g, the reference %.17g (largest difference %.3g, tolerance %.3g)",
                first, got[first], ref[first], worst, tol * scale);
  why = buf;
  return false;
}

}  // namespace dense
