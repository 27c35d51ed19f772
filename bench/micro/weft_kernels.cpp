// weft-bench-micro — the weft kernels.
#include <weft/weft.hpp>

#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "kernels.hpp"

namespace wbench::weftk {

namespace {
bool use_lfq = false;  // set_lfq
}  // namespace

void set_lfq(bool on) { use_lfq = on; }

std::string lfq_buffer_description() {
  const unsigned n = weft::Options::from_environment().lfq_buffer;
  return n ? std::to_string(n) + " slots (WEFT_LFQ_BUFFER)" : "4 x workers slots";
}

// One Runtime per worker count (and scheduler, set_lfq), created outside the timed region and kept (its
// threads sleep between runs).
weft::Runtime& runtime(int workers) {
  static std::map<std::pair<int, bool>, std::unique_ptr<weft::Runtime>> runtimes;
  auto& rt = runtimes[{workers, use_lfq}];
  if (!rt) {
    weft::Options o = weft::Options::from_environment();
    o.num_threads = static_cast<unsigned>(workers);
    if (use_lfq) o.scheduler = weft::Scheduler::lfq;
    rt = std::make_unique<weft::Runtime>(o);
  }
  return *rt;
}

namespace {

template <int K>
inline void bump(Slot* s) {
  for (int j = 0; j < K; ++j) s[j].v++;
}

template <std::size_t... J>
void chain_produce(weft::Context& cx, long long n, Slot* s, std::index_sequence<J...>) {
  constexpr int K = sizeof...(J);
  for (long long i = 0; i < n; ++i) cx.spawn([s] { bump<K>(s); }, weft::inout(s[J].v)...);
  cx.taskwait();
}

struct TreeNode {
  int depth;
  std::uint64_t cycles;
  long long* out;
  void operator()(weft::Context& cx) const {
    busy_cycles(cycles);  // every task works (TTG paper, Fig. 6), then spawns its children
    if (depth == 0) {
      *out = 1;
      return;
    }
    long long l = 0, r = 0;
    cx.spawn(TreeNode{depth - 1, cycles, &l});
    cx.spawn(TreeNode{depth - 1, cycles, &r});
    cx.taskwait();
    *out = l + r;
  }
};

// Ping-pong: hop i spawns hop i + 1 and spins until it has started, so that the other worker must take it
// (steal); each hop records how long after its spawn it started.
struct PingPong {
  long long n;
  int gap_us;
  std::atomic<long long> started{-1};
  std::vector<double> ns;  // ns[i]: spawn of hop i to its start (written by hop i only)
};

struct Hop {
  PingPong* p;
  long long i;
  double sent;
  void operator()(weft::Context& cx) const {
    const double t = now_s();
    p->ns[static_cast<std::size_t>(i)] = (t - sent) * 1e9;
    p->started.store(i, std::memory_order_release);
    if (i + 1 == p->n) return;
    if (p->gap_us > 0) {  // long enough for the other worker to fall asleep
      const double end = now_s() + 1e-6 * p->gap_us;
      while (now_s() < end) _mm_pause();
    }
    cx.spawn(Hop{p, i + 1, now_s()});
    while (p->started.load(std::memory_order_acquire) != i + 1) _mm_pause();
  }
};

// Context switches of thread `tid` of this process: {voluntary, involuntary}.
std::pair<long long, long long> context_switches(long tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
  std::pair<long long, long long> r{-1, -1};
  FILE* f = std::fopen(path, "r");
  if (!f) return r;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1) r.first = v;
    else if (std::sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1) r.second = v;
  }
  std::fclose(f);
  return r;
}

}  // namespace

double pingpong(long long hops, int gap_us) {
  PingPong p{hops, gap_us, {}, std::vector<double>(static_cast<std::size_t>(hops), 0.0)};
  weft::Runtime& rt = runtime(2);
  rt.run([&](weft::Context& cx) {
    cx.spawn(Hop{&p, 0, now_s()});
    cx.taskwait();
  });
  std::vector<double> v(p.ns.begin() + 1, p.ns.end());  // hop 0 may run on either worker
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::pair<double, double> idle_switches(double seconds) {
  weft::Runtime& rt = runtime(2);
  // The thread id of worker 1: the root spins (it runs no task meanwhile), so worker 1 takes the task.
  std::atomic<long> tid{0};
  rt.run([&](weft::Context& cx) {
    cx.spawn([&tid](weft::Context& c) {
      if (c.worker_id() == 1) tid.store(static_cast<long>(syscall(SYS_gettid)), std::memory_order_release);
    });
    const double end = now_s() + 5;
    while (!tid.load(std::memory_order_acquire) && now_s() < end) _mm_pause();
  });
  if (!tid.load()) return {-1, -1};
  std::pair<long long, long long> a, b;
  double t = 0;
  rt.run([&](weft::Context&) {  // worker 0 busy in the root, worker 1 idle
    a = context_switches(tid.load());
    const double t0 = now_s();
    while (now_s() - t0 < seconds) _mm_pause();
    b = context_switches(tid.load());
    t = now_s() - t0;
  });
  return {double(b.first - a.first) / t, double(b.second - a.second) / t};
}

std::pair<double, double> waiting_switches(double seconds) {
  weft::Runtime& rt = runtime(2);
  std::pair<long long, long long> a, b;
  double t = 0;
  rt.run([&](weft::Context& cx) {
    const long self = static_cast<long>(syscall(SYS_gettid));
    std::atomic<bool> started{false};
    cx.spawn([&, seconds] {
      started.store(true, std::memory_order_release);
      const double t0 = now_s();
      while (now_s() - t0 < seconds) _mm_pause();
    });
    // The root spins without running tasks: worker 1 takes the child, then the root waits for it.
    while (!started.load(std::memory_order_acquire)) _mm_pause();
    a = context_switches(self);
    const double t0 = now_s();
    cx.taskwait();
    t = now_s() - t0;
    b = context_switches(self);
  });
  return {double(b.first - a.first) / t, double(b.second - a.second) / t};
}

Result chain(int deps, long long n) {
  Slot slots[kMaxDeps] = {};
  Slot* s = slots;
  weft::Runtime& rt = runtime(1);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    switch (deps) {
      case 1: chain_produce(cx, n, s, std::make_index_sequence<1>{}); break;
      case 2: chain_produce(cx, n, s, std::make_index_sequence<2>{}); break;
      case 3: chain_produce(cx, n, s, std::make_index_sequence<3>{}); break;
      case 4: chain_produce(cx, n, s, std::make_index_sequence<4>{}); break;
      case 5: chain_produce(cx, n, s, std::make_index_sequence<5>{}); break;
      case 6: chain_produce(cx, n, s, std::make_index_sequence<6>{}); break;
      default: break;
    }
  });
  const double t1 = now_s();
  if (deps < 1 || deps > kMaxDeps) return checked(t1 - t0, deps, 1);  // unsupported count: fail the check
  return chain_result(t1 - t0, slots, deps, n);
}

Result tree(int height, std::uint64_t cycles, int workers) {
  long long leaves = 0;
  weft::Runtime& rt = runtime(workers);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    cx.spawn(TreeNode{height, cycles, &leaves});
    cx.taskwait();
  });
  const double t1 = now_s();
  return checked(t1 - t0, leaves, 1LL << height);
}

Result independent(long long n, int workers) {
  std::vector<unsigned char> done(static_cast<std::size_t>(n), 0);
  unsigned char* d = done.data();
  weft::Runtime& rt = runtime(workers);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    for (long long i = 0; i < n; ++i) cx.spawn([d, i] { d[i] = 1; });
    cx.taskwait();
  });
  const double t1 = now_s();
  return independent_result(t1 - t0, done);
}

Result priority(long long n, int levels, int workers) {
  std::vector<int> prio(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) prio[static_cast<std::size_t>(i)] = task_priority(i, levels);
  std::vector<unsigned char> done(static_cast<std::size_t>(n), 0);
  unsigned char* d = done.data();
  weft::Runtime& rt = runtime(workers);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    for (long long i = 0; i < n; ++i) cx.spawn([d, i] { d[i] = 1; }, weft::priority(prio[static_cast<std::size_t>(i)]));
    cx.taskwait();
  });
  const double t1 = now_s();
  return independent_result(t1 - t0, done);
}

Result replay(ReplayGraph g, ReplayMode mode, long long m, long long iters, int workers) {
  std::vector<Slot> slots(g == ReplayGraph::chain ? 1 : static_cast<std::size_t>(m));
  Slot* s = slots.data();
  const bool chain = g == ReplayGraph::chain;
  // One iteration's tasks; `cx` is the loop's Context (recording under taskiter).
  auto iteration = [s, m, chain](weft::Context& cx) {
    if (chain)
      for (long long j = 0; j < m; ++j) cx.spawn([s] { s->v++; }, weft::inout(s->v));
    else
      for (long long j = 0; j < m; ++j) cx.spawn([p = &s[j]] { p->v++; }, weft::inout(s[j].v));
  };
  weft::Runtime& rt = runtime(workers);
  const double t0 = now_s();
  rt.run([&](weft::Context& cx) {
    switch (mode) {
      case ReplayMode::tasks:
        for (long long i = 0; i < iters; ++i) iteration(cx);
        break;
      case ReplayMode::taskiter: cx.taskiter(static_cast<std::uint64_t>(iters), iteration); break;
      case ReplayMode::barrier: cx.taskiter(static_cast<std::uint64_t>(iters), iteration, weft::replay_barrier); break;
    }
  });
  const double t1 = now_s();
  long long got = 0;
  for (const Slot& x : slots) got += x.v;
  return checked(t1 - t0, got, m * iters);
}

void wake(int workers) {
  if (workers < 2) return;
  std::atomic<int> arrived{0};
  runtime(workers).run([&](weft::Context& cx) {
    for (int k = 0; k < workers; ++k) cx.spawn([&] { rendezvous(arrived, workers); });
  });
}

std::string describe() {
  const weft::Options o = weft::Options::from_environment();
  return "weft (max_tasks " + std::to_string(o.max_tasks) + ", immediate_successor " +
         (o.immediate_successor ? "on" : "off") + ", scheduler " +
         (o.scheduler == weft::Scheduler::lfq ? "lfq" : "llp") +
         (o.lfq_buffer ? ", lfq_buffer " + std::to_string(o.lfq_buffer) : std::string()) + ")";
}

}  // namespace wbench::weftk
