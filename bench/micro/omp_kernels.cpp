// weft-bench-micro — the OpenMP peer's kernels (see omp_kernels.hpp). Compiled with g++ -fopenmp (libgomp,
// linked into the driver) and with clang++-16 -fopenmp=libomp (LLVM OpenMP, weft-bench-micro-libomp).
#include "omp_kernels.hpp"

#include <omp.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <vector>

namespace wbench::omp {
namespace {

template <int K>
inline void bump(Slot* s) {
  for (int j = 0; j < K; ++j) s[j].v++;
}

// The producer loop: one task per iteration, inout on the first `deps` slots, then wait for all of them.
void chain_produce(int deps, long long n, Slot* s) {
  switch (deps) {
    case 1:
      for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(s) depend(inout : s[0].v)
        bump<1>(s);
      }
      break;
    case 2:
      for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(s) depend(inout : s[0].v, s[1].v)
        bump<2>(s);
      }
      break;
    case 3:
      for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(s) depend(inout : s[0].v, s[1].v, s[2].v)
        bump<3>(s);
      }
      break;
    case 4:
      for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(s) depend(inout : s[0].v, s[1].v, s[2].v, s[3].v)
        bump<4>(s);
      }
      break;
    case 5:
      for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(s) depend(inout : s[0].v, s[1].v, s[2].v, s[3].v, s[4].v)
        bump<5>(s);
      }
      break;
    case 6:
      for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(s) depend(inout : s[0].v, s[1].v, s[2].v, s[3].v, s[4].v, s[5].v)
        bump<6>(s);
      }
      break;
    default:
      break;
  }
#pragma omp taskwait
}

void tree_node(int depth, long long* out, std::uint64_t cycles) {
  busy_cycles(cycles);  // every task works (TTG paper, Fig. 6), then spawns its children
  if (depth == 0) {
    *out = 1;
    return;
  }
  long long l = 0, r = 0;
#pragma omp task default(none) shared(l) firstprivate(depth, cycles)
  tree_node(depth - 1, &l, cycles);
#pragma omp task default(none) shared(r) firstprivate(depth, cycles)
  tree_node(depth - 1, &r, cycles);
#pragma omp taskwait
  *out = l + r;
}

void warn_team(const char* what, int want, int got) {
  if (want != got)
    std::fprintf(stderr, "weft-bench-micro: OpenMP %s: asked for %d threads, the team has %d\n", what, want, got);
}

}  // namespace

Result chain(int deps, long long n, ChainMode mode) {
  Slot slots[kMaxDeps] = {};
  Slot* s = slots;
  int team = 0;
  double t0 = 0, t1 = 0;
  if (deps < 1 || deps > kMaxDeps) return {};
  if (mode == ChainMode::one_thread) {
    t0 = now_s();
#pragma omp parallel num_threads(1) default(none) shared(deps, n, s, team)
#pragma omp single
    {
      team = omp_get_num_threads();
      chain_produce(deps, n, s);
    }
    t1 = now_s();
    warn_team("chain (one thread)", 1, team);
  } else {
    // Thread 0 produces the chain and, at its scheduling points (the throttle, the final taskwait), executes
    // the tasks. Thread 1 blocks on a condition variable, not in an OpenMP barrier, so it cannot run tasks;
    // its presence only makes the team size 2, which keeps the runtime from running the tasks undeferred.
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    t0 = now_s();
#pragma omp parallel num_threads(2) default(none) shared(deps, n, s, team, m, cv, done)
    {
      if (omp_get_thread_num() == 0) {
        team = omp_get_num_threads();
        chain_produce(deps, n, s);
        {
          std::lock_guard<std::mutex> lk(m);
          done = true;
        }
        cv.notify_all();
      } else {
        std::unique_lock<std::mutex> lk(m);
        cv.wait(lk, [&] { return done; });
      }
    }
    t1 = now_s();
    warn_team("chain (two threads, one asleep)", 2, team);
  }
  return chain_result(t1 - t0, slots, deps, n);
}

Result tree(int height, std::uint64_t cycles, int workers) {
  long long leaves = 0;
  int team = 0;
  const double t0 = now_s();
#pragma omp parallel num_threads(workers) default(none) shared(height, cycles, leaves, team)
#pragma omp single
  {
    team = omp_get_num_threads();
#pragma omp task default(none) shared(leaves) firstprivate(height, cycles)
    tree_node(height, &leaves, cycles);
#pragma omp taskwait
  }
  const double t1 = now_s();
  warn_team("tree", workers, team);
  return checked(t1 - t0, leaves, 1LL << height);
}

Result independent(long long n, int workers) {
  std::vector<unsigned char> done(static_cast<std::size_t>(n), 0);
  unsigned char* d = done.data();
  int team = 0;
  const double t0 = now_s();
#pragma omp parallel num_threads(workers) default(none) shared(n, d, team)
#pragma omp single
  {
    team = omp_get_num_threads();
    for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(d, i)
      d[i] = 1;
    }
#pragma omp taskwait
  }
  const double t1 = now_s();
  warn_team("independent", workers, team);
  return independent_result(t1 - t0, done);
}

Result priority(long long n, int levels, int workers) {
  if (omp_get_max_task_priority() < levels) {
    static bool warned = false;
    if (!warned)
      std::fprintf(stderr, "warning: priority: omp_get_max_task_priority() = %d < %d: set OMP_MAX_TASK_PRIORITY=%d\n",
                   omp_get_max_task_priority(), levels, levels);
    warned = true;
  }
  std::vector<int> prio(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) prio[static_cast<std::size_t>(i)] = task_priority(i, levels);
  const int* pr = prio.data();
  std::vector<unsigned char> done(static_cast<std::size_t>(n), 0);
  unsigned char* d = done.data();
  int team = 0;
  const double t0 = now_s();
#pragma omp parallel num_threads(workers) default(none) shared(n, d, pr, team)
#pragma omp single
  {
    team = omp_get_num_threads();
    for (long long i = 0; i < n; ++i) {
#pragma omp task default(none) firstprivate(d, i) priority(pr[i])
      d[i] = 1;
    }
#pragma omp taskwait
  }
  const double t1 = now_s();
  warn_team("priority", workers, team);
  return independent_result(t1 - t0, done);
}

void wake(int workers) {
  if (workers < 2) return;
#pragma omp parallel num_threads(workers)
  {
#pragma omp barrier
  }
}

std::string describe() {
  std::string s;
#if defined(__clang__)
  s = std::string("clang++ ") + __clang_version__ + ", LLVM libomp";
#elif defined(__GNUC__)
  s = std::string("g++ ") + __VERSION__ + ", libgomp";
#else
  s = "unknown compiler";
#endif
  s += ", _OPENMP " + std::to_string(_OPENMP);
  return s;
}

}  // namespace wbench::omp
