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
//   * exception programs (kinds exc, exc_wide, long_exc): some bodies throw (before a chosen step, after their
//     writes); some tasks catch what their taskwait/taskwait_on rethrows, in the others it escapes the body. The
//     reference interpreter models the failure semantics (see "Reference interpreter" below), and rejects the
//     few choices of throwers whose outcome the documentation leaves to timing;
//   * long programs (kinds long, long_exc): 1500-4000 children of the root over 40-320 variables, so that records,
//     descriptors and the domain's hash table grow and recycle.
//   * reduction programs (kinds reduce, reduce_exc, reduce_long: those of all, exc and long with reductions):
//     some accesses are reduction or weak_reduction with sum, min or max on uint32 (order-independent, so the
//     reference's value is exact). A reducing task contributes a task-specific value through Context::local and
//     does not read the variable; a child of a reducing parent may access that variable only by a reduction
//     with the parent's operator (joining its reduction). At most two reduction clauses per task, never merged
//     with another clause on their variable.
// Completion events (weft::Event): in the weft runs of one program in six (CI time: a run with events waits for
// the pool's thread), about one task in four (chosen by hashes of the program's seed and the task id, so the
// generator and the reference are untouched) takes an event at the start of its body and leaves it in a shared pool; every body first fulfils one pooled event of any earlier task (an
// unrelated task, a descendant, ...), and a plain std::thread fulfils the others after a short delay. An
// event only delays its task's completion, so every observation must still equal the sequential one.
// Each program runs on 4 runtimes: 1 worker; 2 workers; 3 workers with max_tasks = 4 (throttling);
// 4 workers without immediate successor. Each run compares which bodies ran (and how often), every task's
// recorded reads (a caught exception is logged), the exception each wait rethrew and the one out of
// Runtime::run (one of the possible ones when several were pending), the final variable values, commutative
// exclusion and the task counters of Stats (created, executed, cancelled, exceptions dropped).
//
// Environment: WEFT_TEST_SCALE scales the number of programs; WEFT_DIFF_SEED=<seed> WEFT_DIFF_KIND=<kind>
// reruns one program verbosely (test Differential.Single); WEFT_DIFF_PROGRAMS overrides the count;
// WEFT_DIFF_EVENTS=0|1 takes completion events in no program or in all (default: one in six);
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
#include <deque>
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

constexpr int kMaxVars = 320;      // long programs; the others use 4..6 variables
constexpr std::size_t kMaxAcc = 12;  // clauses of one spawn (at most 6 variables, some declared twice)

bool is_weak(AccessMode m) {
  return m == AccessMode::weak_in || m == AccessMode::weak_out || m == AccessMode::weak_inout ||
         m == AccessMode::weak_reduction;
}
bool is_reduction(AccessMode m) { return m == AccessMode::reduction || m == AccessMode::weak_reduction; }

// Reduction operators of the programs: order-independent on uint32 (sum wraps), so the sequential interpreter
// computes the exact value.
enum class Op : std::uint8_t { sum, min, max };
const char* op_name(Op o) { return o == Op::sum ? "sum" : o == Op::min ? "min" : "max"; }
u32 identity_of(Op o) { return o == Op::min ? 0xFFFFFFFFu : 0u; }
u32 combine(Op o, u32 a, u32 b) {
  switch (o) {
    case Op::sum: return a + b;
    case Op::min: return std::min(a, b);
    case Op::max: return std::max(a, b);
  }
  return a;
}

// none: no access; read: in / weak_in; full: any mode; reduce: only a reduction with the parent's operator.
enum class Perm : std::uint8_t { none, read, full, reduce };

// How an access is written at the spawn: plain, or as several clauses that merge into it.
// (`region` names the datum as a region starting at the variable: the same datum, since a datum is named by its
// start address.)
enum class Decl : std::uint8_t { plain, in_out, out_in, inout_in, duplicate, region };

struct Acc {
  int var;
  AccessMode mode;
  Decl decl = Decl::plain;
  Op op = Op::sum;  // reductions
};
constexpr int kMaxReductions = 2;  // reduction clauses of one spawn (WeftCtx::spawn instantiates 0..2)

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
  int throw_at = -1;     // the body throws TestError just before step throw_at (steps.size(): at its end)
  bool catches = false;  // catches what its taskwait/taskwait_on rethrows (else it escapes the body)
  AccessMode mode_of(int v, bool& has) const {
    for (const Acc& a : acc)
      if (a.var == v) {
        has = true;
        return a.mode;
      }
    has = false;
    return AccessMode::in;
  }
  Op op_of(int v) const {
    for (const Acc& a : acc)
      if (a.var == v) return a.op;
    return Op::sum;
  }
};

struct Program {
  u64 seed = 0;
  std::string kind;
  int nvars = 0;
  std::vector<u32> init;
  std::vector<Task> tasks;  // tasks[0] is the root (run's function)
};

struct GenParams {
  bool allow_weak = true;
  int min_root_children = 1;
  int max_root_children = 10;
  int max_children[4] = {0, 4, 3, 0};  // by depth (root handled separately)
  int weak_max_children = 3;
  double p_has_children = 0.55;
  double p_taskwait = 0.15;
  double p_taskwait_on = 0.12;
  double p_repeat_previous = 0.25;
  int pick_vars = 0;       // > 0: a child of the root accesses 1..pick_vars random variables (long programs)
  int nvars_min = 4, nvars_max = 6;
  double p_reduction = 0;  // a child of the root (or of a writer) picks a reduction (reduce* kinds)
  double p_throw = 0;      // a task's body throws (exception programs)
  double p_catch = 0.5;    // a (non-weak) task catches the exceptions its waits rethrow
};

GenParams params_for(const std::string& kind) {
  // reduce, reduce_exc, reduce_long: the programs of all, exc and long with reduction accesses among the others.
  if (kind.rfind("reduce", 0) == 0) {
    GenParams g = params_for(kind == "reduce_exc" ? "exc" : kind == "reduce_long" ? "long" : "all");
    g.p_reduction = kind == "reduce_long" ? 0.3 : 0.22;
    return g;
  }
  GenParams g;
  if (kind == "strong") g.allow_weak = false;
  if (kind == "wide") {
    g.max_root_children = 24;
    g.max_children[1] = 6;
    g.max_children[2] = 4;
    g.p_has_children = 0.35;
  }
  if (kind == "exc" || kind == "exc_wide") g.p_throw = 0.12;
  if (kind == "exc_wide") {
    g.max_root_children = 24;
    g.max_children[1] = 6;
    g.p_has_children = 0.4;
  }
  if (kind == "long" || kind == "long_exc") {
    // Thousands of tasks over up to a few hundred variables: records, descriptors and the domain's hash table
    // grow and are recycled. long_exc: a few tasks throw, and no task is weak (almost every failure would reach
    // a weak task further down the program, an outcome left to timing: see make_program).
    g.min_root_children = 1500;
    g.max_root_children = 4000;
    g.max_children[1] = 3;
    g.max_children[2] = 2;
    g.p_has_children = 0.08;
    g.p_taskwait = 0.002;
    g.p_taskwait_on = 0;  // at the root it would rarely wait for all failed children: ambiguous (see make_program)
    g.p_repeat_previous = 0.1;
    g.pick_vars = 3;
    g.nvars_min = 40;
    g.nvars_max = kMaxVars;
    if (kind == "long_exc") {
      g.allow_weak = false;
      g.p_throw = 0.003;
    }
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
    p.nvars = gp_.nvars_min + static_cast<int>(below(gp_.nvars_max - gp_.nvars_min + 1));
    p.init.resize(p.nvars);
    for (int v = 0; v < p.nvars; ++v) p.init[v] = static_cast<u32>(rng_());
    p.tasks.emplace_back();  // root
    children(p, 0);
    if (gp_.p_throw > 0) assign_throws(p);
    return p;
  }

  // Chooses which bodies throw and which tasks catch; called again to draw another choice when the first one
  // makes an outcome timing-dependent (see make_program).
  void assign_throws(Program& p) {
    for (std::size_t i = 0; i < p.tasks.size(); ++i) {
      Task& t = p.tasks[i];
      t.throw_at = chance(i == 0 ? gp_.p_throw / 2 : gp_.p_throw) ? static_cast<int>(below(t.steps.size() + 1)) : -1;
      t.catches = !t.weak && chance(gp_.p_catch);
    }
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
      case AccessMode::reduction:
      case AccessMode::weak_reduction: return Perm::reduce;  // children join the parent's reduction
      default: return Perm::none;  // inoutset / commutative: children leave it alone
    }
  }

  AccessMode pick_mode(Perm perm, bool weak_ok) {
    if (perm == Perm::read) return weak_ok && chance(0.3) ? AccessMode::weak_in : AccessMode::in;
    if (perm == Perm::reduce) return weak_ok && chance(0.35) ? AccessMode::weak_reduction : AccessMode::reduction;
    if (gp_.p_reduction > 0 && chance(gp_.p_reduction))
      return weak_ok && chance(0.4) ? AccessMode::weak_reduction : AccessMode::reduction;
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
        if (is_weak(a.mode) && !weak_ok)
          a.mode = a.mode == AccessMode::weak_in          ? AccessMode::in
                   : a.mode == AccessMode::weak_reduction ? AccessMode::reduction
                                                          : AccessMode::inout;
    } else if (gp_.pick_vars > 0 && parent == 0) {
      // Many variables: a few random ones, not a coin per variable.
      int k = 1 + static_cast<int>(below(gp_.pick_vars));
      for (int j = 0; j < k; ++j) {
        int v = static_cast<int>(below(p.nvars));
        bool dup = std::any_of(c.acc.begin(), c.acc.end(), [v](const Acc& a) { return a.var == v; });
        if (dup) continue;
        c.acc.push_back({v, pick_mode(Perm::full, weak_ok)});
        if (is_reduction(c.acc.back().mode)) c.acc.back().op = static_cast<Op>(below(3));
      }
    } else {
      for (int v = 0; v < p.nvars; ++v) {
        Perm perm = perm_for_children(p, parent, v);
        if (perm == Perm::none || !chance(0.45)) continue;
        c.acc.push_back({v, pick_mode(perm, weak_ok)});
        // A reduction's operator: the parent's (to join its reduction), else any; consecutive siblings with
        // the same one form a group, another one starts a new group.
        if (is_reduction(c.acc.back().mode))
          c.acc.back().op = perm == Perm::reduce ? p.tasks[parent].op_of(v) : static_cast<Op>(below(3));
      }
      std::shuffle(c.acc.begin(), c.acc.end(), rng_);
    }
    // At most kMaxReductions reduction clauses: the parent's reductions (at most kMaxReductions) first, the
    // extra ones of the others become writes.
    int reductions = 0;
    for (const Acc& a : c.acc) reductions += perm_for_children(p, parent, a.var) == Perm::reduce;
    for (Acc& a : c.acc)
      if (is_reduction(a.mode) && perm_for_children(p, parent, a.var) != Perm::reduce &&
          ++reductions > kMaxReductions)
        a.mode = a.mode == AccessMode::weak_reduction ? AccessMode::weak_inout : AccessMode::inout;
    for (Acc& a : c.acc) {
      a.decl = Decl::plain;
      if (is_reduction(a.mode)) continue;  // a reduction is its task's only clause on its datum
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
    int n = depth == 0 ? gp_.min_root_children + static_cast<int>(below(maxc - gp_.min_root_children + 1))
                       : static_cast<int>(below(maxc + 1));
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
    os << " " << weft::to_string(a.mode) << "(v" << a.var;
    if (is_reduction(a.mode)) os << "," << op_name(a.op);
    os << ")";
    if (a.decl != Decl::plain) os << "[decl" << static_cast<int>(a.decl) << "]";
  }
  if (t.priority) os << " prio=" << t.priority;
  if (t.spin_us) os << " spin=" << t.spin_us << "us";
  if (t.throw_at >= 0) os << " throws@" << t.throw_at;
  if (t.catches) os << " catches";
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
// What a reduction task contributes to v.
inline u32 contribution(u64 seed, int id, int v, Op o) {
  return o == Op::sum ? set_constant(id, v) : static_cast<u32>(mix(seed ^ 0x5EDull, static_cast<u64>(id) * 1000 + v));
}

// What a throwing body throws: the ids of the tasks that may have thrown it. A weft body throws its own id;
// the reference interpreter rethrows at a wait the set of exceptions any of which the engine may pick (the
// first to arrive), so a weft observation is checked by membership.
struct TestError {
  std::vector<int> ids;
};
constexpr u32 kCaughtMarker = 0xCA0C7000u;  // logged where a task caught a rethrown exception

struct Exec {
  explicit Exec(const Program& prog)
      : p(prog), vars(prog.nvars), logs(prog.tasks.size()), caught(prog.tasks.size()),
        runs(new std::atomic<int>[prog.tasks.size()]), inside(new std::atomic<int>[prog.nvars]) {
    for (int v = 0; v < p.nvars; ++v) {
      vars[v].value = p.init[v];
      inside[v] = 0;
    }
    for (std::size_t i = 0; i < p.tasks.size(); ++i) runs[i] = 0;
  }
  const Program& p;
  struct alignas(16) Slot {
    u32 value;
  };
  std::vector<Slot> vars;
  std::vector<std::vector<u32>> logs;
  std::vector<std::vector<std::vector<int>>> caught;  // per task: ids of each exception it caught
  std::unique_ptr<std::atomic<int>[]> runs;
  std::unique_ptr<std::atomic<int>[]> inside;
  std::atomic<int> exclusion_violations{0};
  struct EventPool* events = nullptr;  // weft runs: completion events (see the top of this file)
};

// The weft runs of this program take completion events (one program in six; WEFT_DIFF_EVENTS=0: none, 1: all).
bool events_enabled(u64 seed) {
  if (const char* e = std::getenv("WEFT_DIFF_EVENTS")) return std::atoi(e) != 0;
  return mix(seed, 0xE7E7ull) % 6 == 0;
}

// Pending completion events: fulfilled by later task bodies, or by the pool's own thread (a foreign thread for
// the runtimes), so that none waits forever.
struct EventPool {
  EventPool() : thread_([this] { loop(); }) {}
  ~EventPool() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // At the start of task `id`'s body: fulfils a pooled event, then maybe takes one of its own.
  void body_start(u64 seed, int id, weft::Context& cx) {
    weft::Event other;
    {
      std::lock_guard<std::mutex> g(m_);
      if (!pool_.empty()) {
        other = std::move(pool_.front());
        pool_.pop_front();
      }
    }
    if (other) other.fulfill();
    if (mix(seed ^ 0xE7E7E7E7ull, static_cast<u64>(id)) % 4 != 0) return;
    weft::Event mine = cx.event();
    {
      std::lock_guard<std::mutex> g(m_);
      pool_.push_back(std::move(mine));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(m_);
    unsigned k = 0;
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !pool_.empty(); });
      if (stop_ && pool_.empty()) return;
      lk.unlock();
      for (unsigned i = 0, n = (++k % 4) * 8; i < n; ++i) std::this_thread::yield();  // lag behind
      lk.lock();
      if (pool_.empty()) continue;
      weft::Event ev = std::move(pool_.front());
      pool_.pop_front();
      lk.unlock();
      ev.fulfill();
      lk.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<weft::Event> pool_;
  bool stop_ = false;
  std::thread thread_;
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
      case AccessMode::reduction: ctx.reduce(a.var, a.op, contribution(e.p.seed, id, a.var, a.op)); break;
      default: break;  // in (already read), weak_*: the task itself does not touch the variable
    }
  }
  // A rethrown exception is logged and swallowed by a catching task; otherwise it leaves the body.
  auto wait = [&](auto&& w) {
    try {
      w();
    } catch (const TestError& x) {
      if (!t.catches) throw;
      log.push_back(kCaughtMarker);
      e.caught[id].push_back(x.ids);
    }
  };
  for (std::size_t k = 0; k < t.steps.size(); ++k) {
    if (static_cast<int>(k) == t.throw_at) throw TestError{{id}};
    const Step& s = t.steps[k];
    switch (s.kind) {
      case Step::spawn: ctx.spawn(s.arg); break;
      case Step::taskwait:
        wait([&] { ctx.taskwait(); });
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
        wait([&] { ctx.taskwait_on(s.arg); });
        if (may_read_after_wait(t, id, s.arg)) log.push_back(e.vars[s.arg].value);
        break;
    }
  }
  if (static_cast<std::size_t>(t.throw_at) == t.steps.size()) throw TestError{{id}};
}

// ---------------------------------------------------------------------------------------------------------
// Reference interpreter: children run at their spawn point, depth first. It models the documented failure
// semantics (tasks.hpp, "Exceptions") on the sibling order:
//  * each task has direct predecessors among its earlier siblings, per datum, as the records of a domain give
//    them:  in -> the last writer (or the last group, joined);  out/inout -> the readers since the last writer,
//    or that writer if none;  inoutset/commutative -> what came before the group (readers since the last
//    writer, else the last writer), shared by the members of the group, which do not wait for one another;
//    weak_* -> like the strong mode, for the task's weak predecessors. The relation is transitively closed by
//    the propagation itself: a cancelled task counts as failed for its own dependents.
//  * a task is cancelled (body skipped, no children, no exception) iff a strong predecessor failed or was
//    cancelled; a taskwait (every child finished) forgets the predecessors: children spawned after it have
//    none among the children before it;
//  * a task fails iff its body throws (its own exception, or one a wait rethrew that it does not catch) or it
//    ends with an unrethrown child exception; a failure records one exception in the parent per cause (own,
//    then unrethrown), the first one pending is rethrown by the parent's next wait, the others are dropped;
//  * Runtime::run rethrows the root body's exception, else its unrethrown child exception.
// Where the engine may legitimately behave either way, the program is rejected as ambiguous (make_program
// draws other throwers):
//  * a weak predecessor of a task fails (its body runs, its successors and its children on the datum are
//    cancelled: not modelled here; tests/unit/exceptions_test.cpp checks it);
//  * a taskwait_on returns while a failed child it does not wait for (directly or through its predecessors) is
//    pending: that exception may or may not have arrived.
// Reductions: members of a group (consecutive reductions with one operator, weak ones included) are a group
// like inoutset's; their contributions accumulate in the group and reach the variable when the group is closed
// (by a later access, a taskwait or taskwait_on of its owner, or the end of its owner's body), unless one of
// its direct members failed or was cancelled (then none does). A task that reduces on v lends its group to its
// children's reductions on v (they accumulate into it; their failures count only through their parent's).

struct RefRec {
  std::vector<int> writer;  // the last writer, or the members of the last group (joined)
  std::vector<int> readers;
  std::vector<int> members;
  std::vector<int> group_pred;
  AccessMode group = AccessMode::in;  // in: no group; reduction: a reduction group (weak members included)
  Op op = Op::sum;
  int group_id = -1;      // reduction: Model::groups
  bool borrowed = false;  // reduction: the parent's group (combined in the grandparent's domain)
};

struct RefGroup {
  int var;
  Op op;
  u32 acc;
  bool failed = false;
};

struct Model {
  explicit Model(const Program& p)
      : status(p.tasks.size(), kNone), preds(p.tasks.size()), own(p.tasks.size()), leftover(p.tasks.size()),
        has_own(p.tasks.size()), has_leftover(p.tasks.size()) {}
  enum Status : std::uint8_t { kNone, kOk, kFailed, kCancelled };
  std::vector<Status> status;
  std::vector<std::vector<int>> preds;  // direct predecessors among the siblings
  std::vector<std::vector<int>> own, leftover;
  std::vector<char> has_own, has_leftover;
  u64 created = 0, cancelled = 0, dropped = 0;
  std::vector<RefGroup> groups;
  bool run_threw = false;
  std::vector<int> run_error;
  std::string ambiguous;  // empty: the outcome is determined
  bool bad(int t) const { return status[t] == kFailed || status[t] == kCancelled; }
};

struct RefCtx {
  static constexpr bool kParallel = false;
  Exec& e;
  Model& m;
  int self;
  std::vector<RefRec> recs;     // the domain, by variable (created at the first spawn)
  std::vector<int> unaccounted;  // failed children whose exceptions no wait has consumed yet
  std::vector<std::pair<int, int>> links = {};  // this task's reductions: variable, group

  void reduce(int v, Op o, u32 value) {
    for (auto [var, gid] : links)
      if (var == v) {
        RefGroup& g = m.groups[static_cast<std::size_t>(gid)];
        g.acc = combine(o, g.acc, value);
        return;
      }
    std::abort();  // the generator gives a reduction task its group
  }
  void combine_group(int gid) {
    const RefGroup& g = m.groups[static_cast<std::size_t>(gid)];
    if (!g.failed) e.vars[g.var].value = combine(g.op, e.vars[g.var].value, g.acc);
  }
  // Owned reduction groups still open: combined (at a taskwait, or the end of the body).
  void settle() {
    for (RefRec& r : recs)
      if (r.group == AccessMode::reduction && !r.borrowed) close_group(r);
  }

  void close_group(RefRec& r) {
    if (r.group == AccessMode::in) return;
    if (r.group == AccessMode::reduction) combine_group(r.group_id);
    r.writer = std::move(r.members);
    r.members.clear();
    r.group_pred.clear();
    r.group = AccessMode::in;
  }
  void access(RefRec& r, int t, const Acc& a, std::vector<int>& ps, std::vector<std::pair<int, int>>& child_links) {
    const AccessMode mode = a.mode;
    switch (mode) {
      case AccessMode::reduction:
      case AccessMode::weak_reduction:
        if (r.group != AccessMode::reduction || r.op != a.op) {
          close_group(r);
          r.group_pred = r.readers.empty() ? r.writer : r.readers;
          r.readers.clear();
          r.group = AccessMode::reduction;
          r.op = a.op;
          r.borrowed = false;
          r.group_id = static_cast<int>(m.groups.size());
          m.groups.push_back({a.var, a.op, identity_of(a.op)});
        }
        ps.insert(ps.end(), r.group_pred.begin(), r.group_pred.end());
        r.members.push_back(t);
        child_links.emplace_back(a.var, r.group_id);
        return;
      case AccessMode::in:
      case AccessMode::weak_in:
        close_group(r);
        ps.insert(ps.end(), r.writer.begin(), r.writer.end());
        r.readers.push_back(t);
        return;
      case AccessMode::out:
      case AccessMode::inout:
      case AccessMode::weak_out:
      case AccessMode::weak_inout:
        close_group(r);
        if (!r.readers.empty()) {
          ps.insert(ps.end(), r.readers.begin(), r.readers.end());
          r.readers.clear();
        } else {
          ps.insert(ps.end(), r.writer.begin(), r.writer.end());
        }
        r.writer = {t};
        return;
      case AccessMode::inoutset:
      case AccessMode::commutative:
      default:
        if (r.group != mode) {
          close_group(r);
          r.group_pred = r.readers.empty() ? r.writer : r.readers;
          r.readers.clear();
          r.group = mode;
        }
        ps.insert(ps.end(), r.group_pred.begin(), r.group_pred.end());
        r.members.push_back(t);
        return;
    }
  }

  void init_recs() {
    if (!recs.empty()) return;
    recs.resize(e.p.nvars);
    for (auto [v, gid] : links) {  // children's reductions on v join this task's group
      RefRec& r = recs[v];
      r.group = AccessMode::reduction;
      r.op = m.groups[static_cast<std::size_t>(gid)].op;
      r.group_id = gid;
      r.borrowed = true;
    }
  }

  void spawn(int child) {
    const Task& c = e.p.tasks[child];
    init_recs();
    ++m.created;
    bool strong_bad = false, weak_bad = false;
    std::vector<std::pair<int, int>> child_links;
    for (const Acc& a : c.acc) {
      std::vector<int> ps;
      access(recs[a.var], child, a, ps, child_links);
      for (int x : ps) (is_weak(a.mode) ? weak_bad : strong_bad) |= m.bad(x);
      m.preds[child].insert(m.preds[child].end(), ps.begin(), ps.end());
    }
    if (weak_bad && m.ambiguous.empty())
      m.ambiguous = "a weak predecessor of T" + std::to_string(child) + " fails";
    // A direct member that fails or is cancelled: its group (owned here) is not combined.
    auto mark_groups = [&] {
      if (!m.bad(child)) return;
      for (const Acc& a : c.acc)
        if (is_reduction(a.mode) && !recs[a.var].borrowed)
          for (auto [v, gid] : child_links)
            if (v == a.var) m.groups[static_cast<std::size_t>(gid)].failed = true;
    };
    if (strong_bad) {
      m.status[child] = Model::kCancelled;
      ++m.cancelled;
      mark_groups();
      return;
    }
    RefCtx sub{e, m, child, {}, {}, child_links};
    try {
      task_body(e, child, sub);
    } catch (const TestError& x) {
      m.has_own[child] = true;
      m.own[child] = x.ids;
    }
    sub.settle();  // the end of the child: its open reductions are combined
    if (sub.consume(m.leftover[child])) m.has_leftover[child] = true;
    m.status[child] = m.has_own[child] || m.has_leftover[child] ? Model::kFailed : Model::kOk;
    if (m.status[child] == Model::kFailed) unaccounted.push_back(child);
    mark_groups();
  }

  // The pending exceptions are consumed (rethrown at a wait, or moved up at the end of the body): one is kept,
  // any of them; the others are dropped. Returns whether there was one; `ids`: the possible ones.
  bool consume(std::vector<int>& ids) {
    u64 calls = 0;
    for (int x : unaccounted) {
      calls += static_cast<u64>(m.has_own[x]) + static_cast<u64>(m.has_leftover[x]);
      // A failed child reports its own exception before the unrethrown one of its children.
      const std::vector<int>& first = m.has_own[x] ? m.own[x] : m.leftover[x];
      ids.insert(ids.end(), first.begin(), first.end());
    }
    unaccounted.clear();
    if (calls == 0) return false;
    m.dropped += calls - 1;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return true;
  }
  void rethrow() {
    std::vector<int> ids;
    if (consume(ids)) throw TestError{ids};
  }
  void taskwait() {
    settle();
    recs.clear();  // every child has finished: later children start afresh, a failed writer forgotten
    rethrow();
  }
  void taskwait_on(int v) {
    // What the engine waits for: the current group's members, else the last writer; and, transitively, their
    // predecessors. An open reduction group of its own is closed first (combined).
    std::vector<char> covered(e.p.tasks.size(), 0);
    std::vector<int> todo;
    if (!recs.empty()) {
      RefRec& r = recs[v];
      if (r.group == AccessMode::reduction && !r.borrowed) close_group(r);
      todo = r.group != AccessMode::in ? r.members : r.writer;
    }
    while (!todo.empty()) {
      int x = todo.back();
      todo.pop_back();
      if (covered[x]) continue;
      covered[x] = 1;
      todo.insert(todo.end(), m.preds[x].begin(), m.preds[x].end());
    }
    for (int x : unaccounted)
      if (!covered[x] && m.ambiguous.empty())
        m.ambiguous = "T" + std::to_string(self) + "'s taskwait_on(v" + std::to_string(v) +
                      ") does not wait for the failed T" + std::to_string(x);
    rethrow();
  }
};

// Runs the reference interpreter on `ref`; returns the model of the outcome.
Model run_reference(Exec& ref) {
  Model m(ref.p);
  RefCtx root{ref, m, 0, {}, {}};
  try {
    task_body(ref, 0, root);
  } catch (const TestError& x) {
    m.run_threw = true;
    m.run_error = x.ids;
  }
  root.settle();
  std::vector<int> left;
  if (root.consume(left) && !m.run_threw) {
    m.run_threw = true;
    m.run_error = left;
  }
  return m;
}

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

// The same with R reduction clauses r[0 .. R) among the accesses.
template <std::size_t R, std::size_t N = 0, class F>
void spawn_dynamic_r(weft::Context& cx, F&& f, const weft::Access* a, std::size_t n, const weft::ReductionAccess* r,
                     int prio, bool labelled) {
  if constexpr (N > kMaxAcc) {
    std::abort();
  } else {
    if (n == N) {
      [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>, std::index_sequence<J...>) {
        if (labelled)
          cx.spawn(std::forward<F>(f), r[J]..., a[I]..., weft::priority(prio), weft::label("diff"));
        else
          cx.spawn(std::forward<F>(f), a[I]..., weft::priority(prio), r[J]...);
      }(std::make_index_sequence<N>{}, std::make_index_sequence<R>{});
    } else {
      spawn_dynamic_r<R, N + 1>(cx, std::forward<F>(f), a, n, r, prio, labelled);
    }
  }
}

weft::ReductionAccess make_reduction(AccessMode m, Op o, u32& x) {
  const bool weak = m == AccessMode::weak_reduction;
  switch (o) {
    case Op::sum: return weak ? weft::weak_reduction(x, weft::sum) : weft::reduction(x, weft::sum);
    case Op::min: return weak ? weft::weak_reduction(x, weft::minimum) : weft::reduction(x, weft::minimum);
    case Op::max: return weak ? weft::weak_reduction(x, weft::maximum) : weft::reduction(x, weft::maximum);
  }
  std::abort();
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
    default: break;  // reductions: never a region
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
    default: break;  // reductions: make_reduction
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
    weft::ReductionAccess red[kMaxReductions];
    std::size_t n = 0, nr = 0;
    for (const Acc& a : t.acc) {
      const u32& x = e.vars[a.var].value;
      if (is_reduction(a.mode)) {
        red[nr++] = make_reduction(a.mode, a.op, e.vars[a.var].value);
        continue;
      }
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
    auto body = [ep, child](weft::Context& c) {
      if (ep->events) ep->events->body_start(ep->p.seed, child, c);
      WeftCtx sub{*ep, c};
      task_body(*ep, child, sub);
    };
    if (nr == 0)
      spawn_dynamic(cx, body, acc, n, t.priority, t.labelled);
    else if (nr == 1)
      spawn_dynamic_r<1>(cx, body, acc, n, red, t.priority, t.labelled);
    else
      spawn_dynamic_r<2>(cx, body, acc, n, red, t.priority, t.labelled);
  }
  void reduce(int v, Op o, u32 value) {
    u32& mine = cx.local(e.vars[v].value);  // this worker's copy of the reduction
    mine = combine(o, mine, value);
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

const char* kind_literal(const std::string& kind) {
  for (const char* k : {"strong", "wide", "exc", "exc_wide", "long", "long_exc", "reduce", "reduce_exc", "reduce_long"})
    if (kind == k) return k;
  return "all";
}

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

bool contains(const std::vector<int>& ids, int id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

std::string expected_exception(bool any, const std::vector<int>& ids) {
  if (!any) return "none";
  std::ostringstream os;
  os << "the exception of one of T{";
  for (std::size_t i = 0; i < ids.size(); ++i) os << (i ? "," : "") << ids[i];
  os << "}";
  return os.str();
}

// Long programs print thousands of lines: the failure message keeps the start (Differential.Single prints it all).
std::string describe_short(const Program& p) {
  std::string d = describe(p);
  if (d.size() > 6000) d = d.substr(0, 6000) + "\n... (rerun with WEFT_DIFF_SEED for the whole program)\n";
  return d;
}

// The program of a seed. In exception programs, throwers are drawn again (at most 20 times, then none throws)
// while the reference finds the outcome timing-dependent (see the reference interpreter).
Program make_program(u64 seed, const std::string& kind) {
  Gen g(seed, params_for(kind));
  Program p = g.make(seed, kind);
  if (params_for(kind).p_throw <= 0) return p;
  for (int attempt = 0;; ++attempt) {
    Exec ref(p);
    if (run_reference(ref).ambiguous.empty()) return p;
    if (attempt == 20) {
      for (Task& t : p.tasks) t.throw_at = -1;
      return p;
    }
    g.assign_throws(p);
  }
}

struct Runner {
  Runner() {
    for (const Config& c : kConfigs) {
      weft::Options o;
      o.num_threads = c.workers;
      o.max_tasks = c.max_tasks;
      o.immediate_successor = c.immediate_successor;
      o.scheduler = weft_test::scheduler_under_test();
      runtimes.push_back(std::make_unique<weft::Runtime>(o));
    }
  }
  std::vector<std::unique_ptr<weft::Runtime>> runtimes;
  EventPool events;

  // Returns an empty string on success, else a failure description.
  std::string check(const Program& p, bool verbose) {
    Exec ref(p);
    const Model model = run_reference(ref);
    int only = -1;
    if (const char* e = std::getenv("WEFT_DIFF_CONFIG")) only = std::atoi(e);
    for (std::size_t ci = 0; ci < runtimes.size(); ++ci) {
      if (only >= 0 && static_cast<int>(ci) != only) continue;
      weft::Runtime& rt = *runtimes[ci];
      g_progress.config = static_cast<int>(ci);
      g_progress.ticks.fetch_add(1);
      Exec got(p);
      got.events = events_enabled(p.seed) ? &events : nullptr;
      rt.reset_stats();
      std::string error;
      bool run_threw = false;
      try {
        rt.run([&](weft::Context& cx) {
          if (got.events) events.body_start(p.seed, 0, cx);
          WeftCtx root{got, cx};
          task_body(got, 0, root);
        });
      } catch (const TestError& x) {
        run_threw = true;
        if (!model.run_threw || x.ids.size() != 1 || !contains(model.run_error, x.ids[0]))
          error = "run() threw the exception of T" + std::to_string(x.ids.empty() ? -1 : x.ids[0]) +
                  ", expected " + expected_exception(model.run_threw, model.run_error);
      } catch (const std::exception& ex) {
        error = std::string("run() threw: ") + ex.what();
      } catch (...) {
        error = "run() threw a non-std exception";
      }
      std::ostringstream os;
      if (!error.empty()) os << error << "\n";
      if (model.run_threw && !run_threw && error.empty())
        os << "run() returned, expected " << expected_exception(true, model.run_error) << "\n";
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
        if (got.caught[t].size() != ref.caught[t].size()) {
          os << "T" << t << " caught " << got.caught[t].size() << " exceptions, expected " << ref.caught[t].size()
             << "\n";
        } else {
          for (std::size_t k = 0; k < got.caught[t].size(); ++k)
            if (got.caught[t][k].size() != 1 || !contains(ref.caught[t][k], got.caught[t][k][0]))
              os << "T" << t << "'s wait #" << k << " rethrew the exception of T" << got.caught[t][k][0]
                 << ", expected " << expected_exception(true, ref.caught[t][k]) << "\n";
        }
      }
      for (int v = 0; v < p.nvars; ++v)
        if (got.vars[v].value != ref.vars[v].value)
          os << "final v" << v << " expected " << ref.vars[v].value << " got " << got.vars[v].value << "\n";
      if (got.exclusion_violations.load() != 0)
        os << got.exclusion_violations.load() << " commutative exclusion violations\n";
      weft::Stats s = rt.stats();
      u64 n = 0;  // bodies run (spawned tasks not cancelled)
      for (std::size_t t = 1; t < p.tasks.size(); ++t) n += static_cast<u64>(ref.runs[t].load());
      if (s.tasks_created != model.created || s.tasks_executed != n || s.tasks_cancelled != model.cancelled ||
          s.exceptions_dropped != model.dropped)
        os << "stats: created " << s.tasks_created << " executed " << s.tasks_executed << " cancelled "
           << s.tasks_cancelled << " exceptions_dropped " << s.exceptions_dropped << ", expected "
           << model.created << " " << n << " " << model.cancelled << " " << model.dropped << "\n";
      std::string out = os.str();
      if (verbose) {
        std::printf("%s: %s\n", config_name(kConfigs[ci]).c_str(), out.empty() ? "ok" : out.c_str());
        std::fflush(stdout);
      }
      if (!out.empty())
        return "on " + config_name(kConfigs[ci]) + ":\n" + out + describe_short(p) +
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
  g_progress.kind = kind_literal(kind);
  std::size_t total_tasks = 0, weak_tasks = 0, waits = 0, throwers = 0, cancelled = 0, failed_runs = 0,
              reducers = 0, nested_reducers = 0;
  for (std::size_t i = 0; i < count; ++i) {
    u64 seed = seed_base + i;
    g_progress.seed = seed;
    Program p = make_program(seed, kind);
    total_tasks += p.tasks.size();
    for (const Task& t : p.tasks) {
      weak_tasks += t.weak;
      throwers += t.throw_at >= 0;
      const bool reduces = std::any_of(t.acc.begin(), t.acc.end(), [](const Acc& a) { return is_reduction(a.mode); });
      reducers += reduces;
      nested_reducers += reduces && t.parent > 0 &&
                         std::any_of(t.acc.begin(), t.acc.end(), [&](const Acc& a) {
                           bool has;
                           return is_reduction(a.mode) && is_reduction(p.tasks[t.parent].mode_of(a.var, has));
                         });
      for (const Step& s : t.steps) waits += s.kind != Step::spawn;
    }
    if (gp.p_throw > 0) {
      Exec ref(p);
      Model m = run_reference(ref);
      cancelled += m.cancelled;
      failed_runs += m.run_threw;
    }
    std::string failure = runner.check(p, false);
    ASSERT_TRUE(failure.empty()) << "program " << i << " (seed " << seed << ") failed " << failure;
  }
  std::printf("[differential %s] %zu programs, %zu tasks (%zu weak, %zu throw, %zu cancelled, %zu reduce, %zu of "
              "them in a reducing parent), %zu taskwait/taskwait_on, %zu runs threw, %zu configs each\n",
              kind.c_str(), count, total_tasks, weak_tasks, throwers, cancelled, reducers, nested_reducers, waits,
              failed_runs, std::size(kConfigs));
  if (gp.p_reduction > 0 && count >= 3) {
    EXPECT_GT(reducers, total_tasks / 20);
    if (count >= 100) {
      EXPECT_GT(nested_reducers, count / 20);
    }
  }
  // The generator must actually exercise what it claims to.
  if (count >= 100) {
    EXPECT_GT(total_tasks, count * 5);
    EXPECT_GT(waits, count / 4);
    if (gp.allow_weak) {
      EXPECT_GT(weak_tasks, count / 10);
    }
  }
  if (gp.p_throw > 0 && count >= 3) {
    EXPECT_GT(throwers, static_cast<std::size_t>(static_cast<double>(total_tasks) * gp.p_throw / 3));
    EXPECT_GT(cancelled, 0u);
    EXPECT_GT(failed_runs, 0u);
  }
}

TEST(Differential, StrongModes) { run_many("strong", 1000000, program_count(3000)); }
TEST(Differential, AllModes) { run_many("all", 2000000, program_count(6000)); }
TEST(Differential, WidePrograms) { run_many("wide", 3000000, program_count(1000)); }
// Some bodies throw: cancelled dependents, rethrown exceptions (caught or not), failures moving up.
TEST(Differential, Exceptions) { run_many("exc", 4000000, program_count(4000)); }
TEST(Differential, ExceptionsWide) { run_many("exc_wide", 5000000, program_count(1000)); }
// Thousands of tasks over up to 320 variables per program: descriptors recycle, domains grow.
std::size_t long_program_count() {
  std::size_t n = weft_test::scaled(8, 3);
  if (const char* e = std::getenv("WEFT_DIFF_PROGRAMS")) n = std::max(1L, std::strtol(e, nullptr, 10));
  return n;
}
TEST(Differential, LongPrograms) { run_many("long", 6000000, long_program_count()); }
TEST(Differential, LongProgramsExceptions) { run_many("long_exc", 7000000, long_program_count()); }
// Reduction accesses (sum, min, max; strong and weak, nested) among the other modes.
TEST(Differential, Reductions) { run_many("reduce", 8000000, program_count(3000)); }
TEST(Differential, ReductionsExceptions) { run_many("reduce_exc", 9000000, program_count(2000)); }
TEST(Differential, ReductionsLong) { run_many("reduce_long", 10000000, long_program_count()); }

// Reruns one program verbosely: WEFT_DIFF_SEED=<seed>
// [WEFT_DIFF_KIND=strong|all|wide|exc|exc_wide|long|long_exc|reduce|reduce_exc|reduce_long].
TEST(Differential, Single) {
  const char* s = std::getenv("WEFT_DIFF_SEED");
  if (!s) GTEST_SKIP() << "set WEFT_DIFF_SEED (and WEFT_DIFF_KIND) to rerun one program";
  u64 seed = std::strtoull(s, nullptr, 10);
  const char* k = std::getenv("WEFT_DIFF_KIND");
  std::string kind = k ? k : "all";
  HangWatch watch;
  g_progress.kind = kind_literal(kind);
  g_progress.seed = seed;
  Program p = make_program(seed, kind);
  reduce_from_environment(p);
  std::printf("%s", describe(p).c_str());
  {
    Exec ref(p);
    Model m = run_reference(ref);
    if (!m.ambiguous.empty()) std::printf("note: the reduced program's outcome is timing-dependent: %s\n", m.ambiguous.c_str());
  }
  std::fflush(stdout);
  Runner runner;
  std::string failure = runner.check(p, true);
  EXPECT_TRUE(failure.empty()) << failure;
}

// The generator is deterministic (reproducible seeds) and self-consistent.
TEST(DifferentialGenerator, DeterministicAndWellFormed) {
  for (u64 seed = 1; seed <= 400; ++seed) {
    const char* kind = seed % 2 ? "all" : "reduce";
    Program a = Gen(seed, params_for(kind)).make(seed, kind);
    Program b = Gen(seed, params_for(kind)).make(seed, kind);
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
        if (is_reduction(pm)) {
          ASSERT_TRUE(is_reduction(acc.mode)) << describe(a);
          ASSERT_EQ(acc.op, par.op_of(acc.var)) << describe(a);
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
