// Randomized differential test of taskiter: random loop bodies run as taskiter on weft and sequentially.
//
// A program is a loop over a few uint64 data. Its body has k patterns (unroll(k), k = 1..3): iteration i spawns
// the tasks of pattern i % k, each with random in/out/inout accesses (some with none). A task reads its in and
// inout data, then writes each out/inout datum with a hash of what it read, its identity and a parameter, and
// appends (iteration, task, read or written value) to each accessed datum's log. Some tasks do their writes in
// nested child tasks on odd iterations (nested tasks may differ between iterations). Loop kinds: fixed trip
// count, taskiter_while with a random trip count (cond counts its own calls), and update mode with parameters
// that change every iteration; each pipelined or with replay_barrier (update too: without the clause, a fixed
// trip count's body runs ahead of the tasks of the two previous periods). Some update programs change their graph
// at a random iteration: the loop must stop with weft::taskiter_error after the iterations before it.
// Programs without update turn some writes into reductions (weft::reduction with sum; at most one per task),
// from a second random stream so that the rest of the program is as without them: a member adds a value of its
// own to its private copy (through a nested child on odd iterations, which joins the member's reduction) and
// logs nothing; whoever reads the datum later must see every contribution.
// Checked against the sequential loop: per datum, the log with the readers between two writes taken as a set
// (they may run in any order) — i.e. every pair of conflicting accesses in sequential order — the final values,
// the trip count and the number of cond() calls.
//
// WEFT_TEST_SCALE scales the number of programs; WEFT_ITER_SEED=<seed> runs that one program.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../common/test_util.hpp"

namespace {

using u64 = std::uint64_t;
using weft::Access;
using weft::AccessMode;

constexpr int kMaxData = 5;

u64 mix(u64 a, u64 b) {
  u64 x = (a ^ (b * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 31);
}

struct TaskSpec {
  std::vector<std::pair<int, AccessMode>> acc;  // distinct data
  bool nested = false;                          // odd iterations write through a child task
};

enum class LoopKind { fixed, while_loop };

struct Program {
  u64 seed = 0;
  int ndata = 0;
  std::vector<std::vector<TaskSpec>> patterns;  // one per copy
  LoopKind kind = LoopKind::fixed;
  u64 n = 0;          // fixed: iterations; while: cond returns true for its first n calls
  bool update = false;
  bool barrier = false;
  u64 change_at = 0;  // update: iteration whose body spawns one task more (0: never)

  unsigned k() const { return static_cast<unsigned>(patterns.size()); }
  // Iterations the documented semantics run.
  u64 trip_count() const {
    if (kind == LoopKind::fixed) return n;
    if (n == 0) return 0;
    return (barrier || update) ? n * k() : n + k() - 1;
  }
  std::string describe() const {
    std::ostringstream o;
    o << "seed=" << seed << " k=" << k() << (kind == LoopKind::fixed ? " fixed n=" : " while n=") << n
      << (update ? " update" : "") << (barrier ? " barrier" : "");
    if (change_at) o << " change_at=" << change_at;
    for (unsigned c = 0; c < k(); ++c) {
      o << "\n  pattern " << c << ":";
      for (const TaskSpec& t : patterns[c]) {
        o << " [";
        for (auto& [d, m] : t.acc) o << weft::to_string(m) << d << " ";
        o << (t.nested ? "nested]" : "]");
      }
    }
    return o.str();
  }
};

Program generate(u64 seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return static_cast<int>(rng() % static_cast<u64>(hi - lo + 1)) + lo; };
  Program p;
  p.seed = seed;
  p.ndata = pick(1, kMaxData);
  const int k = pick(1, 3);
  p.patterns.resize(static_cast<std::size_t>(k));
  for (auto& pat : p.patterns) {
    const int tasks = pick(0, 6);
    for (int t = 0; t < tasks; ++t) {
      TaskSpec ts;
      for (int d = 0; d < p.ndata; ++d) {
        const int r = pick(0, 9);
        if (r < 5) continue;
        ts.acc.emplace_back(d, r < 7 ? AccessMode::in : r < 8 ? AccessMode::out : AccessMode::inout);
      }
      std::shuffle(ts.acc.begin(), ts.acc.end(), rng);
      ts.nested = pick(0, 4) == 0;
      pat.push_back(ts);
    }
  }
  if (std::all_of(p.patterns.begin(), p.patterns.end(), [](auto& v) { return v.empty(); }))
    p.patterns[0].push_back(TaskSpec{{{0, AccessMode::inout}}, false});
  p.kind = pick(0, 2) == 0 ? LoopKind::while_loop : LoopKind::fixed;
  p.n = static_cast<u64>(p.kind == LoopKind::fixed ? pick(0, 14) : pick(0, 8));
  p.update = pick(0, 3) == 0;
  p.barrier = pick(0, 3) == 0;
  // A change after the recorded period (iterations k..n-1) is found when that period is refreshed.
  if (p.update && p.kind == LoopKind::fixed && p.n > static_cast<u64>(k) && pick(0, 2) == 0)
    p.change_at = static_cast<u64>(pick(k, static_cast<int>(p.n) - 1));
  if (!p.update) {  // reductions (update refuses them), from their own stream
    std::mt19937_64 rr(seed ^ 0x4ED0C710ull);
    for (auto& pat : p.patterns)
      for (TaskSpec& ts : pat)
        for (auto& [d, m] : ts.acc)
          if (m != AccessMode::in && rr() % 3 == 0) {
            m = AccessMode::reduction;
            break;
          }
  }
  return p;
}

struct Entry {
  u64 iter;
  int task;
  bool write;
  u64 value;
  bool operator<(const Entry& o) const { return std::tie(iter, task, write, value) < std::tie(o.iter, o.task, o.write, o.value); }
  bool operator==(const Entry& o) const { return iter == o.iter && task == o.task && write == o.write && value == o.value; }
};

struct State {
  u64 value[kMaxData] = {};
  std::vector<Entry> log[kMaxData];
  std::mutex m[kMaxData];
  void append(int d, const Entry& e) {
    std::lock_guard<std::mutex> g(m[d]);
    log[d].push_back(e);
  }
};

u64 param_of(const Program& p, u64 iter, unsigned copy, int t) {
  return p.update ? mix(iter + 1, static_cast<u64>(t)) : mix(copy + 1000, static_cast<u64>(t));
}

bool writes_mode(AccessMode m) { return m == AccessMode::out || m == AccessMode::inout; }

// One task's work: read, then write; `write_nested` routes the writes through a child task. A reduction adds a
// value of the task's own to its datum (to its private copy on weft).
void work(State& s, const TaskSpec& ts, u64 iter, int tid, u64 param, weft::Context* cx) {
  u64 acc = mix(param, static_cast<u64>(tid));
  for (auto& [d, m] : ts.acc)
    if (m == AccessMode::in || m == AccessMode::inout) {
      acc = mix(acc, s.value[d]);
      if (m == AccessMode::in) s.append(d, {iter, tid, false, s.value[d]});
    }
  for (auto& [d, m] : ts.acc)
    if (m == AccessMode::reduction) {
      const u64 c = mix(acc, 77u + static_cast<u64>(d)) & 0xFFFFFF;
      u64* x = &s.value[d];
      if (!cx)
        *x += c;
      else if (ts.nested && iter % 2 == 1)
        cx->spawn([x, c](weft::Context& u) { u.local(*x) += c; }, weft::reduction(*x, weft::sum));
      else
        cx->local(*x) += c;
    }
  auto writes = [&s, &ts, iter, tid, acc] {
    for (auto& [d, m] : ts.acc)
      if (writes_mode(m)) {
        s.value[d] = mix(acc, static_cast<u64>(d));
        s.append(d, {iter, tid, true, s.value[d]});
      }
  };
  if (cx && ts.nested && iter % 2 == 1) {
    for (auto& [d, m] : ts.acc)
      if (writes_mode(m)) {
        cx->spawn(writes, weft::inout(s.value[d]));
        return;  // the child writes every datum; it declares one (the parent's accesses order the rest)
      }
  }
  writes();
}

// Readers between two writes as a sorted set.
std::vector<Entry> canonical(std::vector<Entry> log) {
  std::size_t i = 0;
  while (i < log.size()) {
    std::size_t j = i;
    while (j < log.size() && !log[j].write) ++j;
    std::sort(log.begin() + static_cast<std::ptrdiff_t>(i), log.begin() + static_cast<std::ptrdiff_t>(j));
    i = j + 1;
  }
  return log;
}

void run_sequential(const Program& p, State& s, u64 iterations) {
  for (u64 i = 0; i < iterations; ++i) {
    const unsigned c = static_cast<unsigned>(i % p.k());
    for (std::size_t t = 0; t < p.patterns[c].size(); ++t) {
      const int tid = static_cast<int>(c * 100 + t);
      work(s, p.patterns[c][t], i, tid, param_of(p, i, c, static_cast<int>(t)), nullptr);
    }
  }
}

struct Outcome {
  u64 cond_calls = 0;
  bool changed_graph_error = false;
};

Outcome run_weft(weft::Runtime& rt, const Program& p, State& s) {
  Outcome out;
  auto body = [&p, &s](weft::Context& it, u64 i) {
    const unsigned c = static_cast<unsigned>(i % p.k());
    for (std::size_t t = 0; t < p.patterns[c].size(); ++t) {
      const TaskSpec* ts = &p.patterns[c][t];
      const int tid = static_cast<int>(c * 100 + t);
      const u64 param = param_of(p, i, c, static_cast<int>(t));
      Access acc[kMaxData + 1];
      std::size_t n = 0;
      int reduced = -1;
      for (auto& [d, m] : ts->acc) {
        if (m == AccessMode::reduction)
          reduced = d;
        else
          acc[n++] = {&s.value[d], sizeof(u64), m};
      }
      auto task = [&s, ts, tid, param](weft::Context& tc) {
        work(s, *ts, weft::taskiter_iteration(tc), tid, param, &tc);
      };
      auto spawn = [&](auto&&... extra) {
        switch (n) {  // the accesses as clauses
          case 0: it.spawn(task, extra...); break;
          case 1: it.spawn(task, acc[0], extra...); break;
          case 2: it.spawn(task, acc[0], acc[1], extra...); break;
          case 3: it.spawn(task, acc[0], acc[1], acc[2], extra...); break;
          case 4: it.spawn(task, acc[0], acc[1], acc[2], acc[3], extra...); break;
          case 5: it.spawn(task, acc[0], acc[1], acc[2], acc[3], acc[4], extra...); break;
          default: it.spawn(task, acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], extra...); break;
        }
      };
      if (reduced >= 0)
        spawn(weft::reduction(s.value[reduced], weft::sum));
      else
        spawn();
    }
    if (p.change_at && i == p.change_at) it.spawn([] {});  // one task more than recorded
  };
  auto cond = [&p, &out] { return out.cond_calls++ < p.n; };
  try {
    rt.run([&](weft::Context& cx) {
      const weft::unroll k(p.k());
      if (p.kind == LoopKind::fixed) {
        if (p.update && p.barrier) cx.taskiter(p.n, body, k, weft::update, weft::replay_barrier);
        else if (p.update) cx.taskiter(p.n, body, k, weft::update);
        else if (p.barrier) cx.taskiter(p.n, body, k, weft::replay_barrier);
        else cx.taskiter(p.n, body, k);
      } else {
        if (p.update && p.barrier) cx.taskiter_while(cond, body, k, weft::update, weft::replay_barrier);
        else if (p.update) cx.taskiter_while(cond, body, k, weft::update);
        else if (p.barrier) cx.taskiter_while(cond, body, k, weft::replay_barrier);
        else cx.taskiter_while(cond, body, k);
      }
    });
  } catch (const weft::taskiter_error& e) {
    out.changed_graph_error = std::string(e.what()).find("update") != std::string::npos;
    if (!p.change_at) ADD_FAILURE() << "unexpected taskiter_error: " << e.what();
  }
  return out;
}

void check(weft::Runtime& rt, const Program& p, const std::string& where) {
  State got, want;
  const Outcome o = run_weft(rt, p, got);
  u64 iterations = p.trip_count();
  if (p.change_at) {
    ASSERT_TRUE(o.changed_graph_error) << where << ": changed graph not reported\n" << p.describe();
    iterations = p.change_at / p.k() * p.k();  // the periods before the one whose body changed
  }
  run_sequential(p, want, iterations);
  if (p.kind == LoopKind::while_loop) {
    ASSERT_EQ(o.cond_calls, p.n + 1) << where << "\n" << p.describe();
  }
  for (int d = 0; d < p.ndata; ++d) {
    ASSERT_EQ(got.value[d], want.value[d]) << where << ": datum " << d << "\n" << p.describe();
    ASSERT_TRUE(canonical(got.log[d]) == canonical(want.log[d]))
        << where << ": log of datum " << d << " (" << got.log[d].size() << " entries, want " << want.log[d].size()
        << ")\n" << p.describe();
  }
}

class TaskiterDifferential : public testing::TestWithParam<std::tuple<unsigned, bool>> {};

TEST_P(TaskiterDifferential, RandomLoopsMatchSequential) {
  const unsigned workers = std::get<0>(GetParam());
  weft::Runtime rt(weft_test::opts(workers, weft::kDefaultMaxTasks, std::get<1>(GetParam())));
  if (const char* e = std::getenv("WEFT_ITER_SEED")) {
    const Program p = generate(std::strtoull(e, nullptr, 10));
    std::printf("%s\n", p.describe().c_str());
    check(rt, p, "single");
    return;
  }
  const std::size_t programs = weft_test::scaled(1500, 50);
  int changed = 0, whiles = 0, reducing = 0;
  for (std::size_t i = 0; i < programs; ++i) {
    const u64 seed = 1000003ull * i + workers;
    const Program p = generate(seed);
    changed += p.change_at != 0;
    for (const auto& pat : p.patterns)
      for (const TaskSpec& ts : pat)
        reducing += std::any_of(ts.acc.begin(), ts.acc.end(), [](auto& a) { return a.second == AccessMode::reduction; });
    whiles += p.kind == LoopKind::while_loop;
    char where[64];
    std::snprintf(where, sizeof where, "program %zu", i);
    check(rt, p, where);
    if (testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(changed, 0);
  EXPECT_GT(whiles, 0);
  EXPECT_GT(reducing, static_cast<int>(programs / 4));
}

INSTANTIATE_TEST_SUITE_P(Workers, TaskiterDifferential,
                         testing::Combine(testing::Values(1u, 2u, 4u), testing::Bool()),
                         [](const auto& info) {
                           char name[32];
                           std::snprintf(name, sizeof name, "w%u_%s", std::get<0>(info.param),
                                         std::get<1>(info.param) ? "is" : "nois");
                           return std::string(name);
                         });

}  // namespace
