// weft-bench-micro — weft side by side with its peers (GCC OpenMP, LLVM OpenMP, oneTBB) on three micro
// benchmarks: chain, tree, independent, priority. See bench/micro/README.md, or run with --help.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <weft/runtime.hpp>

#include "common.hpp"
#include "kernels.hpp"
#if WEFT_BENCH_HAVE_GOMP
#include "omp_kernels.hpp"
#endif

namespace {

using wbench::Result;

const char* const kUsage = R"(weft-bench-micro: weft side by side with GCC OpenMP, LLVM OpenMP and oneTBB.

usage: weft-bench-micro [options]

  --quick              small sizes (for CI; well under a minute)
  --bench=LIST         chain,tree,independent,priority,replay,pingpong (default: all)
  --only=LIST          systems to run: weft,gomp,gomp-1t,libomp,libomp-1t,tbb,flow,flow-copy,weft-lfq,flow-lfq
                       (default: all available but weft-lfq and flow-lfq)
  --reps=R             repetitions per system (default 5); the table shows the median; the systems are
                       interleaved: repetition 1 of every system, then repetition 2, ...
  --csv=FILE           also write every measurement to FILE (CSV)
  --tasks=N            chain: tasks (default 1e6, --quick 1e5; the issue's size: --tasks=1e7)
  --deps=LIST          chain: addresses each task accesses inout, = flows of an int for flow graphs
                       (default 0,1,2,4,6; 0..6; 0: flow graphs only, a control edge)
  --tree=LIST          tree: CYCLES:HEIGHT pairs, every task busy-waits CYCLES TSC ticks, 2^HEIGHT leaves
                       (default 0:20,1000:17,10000:14,40000:12; --quick 0:14,1000:12,10000:9,40000:7)
  --independent-tasks=N  independent: tasks (default 1e6, --quick 1e5)
  --priority-tasks=N   priority: tasks (default 1e6, --quick 1e5)
  --priority-levels=P  priority: task i has priority 1 + hash(i) mod P (default 16); GCC OpenMP honours
                       priorities up to OMP_MAX_TASK_PRIORITY (set it to P in the environment); no TBB or
                       LLVM OpenMP column
  --workers=LIST       tree, independent, priority: worker counts (default 1,2,4,...,N and N = hardware threads)
  --replay-tasks=M     replay: tasks per iteration (default 1000)
  --replay-iters=N     replay: iterations (default 1000, --quick 100)
  --replay-graphs=LIST replay: chain,wide (default both)
  --replay-modes=LIST  replay: tasks,taskiter,barrier (default all)
  --pingpong-hops=N    pingpong: hops without a gap (default 20000, --quick 2000; 1/40 of them with a gap)
  --tbb-block=B        chain, TBB: continue_nodes built per flow-graph block (default 4096)
  --libomp-chain-tasks=N  chain, libomp with 2 threads: at most N tasks (default 2e5; marked * in the table).
                       It keeps every task of the chain in memory until the final taskwait (~1.5 KB each)
                       and takes microseconds per task, independent of N.
  --no-warmup          no untimed warm-up runs (one per configuration at 1/20 of the size, and just before each
                       timed run a primer of a few hundred tasks, then one task per worker that waits until
                       every worker has started one: each system's workers are awake when the timing starts)
  --no-quiesce         do not wait for idle runtime threads to stop spinning after each timed run
  --watchdog=S         abort (exit 3) if one run takes longer than S seconds (default 600): a hung runtime
  -h, --help

Systems: weft (Options::num_threads = 1 for chain, else the worker count; other options from WEFT_*);
weft-lfq, flow-lfq = weft, flow with Options::scheduler = lfq (PaRSEC's local flat queues, the TTG paper's
Fig. 6 comparison), only when named in --only; their ratio is to weft, flow (lfq/llp; set WEFT_SCHEDULER=llp);
gomp = libgomp, this program compiled with g++ -fopenmp; libomp = LLVM OpenMP, a clang++-16 -fopenmp=libomp
build of the same kernels, run as a subprocess (weft-bench-micro-libomp); tbb = oneTBB.
chain, OpenMP: "gomp"/"libomp" = team of 2 threads where thread 1 is held asleep on a condition variable
(so one thread executes the tasks, but the runtime defers them); "-1t" = team of 1 thread.
chain, TBB: a flow::graph of continue_nodes linked one after the other (built and run in blocks).
flow, flow-copy: weft flow graphs (weft/flow.hpp), the TTG paper's Fig. 5 chain (each task sends D ints to the
next key; flow moves them, flow-copy sends lvalues) and Fig. 6 tree (key k sends to 2k and 2k+1).
replay (weft only, not in the CSV): a loop of N iterations of M tasks; chain = every task inout on one counter,
1 worker; wide = independent tasks (task j inout on counter j), 2 workers. Modes: tasks (the loop spawns every
iteration), taskiter (recorded once, replayed), barrier (taskiter + weft::replay_barrier). record = time of a
1-iteration loop / M (recording + first run + teardown); replay = (time(N) - time(1)) / ((N-1) M).
pingpong (weft only): 2 workers; hop i spawns hop i+1 and spins until it has started, so the other worker steals
it; median ns from a hop's spawn to its start, with no gap (the other worker polls) and with a 2 ms busy gap
before each spawn (the other worker has gone to sleep). Then the context switches per second of worker 1 while
it idles for 1 s (worker 0 busy in the root body), from /proc/self/task/TID/status.
Exit status: 0; 1 if a benchmark's result check failed or a peer failed; 2 for bad options; 3 if a run hung
(--watchdog).
)";

enum class Bench { chain, tree, independent, priority };
enum Sys { kWeft, kGomp, kGomp1, kLibomp, kLibomp1, kTbb, kFlow, kFlowCopy, kWeftLfq, kFlowLfq, kNumSys };
const char* const kSysName[kNumSys] = {"weft", "gomp",      "gomp-1t",  "libomp",   "libomp-1t",
                                       "tbb",  "flow",      "flow-copy", "weft-lfq", "flow-lfq"};
// The weft system that a -lfq system runs with Options::scheduler = lfq (itself for the others).
int llp_system(int s) { return s == kWeftLfq ? kWeft : s == kFlowLfq ? kFlow : s; }

struct Config {
  Bench bench = Bench::chain;
  int deps = 0;
  long long n = 0;  // chain, independent, priority
  int height = 0;   // tree
  std::uint64_t cycles = 0;
  int workers = 1;
  long long tasks() const { return bench == Bench::tree ? (2LL << height) - 1 : n; }
};

struct Options {
  bool quick = false;
  bool bench[6] = {true, true, true, true, true, true};
  bool only[kNumSys] = {true, true, true, true, true, true, true, true, false, false};
  int reps = 5;
  std::string csv;
  long long chain_tasks = -1;
  std::vector<int> deps{0, 1, 2, 4, 6};
  std::vector<std::pair<std::uint64_t, int>> tree;  // (cycles, height)
  long long independent_tasks = -1;
  long long priority_tasks = -1;
  int priority_levels = 16;
  std::vector<int> workers;
  long long tbb_block = 4096;
  long long replay_tasks = 1000;
  long long replay_iters = -1;
  bool replay_graph[2] = {true, true};  // chain, wide
  bool replay_mode[3] = {true, true, true};  // tasks, taskiter, barrier
  long long libomp_chain_tasks = 200000;
  long long pingpong_hops = -1;
  bool warmup = true;
  bool quiesce = true;
  long long watchdog_s = 600;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "weft-bench-micro: %s (try --help)\n", msg.c_str());
  std::exit(2);
}

long long parse_count(const std::string& s, const char* what) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || v < 1 || v > 1e12 || v != std::floor(v))
    usage_error(std::string("bad ") + what + " '" + s + "'");
  return static_cast<long long>(v);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

Options parse_args(int argc, char** argv) {
  Options o;
  std::string tree_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : a.substr(eq + 1);
    auto need_val = [&] {
      if (eq == std::string::npos || val.empty()) usage_error("option " + key + " needs a value: " + key + "=...");
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--no-warmup") {
      o.warmup = false;
    } else if (a == "--no-quiesce") {
      o.quiesce = false;
    } else if (key == "--bench") {
      need_val();
      std::fill(std::begin(o.bench), std::end(o.bench), false);
      for (const auto& b : split(val, ',')) {
        if (b == "chain") o.bench[0] = true;
        else if (b == "tree") o.bench[1] = true;
        else if (b == "independent") o.bench[2] = true;
        else if (b == "replay") o.bench[3] = true;
        else if (b == "pingpong") o.bench[4] = true;
        else if (b == "priority") o.bench[5] = true;
        else usage_error("unknown benchmark '" + b + "' (chain, tree, independent, priority, replay, pingpong)");
      }
    } else if (key == "--only") {
      need_val();
      std::fill(std::begin(o.only), std::end(o.only), false);
      for (const auto& s : split(val, ',')) {
        int k = 0;
        while (k < kNumSys && s != kSysName[k]) ++k;
        if (k == kNumSys)
          usage_error("unknown system '" + s +
                      "' (weft, gomp, gomp-1t, libomp, libomp-1t, tbb, flow, flow-copy, weft-lfq, flow-lfq)");
        o.only[k] = true;
      }
    } else if (key == "--reps") {
      need_val();
      o.reps = static_cast<int>(parse_count(val, "--reps"));
      if (o.reps > 1000) usage_error("--reps too large");
    } else if (key == "--csv") {
      need_val();
      o.csv = val;
    } else if (key == "--tasks") {
      need_val();
      o.chain_tasks = parse_count(val, "--tasks");
    } else if (key == "--deps") {
      need_val();
      o.deps.clear();
      for (const auto& s : split(val, ',')) {
        const long long d = s == "0" ? 0 : parse_count(s, "--deps");
        if (d > wbench::kMaxDeps) usage_error("--deps: at most 6 addresses");
        o.deps.push_back(int(d));
      }
    } else if (key == "--tree") {
      need_val();
      tree_arg = val;
    } else if (key == "--independent-tasks") {
      need_val();
      o.independent_tasks = parse_count(val, "--independent-tasks");
    } else if (key == "--priority-tasks") {
      need_val();
      o.priority_tasks = parse_count(val, "--priority-tasks");
    } else if (key == "--priority-levels") {
      need_val();
      const long long p = parse_count(val, "--priority-levels");
      if (p > 1000000) usage_error("--priority-levels: at most 1000000");
      o.priority_levels = int(p);
    } else if (key == "--workers") {
      need_val();
      o.workers.clear();
      for (const auto& s : split(val, ',')) {
        const long long w = parse_count(s, "--workers");
        if (w > 4096) usage_error("--workers: at most 4096");
        o.workers.push_back(int(w));
      }
    } else if (key == "--libomp-chain-tasks") {
      need_val();
      o.libomp_chain_tasks = parse_count(val, "--libomp-chain-tasks");
    } else if (key == "--watchdog") {
      need_val();
      o.watchdog_s = parse_count(val, "--watchdog");
    } else if (key == "--replay-tasks") {
      need_val();
      o.replay_tasks = parse_count(val, "--replay-tasks");
    } else if (key == "--replay-iters") {
      need_val();
      o.replay_iters = parse_count(val, "--replay-iters");
      if (o.replay_iters < 2) usage_error("--replay-iters: at least 2");
    } else if (key == "--replay-graphs") {
      need_val();
      std::fill(std::begin(o.replay_graph), std::end(o.replay_graph), false);
      for (const auto& g : split(val, ',')) {
        if (g == "chain") o.replay_graph[0] = true;
        else if (g == "wide") o.replay_graph[1] = true;
        else usage_error("unknown replay graph '" + g + "' (chain, wide)");
      }
    } else if (key == "--replay-modes") {
      need_val();
      std::fill(std::begin(o.replay_mode), std::end(o.replay_mode), false);
      for (const auto& m : split(val, ',')) {
        if (m == "tasks") o.replay_mode[0] = true;
        else if (m == "taskiter") o.replay_mode[1] = true;
        else if (m == "barrier") o.replay_mode[2] = true;
        else usage_error("unknown replay mode '" + m + "' (tasks, taskiter, barrier)");
      }
    } else if (key == "--pingpong-hops") {
      need_val();
      o.pingpong_hops = parse_count(val, "--pingpong-hops");
      if (o.pingpong_hops < 80) usage_error("--pingpong-hops: at least 80");
    } else if (key == "--tbb-block") {
      need_val();
      o.tbb_block = parse_count(val, "--tbb-block");
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (o.chain_tasks < 0) o.chain_tasks = o.quick ? 100000 : 1000000;
  if (o.independent_tasks < 0) o.independent_tasks = o.quick ? 100000 : 1000000;
  if (o.priority_tasks < 0) o.priority_tasks = o.quick ? 100000 : 1000000;
  if (o.replay_iters < 0) o.replay_iters = o.quick ? 100 : 1000;
  if (o.pingpong_hops < 0) o.pingpong_hops = o.quick ? 2000 : 20000;
  if (tree_arg.empty()) tree_arg = o.quick ? "0:14,1000:12,10000:9,40000:7" : "0:20,1000:17,10000:14,40000:12";
  for (const auto& p : split(tree_arg, ',')) {
    const std::size_t c = p.find(':');
    if (c == std::string::npos) usage_error("--tree: expected CYCLES:HEIGHT, got '" + p + "'");
    const std::string cyc = p.substr(0, c);
    const long long cycles = cyc == "0" ? 0 : parse_count(cyc, "--tree cycles");
    const long long h = parse_count(p.substr(c + 1), "--tree height");
    if (h > 40) usage_error("--tree: height at most 40");
    o.tree.emplace_back(static_cast<std::uint64_t>(cycles), int(h));
  }
  if (o.workers.empty()) {
    const int n = std::max(1u, std::thread::hardware_concurrency());
    for (int w = 1; w < n; w *= 2) o.workers.push_back(w);
    o.workers.push_back(n);
  }
  return o;
}

// ---------------------------------------------------------------------------------------------------------
// The LLVM OpenMP peer: a subprocess speaking the line protocol of omp_server.cpp.

class OmpServer {
 public:
  ~OmpServer() { stop(); }

  /// Starts the server; returns "" or why it could not be used.
  std::string start(const std::string& path) {
    if (access(path.c_str(), X_OK) != 0) return "not built (" + path + " not found)";
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
    if (pipe2(from, O_CLOEXEC) != 0) {
      close(to[0]);
      close(to[1]);
      return std::string("pipe: ") + std::strerror(errno);
    }
    pid_ = fork();
    if (pid_ < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid_ == 0) {
      dup2(to[0], 0);
      dup2(from[1], 1);
      const char* args[] = {path.c_str(), "--server", nullptr};
      execv(path.c_str(), const_cast<char* const*>(args));
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    to_ = fdopen(to[1], "w");
    from_ = fdopen(from[0], "r");
    std::string reply;
    if (!request("describe", reply)) {
      stop();
      return "does not start: " + path;
    }
    describe_ = reply;
    return "";
  }

  /// Sends one request, returns the reply after "ok " (false on error or if the server died).
  bool request(const std::string& line, std::string& reply) {
    if (!to_ || !from_) return false;
    if (std::fprintf(to_, "%s\n", line.c_str()) < 0 || std::fflush(to_) != 0) return false;
    char buf[1024];
    if (!std::fgets(buf, sizeof buf, from_)) return false;
    std::string r = buf;
    while (!r.empty() && (r.back() == '\n' || r.back() == '\r')) r.pop_back();
    if (r.rfind("ok ", 0) != 0) return false;
    reply = r.substr(3);
    return true;
  }

  Result measure(const std::string& line) {
    std::string reply;
    if (!request(line, reply)) throw std::runtime_error("the LLVM OpenMP peer failed on '" + line + "'");
    Result r;
    int ok = 0;
    if (std::sscanf(reply.c_str(), "%lf %d %lld %lld", &r.seconds, &ok, &r.got, &r.want) != 4)
      throw std::runtime_error("the LLVM OpenMP peer sent '" + reply + "'");
    r.ok = ok != 0;
    return r;
  }

  void wake(int workers) {
    std::string reply;
    if (!request("wake " + std::to_string(workers), reply))
      throw std::runtime_error("the LLVM OpenMP peer failed on 'wake'");
  }

  /// Returns once the server's threads have stopped spinning (true), or after 2 s (false).
  bool quiesce() {
    std::string reply;
    if (!request("quiesce", reply)) throw std::runtime_error("the LLVM OpenMP peer failed on 'quiesce'");
    return reply != "busy";
  }

  const std::string& description() const { return describe_; }

  /// For the watchdog: the server may be the one that hangs.
  void kill_now() const {
    if (pid_ > 0) kill(pid_, SIGKILL);
  }

  void stop() {
    if (to_) {
      std::fputs("quit\n", to_);
      std::fclose(to_);
      to_ = nullptr;
    }
    if (from_) {
      std::fclose(from_);
      from_ = nullptr;
    }
    if (pid_ > 0) {
      int st = 0;
      waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::string describe_;
};

std::string self_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<std::size_t>(n));
  const std::size_t s = p.rfind('/');
  return s == std::string::npos ? "." : p.substr(0, s);
}

// ---------------------------------------------------------------------------------------------------------

struct Bencher {
  Options opt;
  bool avail[kNumSys] = {};
  std::string skip_reason[kNumSys];
  OmpServer libomp;
  double tsc_hz = 0;
  mutable std::map<std::uint64_t, double> busy_s;  // measured seconds of one busy_cycles(c) call, per c
  FILE* csv = nullptr;

  // The serial cost of one task's work, measured rather than derived from the TSC frequency: reading the TSC
  // takes tens of cycles (more in a virtual machine), so busy_cycles(c) lasts longer than c ticks.
  double busy_seconds(std::uint64_t cycles) const {
    auto it = busy_s.find(cycles);
    if (it != busy_s.end()) return it->second;
    long long k = 16;
    double t = 0;
    for (;;) {  // grow k until the loop takes ~50 ms, then keep the best of 3
      const double t0 = wbench::now_s();
      for (long long i = 0; i < k; ++i) wbench::busy_cycles(cycles);
      t = wbench::now_s() - t0;
      if (t > 0.05) break;
      k *= 2;
    }
    double best = t / double(k);
    for (int r = 0; r < 2; ++r) {
      const double t0 = wbench::now_s();
      for (long long i = 0; i < k; ++i) wbench::busy_cycles(cycles);
      best = std::min(best, (wbench::now_s() - t0) / double(k));
    }
    return busy_s[cycles] = best;
  }

  bool applies(int s, Bench b) const {
    s = llp_system(s);
    if (s == kGomp1 || s == kLibomp1 || s == kFlowCopy) return b == Bench::chain;
    if (s == kFlow) return b != Bench::independent && b != Bench::priority;
    if (s == kTbb) return b != Bench::priority;  // task_group has no priorities
    // LLVM libomp 16 with 2 threads did not finish this benchmark (600 s watchdog) in our runs: not compared.
    if (s == kLibomp) return b != Bench::priority;
    return true;
  }
  // A chain without dependencies is no chain: D = 0 only for flow graphs (a control edge).
  bool applies(int s, const Config& c) const {
    return applies(s, c.bench) &&
           (c.bench != Bench::chain || c.deps > 0 || s == kFlow || s == kFlowCopy || s == kFlowLfq);
  }

  Result run(int s, const Config& c) {
    if (llp_system(s) != s) {
      wbench::weftk::set_lfq(true);
      try {
        const Result r = run(llp_system(s), c);
        wbench::weftk::set_lfq(false);
        return r;
      } catch (...) {
        wbench::weftk::set_lfq(false);
        throw;
      }
    }
    char line[128];
    switch (c.bench) {
      case Bench::chain:
        switch (s) {
          case kWeft: return wbench::weftk::chain(c.deps, c.n);
#if WEFT_BENCH_HAVE_GOMP
          case kGomp: return wbench::omp::chain(c.deps, c.n, wbench::omp::ChainMode::two_threads);
          case kGomp1: return wbench::omp::chain(c.deps, c.n, wbench::omp::ChainMode::one_thread);
#endif
          case kLibomp:
          case kLibomp1:
            std::snprintf(line, sizeof line, "chain %d %lld %d", c.deps, c.n, s == kLibomp ? 2 : 1);
            return libomp.measure(line);
#if WEFT_BENCH_HAVE_TBB
          case kTbb: return wbench::tbbk::chain(c.deps, c.n, opt.tbb_block);
#endif
          case kFlow: return wbench::flowk::chain(c.deps, c.n, false);
          case kFlowCopy: return wbench::flowk::chain(c.deps, c.n, true);
        }
        break;
      case Bench::tree:
        switch (s) {
          case kWeft: return wbench::weftk::tree(c.height, c.cycles, c.workers);
#if WEFT_BENCH_HAVE_GOMP
          case kGomp: return wbench::omp::tree(c.height, c.cycles, c.workers);
#endif
          case kLibomp:
            std::snprintf(line, sizeof line, "tree %d %llu %d", c.height, static_cast<unsigned long long>(c.cycles),
                          c.workers);
            return libomp.measure(line);
#if WEFT_BENCH_HAVE_TBB
          case kTbb: return wbench::tbbk::tree(c.height, c.cycles, c.workers);
#endif
          case kFlow: return wbench::flowk::tree(c.height, c.cycles, c.workers);
        }
        break;
      case Bench::independent:
        switch (s) {
          case kWeft: return wbench::weftk::independent(c.n, c.workers);
#if WEFT_BENCH_HAVE_GOMP
          case kGomp: return wbench::omp::independent(c.n, c.workers);
#endif
          case kLibomp:
            std::snprintf(line, sizeof line, "independent %lld %d", c.n, c.workers);
            return libomp.measure(line);
#if WEFT_BENCH_HAVE_TBB
          case kTbb: return wbench::tbbk::independent(c.n, c.workers);
#endif
        }
        break;
      case Bench::priority:
        switch (s) {
          case kWeft: return wbench::weftk::priority(c.n, opt.priority_levels, c.workers);
#if WEFT_BENCH_HAVE_GOMP
          case kGomp: return wbench::omp::priority(c.n, opt.priority_levels, c.workers);
#endif
        }
        break;
    }
    throw std::logic_error(std::string("system not built in: ") + kSysName[s]);
  }

  static const char* bench_name(Bench b) {
    return b == Bench::chain ? "chain" : b == Bench::tree ? "tree" : b == Bench::independent ? "independent" : "priority";
  }

  std::string variant(int s, const Config& c) const {
    if (llp_system(s) != s) return variant(llp_system(s), c) + ", Options::scheduler=lfq";
    const std::string w = std::to_string(c.workers);
    if (c.bench == Bench::chain) {
      switch (s) {
        case kWeft: return "Options::num_threads=1";
        case kGomp: case kLibomp: return "team of 2 threads, thread 1 held asleep";
        case kGomp1: case kLibomp1: return "team of 1 thread";
        case kTbb: return "flow::graph continue_node chain in blocks of " + std::to_string(opt.tbb_block) + ", arena(1)";
        case kFlow: return "weft flow graph, values moved, Options::num_threads=1";
        case kFlowCopy: return "weft flow graph, values copied, Options::num_threads=1";
      }
    }
    switch (s) {
      case kWeft: return "Options::num_threads=" + w;
      case kGomp: case kLibomp: return "parallel num_threads(" + w + ") + single";
      case kTbb: return "task_group in task_arena(" + w + ")";
      case kFlow: return "weft flow graph, Options::num_threads=" + w;
    }
    return "";
  }

  void check(int s, const Config& c, const Result& r) const {
    if (r.ok) return;
    std::fflush(stdout);
    std::fprintf(stderr,
                 "weft-bench-micro: FAILED: %s, %s (deps=%d tasks=%lld height=%d cycles=%llu workers=%d): result "
                 "%lld, expected %lld\n",
                 bench_name(c.bench), kSysName[s], c.deps, c.n, c.height, static_cast<unsigned long long>(c.cycles),
                 c.workers, r.got, r.want);
    std::exit(1);
  }

  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }

  struct Row {
    std::vector<int> systems;
    std::vector<std::vector<double>> ns;  // per system, per repetition: ns/task
    std::vector<double> med;
  };

  // Waits until system s's idle threads stop spinning, so that they do not take cores from the next system.
  void settle(int s) {
    if (!opt.quiesce) return;
    const bool idle = (s == kLibomp || s == kLibomp1) ? libomp.quiesce() : wbench::quiesce();
    if (!idle && !warned_busy[s]) {
      warned_busy[s] = true;
      std::fprintf(stderr, "weft-bench-micro: warning: %s's threads still use the CPU 2 s after a run (idle threads "
                   "that never sleep?); the next measurements share the cores with them\n", kSysName[s]);
    }
  }
  bool warned_busy[kNumSys] = {};

  // Watchdog: a thread that aborts the process if no run finishes for opt.watchdog_s seconds (a runtime that
  // hangs would otherwise hang the CI job). It only sleeps and reads two variables.
  std::atomic<long long> progress{0};
  std::mutex current_mutex;
  std::string current;
  void set_current(const Config& c) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s deps=%d tasks=%lld height=%d cycles=%llu workers=%d", bench_name(c.bench),
                  c.deps, c.n, c.height, static_cast<unsigned long long>(c.cycles), c.workers);
    std::lock_guard<std::mutex> lk(current_mutex);
    current = buf;
  }
  void start_watchdog() {
    std::thread([this] {
      long long last = -1;
      double since = wbench::now_s();
      while (true) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        const long long p = progress.load(std::memory_order_relaxed);
        if (p != last) {
          last = p;
          since = wbench::now_s();
        } else if (wbench::now_s() - since > double(opt.watchdog_s)) {
          std::lock_guard<std::mutex> lk(current_mutex);
          std::fflush(stdout);
          std::fprintf(stderr, "weft-bench-micro: FAILED: no run finished for %lld s (%s); a runtime hangs?\n",
                       opt.watchdog_s, current.c_str());
          libomp.kill_now();
          std::_Exit(3);
        }
      }
    }).detach();
  }

  // A few hundred tasks of the same kind (untimed), run just before a timed run (then wake()): caches and pools
  // are warm, and the system's worker threads, put to sleep by settle(), are awake: the timed run measures
  // throughput, not wake-up latency.
  static Config primer(const Config& c) {
    Config p = c;
    if (c.bench == Bench::tree) p.height = std::min(c.height, 4);
    else p.n = std::min(c.n, 1000LL);
    return p;
  }

  // Every worker of system s awake and looking for work, just before a timed run of c on several workers: the
  // primer alone does not ensure it (one worker can run a few hundred short tasks before another wakes), and on
  // a virtual machine an idle CPU can take milliseconds to wake, which the run would time.
  void wake(int s, const Config& c) {
    if (c.workers < 2 || c.bench == Bench::chain) return;  // the chains run on one worker
    switch (llp_system(s)) {
      case kWeft:
      case kFlow: {
        wbench::weftk::set_lfq(llp_system(s) != s);
        wbench::weftk::wake(c.workers);
        wbench::weftk::set_lfq(false);
        break;
      }
#if WEFT_BENCH_HAVE_GOMP
      case kGomp: wbench::omp::wake(c.workers); break;
#endif
      case kLibomp: libomp.wake(c.workers); break;
#if WEFT_BENCH_HAVE_TBB
      case kTbb: wbench::tbbk::wake(c.workers); break;
#endif
      default: break;
    }
  }

  // The configuration system s actually runs: libomp's two-thread chain is capped (see --libomp-chain-tasks).
  Config effective(int s, const Config& c) const {
    Config e = c;
    if (c.bench == Bench::chain && s == kLibomp) e.n = std::min(c.n, opt.libomp_chain_tasks);
    return e;
  }
  bool capped(int s, const Config& c) const { return effective(s, c).n != c.n; }

  // One configuration: a warm-up run of each system (1/20 of the size: touches memory, starts threads), then
  // opt.reps timed runs of each system, interleaved (primer, wake, timed run, settle).
  Row measure(const Config& c, const Config& warm) {
    set_current(c);
    Row row;
    for (int s = 0; s < kNumSys; ++s)
      if (avail[s] && applies(s, c)) row.systems.push_back(s);
    row.ns.resize(row.systems.size());
    if (opt.warmup)
      for (int s : row.systems) {
        progress.fetch_add(1, std::memory_order_relaxed);
        check(s, warm, run(s, effective(s, warm)));
        settle(s);
      }
    const Config prime = primer(c);
    for (int rep = 0; rep < opt.reps; ++rep)
      for (std::size_t k = 0; k < row.systems.size(); ++k) {
        const int s = row.systems[k];
        const Config e = effective(s, c);
        progress.fetch_add(1, std::memory_order_relaxed);
        if (opt.warmup) {
          check(s, prime, run(s, prime));
          wake(s, c);
        }
        const Result r = run(s, e);
        check(s, e, r);
        row.ns[k].push_back(r.seconds * 1e9 / double(e.tasks()));
        settle(s);
      }
    for (auto& v : row.ns) row.med.push_back(median(v));
    return row;
  }

  // Overhead against the ideal time: tasks x (measured time of one task's busy-wait) / workers.
  double overhead_pct(const Config& c, double ns_per_task) const {
    if (c.bench != Bench::tree || c.cycles == 0) return NAN;
    const double ideal = double(c.tasks()) * busy_seconds(c.cycles) / c.workers;
    const double t = ns_per_task * 1e-9 * double(c.tasks());
    return (t / ideal - 1.0) * 100.0;
  }

  void write_csv(const Config& c, const Row& row) {
    if (!csv) return;
    const double weft_med = row.systems.empty() || row.systems[0] != kWeft ? NAN : row.med[0];
    for (std::size_t k = 0; k < row.systems.size(); ++k) {
      const int s = row.systems[k];
      const auto mm = std::minmax_element(row.ns[k].begin(), row.ns[k].end());
      std::fprintf(csv, "%s,%d,%d,%llu,%lld,%d,%s,\"%s\",%.3f,%.3f,%.3f,", bench_name(c.bench), c.deps, c.height,
                   static_cast<unsigned long long>(c.cycles), effective(s, c).tasks(), c.workers, kSysName[s],
                   variant(s, c).c_str(), row.med[k], *mm.first, *mm.second);
      if (std::isnan(weft_med)) std::fprintf(csv, ",");
      else std::fprintf(csv, "%.4f,", row.med[k] / weft_med);
      const double ov = overhead_pct(c, row.med[k]);
      if (!std::isnan(ov)) std::fprintf(csv, "%.2f", ov);
      std::fprintf(csv, ",");
      for (std::size_t i = 0; i < row.ns[k].size(); ++i) std::fprintf(csv, "%s%.3f", i ? ";" : "", row.ns[k][i]);
      std::fprintf(csv, "\n");
    }
    std::fflush(csv);
  }

  std::vector<int> columns(Bench b) const {
    std::vector<int> cols;
    for (int s = 0; s < kNumSys; ++s)
      if (avail[s] && applies(s, b)) cols.push_back(s);
    return cols;
  }

  // A cell: ns/task, then [peer/weft] for peers, then the tree's overhead.
  static constexpr int kCellW = 17;
  std::string cell(int s, const Config& c, const Row& row, std::size_t k) const {
    char buf[96];
    const double weft_med = row.systems[0] == kWeft ? row.med[0] : NAN;
    // Peers are compared with weft's dependency tasks; flow-copy with flow (when weft has no row: D = 0); the
    // -lfq systems with their default-scheduler system (lfq/llp).
    double ref = std::isnan(weft_med) && s == kFlowCopy && k > 0 && row.systems[k - 1] == kFlow ? row.med[k - 1]
                                                                                                  : weft_med;
    if (s == kFlowLfq) {
      ref = NAN;
      for (std::size_t j = 0; j < row.systems.size(); ++j)
        if (row.systems[j] == kFlow) ref = row.med[j];
    }
    int n = std::snprintf(buf, sizeof buf, "%9.1f%s", row.med[k], capped(s, c) ? "*" : "");
    const char* pad = capped(s, c) ? "" : " ";
    if (s != kWeft && !std::isnan(ref))
      n += std::snprintf(buf + n, sizeof buf - n, "%s%7s", pad, (fmt_ratio(row.med[k] / ref)).c_str());
    else
      n += std::snprintf(buf + n, sizeof buf - n, "%s%7s", pad, "");
    if (c.bench == Bench::tree) {
      const double ov = overhead_pct(c, row.med[k]);
      if (std::isnan(ov)) std::snprintf(buf + n, sizeof buf - n, " %7s", "");
      else std::snprintf(buf + n, sizeof buf - n, " %+6.1f%%", ov);
    }
    return buf;
  }

  static std::string fmt_ratio(double r) {
    char b[32];
    if (r >= 100) std::snprintf(b, sizeof b, "x%.0f", r);
    else if (r >= 10) std::snprintf(b, sizeof b, "x%.1f", r);
    else std::snprintf(b, sizeof b, "x%.2f", r);
    return b;
  }

  void print_header_row(Bench b) const {
    const auto cols = columns(b);
    std::string h;
    if (b == Bench::chain) h = " deps      tasks";
    else if (b == Bench::tree) h = " height task-cycles    tasks workers";
    else h = "     tasks workers";
    for (int s : cols) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "  %9s%*s", kSysName[s], (b == Bench::tree ? kCellW + 8 : kCellW) - 9, "");
      h += buf;
    }
    while (!h.empty() && h.back() == ' ') h.pop_back();
    std::printf("%s\n", h.c_str());
  }

  void print_row(const Config& c, const Row& row) const {
    char buf[96];
    if (c.bench == Bench::chain) std::snprintf(buf, sizeof buf, " %4d %10lld", c.deps, c.n);
    else if (c.bench == Bench::tree)
      std::snprintf(buf, sizeof buf, " %6d %11llu %8lld %7d", c.height, static_cast<unsigned long long>(c.cycles),
                    c.tasks(), c.workers);
    else std::snprintf(buf, sizeof buf, " %9lld %7d", c.n, c.workers);
    std::string line = buf;
    std::size_t k = 0;
    for (int s : columns(c.bench)) {
      if (k < row.systems.size() && row.systems[k] == s) {
        line += "  " + cell(s, c, row, k);
        ++k;
      } else {  // not applicable to this row (chain with D = 0)
        line += "  " + std::string(c.bench == Bench::tree ? kCellW + 8 : kCellW, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  // replay: weft alone (taskiter has no counterpart in the peers here). For each graph and mode, R repetitions
  // of (1-iteration loop, N-iteration loop); the cost per replayed task is the difference over (N-1) M tasks.
  void run_replay() {
    if (!avail[kWeft]) return;
    using wbench::weftk::ReplayGraph;
    using wbench::weftk::ReplayMode;
    const long long m = opt.replay_tasks, n = opt.replay_iters;
    std::printf("\n== replay: a loop of %lld iterations of %lld tasks (chain: all inout on one counter, 1 worker; wide: "
                "independent, 2 workers).\n   ns/task, median of %d. tasks: spawned every iteration; record: "
                "1-iteration taskiter / M; replay: (t(N) - t(1)) / ((N-1) M).\n",
                n, m, opt.reps);
    std::printf(" graph   workers  %10s  %10s  %10s  %13s  %14s\n", "tasks", "record", "replay", "replay/record",
                "barrier-replay");
    const char* const mode_name[3] = {"tasks", "taskiter", "barrier"};
    for (int gi = 0; gi < 2; ++gi) {
      if (!opt.replay_graph[gi]) continue;
      const ReplayGraph g = gi == 0 ? ReplayGraph::chain : ReplayGraph::wide;
      const int workers = gi == 0 ? 1 : 2;
      double cost[3][2];  // per mode: {record or per-task, replay}
      for (auto& c : cost) c[0] = c[1] = NAN;
      for (int mi = 0; mi < 3; ++mi) {
        if (!opt.replay_mode[mi]) continue;
        const ReplayMode mode = static_cast<ReplayMode>(mi);
        {
          std::lock_guard<std::mutex> lk(current_mutex);
          current = std::string("replay ") + (gi == 0 ? "chain " : "wide ") + mode_name[mi];
        }
        auto once = [&](long long iters) {
          progress.fetch_add(1, std::memory_order_relaxed);
          const Result r = wbench::weftk::replay(g, mode, m, iters, workers);
          if (!r.ok) {
            std::fflush(stdout);
            std::fprintf(stderr, "weft-bench-micro: FAILED: replay %s %s (tasks=%lld iterations=%lld): result %lld, "
                         "expected %lld\n", gi == 0 ? "chain" : "wide", mode_name[mi], m, iters, r.got, r.want);
            std::exit(1);
          }
          return r.seconds;
        };
        if (opt.warmup) once(std::max(2LL, n / 20));
        std::vector<double> first, per;
        for (int rep = 0; rep < opt.reps; ++rep) {
          const double t1 = once(1);
          const double tn = once(n);
          first.push_back(t1 * 1e9 / double(m));
          per.push_back(mode == ReplayMode::tasks ? tn * 1e9 / double(n * m) : (tn - t1) * 1e9 / double((n - 1) * m));
          settle(kWeft);
        }
        cost[mi][0] = median(first);
        cost[mi][1] = median(per);
      }
      auto cell = [](double v) {
        char b[32];
        if (std::isnan(v)) std::snprintf(b, sizeof b, "%10s", "-");
        else std::snprintf(b, sizeof b, "%10.1f", v);
        return std::string(b);
      };
      const double ratio = cost[1][1] / cost[1][0];
      char r[32];
      if (std::isnan(ratio)) std::snprintf(r, sizeof r, "%13s", "-");
      else std::snprintf(r, sizeof r, "%13.3f", ratio);
      std::printf(" %-6s  %7d  %s  %s  %s  %s   %s\n", gi == 0 ? "chain" : "wide", workers, cell(cost[0][1]).c_str(),
                  cell(cost[1][0]).c_str(), cell(cost[1][1]).c_str(), r, cell(cost[2][1]).c_str());
      std::fflush(stdout);
    }
  }

  // pingpong: weft alone (no peer kernel written for it). Repetitions interleave the two gaps.
  void run_pingpong() {
    if (!avail[kWeft]) return;
    {
      std::lock_guard<std::mutex> lk(current_mutex);
      current = "pingpong";
    }
    const long long hops[2] = {opt.pingpong_hops, opt.pingpong_hops / 40};
    const int gap_us[2] = {0, 2000};
    std::vector<double> ns[2], vol, invol, wvol;
    if (opt.warmup) wbench::weftk::pingpong(std::min(1000LL, hops[0]), 0);
    for (int rep = 0; rep < opt.reps; ++rep) {
      for (int g = 0; g < 2; ++g) {
        progress.fetch_add(1, std::memory_order_relaxed);
        ns[g].push_back(wbench::weftk::pingpong(hops[g], gap_us[g]));
      }
      progress.fetch_add(1, std::memory_order_relaxed);
      const auto sw = wbench::weftk::idle_switches(1.0);
      const auto ws = wbench::weftk::waiting_switches(1.0);
      wvol.push_back(ws.first);
      vol.push_back(sw.first);
      invol.push_back(sw.second);
    }
    std::printf("\n== pingpong: 2 workers, hop i spawns hop i+1 and spins until it starts (the other worker steals it); "
                "weft only.\n   ns from a hop's spawn to its start: median over the hops, then median of %d.\n",
                opt.reps);
    std::printf(" gap-us     hops   ns/hop\n");
    for (int g = 0; g < 2; ++g) std::printf(" %6d %8lld %8.0f\n", gap_us[g], hops[g], median(ns[g]));
    std::printf("== idle: worker 1 of 2 idle for 1 s while worker 0 runs a busy root body; its context switches per "
                "second, median of %d:\n   voluntary %.0f, involuntary %.0f\n",
                opt.reps, median(vol), median(invol));
    std::printf("== waiting: worker 0 of 2 in taskwait for 1 s while worker 1 runs its child; its voluntary context "
                "switches per second, median of %d: %.0f\n",
                opt.reps, median(wvol));
    std::fflush(stdout);
  }

  void run_bench(Bench b) {
    std::vector<Config> configs;
    if (b == Bench::chain) {
      for (int d : opt.deps) {
        Config c;
        c.bench = b;
        c.deps = d;
        c.n = opt.chain_tasks;
        configs.push_back(c);
      }
    } else if (b == Bench::tree) {
      for (auto [cycles, h] : opt.tree)
        for (int w : opt.workers) {
          Config c;
          c.bench = b;
          c.height = h;
          c.cycles = cycles;
          c.workers = w;
          configs.push_back(c);
        }
    } else {
      for (int w : opt.workers) {
        Config c;
        c.bench = b;
        c.n = b == Bench::priority ? opt.priority_tasks : opt.independent_tasks;
        c.workers = w;
        configs.push_back(c);
      }
    }
    if (columns(b).empty()) return;
    std::printf("\n");
    if (b == Bench::chain) {
      std::printf("== chain: N tasks, each inout on the same D addresses (ordered one after the other), one executing "
                  "worker.\n   ns/task, median of %d; [peer/weft]. gomp, libomp: team of 2 threads, thread 1 held "
                  "asleep; -1t: team of 1 thread; tbb: flow::graph of continue_nodes.\n",
                  opt.reps);
      if (avail[kLibomp] && opt.chain_tasks > opt.libomp_chain_tasks)
        std::printf("   * libomp (2 threads) measured on %lld tasks (--libomp-chain-tasks): it holds every task until "
                    "the taskwait, ~1.5 KB each.\n",
                    opt.libomp_chain_tasks);
    } else if (b == Bench::tree) {
      std::printf("== tree: binary tree of tasks (every task busy-waits `cycles` TSC ticks, then an inner task spawns 2 "
                  "children and waits for them).\n   ns/task (all 2^(height+1)-1 tasks), median of %d; "
                  "[peer/weft]; overhead against tasks x (one busy-wait's measured time) / workers (TSC %.3f GHz).\n",
                  opt.reps, tsc_hz * 1e-9);
    } else if (b == Bench::independent) {
      std::printf("== independent: N independent tasks spawned by one producer, then one wait.\n   ns/task, median "
                  "of %d; [peer/weft].\n",
                  opt.reps);
    } else {
      std::printf("== priority: N independent tasks spawned by one producer, task i with priority 1 + hash(i) mod %d, "
                  "then one wait.\n   ns/task, median of %d; [peer/weft]. OpenMP: the priority clause (honoured up to "
                  "OMP_MAX_TASK_PRIORITY; a warning says when it is lower).\n",
                  opt.priority_levels, opt.reps);
    }
    {
      const auto cols = columns(b);
      if (std::find(cols.begin(), cols.end(), kWeftLfq) != cols.end() ||
          std::find(cols.begin(), cols.end(), kFlowLfq) != cols.end())
        std::printf("   weft-lfq, flow-lfq: Options::scheduler = lfq (PaRSEC's local flat queues, buffers of %s); "
                    "their ratio is lfq/llp, to weft and flow.\n",
                    wbench::weftk::lfq_buffer_description().c_str());
    }
    print_header_row(b);
    for (const Config& c : configs) {
      Config warm = c;
      if (b == Bench::tree) warm.height = std::max(1, c.height - 3);
      else warm.n = std::max(1LL, std::min(c.n, std::max(c.n / 20, 1000LL)));
      const Row row = measure(c, warm);
      print_row(c, row);
      write_csv(c, row);
    }
  }
};

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const std::size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  return "unknown CPU";
}

// The 1-minute load average at start: other processes on the machine make the numbers noisy.
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  if (!(f >> one)) return "unknown";
  return one;
}

double measure_tsc_hz() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t c0 = __rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t1 = std::chrono::steady_clock::now();
  const std::uint64_t c1 = __rdtsc();
  return double(c1 - c0) / std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Bencher B;
  B.opt = parse_args(argc, argv);
  const Options& o = B.opt;
  try {  // a bad WEFT_* value is bad input, refused before anything starts
    (void)weft::Options::from_environment();
  } catch (const weft::config_error& e) {
    std::fprintf(stderr, "weft-bench-micro: %s\n", e.what());
    return 2;
  }

  // Availability of the systems. The LLVM OpenMP server is started first, before this process has threads.
  for (int s = 0; s < kNumSys; ++s) B.avail[s] = o.only[s];
#if !WEFT_BENCH_HAVE_GOMP
  B.avail[kGomp] = B.avail[kGomp1] = false;
  B.skip_reason[kGomp] = B.skip_reason[kGomp1] = WEFT_BENCH_GOMP_SKIP;
#endif
#if !WEFT_BENCH_HAVE_TBB
  B.avail[kTbb] = false;
  B.skip_reason[kTbb] = "oneTBB not found at configure time (find_package(TBB))";
#endif
  if (B.avail[kLibomp] || B.avail[kLibomp1]) {
#if WEFT_BENCH_HAVE_LIBOMP
    std::string path;
    if (const char* e = std::getenv("WEFT_BENCH_LIBOMP_SERVER")) path = e;
    else {
      path = self_dir() + "/weft-bench-micro-libomp";
      if (access(path.c_str(), X_OK) != 0) path = WEFT_BENCH_LIBOMP_SERVER;
    }
    const std::string err = B.libomp.start(path);
    if (!err.empty()) {
      B.avail[kLibomp] = B.avail[kLibomp1] = false;
      B.skip_reason[kLibomp] = B.skip_reason[kLibomp1] = "LLVM OpenMP peer " + err;
    }
#else
    B.avail[kLibomp] = B.avail[kLibomp1] = false;
    B.skip_reason[kLibomp] = B.skip_reason[kLibomp1] = WEFT_BENCH_LIBOMP_SKIP;
#endif
  }
  if (!B.avail[kWeft]) {
    B.skip_reason[kWeft] = "not selected (--only): no peer/weft ratios";
  }
  for (int s = 0; s < kNumSys; ++s)
    if (!o.only[s] && B.skip_reason[s].empty()) B.skip_reason[s] = "not selected (--only)";

  if (o.bench[1]) B.tsc_hz = measure_tsc_hz();

  // Header: the machine and the versions.
  {
    char date[64];
    const std::time_t t = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
    std::printf("weft-bench-micro  %s\n", date);
    std::printf("machine: %s, %u hardware threads", cpu_model().c_str(), std::thread::hardware_concurrency());
    if (B.tsc_hz > 0) std::printf(", TSC %.3f GHz", B.tsc_hz * 1e-9);
    std::printf(", load average %s\n", load_average().c_str());
#if defined(__clang__)
    std::printf("driver:  clang++ %s\n", __clang_version__);
#else
    std::printf("driver:  g++ %s\n", __VERSION__);
#endif
#ifndef NDEBUG
    std::printf("warning: built without NDEBUG (a Debug build?): the numbers are not representative\n");
#endif
    std::printf("weft:    %s\n", wbench::weftk::describe().c_str());
#if WEFT_BENCH_HAVE_GOMP
    if (B.avail[kGomp] || B.avail[kGomp1]) std::printf("gomp:    %s\n", wbench::omp::describe().c_str());
#endif
    if (B.avail[kLibomp] || B.avail[kLibomp1]) std::printf("libomp:  %s\n", B.libomp.description().c_str());
#if WEFT_BENCH_HAVE_TBB
    if (B.avail[kTbb]) std::printf("tbb:     %s\n", wbench::tbbk::describe().c_str());
#endif
    for (int s = 0; s < kNumSys; ++s)
      if (!B.avail[s] && !B.skip_reason[s].empty() && (s != kGomp1 || B.skip_reason[s] != B.skip_reason[kGomp]) &&
          (s != kLibomp1 || B.skip_reason[s] != B.skip_reason[kLibomp]))
        std::printf("skipped: %s: %s\n", kSysName[s], B.skip_reason[s].c_str());
    std::printf("reps:    %d per system, interleaved%s%s%s\n", o.reps,
                o.warmup ? "; untimed warm-up per configuration and primer before each run" : "",
                o.quiesce ? "; spinning idle threads waited out after each run" : "", o.quick ? "; --quick sizes" : "");
    std::fflush(stdout);
  }

  if (!o.csv.empty()) {
    B.csv = std::fopen(o.csv.c_str(), "w");
    if (!B.csv) {
      std::fprintf(stderr, "weft-bench-micro: cannot write %s: %s\n", o.csv.c_str(), std::strerror(errno));
      return 2;
    }
    std::fprintf(B.csv,
                 "bench,deps,height,leaf_cycles,tasks,workers,system,variant,median_ns_per_task,min_ns_per_task,"
                 "max_ns_per_task,ratio_vs_weft,overhead_pct,reps_ns_per_task\n");
  }

  B.start_watchdog();
  const double t_start = wbench::now_s();
  try {
    if (o.bench[0]) B.run_bench(Bench::chain);
    if (o.bench[1]) B.run_bench(Bench::tree);
    if (o.bench[2]) B.run_bench(Bench::independent);
    if (o.bench[5]) B.run_bench(Bench::priority);
    if (o.bench[3]) B.run_replay();
    if (o.bench[4]) B.run_pingpong();
  } catch (const weft::config_error& e) {  // a profile or trace file that cannot be created
    std::fflush(stdout);
    std::fprintf(stderr, "weft-bench-micro: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "weft-bench-micro: FAILED: %s\n", e.what());
    return 1;
  }
  std::printf("\ntotal %.1f s\n", wbench::now_s() - t_start);
  if (B.csv) std::fclose(B.csv);
  B.libomp.stop();
  return 0;
}
