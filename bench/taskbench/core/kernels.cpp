// taskbench core: kernels (spec section 4) and the SipHash-based uniform numbers.
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TASKBENCH_X86 1
#else
#define TASKBENCH_X86 0
#endif

#ifndef TASKBENCH_HAVE_BLAS
#define TASKBENCH_HAVE_BLAS 0
#endif

#if TASKBENCH_HAVE_BLAS
#include <cblas.h>  // OpenBLAS's (its include directory comes first): declares openblas_set_num_threads
#endif

#include "core/core.hpp"
#include "core/internal.hpp"

namespace taskbench {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --- SipHash-2-4 -------------------------------------------------------------------------------------------

namespace {

inline std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

struct SipState {
  std::uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  void compress(std::uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

std::uint64_t siphash24(const void* data, std::size_t bytes, const unsigned char key[16]) {
  const auto* in = static_cast<const unsigned char*>(data);
  const std::uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
  SipState s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
             k1 ^ 0x7465646279746573ULL};
  const std::size_t full = bytes - bytes % 8;
  for (std::size_t k = 0; k < full; k += 8) s.compress(load_le64(in + k));
  std::uint64_t last = static_cast<std::uint64_t>(bytes & 0xff) << 56;
  for (std::size_t k = 0; k < bytes % 8; ++k) last |= static_cast<std::uint64_t>(in[full + k]) << (8 * k);
  s.compress(last);
  s.v2 ^= 0xff;
  for (int r = 0; r < 4; ++r) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

double hash_uniform(const std::int64_t* values, std::size_t n) {
  static const unsigned char key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0};
  unsigned char small[8 * 8];
  std::vector<unsigned char> large;
  unsigned char* bytes = small;
  if (n > 8) {
    large.resize(8 * n);
    bytes = large.data();
  }
  for (std::size_t k = 0; k < n; ++k) {
    const auto u = static_cast<std::uint64_t>(values[k]);
    for (int b = 0; b < 8; ++b) bytes[8 * k + b] = static_cast<unsigned char>(u >> (8 * b));
  }
  return static_cast<double>(siphash24(bytes, 8 * n, key)) * 0x1p-64;
}

// --- compute kernels ----------------------------------------------------------------------------------------

namespace {

// Keeps a kernel's result alive: the compiler cannot drop work whose result is stored to a volatile object.
// One per thread, so that concurrent tasks do not write the same location.
thread_local volatile double t_sink;

// Starting values in (-0.75, -0.5]: a = a*a + a = a(a + 1) then stays in (-1, 0) and tends to 0 like -1/n, so
// the iterations never overflow and never reach subnormal numbers (which would be slow).
inline double start_value(int j) { return -0.5 - j / 256.0; }

// 64 doubles, `iters` times a = a*a + a (one FMA each), then a sum of the 64 (the spec's + 64 FLOPs).
double compute_generic(long iters) {
  double a[64];
  for (int j = 0; j < 64; ++j) a[j] = start_value(j);
  for (long n = 0; n < iters; ++n)
    for (int j = 0; j < 64; ++j) a[j] = a[j] * a[j] + a[j];
  double s = 0;
  for (int j = 0; j < 64; ++j) s += a[j];
  return s;
}

// compute_bound2's loop, compiled twice: plainly and, inlined into compute2_avx2, with AVX2 + FMA.
__attribute__((always_inline)) inline double compute2_body(long iters) {
  double a[32], b[32], c[32];
  for (int j = 0; j < 32; ++j) a[j] = start_value(j), b[j] = 1e-9 * j, c[j] = 0;
  for (long n = 0; n < iters; ++n)
    for (int j = 0; j < 32; ++j) c[j] += a[j] * b[j];
  double s = 0;
  for (int j = 0; j < 32; ++j) s += c[j];
  return s;
}

double compute2_generic(long iters) { return compute2_body(iters); }

#if TASKBENCH_X86
// 16 independent vectors of 4 doubles: enough independent FMA chains to cover the FMA latency on both FMA
// ports, all held in the 16 ymm registers.
__attribute__((target("avx2,fma"))) double compute_avx2(long iters) {
  __m256d v[16];
  for (int k = 0; k < 16; ++k)
    v[k] = _mm256_setr_pd(start_value(4 * k), start_value(4 * k + 1), start_value(4 * k + 2),
                          start_value(4 * k + 3));
  __m256d a0 = v[0], a1 = v[1], a2 = v[2], a3 = v[3], a4 = v[4], a5 = v[5], a6 = v[6], a7 = v[7];
  __m256d a8 = v[8], a9 = v[9], a10 = v[10], a11 = v[11], a12 = v[12], a13 = v[13], a14 = v[14], a15 = v[15];
  for (long n = 0; n < iters; ++n) {
    a0 = _mm256_fmadd_pd(a0, a0, a0);
    a1 = _mm256_fmadd_pd(a1, a1, a1);
    a2 = _mm256_fmadd_pd(a2, a2, a2);
    a3 = _mm256_fmadd_pd(a3, a3, a3);
    a4 = _mm256_fmadd_pd(a4, a4, a4);
    a5 = _mm256_fmadd_pd(a5, a5, a5);
    a6 = _mm256_fmadd_pd(a6, a6, a6);
    a7 = _mm256_fmadd_pd(a7, a7, a7);
    a8 = _mm256_fmadd_pd(a8, a8, a8);
    a9 = _mm256_fmadd_pd(a9, a9, a9);
    a10 = _mm256_fmadd_pd(a10, a10, a10);
    a11 = _mm256_fmadd_pd(a11, a11, a11);
    a12 = _mm256_fmadd_pd(a12, a12, a12);
    a13 = _mm256_fmadd_pd(a13, a13, a13);
    a14 = _mm256_fmadd_pd(a14, a14, a14);
    a15 = _mm256_fmadd_pd(a15, a15, a15);
  }
  __m256d s = _mm256_add_pd(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)),
                            _mm256_add_pd(_mm256_add_pd(a4, a5), _mm256_add_pd(a6, a7)));
  s = _mm256_add_pd(s, _mm256_add_pd(_mm256_add_pd(_mm256_add_pd(a8, a9), _mm256_add_pd(a10, a11)),
                                     _mm256_add_pd(_mm256_add_pd(a12, a13), _mm256_add_pd(a14, a15))));
  double lanes[4];
  _mm256_storeu_pd(lanes, s);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

__attribute__((target("avx2,fma"))) double compute2_avx2(long iters) { return compute2_body(iters); }

bool have_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

double compute(long iters) {
#if TASKBENCH_X86
  if (have_avx2_fma()) return compute_avx2(iters);
#endif
  return compute_generic(iters);
}

double compute2(long iters) {
#if TASKBENCH_X86
  if (have_avx2_fma()) return compute2_avx2(iters);
#endif
  return compute2_generic(iters);
}

long busy_wait(long iters, long seed) {
  long long acc = seed % 2147483647 + 1;
  for (long n = 0; n < iters; ++n) acc = acc * 139 % 2147483647;
  return static_cast<long>(acc);
}

void memory_kernel(const TaskGraph& g, long t, char* scratch) {
  const long samples = g.kernel.samples, iters = g.kernel.iterations;
  const std::size_t slice = g.scratch_bytes / static_cast<std::size_t>(samples), half = slice / 2;
  long s = static_cast<long>((static_cast<unsigned long long>(t) * static_cast<unsigned long long>(iters)) %
                             static_cast<unsigned long long>(samples));
  for (long n = 0; n < iters; ++n) {
    char* base = scratch + static_cast<std::size_t>(s) * slice;
    std::memcpy(base + half, base, half);
    if (++s == samples) s = 0;
  }
  t_sink = static_cast<double>(static_cast<unsigned char>(scratch[slice - 1]));
}

#if TASKBENCH_HAVE_BLAS
// compute_dgemm, as Task Bench's: the scratch holds three N x N row-major matrices A, B, C (N = matrix_order),
// and each iteration is C = A B + C. The scratch is filled with 0x5C4A7C8B words, i.e. subnormal doubles whose
// products are 0: C keeps its value, A (where the scratch's first word is) is only read.
void dgemm_kernel(const TaskGraph& g, char* scratch) {
  const auto n = static_cast<int>(matrix_order(g.scratch_bytes));
  if (n == 0) return;  // check() refuses it; a graph built by hand may not
  auto* a = reinterpret_cast<double*>(scratch);
  double* b = a + static_cast<std::size_t>(n) * n;
  double* c = b + static_cast<std::size_t>(n) * n;
  for (long k = 0; k < g.kernel.iterations; ++k)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, b, n, 1.0, c, n);
  t_sink = c[0];
}

// memory_daxpy: memory_bound's walk over the `sample` slices (starting at slice (t * iter) mod samples,
// wrapping), each iteration y = x + y on one slice, x its first half and y its second. Slices are rounded down
// to 16 bytes so that both halves hold whole, aligned doubles; the first word of the scratch, in slice 0's x,
// is only read.
void daxpy_kernel(const TaskGraph& g, long t, char* scratch) {
  const long samples = g.kernel.samples, iters = g.kernel.iterations;
  const std::size_t slice = g.scratch_bytes / static_cast<std::size_t>(samples) / 16 * 16, half = slice / 2;
  const auto n = static_cast<int>(half / sizeof(double));
  long s = static_cast<long>((static_cast<unsigned long long>(t) * static_cast<unsigned long long>(iters)) %
                             static_cast<unsigned long long>(samples));
  for (long k = 0; k < iters; ++k) {
    auto* x = reinterpret_cast<double*>(scratch + static_cast<std::size_t>(s) * slice);
    cblas_daxpy(n, 1.0, x, 1, x + n, 1);
    if (++s == samples) s = 0;
  }
  double last;
  std::memcpy(&last, scratch + slice - sizeof last, sizeof last);
  t_sink = last;
}
#endif

}  // namespace

bool blas_available() { return TASKBENCH_HAVE_BLAS != 0; }

void use_single_threaded_blas() {
#if TASKBENCH_HAVE_BLAS
  // The runtimes under test provide the parallelism, one task per worker: a BLAS call spread over OpenBLAS's own
  // threads would oversubscribe the cores and time OpenBLAS's threading instead of the runtime's scheduling.
  // OPENBLAS_NUM_THREADS=1 would have to be in the environment before the library loads (it reads it at
  // start-up), which a program cannot arrange for itself; this call can, once, before the first BLAS call.
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
#endif
}

long imbalanced_iterations(const TaskGraph& g, long t, long point) {
  const std::int64_t v[3] = {g.graph_index, t, point};
  const double u = hash_uniform(v, 3);
  const long its = std::lround((1 + (u - 0.5) * g.kernel.imbalance) * static_cast<double>(g.kernel.iterations));
  return its < 0 ? 0 : its;
}

long matrix_order(std::size_t scratch_bytes) {
  return static_cast<long>(std::sqrt(static_cast<double>(scratch_bytes) / 24.0));
}

void run_kernel(const TaskGraph& g, long t, long point, char* scratch) {
  switch (g.kernel.type) {
    case KernelType::empty:
      break;
    case KernelType::busy_wait:
      t_sink = static_cast<double>(busy_wait(g.kernel.iterations, t * g.max_width + point));
      break;
    case KernelType::compute_bound:
      t_sink = compute(g.kernel.iterations);
      break;
    case KernelType::compute_bound2:
      t_sink = compute2(g.kernel.iterations);
      break;
    case KernelType::load_imbalance:
      t_sink = compute(imbalanced_iterations(g, t, point));
      break;
    case KernelType::memory_bound:
      memory_kernel(g, t, scratch);
      break;
    case KernelType::compute_dgemm:
    case KernelType::memory_daxpy:
#if TASKBENCH_HAVE_BLAS
      use_single_threaded_blas();  // App did it already; a graph built by hand gets it here
      if (g.kernel.type == KernelType::compute_dgemm)
        dgemm_kernel(g, scratch);
      else
        daxpy_kernel(g, t, scratch);
      break;
#else
      // Rejected by the command line (no BLAS in this build); a graph built by hand gets the same answer.
      std::fprintf(stderr, "error: -kernel %s needs BLAS, which this build does not have (OpenBLAS was not found "
                   "when it was configured)\n", name_of(g.kernel.type));
      std::exit(2);
#endif
  }
}

}  // namespace taskbench
