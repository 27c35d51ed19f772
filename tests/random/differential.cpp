// Randomized differential test: random programs of nested tasks with random accesses (all modes, weak ones
// included) run on weft with 1..4 workers and compared with a sequential reference interpreter (children run
// at their spawn point, depth first: the sequential semantics of tasks.hpp).
//
// Program model (only well-defined programs are generated):
//   * a tree of tasks (root = task 0, depth <= 3) over a few uint32 variables v0..v5;
//   * a child accesses only variables its parent declared, with a compatible mode:
//       parent in / weak_in                      -> child in or weak_in
//       parent out / inout / weak_out / weak_inout -> child any mode
//       parent inoutset / commutative            -> child does not access the variable
//     (the root may access everything);
//   * a task body first reads its in/inout variables (recorded), then writes: out/inout assign a hash of the
//     task id and everything it read; inoutset members add a task-specific constant atomically; commutative
//     members add one non-atomically (and check they are alone), so the result within a set is
//     order-independent and nobody reads in the middle of a set;
//   * a weakly accessing task never touches the variable itself, only its children do, and never waits
//     (taskwait in weak tasks is a documented limitation); it has at most 3 children, so throttling never
//     triggers in it either (the smallest max_tasks used is 4);
//   * other parents interleave spawns with taskwait (then they re-read every variable they may read and
//     rewrite every variable they may write) and taskwait_on(v) (then they re-read v if they may read it);
//   * accesses are sometimes declared as several clauses that merge (in+out, a duplicate) or as a region
//     starting at the variable; tasks get random priorities and labels.
// Each program runs on 4 runtimes: 1 worker; 2 workers; 3 workers with max_tasks = 4 (throttling);
// 4 workers without immediate successor. Each run compares every task's recorded reads, the final variable values, that each task ran once,
// commutative exclusion and the task counters of Stats.
//
// Environment: WEFT_TEST_SCALE scales the number of programs; WEFT_DIFF_SEED=<seed> WEFT_DIFF_KIND=<kind>
// reruns one program verbosely (test Differential.Single); WEFT_DIFF_PROGRAMS overrides the count;
// WEFT_DIFF_HANG_SECONDS (default 20, 60 under sanitizers) is how long one program may make no progress
// before the test prints its seed and aborts. To shrink a failing program: random/minimize.py.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/test_util.hpp"

namespace {

using u32 = std::uint32_t;
using u64 = std::uint64_t;
using weft::AccessMode;

constexpr int kMaxVars = 6;
constexpr std::size_t kMaxAcc = 2 * kMaxVars;

bool is_weak(AccessMode m) {
  return m == AccessMode::weak_in || m == AccessMode::weak_out || m == AccessMode::weak_inout;
}

enum class Perm : std::uint8_t { none, read, full };

// How an access is written at the spawn: plain, or as several clauses that merge into it.
// (`region` names the datum as a region starting at the variable: the same datum, since a datum is named by its
// start address.)
enum class Decl : std::uint8_t { plain, in_out, out_in, inout_in, duplicate, region };

struct Acc {
  int var;
  AccessMode mode;
  Decl decl = Decl::plain;
};

struct Step {
  enum Kind : std::uint8_t { spawn, taskwait, taskwait_on } kind;
  int arg;  // child task id, or variable for taskwait_on
};

struct Task {
  int parent = -1;
  int depth = 0;
  std::vector<Acc> acc;  // distinct variables, in clause order
  std::vector<Step> steps;
  int priority = 0;
  int spin_us = 0;
  bool weak = false;
  bool labelled = false;
  AccessMode mode_of(int v, bool& has) const {
    for (const Acc& a : acc)
      if (a.var == v) {
        has = true;
        return a.mode;
      }
    has = false;
    return AccessMode::in;
  }
};

struct Program {
  u64 seed = 0;
  std::string kind;
  int nvars = 0;
  u32 init[kMaxVars] = {};
  std::vector<Task> tasks;  // tasks[0] is the root (run's function)
};

struct GenParams {
  bool allow_weak = true;
  int max_root_children = 10;
  int max_children[4] = {0, 4, 3, 0};  // by depth (root handled separately)
  int weak_max_children = 3;
  double p_has_children = 0.55;
  double p_taskwait = 0.15;
  double p_taskwait_on = 0.12;
  double p_repeat_previous = 0.25;
};

GenParams params_for(const std::string& kind) {
  GenParams g;
  if (kind == "strong") g.allow_weak = false;
  if (kind == "wide") {
    g.max_root_children = 24;
    g.max_children[1] = 6;
    g.max_children[2] = 4;
    g.p_has_children = 0.35;
  }
  return g;
}

class Gen {
 public:
  Gen(u64 seed, const GenParams& gp) : rng_(seed), gp_(gp) {}

  Program make(u64 seed, const std::string& kind) {
    Program p;
    p.seed = seed;
    p.kind = kind;
    p.nvars = 4 + static_cast<int>(below(kMaxVars - 3));  // 4..6
    for (int v = 0; v < p.nvars; ++v) p.init[v] = static_cast<u32>(rng_());
    p.tasks.emplace_back();  // root
    children(p, 0);
    return p;
  }

 private:
  u64 below(u64 n) { return n == 0 ? 0 : rng_() % n; }
  bool chance(double q) { return std::uniform_real_distribution<double>(0, 1)(rng_) < q; }

  static Perm perm_for_children(const Program& p, int t, int v) {
    if (t == 0) return Perm::full;
    bool has;
    AccessMode m = p.tasks[t].mode_of(v, has);
    if (!has) return Perm::none;
    switch (m) {
      case AccessMode::in:
      case AccessMode::weak_in: return Perm::read;
      case AccessMode::out:
      case AccessMode::inout:
      case AccessMode::weak_out:
      case AccessMode::weak_inout: return Perm::full;
      default: return Perm::none;  // inoutset / commutative: children leave it alone
    }
  }

  AccessMode pick_mode(Perm perm, bool weak_ok) {
    if (perm == Perm::read) return weak_ok && chance(0.3) ? AccessMode::weak_in : AccessMode::in;
    static const AccessMode strong[] = {AccessMode::in, AccessMode::in, AccessMode::in, AccessMode::out,
                                        AccessMode::out, AccessMode::inout, AccessMode::inout, AccessMode::inout,
                                        AccessMode::inoutset, AccessMode::inoutset, AccessMode::commutative,
                                        AccessMode::commutative};
    static const AccessMode weak[] = {AccessMode::weak_in, AccessMode::weak_out, AccessMode::weak_inout,
                                      AccessMode::weak_inout};
    if (weak_ok && chance(0.35)) return weak[below(4)];
    return strong[below(std::size(strong))];
  }

  // Fills the accesses of a new child of `parent`; returns whether it should get children.
  void make_child(Program& p, int parent, int child, const Task* previous) {
    Task& c = p.tasks[child];
    c.parent = parent;
    c.depth = p.tasks[parent].depth + 1;
    bool want_kids = c.depth < 3 && chance(gp_.p_has_children);
    bool weak_ok = gp_.allow_weak && (want_kids || chance(0.1));
    if (previous && chance(gp_.p_repeat_previous)) {
      c.acc = previous->acc;  // same accesses as the previous sibling: makes reader groups and sets
      for (Acc& a : c.acc)
        if (is_weak(a.mode) && !weak_ok) a.mode = a.mode == AccessMode::weak_in ? AccessMode::in : AccessMode::inout;
    } else {
      for (int v = 0; v < p.nvars; ++v) {
        Perm perm = perm_for_children(p, parent, v);
        if (perm == Perm::none || !chance(0.45)) continue;
        c.acc.push_back({v, pick_mode(perm, weak_ok)});
      }
      std::shuffle(c.acc.begin(), c.acc.end(), rng_);
    }
    for (Acc& a : c.acc) {
      a.decl = Decl::plain;
      if (a.mode == AccessMode::inout && chance(0.12)) a.decl = static_cast<Decl>(1 + below(3));
      else if (chance(0.04)) a.decl = Decl::duplicate;
      else if (chance(0.05)) a.decl = Decl::region;
    }
    c.weak = std::any_of(c.acc.begin(), c.acc.end(), [](const Acc& a) { return is_weak(a.mode); });
    c.priority = chance(0.3) ? static_cast<int>(below(7)) - 3 : 0;
    c.spin_us = chance(0.08) ? static_cast<int>(below(30)) : 0;
    c.labelled = chance(0.2);
    if (want_kids) children(p, child);
  }

  void children(Program& p, int t) {
    int depth = p.tasks[t].depth;
    int maxc = depth == 0 ? gp_.max_root_children : gp_.max_children[depth];
    if (p.tasks[t].weak) maxc = std::min(maxc, gp_.weak_max_children);
    int n = depth == 0 ? 1 + static_cast<int>(below(maxc)) : static_cast<int>(below(maxc + 1));
    bool may_wait = !p.tasks[t].weak;
    int prev = -1;
    for (int i = 0; i < n; ++i) {
      int c = static_cast<int>(p.tasks.size());
      p.tasks.emplace_back();
      p.tasks[t].steps.push_back({Step::spawn, c});
      Task previous_copy;
      if (prev >= 0) previous_copy = p.tasks[prev];
      make_child(p, t, c, prev >= 0 ? &previous_copy : nullptr);
      prev = c;
      if (may_wait) {
        if (chance(gp_.p_taskwait))
          p.tasks[t].steps.push_back({Step::taskwait, 0});
        else if (chance(gp_.p_taskwait_on))
          p.tasks[t].steps.push_back({Step::taskwait_on, static_cast<int>(below(p.nvars))});
      }
    }
  }

  std::mt19937_64 rng_;
  GenParams gp_;
};

void describe_task(const Program& p, int i, std::ostringstream& os) {
  const Task& t = p.tasks[i];
  os << std::string(2 * t.depth, ' ') << "T" << i << (i == 0 ? " (root)" : "") << ":";
  for (const Acc& a : t.acc) {
    os << " " << weft::to_string(a.mode) << "(v" << a.var << ")";
    if (a.decl != Decl::plain) os << "[decl" << static_cast<int>(a.decl) << "]";
  }
  if (t.priority) os << " prio=" << t.priority;
  if (t.spin_us) os << " spin=" << t.spin_us << "us";
  os << " | steps:";
  for (const Step& s : t.steps) {
    if (s.kind == Step::spawn) os << " spawn T" << s.arg;
    if (s.kind == Step::taskwait) os << " taskwait";
    if (s.kind == Step::taskwait_on) os << " taskwait_on(v" << s.arg << ")";
  }
  os << "\n";
  for (const Step& s : t.steps)
    if (s.kind == Step::spawn) describe_task(p, s.arg, os);
}

// The program as text: each task (reachable from the root) with its accesses and steps, children indented.
std::string describe(const Program& p) {
  std::ostringstream os;
  os << "program seed=" << p.seed << " kind=" << p.kind << " nvars=" << p.nvars << " init={";
  for (int v = 0; v < p.nvars; ++v) os << (v ? "," : "") << p.init[v];
  os << "}\n";
  describe_task(p, 0, os);
  return os.str();
}

// ---------------------------------------------------------------------------------------------------------
// Execution (shared by the reference interpreter and weft).

inline u64 mix(u64 h, u64 v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return h;
}
inline u32 set_constant(int id, int v) { return static_cast<u32>(id) * 7919u + static_cast<u32>(v) * 104729u + 1u; }

struct Exec {
  explicit Exec(const Program& prog) : p(prog), logs(prog.tasks.size()), runs(new std::atomic<int>[prog.tasks.size()]) {
    for (int v = 0; v < kMaxVars; ++v) vars[v].value = p.init[v];
    for (std::size_t i = 0; i < p.tasks.size(); ++i) runs[i] = 0;
  }
  const Program& p;
  struct alignas(16) Slot {
    u32 value;
  };
  Slot vars[kMaxVars];
  std::vector<std::vector<u32>> logs;
  std::unique_ptr<std::atomic<int>[]> runs;
  std::atomic<int> inside[kMaxVars] = {};
  std::atomic<int> exclusion_violations{0};
};

bool may_read_after_wait(const Task& t, int id, int v) {
  if (id == 0) return true;
  bool has;
  AccessMode m = t.mode_of(v, has);
  return has && (m == AccessMode::in || m == AccessMode::out || m == AccessMode::inout);
}
bool may_write_after_wait(const Task& t, int id, int v) {
  if (id == 0) return true;
  bool has;
  AccessMode m = t.mode_of(v, has);
  return has && (m == AccessMode::out || m == AccessMode::inout);
}

template <class Ctx>
void task_body(Exec& e, int id, Ctx& ctx) {
  const Task& t = e.p.tasks[id];
  e.runs[id].fetch_add(1, std::memory_order_relaxed);
  std::vector<u32>& log = e.logs[id];
  u64 h = mix(e.p.seed, static_cast<u64>(id));
  for (const Acc& a : t.acc)
    if (a.mode == AccessMode::in || a.mode == AccessMode::inout) {
      u32 r = e.vars[a.var].value;
      log.push_back(r);
      h = mix(h, r);
    }
  if (t.spin_us && Ctx::kParallel) weft_test::busy_for_us(t.spin_us);
  for (const Acc& a : t.acc) {
    u32& x = e.vars[a.var].value;
    switch (a.mode) {
      case AccessMode::out:
      case AccessMode::inout: x = static_cast<u32>(mix(h, static_cast<u64>(a.var))); break;
      case AccessMode::inoutset: std::atomic_ref<u32>(x).fetch_add(set_constant(id, a.var)); break;
      case AccessMode::commutative:
        if (e.inside[a.var].fetch_add(1) != 0) e.exclusion_violations.fetch_add(1);
        if (Ctx::kParallel && (id & 3) == 0) std::this_thread::yield();
        x += set_constant(id, a.var);
        e.inside[a.var].fetch_sub(1);
        break;
      default: break;  // in (already read), weak_*: the task itself does not touch the variable
    }
  }
  for (const Step& s : t.steps) {
    switch (s.kind) {
      case Step::spawn: ctx.spawn(s.arg); break;
      case Step::taskwait:
        ctx.taskwait();
        for (int v = 0; v < e.p.nvars; ++v)
          if (may_read_after_wait(t, id, v)) {
            u32 r = e.vars[v].value;
            log.push_back(r);
            h = mix(h, r);
          }
        for (int v = 0; v < e.p.nvars; ++v)
          if (may_write_after_wait(t, id, v)) e.vars[v].value = static_cast<u32>(mix(h, 100u + v));
        break;
      case Step::taskwait_on:
        ctx.taskwait_on(s.arg);
        if (may_read_after_wait(t, id, s.arg)) log.push_back(e.vars[s.arg].value);
        break;
    }
  }
}

struct RefCtx {
  static constexpr bool kParallel = false;
  Exec& e;
  void spawn(int child) {
    RefCtx sub{e};
    task_body(e, child, sub);
  }
  void taskwait() {}
  void taskwait_on(int) {}
};

template <std::size_t N, class F>
void spawn_n(weft::Context& cx, F&& f, const weft::Access* a, int prio, bool labelled) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    if (labelled)
      cx.spawn(std::forward<F>(f), a[I]..., weft::priority(prio), weft::label("diff"));
    else
      cx.spawn(std::forward<F>(f), weft::priority(prio), a[I]...);
  }(std::make_index_sequence<N>{});
}

template <std::size_t N = 0, class F>
void spawn_dynamic(weft::Context& cx, F&& f, const weft::Access* a, std::size_t n, int prio, bool labelled) {
  if constexpr (N > kMaxAcc) {
    std::abort();
  } else {
    if (n == N)
      spawn_n<N>(cx, std::forward<F>(f), a, prio, labelled);
    else
      spawn_dynamic<N + 1>(cx, std::forward<F>(f), a, n, prio, labelled);
  }
}

weft::Access make_region_access(AccessMode m, const u32* x, std::size_t n) {
  switch (m) {
    case AccessMode::in: return weft::in(x, n);
    case AccessMode::out: return weft::out(x, n);
    case AccessMode::inout: return weft::inout(x, n);
    case AccessMode::inoutset: return weft::inoutset(x, n);
    case AccessMode::commutative: return weft::commutative(x, n);
    case AccessMode::weak_in: return weft::weak_in(x, n);
    case AccessMode::weak_out: return weft::weak_out(x, n);
    case AccessMode::weak_inout: return weft::weak_inout(x, n);
  }
  std::abort();
}

weft::Access make_access(AccessMode m, const u32& x) {
  switch (m) {
    case AccessMode::in: return weft::in(x);
    case AccessMode::out: return weft::out(x);
    case AccessMode::inout: return weft::inout(x);
    case AccessMode::inoutset: return weft::inoutset(x);
    case AccessMode::commutative: return weft::commutative(x);
    case AccessMode::weak_in: return weft::weak_in(x);
    case AccessMode::weak_out: return weft::weak_out(x);
    case AccessMode::weak_inout: return weft::weak_inout(x);
  }
  std::abort();
}

struct WeftCtx {
  static constexpr bool kParallel = true;
  Exec& e;
  weft::Context& cx;
  void spawn(int child) {
    const Task& t = e.p.tasks[child];
    weft::Access acc[kMaxAcc];
    std::size_t n = 0;
    for (const Acc& a : t.acc) {
      const u32& x = e.vars[a.var].value;
      switch (a.decl) {
        case Decl::plain: acc[n++] = make_access(a.mode, x); break;
        case Decl::in_out: acc[n++] = weft::in(x); acc[n++] = weft::out(x); break;
        case Decl::out_in: acc[n++] = weft::out(x); acc[n++] = weft::in(x); break;
        case Decl::inout_in: acc[n++] = weft::inout(x); acc[n++] = weft::in(x); break;
        case Decl::duplicate: acc[n++] = make_access(a.mode, x); acc[n++] = make_access(a.mode, x); break;
        case Decl::region: acc[n++] = make_region_access(a.mode, &x, 1 + (child & 1)); break;
      }
    }
    Exec* ep = &e;
    spawn_dynamic(cx, [ep, child](weft::Context& c) {
      WeftCtx sub{*ep, c};
      task_body(*ep, child, sub);
    }, acc, n, t.priority, t.labelled);
  }
  void taskwait() { cx.taskwait(); }
  void taskwait_on(int v) { cx.taskwait_on(e.vars[v].value); }
};

// ---------------------------------------------------------------------------------------------------------
// Hang detection: if one program runs for too long, print what was running and abort.

struct Progress {
  std::atomic<u64> ticks{0};
  std::atomic<u64> seed{0};
  std::atomic<int> config{-1};
  const char* kind = "";
};
Progress g_progress;

class HangWatch {
 public:
  HangWatch() : thread_([this] { loop(); }) {}
  ~HangWatch() {
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    long secs = weft_test::kSanitized ? 60 : 20;
    if (const char* e = std::getenv("WEFT_DIFF_HANG_SECONDS")) secs = std::max(1L, std::strtol(e, nullptr, 10));
    const auto limit = std::chrono::seconds(secs);
    std::unique_lock<std::mutex> lk(m_);
    u64 last = g_progress.ticks.load();
    auto since = std::chrono::steady_clock::now();
    while (!quit_) {
      cv_.wait_for(lk, std::chrono::milliseconds(200));
      u64 now_ticks = g_progress.ticks.load();
      auto now = std::chrono::steady_clock::now();
      if (now_ticks != last) {
        last = now_ticks;
        since = now;
      } else if (now - since > limit) {
        std::fprintf(stderr, "\nDIFFERENTIAL HANG: program seed=%llu kind=%s config=%d made no progress for %llds\n"
                     "reproduce: WEFT_DIFF_SEED=%llu WEFT_DIFF_KIND=%s ./weft_differential --gtest_filter=Differential.Single\n",
                     static_cast<unsigned long long>(g_progress.seed.load()), g_progress.kind,
                     g_progress.config.load(), static_cast<long long>(limit.count()),
                     static_cast<unsigned long long>(g_progress.seed.load()), g_progress.kind);
        std::fflush(stderr);
        std::abort();
      }
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------------------

struct Config {
  unsigned workers;
  std::size_t max_tasks;
  bool immediate_successor;
};
const Config kConfigs[] = {{1, weft::kDefaultMaxTasks, true},
                           {2, weft::kDefaultMaxTasks, true},
                           {3, 4, true},
                           {4, weft::kDefaultMaxTasks, false}};

std::string config_name(const Config& c) {
  return std::to_string(c.workers) + " workers, max_tasks=" + std::to_string(c.max_tasks) +
         ", immediate_successor=" + (c.immediate_successor ? "1" : "0");
}

// Reductions for minimising a failing program (see minimize.py), applied by Differential.Single:
//   WEFT_DIFF_DROP=3,7        do not spawn tasks T3 and T7 (nor, therefore, their subtrees)
//   WEFT_DIFF_DROP_ACC=3:1    remove T3's access to v1 (skipped if a child of T3 accesses v1)
//   WEFT_DIFF_DROP_WAIT=0:2   remove the third taskwait/taskwait_on step of T0
//   WEFT_DIFF_PLAIN=1         declare every access plainly (no merged duplicate clauses)
//   WEFT_DIFF_NOPRIO=1        all priorities 0, no busy work
//   WEFT_DIFF_CONFIG=0        run only configuration 0 (1 worker), 1 (2 workers), ...
std::vector<std::pair<int, int>> parse_pairs(const char* e) {
  std::vector<std::pair<int, int>> out;
  if (!e) return out;
  std::string s(e);
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos)
      out.emplace_back(std::atoi(item.c_str()), -1);
    else
      out.emplace_back(std::atoi(item.substr(0, colon).c_str()), std::atoi(item.substr(colon + 1).c_str()));
  }
  return out;
}

void reduce_from_environment(Program& p) {
  const int nt = static_cast<int>(p.tasks.size());
  for (auto [t, unused] : parse_pairs(std::getenv("WEFT_DIFF_DROP"))) {
    if (t <= 0 || t >= nt) continue;
    auto& steps = p.tasks[p.tasks[t].parent].steps;
    steps.erase(std::remove_if(steps.begin(), steps.end(),
                               [t](const Step& s) { return s.kind == Step::spawn && s.arg == t; }),
                steps.end());
  }
  for (auto [t, v] : parse_pairs(std::getenv("WEFT_DIFF_DROP_ACC"))) {
    if (t <= 0 || t >= nt) continue;
    bool used_by_child = false;
    for (const Step& s : p.tasks[t].steps)
      if (s.kind == Step::spawn) {
        bool has;
        p.tasks[s.arg].mode_of(v, has);
        used_by_child |= has;
      }
    if (used_by_child) continue;
    auto& acc = p.tasks[t].acc;
    acc.erase(std::remove_if(acc.begin(), acc.end(), [v](const Acc& a) { return a.var == v; }), acc.end());
    p.tasks[t].weak = std::any_of(acc.begin(), acc.end(), [](const Acc& a) { return is_weak(a.mode); });
  }
  auto waits = parse_pairs(std::getenv("WEFT_DIFF_DROP_WAIT"));
  std::sort(waits.begin(), waits.end(), [](auto a, auto b) { return a.second > b.second; });
  for (auto [t, k] : waits) {
    if (t < 0 || t >= nt) continue;
    auto& steps = p.tasks[t].steps;
    int seen = 0;
    for (auto it = steps.begin(); it != steps.end(); ++it)
      if (it->kind != Step::spawn && seen++ == k) {
        steps.erase(it);
        break;
      }
  }
  if (std::getenv("WEFT_DIFF_PLAIN"))
    for (Task& t : p.tasks)
      for (Acc& a : t.acc) a.decl = Decl::plain;
  if (std::getenv("WEFT_DIFF_NOPRIO"))
    for (Task& t : p.tasks) {
      t.priority = 0;
      t.spin_us = 0;
    }
}

struct Runner {
  Runner() {
    for (const Config& c : kConfigs) {
      weft::Options o;
      o.num_threads = c.workers;
      o.max_tasks = c.max_tasks;
      o.immediate_successor = c.immediate_successor;
      runtimes.push_back(std::make_unique<weft::Runtime>(o));
    }
  }
  std::vector<std::unique_ptr<weft::Runtime>> runtimes;

  // Returns an empty string on success, else a failure description.
  std::string check(const Program& p, bool verbose) {
    Exec ref(p);
    {
      RefCtx root{ref};
      task_body(ref, 0, root);
    }
    int only = -1;
    if (const char* e = std::getenv("WEFT_DIFF_CONFIG")) only = std::atoi(e);
    for (std::size_t ci = 0; ci < runtimes.size(); ++ci) {
      if (only >= 0 && static_cast<int>(ci) != only) continue;
      weft::Runtime& rt = *runtimes[ci];
      g_progress.config = static_cast<int>(ci);
      g_progress.ticks.fetch_add(1);
      Exec got(p);
      rt.reset_stats();
      std::string error;
      try {
        rt.run([&](weft::Context& cx) {
          WeftCtx root{got, cx};
          task_body(got, 0, root);
        });
      } catch (const std::exception& ex) {
        error = std::string("run() threw: ") + ex.what();
      } catch (...) {
        error = "run() threw a non-std exception";
      }
      std::ostringstream os;
      if (!error.empty()) os << error << "\n";
      for (std::size_t t = 0; t < p.tasks.size() && os.tellp() < 4000; ++t) {
        if (got.runs[t].load() != ref.runs[t].load())
          os << "T" << t << " ran " << got.runs[t].load() << " times, expected " << ref.runs[t].load() << "\n";
        if (got.logs[t] != ref.logs[t]) {
          os << "T" << t << " reads differ: expected {";
          for (u32 v : ref.logs[t]) os << v << " ";
          os << "} got {";
          for (u32 v : got.logs[t]) os << v << " ";
          os << "}\n";
        }
      }
      for (int v = 0; v < p.nvars; ++v)
        if (got.vars[v].value != ref.vars[v].value)
          os << "final v" << v << " expected " << ref.vars[v].value << " got " << got.vars[v].value << "\n";
      if (got.exclusion_violations.load() != 0)
        os << got.exclusion_violations.load() << " commutative exclusion violations\n";
      weft::Stats s = rt.stats();
      u64 n = 0;  // tasks reachable from the root (all of them unless the program was reduced)
      for (std::size_t t = 1; t < p.tasks.size(); ++t) n += static_cast<u64>(ref.runs[t].load());
      if (s.tasks_created != n || s.tasks_executed != n || s.tasks_cancelled != 0)
        os << "stats: created " << s.tasks_created << " executed " << s.tasks_executed << " cancelled "
           << s.tasks_cancelled << ", expected " << n << " " << n << " 0\n";
      std::string out = os.str();
      if (verbose) {
        std::printf("%s: %s\n", config_name(kConfigs[ci]).c_str(), out.empty() ? "ok" : out.c_str());
        std::fflush(stdout);
      }
      if (!out.empty())
        return "on " + config_name(kConfigs[ci]) + ":\n" + out + describe(p) +
               "reproduce: WEFT_DIFF_SEED=" + std::to_string(p.seed) + " WEFT_DIFF_KIND=" + p.kind +
               " ./weft_differential --gtest_filter=Differential.Single\n";
    }
    return {};
  }
};

std::size_t program_count(std::size_t base) {
  if (const char* e = std::getenv("WEFT_DIFF_PROGRAMS")) {
    long v = std::strtol(e, nullptr, 10);
    if (v > 0) return static_cast<std::size_t>(v);
  }
  return weft_test::scaled(base, 20);
}

void run_many(const std::string& kind, u64 seed_base, std::size_t count) {
  HangWatch watch;
  Runner runner;
  GenParams gp = params_for(kind);
  g_progress.kind = kind == "strong" ? "strong" : kind == "wide" ? "wide" : "all";
  std::size_t total_tasks = 0, weak_tasks = 0, waits = 0;
  for (std::size_t i = 0; i < count; ++i) {
    u64 seed = seed_base + i;
    g_progress.seed = seed;
    Program p = Gen(seed, gp).make(seed, kind);
    total_tasks += p.tasks.size();
    for (const Task& t : p.tasks) {
      weak_tasks += t.weak;
      for (const Step& s : t.steps) waits += s.kind != Step::spawn;
    }
    std::string failure = runner.check(p, false);
    ASSERT_TRUE(failure.empty()) << "program " << i << " (seed " << seed << ") failed " << failure;
  }
  std::printf("[differential %s] %zu programs, %zu tasks (%zu weak), %zu taskwait/taskwait_on, %zu configs each\n",
              kind.c_str(), count, total_tasks, weak_tasks, waits, std::size(kConfigs));
  // The generator must actually exercise what it claims to.
  if (count >= 100) {
    EXPECT_GT(total_tasks, count * 5);
    EXPECT_GT(waits, count / 4);
    if (gp.allow_weak) {
      EXPECT_GT(weak_tasks, count / 10);
    }
  }
}

TEST(Differential, StrongModes) { run_many("strong", 1000000, program_count(3000)); }
TEST(Differential, AllModes) { run_many("all", 2000000, program_count(6000)); }
TEST(Differential, WidePrograms) { run_many("wide", 3000000, program_count(1000)); }

// Reruns one program verbosely: WEFT_DIFF_SEED=<seed> [WEFT_DIFF_KIND=strong|all|wide].
TEST(Differential, Single) {
  const char* s = std::getenv("WEFT_DIFF_SEED");
  if (!s) GTEST_SKIP() << "set WEFT_DIFF_SEED (and WEFT_DIFF_KIND) to rerun one program";
  u64 seed = std::strtoull(s, nullptr, 10);
  const char* k = std::getenv("WEFT_DIFF_KIND");
  std::string kind = k ? k : "all";
  HangWatch watch;
  g_progress.kind = k ? k : "all";
  g_progress.seed = seed;
  Program p = Gen(seed, params_for(kind)).make(seed, kind);
  reduce_from_environment(p);
  std::printf("%s", describe(p).c_str());
  std::fflush(stdout);
  Runner runner;
  std::string failure = runner.check(p, true);
  EXPECT_TRUE(failure.empty()) << failure;
}

// The generator is deterministic (reproducible seeds) and self-consistent.
TEST(DifferentialGenerator, DeterministicAndWellFormed) {
  for (u64 seed = 1; seed <= 200; ++seed) {
    Program a = Gen(seed, params_for("all")).make(seed, "all");
    Program b = Gen(seed, params_for("all")).make(seed, "all");
    ASSERT_EQ(describe(a), describe(b));
    for (std::size_t i = 1; i < a.tasks.size(); ++i) {
      const Task& t = a.tasks[i];
      const Task& par = a.tasks[t.parent];
      ASSERT_LE(t.depth, 3);
      for (const Acc& acc : t.acc) {
        if (t.parent == 0) continue;
        bool has;
        AccessMode pm = par.mode_of(acc.var, has);
        ASSERT_TRUE(has) << describe(a);
        ASSERT_NE(pm, AccessMode::inoutset);
        ASSERT_NE(pm, AccessMode::commutative);
        if (pm == AccessMode::in || pm == AccessMode::weak_in) {
          ASSERT_TRUE(acc.mode == AccessMode::in || acc.mode == AccessMode::weak_in) << describe(a);
        }
      }
      if (t.weak) {
        int kids = 0;
        for (const Step& s : t.steps) {
          ASSERT_EQ(s.kind, Step::spawn) << "weak task waits\n" << describe(a);
          ++kids;
        }
        ASSERT_LE(kids, 3);
      }
    }
  }
}

}  // namespace
