// weft-apps — OpenMP drivers: tasks with depend clauses, and work sharing. Compiled twice: by the project
// compiler with -fopenmp (GCC: libgomp, linked into weft-apps) and by clang++-16 -fopenmp=libomp (into
// weft-apps-libomp).
#include <omp.h>

#include <cstdio>
#include <type_traits>

#include "drivers.hpp"

namespace wapps {
namespace {

// One `#pragma omp task` per shape (number of in and inout items): depend clauses take fixed lists, and the
// portable alternative for variable lists, depend(iterator(...)), silently loses the dependences with GCC 12.
template <int NI, int NO>
struct OmpTask;

#define WAPPS_STR_(x) #x
#define WAPPS_STR(x) WAPPS_STR_(x)
#define WAPPS_IN_0
#define WAPPS_IN_1 depend(in : *in[0])
#define WAPPS_IN_2 depend(in : *in[0], *in[1])
#define WAPPS_IN_3 depend(in : *in[0], *in[1], *in[2])
#define WAPPS_IN_4 depend(in : *in[0], *in[1], *in[2], *in[3])
#define WAPPS_IN_5 depend(in : *in[0], *in[1], *in[2], *in[3], *in[4])
#define WAPPS_IN_6 depend(in : *in[0], *in[1], *in[2], *in[3], *in[4], *in[5])
#define WAPPS_IN_7 depend(in : *in[0], *in[1], *in[2], *in[3], *in[4], *in[5], *in[6])
#define WAPPS_IN_8 depend(in : *in[0], *in[1], *in[2], *in[3], *in[4], *in[5], *in[6], *in[7])
#define WAPPS_IN_9 depend(in : *in[0], *in[1], *in[2], *in[3], *in[4], *in[5], *in[6], *in[7], *in[8])
#define WAPPS_IO_0
#define WAPPS_IO_1 depend(inout : *io[0])
#define WAPPS_IO_2 depend(inout : *io[0], *io[1])
#define WAPPS_IO_3 depend(inout : *io[0], *io[1], *io[2])
#define WAPPS_OMP_SHAPE(ni, no)                                                                   \
  template <>                                                                                     \
  struct OmpTask<ni, no> {                                                                        \
    template <class F>                                                                            \
    static void spawn(F f, const char* const* in, const char* const* io) {                        \
      (void)in;                                                                                   \
      (void)io;                                                                                   \
      _Pragma(WAPPS_STR(omp task firstprivate(f) WAPPS_IN_##ni WAPPS_IO_##no)) f();               \
    }                                                                                             \
  };
#define WAPPS_OMP_SHAPES(ni) \
  WAPPS_OMP_SHAPE(ni, 0) WAPPS_OMP_SHAPE(ni, 1) WAPPS_OMP_SHAPE(ni, 2) WAPPS_OMP_SHAPE(ni, 3)
WAPPS_OMP_SHAPES(0)
WAPPS_OMP_SHAPES(1)
WAPPS_OMP_SHAPES(2)
WAPPS_OMP_SHAPES(3)
WAPPS_OMP_SHAPES(4)
WAPPS_OMP_SHAPES(5)
WAPPS_OMP_SHAPES(6)  // hpcg: the 3 x 3 blocks a stencil reads, and a restriction's 4 + 4 fine blocks
WAPPS_OMP_SHAPES(7)
WAPPS_OMP_SHAPES(8)
WAPPS_OMP_SHAPES(9)

template <class T, class... D>
constexpr int count_of = (0 + ... + int(std::is_same_v<T, D>));

/// Spawns the tasks of apps.hpp as OpenMP tasks (the group protocol is described at wapps::Group): a member is
/// `inout` on its own slot and `in` on the group's datum; a gathering task is `inout` on the group's datum, and
/// the producer first waits (`taskwait`) if members were spawned since its last wait.
class OmpSpawn {
 public:
  template <class F, class... D>
  void operator()(F&& f, const D&... d) {
    (order(d), ...);
    constexpr int ni = count_of<In, D...> + count_of<GroupWrite, D...>;
    constexpr int no = count_of<InOut, D...> + count_of<GroupWrite, D...> + count_of<Gather, D...>;
    const char* in[ni > 0 ? ni : 1];
    const char* io[no > 0 ? no : 1];
    int i = 0, o = 0;
    (collect(d, in, i, io, o), ...);
    OmpTask<ni, no>::spawn(std::decay_t<F>(std::forward<F>(f)), in, io);
  }
  void wait() {
#pragma omp taskwait
    ++epoch_;
  }

 private:
  void order(const GroupWrite& w) { w.g->omp_written = epoch_; }
  void order(const Gather& r) {
    if (r.g->omp_written == epoch_) wait();
  }
  template <class T>
  void order(const T&) {}

  static const char* addr(const void* p) { return static_cast<const char*>(p); }
  static void collect(const In& a, const char** in, int& i, const char**, int&) { in[i++] = addr(a.p); }
  static void collect(const InOut& a, const char**, int&, const char** io, int& o) { io[o++] = addr(a.p); }
  static void collect(const GroupWrite& a, const char** in, int& i, const char** io, int& o) {
    in[i++] = &a.g->token;
    io[o++] = &a.g->slots[std::size_t(a.member)];
  }
  static void collect(const Gather& a, const char**, int&, const char** io, int& o) { io[o++] = &a.g->token; }

  long epoch_ = 0;
};

/// Work sharing inside a `parallel` region: every thread runs the same sequence of phases.
struct OmpFor {
  template <class F>
  void loop(long n, F&& f) {
#pragma omp for schedule(static)
    for (long i = 0; i < n; ++i) f(i);
  }
  template <class F>
  void single(F&& f) {
#pragma omp single
    f();
  }
};

}  // namespace

template <class App>
RunOutcome run_omp_tasks(App& app, const RunConfig& c) {
  long done = 0;
  const double t0 = wbench::now_s();
#pragma omp parallel num_threads(c.workers)
#pragma omp single
  {
    OmpSpawn s;
    done = run_loop(
        app, c.iters, [&](int slot) { app.iteration(s, slot); }, [&](int) { s.wait(); });
  }
  return {wbench::now_s() - t0, done};
}

template <class App>
RunOutcome run_omp_for(App& app, const RunConfig& c) {
  long done = 0;
  const double t0 = wbench::now_s();
#pragma omp parallel num_threads(c.workers)
  {
    OmpFor pf;
    // The condition is read after the barrier that ends the phase computing it, so all threads agree.
    const long d = run_loop(
        app, c.iters, [&](int slot) { app.iteration_for(pf, slot); }, [](int) {});
#pragma omp master
    done = d;
  }
  return {wbench::now_s() - t0, done};
}

std::string omp_describe() {
  char buf[128];
#if defined(__clang__)
  std::snprintf(buf, sizeof buf, "clang %d.%d, LLVM OpenMP (libomp), _OPENMP %d", __clang_major__, __clang_minor__,
                _OPENMP);
#else
  std::snprintf(buf, sizeof buf, "GCC %d.%d, GNU OpenMP (libgomp), _OPENMP %d", __GNUC__, __GNUC_MINOR__, _OPENMP);
#endif
  return buf;
}

#define WAPPS_INSTANTIATE(A)                                         \
  template RunOutcome run_omp_tasks<A>(A&, const RunConfig&); \
  template RunOutcome run_omp_for<A>(A&, const RunConfig&);
WAPPS_FOR_EACH_APP(WAPPS_INSTANTIATE)

}  // namespace wapps
