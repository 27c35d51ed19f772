// weft-apps — the iterative applications: multisaxpy, Gauss-Seidel heat (fixed iterations and "while residual >
// tol"), N-body, HPCCG. One source for the kernels and the task decomposition of every variant.
//
// Each application describes one iteration twice, once per way of driving it:
//   template <class S> void iteration(S& spawn, int slot)
//       the tasks of one iteration, in program order: spawn(body, accesses...) with the access tags below. The
//       serial reference calls the bodies in that order; weft spawns them as tasks (plain, or recorded once by
//       taskiter); OpenMP spawns them with `#pragma omp task depend(...)`. `slot` = iteration mod period().
//   template <class P> void iteration_for(P& pf, int slot)
//       the same iteration as OpenMP work-sharing phases: pf.loop(n, body(i)) is a `for` with its implicit
//       barrier, pf.single(body) a `single`.
// Both orders compute bit-identical results: every datum is updated in program order, and the per-block partial
// sums of a reduction are combined in block order by one task. Only in/inout accesses are used: taskiter
// records no inoutset or commutative accesses.
//
// Compiled by the project compiler and by clang++-16 (the LLVM OpenMP build), so: standard library only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace wapps {

// --- accesses ------------------------------------------------------------------------------------------------
// A datum is named by an address (its first element), as in weft and OpenMP.
struct In {
  const void* p;
};
struct InOut {
  const void* p;
};

/// A group of tasks that each write their own part of something (a per-block partial sum, a block of a vector),
/// followed by one task that needs all the parts (Gather). The members are `in` on the group's datum, so they run
/// concurrently; the gathering task is `inout` on it, so it waits for every member, and the next members wait
/// for it. (inoutset would express the members directly, but taskiter records only in/out/inout.) OpenMP: the
/// compilers here support neither `inoutset` (GCC 12, clang 16) nor, reliably, `depend(iterator(...))` (GCC 12
/// drops those dependences), and a fixed depend list cannot name every member, so the producer waits
/// (`taskwait`) before spawning a gathering task: the barrier that OpenMP task reductions imply too.
struct Group {
  explicit Group(int n) : slots(std::size_t(n)) {}
  char token = 0;           // the datum of the whole group
  std::vector<char> slots;  // OpenMP: one datum per member
  // OpenMP producer (one thread): the epoch (taskwaits so far) in which a member was last spawned.
  long omp_written = -1;
};
struct GroupWrite {
  Group* g;
  int member;
};
struct Gather {
  Group* g;
};

/// Figure of merit: work per iteration in `unit`s (e.g. updates), printed as `unit`/s scaled by `scale`.
struct Merit {
  double per_iteration;
  const char* unit;  // e.g. "Gupdates/s"
  double scale;      // divide work/s by this
};

/// Result of comparing a run with the serial reference.
struct Verdict {
  bool ok = true;
  std::string why;
};

/// Common sizes and knobs (main.cpp fills them from the command line).
struct Params {
  long size = 0;    // app-specific: elements, grid edge, particles, grid edge
  long block = 0;   // app-specific: elements, block edge, particles, rows
  double tol = 0;   // heat-while: stop when the residual is <= tol
  int period = 1;   // heat-while: residual buffers = iterations in flight = taskiter unroll
};

namespace detail {
inline Verdict compare_exact(const char* what, const double* a, const double* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s[%zu] = %.17g, serial reference %.17g (bitwise comparison)", what, i, a[i],
                    b[i]);
      return {false, buf};
    }
  return {};
}
/// Deterministic pseudo-random numbers in [0, 1) (the same on every compiler).
inline double lcg(std::uint64_t& s) {
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  return double(s >> 11) * (1.0 / 9007199254740992.0);
}
inline long ceil_div(long a, long b) { return (a + b - 1) / b; }
/// The 27-point stencil matrix of an e^3 grid (the GenerateProblem of HPCCG and of HPCG), rows in x-fastest
/// order: 27 slots per row in cols and vals (sized by the caller), `diagonal` on the diagonal and -1 for each
/// neighbour inside the grid; nnz[row] is the row's count. Returns the nonzeros of the matrix.
inline long stencil27(long e, double diagonal, std::vector<std::int32_t>& cols, std::vector<double>& vals,
                      std::vector<std::uint8_t>& nnz) {
  long total = 0;
  for (long iz = 0; iz < e; ++iz)
    for (long iy = 0; iy < e; ++iy)
      for (long ix = 0; ix < e; ++ix) {
        const long row = (iz * e + iy) * e + ix;
        int k = 0;
        for (long sz = -1; sz <= 1; ++sz)
          for (long sy = -1; sy <= 1; ++sy)
            for (long sx = -1; sx <= 1; ++sx) {
              const long z = iz + sz, y = iy + sy, x = ix + sx;
              if (z < 0 || z >= e || y < 0 || y >= e || x < 0 || x >= e) continue;
              cols[std::size_t(row * 27 + k)] = std::int32_t((z * e + y) * e + x);
              vals[std::size_t(row * 27 + k)] = (sz == 0 && sy == 0 && sx == 0) ? diagonal : -1.0;
              ++k;
            }
        nnz[std::size_t(row)] = std::uint8_t(k);
        total += k;
      }
  return total;
}
/// A spawn that only counts the tasks of an iteration (Hpcg::tasks_per_iteration).
struct SpawnCounter {
  long n = 0;
  template <class F, class... D>
  void operator()(F&&, const D&...) {
    ++n;
  }
};
}  // namespace detail

// --- multisaxpy ----------------------------------------------------------------------------------------------
// y += a*x over the whole arrays, every iteration; a task per block. Each iteration is embarrassingly parallel
// and block b of iteration i+1 depends only on block b of iteration i: the immediate successor keeps a block in
// the cache of the core that just updated it.
class Multisaxpy {
 public:
  static constexpr const char* kName = "multisaxpy";
  static constexpr const char* kSize = "elements";
  static constexpr const char* kBlock = "elements per task";
  static constexpr long kDefaultSize = 1L << 22, kQuickSize = 1L << 12;
  static constexpr long kDefaultIters = 20, kQuickIters = 4;
  static std::vector<long> default_blocks(bool quick) {
    return quick ? std::vector<long>{256, 1024} : std::vector<long>{256, 1024, 4096, 16384, 65536};
  }

  explicit Multisaxpy(const Params& p)
      : n_(p.size), bs_(std::min(p.block, p.size)), nb_(detail::ceil_div(n_, bs_)), x_(std::size_t(n_)),
        y_(std::size_t(n_)) {
    for (long i = 0; i < n_; ++i) {
      x_[std::size_t(i)] = float(i % 97) * 0.25f;
      y_[std::size_t(i)] = float(i % 13);
    }
  }
  int period() const { return 1; }
  bool has_condition() const { return false; }
  long tasks_per_iteration() const { return nb_; }
  Merit merit() const { return {double(n_), "Gupdates/s", 1e9}; }

  void block(long b) {
    const long lo = b * bs_, hi = std::min(n_, lo + bs_);
    float* __restrict y = y_.data();
    const float* __restrict x = x_.data();
    for (long i = lo; i < hi; ++i) y[i] += kA * x[i];
  }
  template <class S>
  void iteration(S& spawn, int /*slot*/) {
    for (long b = 0; b < nb_; ++b)
      spawn([this, b] { block(b); }, In{&x_[std::size_t(b * bs_)]}, InOut{&y_[std::size_t(b * bs_)]});
  }
  template <class P>
  void iteration_for(P& pf, int /*slot*/) {
    pf.loop(nb_, [this](long b) { block(b); });
  }
  Verdict compare(const Multisaxpy& ref) const {
    for (std::size_t i = 0; i < y_.size(); ++i)
      if (std::memcmp(&y_[i], &ref.y_[i], sizeof(float)) != 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "y[%zu] = %.9g, serial reference %.9g (bitwise comparison)", i,
                      double(y_[i]), double(ref.y_[i]));
        return {false, buf};
      }
    return {};
  }

 private:
  static constexpr float kA = 0.5f;
  long n_, bs_, nb_;
  std::vector<float> x_, y_;
};

// --- Gauss-Seidel heat ---------------------------------------------------------------------------------------
// An n x n interior with a fixed boundary (top edge hot), relaxed in place block by block (bs x bs blocks) in
// row-major block order: block (R, C) reads the blocks above and to the left as updated in this iteration and
// those below and to the right from the previous one, a wave front that successive iterations can overlap.
// With `while_mode`, every block also adds up its squared changes into its partial-sum slot and one task per
// iteration sums them in block order; the loop runs while that residual is > tol. Partial sums and residuals
// have `period` buffers, so that `period` iterations can be in flight (taskiter unroll(period)).
class Heat {
 public:
  static constexpr const char* kName = "heat";
  static constexpr const char* kSize = "grid edge";
  static constexpr const char* kBlock = "block edge";
  static constexpr long kDefaultSize = 1024, kQuickSize = 64;
  static constexpr long kDefaultIters = 10, kQuickIters = 4;
  static std::vector<long> default_blocks(bool quick) {
    return quick ? std::vector<long>{16, 32} : std::vector<long>{8, 16, 32, 64, 128};
  }

  Heat(const Params& p, bool while_mode)
      : n_(p.size), bs_(std::min(p.block, p.size)), nb_(detail::ceil_div(n_, bs_)), ld_(n_ + 2),
        while_(while_mode), period_(while_mode ? p.period : 1), tol_(p.tol),
        u_(std::size_t(ld_ * ld_), 0.0), tok_(std::size_t((nb_ + 2) * (nb_ + 2))) {
    for (long j = 0; j < ld_; ++j) u_[std::size_t(j)] = 1.0;  // hot top edge
    for (long i = 1; i < ld_; ++i) u_[std::size_t(i * ld_)] = 0.5;  // warm left edge
    if (while_) {
      for (int s = 0; s < period_; ++s) res_.emplace_back(int(nb_ * nb_));
      part_.assign(std::size_t(period_ * nb_ * nb_), 0.0);
      residual_.assign(std::size_t(period_), 0.0);
    }
  }
  int period() const { return period_; }
  bool has_condition() const { return while_; }
  long tasks_per_iteration() const { return nb_ * nb_ + (while_ ? 1 : 0); }
  Merit merit() const { return {double(n_) * double(n_), "Mupdates/s", 1e6}; }
  /// while mode: the residual of the iteration that used `slot` says whether to go on.
  bool keep_going(int slot) const { return residual_[std::size_t(slot)] > tol_; }
  const void* condition_datum(int slot) const { return &residual_[std::size_t(slot)]; }
  double residual(int slot) const { return residual_[std::size_t(slot)]; }

  /// Relaxes block (R, C); returns the sum of its squared changes.
  double block(long R, long C) {
    const long i0 = 1 + R * bs_, i1 = std::min(n_ + 1, i0 + bs_);
    const long j0 = 1 + C * bs_, j1 = std::min(n_ + 1, j0 + bs_);
    double* u = u_.data();
    double sum = 0;
    for (long i = i0; i < i1; ++i)
      for (long j = j0; j < j1; ++j) {
        const long k = i * ld_ + j;
        const double v = 0.25 * (u[k - ld_] + u[k + ld_] + u[k - 1] + u[k + 1]);
        if (while_) sum += (v - u[k]) * (v - u[k]);
        u[k] = v;
      }
    return sum;
  }
  void block_task(long R, long C, int slot) {
    const double s = block(R, C);
    if (while_) part_[std::size_t((slot * nb_ + R) * nb_ + C)] = s;
  }
  void reduce(int slot) {
    const double* p = &part_[std::size_t(slot * nb_ * nb_)];
    double s = 0;
    for (long b = 0; b < nb_ * nb_; ++b) s += p[b];
    residual_[std::size_t(slot)] = s;
  }

  template <class S>
  void iteration(S& spawn, int slot) {
    for (long R = 0; R < nb_; ++R)
      for (long C = 0; C < nb_; ++C) {
        auto body = [this, R, C, slot] { block_task(R, C, slot); };
        const In up{tok(R - 1, C)}, down{tok(R + 1, C)}, left{tok(R, C - 1)}, right{tok(R, C + 1)};
        const InOut self{tok(R, C)};
        if (while_)
          spawn(body, up, down, left, right, self, GroupWrite{&res_[std::size_t(slot)], int(R * nb_ + C)});
        else
          spawn(body, up, down, left, right, self);
      }
    if (while_)
      spawn([this, slot] { reduce(slot); }, Gather{&res_[std::size_t(slot)]},
            InOut{&residual_[std::size_t(slot)]});
  }
  // Work sharing: the blocks of one anti-diagonal are independent (their upper and left neighbours are on the
  // previous diagonal), so a `for` per diagonal computes exactly what the row-major order computes.
  template <class P>
  void iteration_for(P& pf, int slot) {
    for (long d = 0; d < 2 * nb_ - 1; ++d) {
      const long r0 = std::max(0L, d - (nb_ - 1)), r1 = std::min(d, nb_ - 1);
      pf.loop(r1 - r0 + 1, [this, d, r0, slot](long k) { block_task(r0 + k, d - (r0 + k), slot); });
    }
    if (while_) pf.single([this, slot] { reduce(slot); });
  }
  Verdict compare(const Heat& ref) const { return detail::compare_exact("u", u_.data(), ref.u_.data(), u_.size()); }

 private:
  // One token per block plus a ring of never-written border tokens, so every block task has the same 5 accesses.
  const char* tok(long R, long C) const { return &tok_[std::size_t((R + 1) * (nb_ + 2) + (C + 1))]; }

  long n_, bs_, nb_, ld_;
  bool while_;
  int period_;
  double tol_;
  std::vector<double> u_;
  std::vector<char> tok_;
  std::vector<Group> res_;        // per slot: the partial sums as a group
  std::vector<double> part_;      // per slot, per block: squared changes
  std::vector<double> residual_;  // per slot
};

class HeatFixed : public Heat {
 public:
  explicit HeatFixed(const Params& p) : Heat(p, false) {}
};
class HeatWhile : public Heat {
 public:
  static constexpr const char* kName = "heat-while";
  static constexpr long kDefaultIters = 200, kQuickIters = 50;  // upper bounds; the residual ends the loop
  static constexpr double kDefaultTol = 0.5, kQuickTol = 0.05;  // about 30 and 25 iterations
  explicit HeatWhile(const Params& p) : Heat(p, true) {}
  Verdict compare(const HeatWhile& ref) const { return Heat::compare(ref); }
};

// --- N-body --------------------------------------------------------------------------------------------------
// All-pairs gravity, blocks of bs particles: per time step a task per block pair (I, J) adds the forces of J's
// particles on I's into I's force block (inout: in J order, so results are bit-identical), then a task per
// block moves its particles and clears its forces. The next step's force tasks on block I start as soon as
// blocks I and J have moved.
class Nbody {
 public:
  static constexpr const char* kName = "nbody";
  static constexpr const char* kSize = "particles";
  static constexpr const char* kBlock = "particles per block";
  static constexpr long kDefaultSize = 2048, kQuickSize = 128;
  static constexpr long kDefaultIters = 4, kQuickIters = 2;
  static std::vector<long> default_blocks(bool quick) {
    return quick ? std::vector<long>{16, 32} : std::vector<long>{8, 16, 32, 64, 128};
  }

  explicit Nbody(const Params& p)
      : n_(p.size), bs_(std::min(p.block, p.size)), nb_(detail::ceil_div(n_, bs_)), pos_(std::size_t(n_)),
        vel_(std::size_t(n_)), frc_(std::size_t(n_)) {
    std::uint64_t s = 42;
    for (auto& q : pos_) q = {detail::lcg(s), detail::lcg(s), detail::lcg(s), (0.5 + detail::lcg(s)) / double(n_)};
    for (auto& v : vel_) v = {0, 0, 0, 0};
    for (auto& f : frc_) f = {0, 0, 0, 0};
  }
  int period() const { return 1; }
  bool has_condition() const { return false; }
  long tasks_per_iteration() const { return nb_ * nb_ + nb_; }
  Merit merit() const { return {double(n_) * double(n_), "Minteractions/s", 1e6}; }

  void forces(long I, long J) {
    const long i0 = I * bs_, i1 = std::min(n_, i0 + bs_), j0 = J * bs_, j1 = std::min(n_, j0 + bs_);
    for (long i = i0; i < i1; ++i) {
      const V4 pi = pos_[std::size_t(i)];
      double fx = 0, fy = 0, fz = 0;
      for (long j = j0; j < j1; ++j) {
        const V4 pj = pos_[std::size_t(j)];
        const double dx = pj.x - pi.x, dy = pj.y - pi.y, dz = pj.z - pi.z;
        const double r2 = dx * dx + dy * dy + dz * dz + kSoftening;
        const double w = pj.w / (r2 * std::sqrt(r2));
        fx += dx * w;
        fy += dy * w;
        fz += dz * w;
      }
      V4& f = frc_[std::size_t(i)];
      f.x += fx * pi.w;
      f.y += fy * pi.w;
      f.z += fz * pi.w;
    }
  }
  void move(long I) {
    const long i0 = I * bs_, i1 = std::min(n_, i0 + bs_);
    for (long i = i0; i < i1; ++i) {
      V4 &p = pos_[std::size_t(i)], &v = vel_[std::size_t(i)], &f = frc_[std::size_t(i)];
      v.x += f.x / p.w * kDt;
      v.y += f.y / p.w * kDt;
      v.z += f.z / p.w * kDt;
      p.x += v.x * kDt;
      p.y += v.y * kDt;
      p.z += v.z * kDt;
      f = {0, 0, 0, 0};
    }
  }
  template <class S>
  void iteration(S& spawn, int /*slot*/) {
    for (long I = 0; I < nb_; ++I)
      for (long J = 0; J < nb_; ++J)
        spawn([this, I, J] { forces(I, J); }, In{&pos_[std::size_t(I * bs_)]}, In{&pos_[std::size_t(J * bs_)]},
              InOut{&frc_[std::size_t(I * bs_)]});
    for (long I = 0; I < nb_; ++I)
      spawn([this, I] { move(I); }, InOut{&pos_[std::size_t(I * bs_)]}, InOut{&vel_[std::size_t(I * bs_)]},
            InOut{&frc_[std::size_t(I * bs_)]});
  }
  template <class P>
  void iteration_for(P& pf, int /*slot*/) {
    pf.loop(nb_, [this](long I) {
      for (long J = 0; J < nb_; ++J) forces(I, J);
    });
    pf.loop(nb_, [this](long I) { move(I); });
  }
  Verdict compare(const Nbody& ref) const {
    static_assert(sizeof(V4) == 4 * sizeof(double));
    return detail::compare_exact("particle coordinate", &pos_[0].x, &ref.pos_[0].x, 4 * pos_.size());
  }

 private:
  struct V4 {
    double x, y, z, w;  // position + mass, velocity, force
  };
  static constexpr double kSoftening = 1e-2, kDt = 1e-3;
  long n_, bs_, nb_;
  std::vector<V4> pos_, vel_, frc_;
};

// --- HPCCG ---------------------------------------------------------------------------------------------------
// Conjugate gradient on the 27-point stencil matrix of HPCCG (an n^3 grid; 27 on the diagonal, -1 for each
// neighbour; right-hand side = A * ones), stored as 27 (column, value) pairs per row. Blocks of `bs` rows;
// per iteration (5 tasks per block + 3):
//   rr[b]  = r_b . r_b                       in r_b,              member of group RR
//   beta   = sum rr / rtrans_old             gathers RR,          inout scalars
//   p_b    = r_b + beta p_b                  in r_b, in scalars,  inout p_b, member of group P
//   (empty)                                  gathers P,           inout p_ready
//   Ap_b   = A_b p                           in p_ready (the stencil reaches other blocks' p), inout Ap_b
//   pAp[b] = p_b . Ap_b                      in p_b, Ap_b,        member of group PAP
//   alpha  = rtrans / sum pAp                gathers PAP,         inout scalars
//   x_b += alpha p_b;  r_b -= alpha Ap_b     in scalars, p_b, Ap_b, inout x_b, r_b
// The next iteration's p_b update (a member of P, so it waits only for the empty task) also comes after every
// Ap_b' = A_b' p that reads it: it reads the scalars written by beta, which gathers the rr[b'] tasks, which read
// r_b' after the update of r_b', which reads Ap_b'.
// p starts at 0 and rtrans_old at 1, so the first iteration sets p = r like HPCCG's without a special case.
class Hpccg {
 public:
  static constexpr const char* kName = "hpccg";
  static constexpr const char* kSize = "grid edge (rows = edge^3)";
  static constexpr const char* kBlock = "rows per block";
  static constexpr long kDefaultSize = 48, kQuickSize = 10;
  static constexpr long kDefaultIters = 20, kQuickIters = 5;
  static std::vector<long> default_blocks(bool quick) {
    return quick ? std::vector<long>{64, 256} : std::vector<long>{64, 256, 1024, 4096};
  }

  explicit Hpccg(const Params& p)
      : e_(p.size), n_(e_ * e_ * e_), bs_(std::min(p.block, n_)), nb_(detail::ceil_div(n_, bs_)),
        cols_(std::size_t(n_ * 27)), vals_(std::size_t(n_ * 27)), nnz_(std::size_t(n_)), x_(std::size_t(n_), 0.0),
        r_(std::size_t(n_)), p_(std::size_t(n_), 0.0), ap_(std::size_t(n_), 0.0), rr_(std::size_t(nb_)),
        pap_(std::size_t(nb_)), g_rr_(int(nb_)), g_p_(int(nb_)), g_pap_(int(nb_)) {
    nnz_total_ = detail::stencil27(e_, 27.0, cols_, vals_, nnz_);
    for (long row = 0; row < n_; ++row)  // b = A * ones; x = 0, so r = b
      r_[std::size_t(row)] = 27.0 - double(nnz_[std::size_t(row)] - 1);
  }
  int period() const { return 1; }
  bool has_condition() const { return false; }
  long tasks_per_iteration() const { return 5 * nb_ + 3; }
  Merit merit() const { return {10.0 * double(n_) + 2.0 * double(nnz_total_), "MFLOP/s", 1e6}; }

  double dot(const std::vector<double>& a, const std::vector<double>& b, long blk) const {
    const long lo = blk * bs_, hi = std::min(n_, lo + bs_);
    double s = 0;
    for (long i = lo; i < hi; ++i) s += a[std::size_t(i)] * b[std::size_t(i)];
    return s;
  }
  void update_beta() {
    double s = 0;
    for (long b = 0; b < nb_; ++b) s += rr_[std::size_t(b)];
    sc_.beta = sc_.rtrans_old == 0 ? 0 : s / sc_.rtrans_old;
    sc_.rtrans = s;
    sc_.rtrans_old = s;
  }
  void update_p(long blk) {
    const long lo = blk * bs_, hi = std::min(n_, lo + bs_);
    const double beta = sc_.beta;
    for (long i = lo; i < hi; ++i) p_[std::size_t(i)] = r_[std::size_t(i)] + beta * p_[std::size_t(i)];
  }
  void spmv(long blk) {
    const long lo = blk * bs_, hi = std::min(n_, lo + bs_);
    const std::int32_t* __restrict c = cols_.data();
    const double* __restrict v = vals_.data();
    const double* __restrict p = p_.data();
    for (long i = lo; i < hi; ++i) {
      double s = 0;
      for (int k = 0; k < nnz_[std::size_t(i)]; ++k) s += v[i * 27 + k] * p[c[i * 27 + k]];
      ap_[std::size_t(i)] = s;
    }
  }
  void update_alpha() {
    double s = 0;
    for (long b = 0; b < nb_; ++b) s += pap_[std::size_t(b)];
    sc_.alpha = s == 0 ? 0 : sc_.rtrans / s;
  }
  void update_xr(long blk) {
    const long lo = blk * bs_, hi = std::min(n_, lo + bs_);
    const double a = sc_.alpha;
    for (long i = lo; i < hi; ++i) {
      x_[std::size_t(i)] += a * p_[std::size_t(i)];
      r_[std::size_t(i)] -= a * ap_[std::size_t(i)];
    }
  }

  template <class S>
  void iteration(S& spawn, int /*slot*/) {
    for (long b = 0; b < nb_; ++b)
      spawn([this, b] { rr_[std::size_t(b)] = dot(r_, r_, b); }, In{blk(r_, b)}, GroupWrite{&g_rr_, int(b)});
    spawn([this] { update_beta(); }, Gather{&g_rr_}, InOut{&sc_});
    for (long b = 0; b < nb_; ++b)
      spawn([this, b] { update_p(b); }, In{blk(r_, b)}, In{&sc_}, InOut{blk(p_, b)}, GroupWrite{&g_p_, int(b)});
    spawn([] {}, Gather{&g_p_}, InOut{&p_ready_});
    for (long b = 0; b < nb_; ++b) spawn([this, b] { spmv(b); }, In{&p_ready_}, InOut{blk(ap_, b)});
    for (long b = 0; b < nb_; ++b)
      spawn([this, b] { pap_[std::size_t(b)] = dot(p_, ap_, b); }, In{blk(p_, b)}, In{blk(ap_, b)},
            GroupWrite{&g_pap_, int(b)});
    spawn([this] { update_alpha(); }, Gather{&g_pap_}, InOut{&sc_});
    for (long b = 0; b < nb_; ++b)
      spawn([this, b] { update_xr(b); }, In{&sc_}, In{blk(p_, b)}, In{blk(ap_, b)}, InOut{blk(x_, b)},
            InOut{blk(r_, b)});
  }
  template <class P>
  void iteration_for(P& pf, int /*slot*/) {
    pf.loop(nb_, [this](long b) { rr_[std::size_t(b)] = dot(r_, r_, b); });
    pf.single([this] { update_beta(); });
    pf.loop(nb_, [this](long b) { update_p(b); });
    pf.loop(nb_, [this](long b) { spmv(b); });
    pf.loop(nb_, [this](long b) { pap_[std::size_t(b)] = dot(p_, ap_, b); });
    pf.single([this] { update_alpha(); });
    pf.loop(nb_, [this](long b) { update_xr(b); });
  }
  Verdict compare(const Hpccg& ref) const {
    Verdict v = detail::compare_exact("x", x_.data(), ref.x_.data(), x_.size());
    if (v.ok) v = detail::compare_exact("r", r_.data(), ref.r_.data(), r_.size());
    return v;
  }

 private:
  struct Scalars {
    double rtrans = 0, rtrans_old = 1, beta = 0, alpha = 0;
  };
  const double* blk(const std::vector<double>& v, long b) const { return &v[std::size_t(b * bs_)]; }

  long e_, n_, bs_, nb_;
  long nnz_total_ = 0;
  std::vector<std::int32_t> cols_;
  std::vector<double> vals_;
  std::vector<std::uint8_t> nnz_;
  std::vector<double> x_, r_, p_, ap_, rr_, pap_;
  Scalars sc_;
  char p_ready_ = 0;
  Group g_rr_, g_p_, g_pap_;
};

// --- HPCG ----------------------------------------------------------------------------------------------------
// The algorithm of the HPCG benchmark (reference implementation, one process): conjugate gradient with a fixed
// iteration count, preconditioned by a multigrid V-cycle, on HPCG's 27-point stencil matrix of an e^3 grid (26
// on the diagonal, -1 for each neighbour: HPCG's values, where HPCCG has 27; right-hand side A * ones, x = 0 at
// the start, so r = b). Four levels, each coarsening the previous by 2 in every dimension (e a multiple of 8).
// V-cycle on levels 0-2, as HPCG's ComputeMG_ref: x = 0; SYMGS; Axf = A x; restriction r_c = r - Axf at the
// even points (injection); V-cycle on the next level; prolongation x += x_c at the even points; SYMGS. On level
// 3: x = 0; SYMGS. SYMGS (ComputeSYMGS_ref): in place, a forward sweep over the rows in order, then a backward
// sweep in reverse order.
//
// Blocks: a block is a run of whole x-lines within one xy-plane, so its rows are consecutive and the stencil
// of block (z, Y) reaches only the 3 x 3 blocks (z-1..z+1, Y-1..Y+1). Each task names every block it reads
// (in) and writes (inout), so the task graph is the program order. A sweep is then a wave front: forward block
// (z, Y) follows (z, Y-1) and (z-1, Y+1), so blocks with equal Y + 2z run concurrently (about half the blocks
// of a plane); backward is its mirror image.
// Granularity: --block is rows per block on level 0, rounded down to whole x-lines (at least one line, at most
// a plane). Each coarser level takes twice the lines of the finer one (its lines are half as long), at most a
// plane: about the same rows per task on every level, so task overheads weigh the same everywhere, and a coarse
// level has 8x fewer tasks as it has 8x less work. Then a coarse block's restriction reads at most 4 fine
// blocks of one plane (4Yc..4Yc+3 of plane 2zc) and a fine block's prolongation one coarse block.
// Per iteration, on level 0's blocks b (level 0's x is z, its r is the CG residual):
//   z = M^-1 r                              the V-cycle above
//   rz[b] = r_b . z_b                       member of group RZ
//   rtz = sum rz; beta = rtz / rtz_old      gathers RZ, inout scalars
//   p_b = z_b + beta p_b (first: p_b = z_b) in z_b, scalars, inout p_b
//   Ap_b = A_b p                            in the 3 x 3 blocks of p around b, inout Ap_b
//   pAp[b] = p_b . Ap_b                     member of group PAP
//   alpha = rtz / sum pAp                   gathers PAP, inout scalars
//   x_b += alpha p_b; r_b -= alpha Ap_b     in scalars, p_b, Ap_b, inout x_b, r_b
//   rr[b] = r_b . r_b                       member of group RR
//   normr = sqrt(sum rr)                    gathers RR, inout normr
// Figure of merit: HPCG's flop count of an iteration (ReportResults: 3 dot products and 3 vector updates of
// 2 flops per row, 2 per nonzero for the SpMV, per level 0-2 4 per nonzero for each SYMGS and 2 for the
// residual, 4 per nonzero on level 3), without the set-up (r = b - A x, untimed here).
class Hpcg {
 public:
  static constexpr const char* kName = "hpcg";
  static constexpr const char* kSize = "grid edge (rows = edge^3, a multiple of 8)";
  static constexpr const char* kBlock = "rows per block on level 0 (whole x-lines of a plane)";
  static constexpr long kDefaultSize = 48, kQuickSize = 16;
  static constexpr long kDefaultIters = 20, kQuickIters = 3;
  static constexpr int kLevels = 4;  // HPCG's: the fine grid and 3 coarse ones
  static std::vector<long> default_blocks(bool quick) {
    // Default (edge 48): 1, 2, 4, 8, 16 x-lines per block; quick (edge 16): 1 line, 3 lines (uneven blocks),
    // a whole plane (a sequential sweep).
    return quick ? std::vector<long>{16, 48, 256} : std::vector<long>{48, 96, 192, 384, 768};
  }
  /// Why `size` cannot be used, or nullptr.
  static const char* size_problem(long size) {
    if (size % 8 != 0) return "hpcg: --size (the grid edge) must be a multiple of 8 (3 coarse levels, each halving it)";
    if (size > 1288) return "hpcg: --size (the grid edge) is at most 1288 (rows = edge^3 in 32-bit column indices)";
    return nullptr;
  }

  explicit Hpcg(const Params& p) {
    long e = p.size, lines = std::clamp(p.block / p.size, 1L, p.size);
    for (int l = 0; l < kLevels; ++l, e /= 2, lines = std::min(2 * lines, e)) lv_.emplace_back(e, lines);
    const Level& f = lv_[0];
    for (long i = 0; i < f.n; ++i) f_r()[i] = 26.0 - double(f.nnz[std::size_t(i)] - 1);  // b = A * ones
    x_ = f.field();
    p_ = f.field();
    ap_ = f.field();
    rz_.assign(std::size_t(f.nb), 0.0);
    pap_.assign(std::size_t(f.nb), 0.0);
    rr_.assign(std::size_t(f.nb), 0.0);
    g_rz_ = Group(int(f.nb));
    g_pap_ = Group(int(f.nb));
    g_rr_ = Group(int(f.nb));
    check_transfer_blocks();
    detail::SpawnCounter count;
    iteration(count, 0);
    tasks_ = count.n;
  }
  int period() const { return 1; }
  bool has_condition() const { return false; }
  long tasks_per_iteration() const { return tasks_; }
  Merit merit() const {
    const Level& f = lv_[0];
    double flops = 12.0 * double(f.n) + 2.0 * double(f.nnz_total);
    for (int l = 0; l + 1 < kLevels; ++l) flops += 10.0 * double(lv_[std::size_t(l)].nnz_total);
    flops += 4.0 * double(lv_.back().nnz_total);
    return {flops, "MFLOP/s", 1e6};
  }

  template <class S>
  void iteration(S& spawn, int /*slot*/) {
    const Level& f = lv_[0];
    mg(spawn, 0);
    for (long b = 0; b < f.nb; ++b)
      spawn([this, b] { rz_[std::size_t(b)] = dot(f_r(), lv_[0].x.v.data(), b); }, In{f.tok(f.r, b)},
            In{f.tok(f.x, b)}, GroupWrite{&g_rz_, int(b)});
    spawn([this] { update_beta(); }, Gather{&g_rz_}, InOut{&sc_});
    for (long b = 0; b < f.nb; ++b)
      spawn([this, b] { update_p(b); }, In{f.tok(f.x, b)}, In{&sc_}, InOut{f.tok(p_, b)});
    for (long b = 0; b < f.nb; ++b)
      spawn_around(spawn, f, p_, b, [this, b] { spmv(lv_[0], p_.v.data(), ap_.v.data(), b); }, In{f.tok(p_, b)},
                   InOut{f.tok(ap_, b)});
    for (long b = 0; b < f.nb; ++b)
      spawn([this, b] { pap_[std::size_t(b)] = dot(p_.v.data(), ap_.v.data(), b); }, In{f.tok(p_, b)},
            In{f.tok(ap_, b)}, GroupWrite{&g_pap_, int(b)});
    spawn([this] { update_alpha(); }, Gather{&g_pap_}, InOut{&sc_});
    for (long b = 0; b < f.nb; ++b)
      spawn([this, b] { update_xr(b); }, In{&sc_}, In{f.tok(p_, b)}, In{f.tok(ap_, b)}, InOut{f.tok(x_, b)},
            InOut{f.tok(f.r, b)});
    for (long b = 0; b < f.nb; ++b)
      spawn([this, b] { rr_[std::size_t(b)] = dot(f_r(), f_r(), b); }, In{f.tok(f.r, b)},
            GroupWrite{&g_rr_, int(b)});
    spawn([this] { update_normr(); }, Gather{&g_rr_}, InOut{&normr_});
  }
  // Work sharing: one `for` per phase; a sweep is one `for` per wave of its wave front (the blocks with equal
  // Y + 2z read no block of their own wave), in increasing order forward and decreasing backward, which computes
  // exactly what the row order computes.
  template <class P>
  void iteration_for(P& pf, int /*slot*/) {
    const long nb = lv_[0].nb;
    mg_for(pf, 0);
    pf.loop(nb, [this](long b) { rz_[std::size_t(b)] = dot(f_r(), lv_[0].x.v.data(), b); });
    pf.single([this] { update_beta(); });
    pf.loop(nb, [this](long b) { update_p(b); });
    pf.loop(nb, [this](long b) { spmv(lv_[0], p_.v.data(), ap_.v.data(), b); });
    pf.loop(nb, [this](long b) { pap_[std::size_t(b)] = dot(p_.v.data(), ap_.v.data(), b); });
    pf.single([this] { update_alpha(); });
    pf.loop(nb, [this](long b) { update_xr(b); });
    pf.loop(nb, [this](long b) { rr_[std::size_t(b)] = dot(f_r(), f_r(), b); });
    pf.single([this] { update_normr(); });
  }
  Verdict compare(const Hpcg& ref) const {
    Verdict v = detail::compare_exact("x", x_.v.data(), ref.x_.v.data(), x_.v.size());
    if (v.ok) v = detail::compare_exact("r", lv_[0].r.v.data(), ref.lv_[0].r.v.data(), lv_[0].r.v.size());
    if (v.ok) v = detail::compare_exact("normr", &normr_, &ref.normr_, 1);
    return v;
  }

 private:
  /// A vector of one level, with one datum per block (the tokens) and a ring of never-written ones around
  /// them, so that a block at the edge of the grid has the same accesses as any other.
  struct Field {
    std::vector<double> v;
    std::vector<char> tok;
  };
  struct Level {
    long e, n, lines, nyb, nb;  // edge, rows, x-lines per block, blocks per plane, blocks
    long nnz_total = 0;
    std::vector<std::int32_t> cols;  // 27 per row, as HPCCG's
    std::vector<double> vals;
    std::vector<std::uint8_t> nnz;
    std::vector<double> diag;
    Field x, r, axf;  // the V-cycle's solution, right-hand side and A x

    Level(long edge, long lines_per_block)
        : e(edge), n(edge * edge * edge), lines(lines_per_block), nyb(detail::ceil_div(edge, lines_per_block)),
          nb(edge * nyb), cols(std::size_t(n * 27)), vals(std::size_t(n * 27)), nnz(std::size_t(n)),
          diag(std::size_t(n)), x(field()), r(field()), axf(field()) {
      nnz_total = detail::stencil27(e, 26.0, cols, vals, nnz);  // HPCG's GenerateProblem_ref
      std::fill(diag.begin(), diag.end(), 26.0);
    }
    Field field() const {
      return {std::vector<double>(std::size_t(n), 0.0), std::vector<char>(std::size_t((e + 2) * (nyb + 2)))};
    }
    /// Block (z, Y)'s datum of f; z in -1..e, Y in -1..nyb (the ring beyond the grid).
    const char* tok(const Field& f, long z, long Y) const { return &f.tok[std::size_t((z + 1) * (nyb + 2) + Y + 1)]; }
    const char* tok(const Field& f, long b) const { return tok(f, b / nyb, b % nyb); }
    long first_line(long b) const { return (b % nyb) * lines; }
    long end_line(long b) const { return std::min(e, (b % nyb + 1) * lines); }
    long row0(long b) const { return ((b / nyb) * e + first_line(b)) * e; }
    long row1(long b) const { return ((b / nyb) * e + end_line(b)) * e; }
  };

  struct Scalars {
    double rtz = 0, beta = 0, alpha = 0;
    long k = 0;  // CG iterations begun
  };

  double* f_r() { return lv_[0].r.v.data(); }
  const double* f_r() const { return lv_[0].r.v.data(); }

  /// Spawns `body` with in accesses on the 8 blocks of f around block b of L, then `own`.
  template <class S, class F, class... D>
  static void spawn_around(S& spawn, const Level& L, const Field& f, long b, F&& body, const D&... own) {
    const long z = b / L.nyb, Y = b % L.nyb;
    spawn(std::forward<F>(body), In{L.tok(f, z - 1, Y - 1)}, In{L.tok(f, z - 1, Y)}, In{L.tok(f, z - 1, Y + 1)},
          In{L.tok(f, z, Y - 1)}, In{L.tok(f, z, Y + 1)}, In{L.tok(f, z + 1, Y - 1)}, In{L.tok(f, z + 1, Y)},
          In{L.tok(f, z + 1, Y + 1)}, own...);
  }

  // --- the V-cycle as tasks ---
  template <class S>
  void mg(S& spawn, std::size_t l) {
    const Level& L = lv_[l];
    for (long b = 0; b < L.nb; ++b) spawn([this, l, b] { zero(l, b); }, InOut{L.tok(L.x, b)});
    symgs(spawn, l);
    if (l + 1 == lv_.size()) return;
    const Level& C = lv_[l + 1];
    for (long b = 0; b < L.nb; ++b)
      spawn_around(spawn, L, L.x, b, [this, l, b] { spmv(lv_[l], lv_[l].x.v.data(), lv_[l].axf.v.data(), b); },
                   In{L.tok(L.x, b)}, InOut{L.tok(L.axf, b)});
    for (long bc = 0; bc < C.nb; ++bc) {
      const long z = 2 * (bc / C.nyb), Y = 4 * (bc % C.nyb);
      auto fine = [&](const Field& f, long k) { return In{L.tok(f, z, std::min(Y + k, L.nyb))}; };
      spawn([this, l, bc] { restrict_to(l, bc); }, fine(L.r, 0), fine(L.r, 1), fine(L.r, 2), fine(L.r, 3),
            fine(L.axf, 0), fine(L.axf, 1), fine(L.axf, 2), fine(L.axf, 3), InOut{C.tok(C.r, bc)});
    }
    mg(spawn, l + 1);
    for (long b = 0; b < L.nb; ++b)
      if (const long bc = coarse_block(l, b); bc >= 0)
        spawn([this, l, b] { prolong(l, b); }, In{C.tok(C.x, bc)}, InOut{L.tok(L.x, b)});
    symgs(spawn, l);
  }
  template <class S>
  void symgs(S& spawn, std::size_t l) {
    const Level& L = lv_[l];
    for (long b = 0; b < L.nb; ++b)
      spawn_around(spawn, L, L.x, b, [this, l, b] { sweep(l, b, true); }, In{L.tok(L.r, b)}, InOut{L.tok(L.x, b)});
    for (long b = L.nb - 1; b >= 0; --b)
      spawn_around(spawn, L, L.x, b, [this, l, b] { sweep(l, b, false); }, In{L.tok(L.r, b)},
                   InOut{L.tok(L.x, b)});
  }

  // --- the V-cycle as work-sharing phases ---
  template <class P>
  void mg_for(P& pf, std::size_t l) {
    pf.loop(lv_[l].nb, [this, l](long b) { zero(l, b); });
    symgs_for(pf, l);
    if (l + 1 == lv_.size()) return;
    pf.loop(lv_[l].nb, [this, l](long b) { spmv(lv_[l], lv_[l].x.v.data(), lv_[l].axf.v.data(), b); });
    pf.loop(lv_[l + 1].nb, [this, l](long bc) { restrict_to(l, bc); });
    mg_for(pf, l + 1);
    pf.loop(lv_[l].nb, [this, l](long b) { prolong(l, b); });
    symgs_for(pf, l);
  }
  template <class P>
  void symgs_for(P& pf, std::size_t l) {
    const long nyb = lv_[l].nyb, waves = (nyb - 1) + 2 * (lv_[l].e - 1) + 1;
    for (int forward = 1; forward >= 0; --forward)
      for (long k = 0; k < waves; ++k) {
        const long w = forward ? k : waves - 1 - k;  // blocks (z, w - 2z)
        const long z0 = std::max(0L, detail::ceil_div(w - (nyb - 1), 2)), z1 = std::min(lv_[l].e - 1, w / 2);
        pf.loop(z1 - z0 + 1, [this, l, w, z0, nyb, forward](long i) {
          const long z = z0 + i;
          sweep(l, z * nyb + (w - 2 * z), forward != 0);
        });
      }
  }

  // --- kernels ---
  void zero(std::size_t l, long b) {
    Level& L = lv_[l];
    std::fill(L.x.v.begin() + L.row0(b), L.x.v.begin() + L.row1(b), 0.0);
  }
  /// One half of ComputeSYMGS_ref on block b of level l: its rows in order (forward) or in reverse order.
  void sweep(std::size_t l, long b, bool forward) {
    Level& L = lv_[l];
    const long lo = L.row0(b), hi = L.row1(b);
    double* x = L.x.v.data();
    const double* r = L.r.v.data();
    auto relax = [&](long i) {
      const std::int32_t* c = &L.cols[std::size_t(i * 27)];
      const double* v = &L.vals[std::size_t(i * 27)];
      const double d = L.diag[std::size_t(i)];
      double sum = r[i];
      for (int k = 0; k < L.nnz[std::size_t(i)]; ++k) sum -= v[k] * x[c[k]];
      sum += x[i] * d;  // the loop took the diagonal's term out too
      x[i] = sum / d;
    };
    if (forward)
      for (long i = lo; i < hi; ++i) relax(i);
    else
      for (long i = hi - 1; i >= lo; --i) relax(i);
  }
  static void spmv(const Level& L, const double* __restrict x, double* __restrict y, long b) {
    const std::int32_t* __restrict c = L.cols.data();
    const double* __restrict v = L.vals.data();
    for (long i = L.row0(b), hi = L.row1(b); i < hi; ++i) {
      double s = 0;
      for (int k = 0; k < L.nnz[std::size_t(i)]; ++k) s += v[i * 27 + k] * x[c[i * 27 + k]];
      y[i] = s;
    }
  }
  /// Block bc of level l+1: r_c = r - Axf at the even points of level l (ComputeRestriction_ref).
  void restrict_to(std::size_t l, long bc) {
    const Level& F = lv_[l];
    Level& C = lv_[l + 1];
    const long zc = bc / C.nyb;
    for (long yc = C.first_line(bc); yc < C.end_line(bc); ++yc)
      for (long xc = 0; xc < C.e; ++xc) {
        const long f = ((2 * zc) * F.e + 2 * yc) * F.e + 2 * xc;
        C.r.v[std::size_t((zc * C.e + yc) * C.e + xc)] = F.r.v[std::size_t(f)] - F.axf.v[std::size_t(f)];
      }
  }
  /// Block b of level l: x += x_c at its even points (ComputeProlongation_ref); nothing if it has none.
  void prolong(std::size_t l, long b) {
    Level& F = lv_[l];
    const Level& C = lv_[l + 1];
    const long zf = b / F.nyb;
    if (zf % 2 != 0) return;
    for (long yf = F.first_line(b) + F.first_line(b) % 2; yf < F.end_line(b); yf += 2)
      for (long xc = 0; xc < C.e; ++xc)
        F.x.v[std::size_t((zf * F.e + yf) * F.e + 2 * xc)] += C.x.v[std::size_t(((zf / 2) * C.e + yf / 2) * C.e + xc)];
  }
  /// The block of level l+1 that block b of level l prolongs from, or -1 if b has no even point.
  long coarse_block(std::size_t l, long b) const {
    const Level &F = lv_[l], &C = lv_[l + 1];
    const long yf = F.first_line(b) + F.first_line(b) % 2;
    if ((b / F.nyb) % 2 != 0 || yf >= F.end_line(b)) return -1;
    return (b / F.nyb / 2) * C.nyb + (yf / 2) / C.lines;
  }
  /// The block choice above guarantees what mg() declares; checked once per construction.
  void check_transfer_blocks() const {
    for (std::size_t l = 0; l + 1 < lv_.size(); ++l) {
      const Level &F = lv_[l], &C = lv_[l + 1];
      for (long bc = 0; bc < C.nb; ++bc) {  // restriction: fine lines 2*yc in fine blocks 4Yc..4Yc+3
        const long lo = 2 * C.first_line(bc) / F.lines, hi = 2 * (C.end_line(bc) - 1) / F.lines;
        if (lo < 4 * (bc % C.nyb) || hi > 4 * (bc % C.nyb) + 3) throw std::logic_error("hpcg: restriction blocks");
      }
      for (long b = 0; b < F.nb; ++b)  // prolongation: all even lines of a fine block in one coarse block
        if (const long bc = coarse_block(l, b); bc >= 0 && ((F.end_line(b) - 1) / 2) / C.lines != bc % C.nyb)
          throw std::logic_error("hpcg: prolongation blocks");
    }
  }

  // --- conjugate gradient (CG_ref) ---
  double dot(const double* a, const double* b, long blk) const {
    double s = 0;
    for (long i = lv_[0].row0(blk), hi = lv_[0].row1(blk); i < hi; ++i) s += a[i] * b[i];
    return s;
  }
  void update_beta() {
    double s = 0;
    for (double v : rz_) s += v;
    if (sc_.k > 0) sc_.beta = s / sc_.rtz;
    sc_.rtz = s;
    ++sc_.k;
  }
  void update_p(long b) {
    const double* z = lv_[0].x.v.data();
    double* p = p_.v.data();
    const long lo = lv_[0].row0(b), hi = lv_[0].row1(b);
    if (sc_.k == 1) {
      std::copy(z + lo, z + hi, p + lo);
    } else {
      const double beta = sc_.beta;
      for (long i = lo; i < hi; ++i) p[i] = z[i] + beta * p[i];
    }
  }
  void update_alpha() {
    double s = 0;
    for (double v : pap_) s += v;
    sc_.alpha = sc_.rtz / s;
  }
  void update_xr(long b) {
    const double a = sc_.alpha;
    double *x = x_.v.data(), *r = f_r();
    const double *p = p_.v.data(), *ap = ap_.v.data();
    for (long i = lv_[0].row0(b), hi = lv_[0].row1(b); i < hi; ++i) {
      x[i] = x[i] + a * p[i];
      r[i] = r[i] + (-a) * ap[i];  // HPCG: ComputeWAXPBY(1, r, -alpha, Ap, r)
    }
  }
  void update_normr() {
    double s = 0;
    for (double v : rr_) s += v;
    normr_ = std::sqrt(s);
  }

  std::vector<Level> lv_;
  Field x_, p_, ap_;  // on level 0's blocks
  std::vector<double> rz_, pap_, rr_;
  Scalars sc_;
  double normr_ = 0;
  Group g_rz_{0}, g_pap_{0}, g_rr_{0};
  long tasks_ = 0;
};

// --- the loop every variant runs -----------------------------------------------------------------------------
/// Runs up to `iters` iterations: emit(slot) issues iteration `it` (slot = it mod period). With a condition, after
/// issuing iteration `it` the loop waits (wait(slot)) for the residual of iteration it-period+1 and stops if it
/// says so: `period` iterations are in flight, as with taskiter_while + unroll(period), and every variant runs
/// the same number of iterations. Returns the number of iterations issued.
/// With use_condition = false, exactly `iters` iterations run (a reference for a variant whose check is coarser).
template <class App, class Emit, class Wait>
long run_loop(const App& app, long iters, Emit&& emit, Wait&& wait, bool use_condition = true) {
  const int k = app.period();
  for (long it = 0; it < iters; ++it) {
    emit(int(it % k));
    if constexpr (requires { app.keep_going(0); }) {
      if (use_condition && app.has_condition() && it >= k - 1) {
        const int slot = int((it - (k - 1)) % k);
        wait(slot);
        if (!app.keep_going(slot)) return it + 1;
      }
    }
  }
  return iters;
}

}  // namespace wapps
