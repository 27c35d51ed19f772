// Profiles and traces: counts, the work/overhead/idle breakdown, per-label times, the Chrome trace file
// (spans per task on the right worker, nesting, edges), a full trace buffer, the JSON profile file, the
// WEFT_PROFILE / WEFT_TRACE* variables, and the front-end phase hook.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "trace/hooks.hpp"  // the front-end phase hook (internal)

using namespace weft_test;
using json = nlohmann::json;

namespace {

// Busy-waits about `us` microseconds of wall time (more when the thread is preempted: tests never compare a
// measured duration with it).
void busy(double us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "weft_" + name + "_" + std::to_string(::getpid()) + ".json";
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);  // throws (fails the test) on malformed JSON
}

weft::Options profiled(unsigned workers) {
  weft::Options o;
  o.num_threads = workers;
  o.profile.enabled = true;
  return o;
}

struct SpanRec {
  std::string name;
  long long tid;
  double ts, dur;
  std::uint64_t id;
};

std::vector<SpanRec> spans(const json& trace, const char* cat) {
  std::vector<SpanRec> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("cat") == cat)
      out.push_back({e.at("name"), e.at("tid"), e.at("ts"), e.at("dur"), e.at("args").at("id")});
  return out;
}

// Spans on one track are laminar: two spans are disjoint or one contains the other.
void expect_laminar(std::vector<SpanRec> v) {
  std::map<long long, std::vector<SpanRec>> by_tid;
  for (auto& s : v) by_tid[s.tid].push_back(s);
  for (auto& [tid, list] : by_tid) {
    std::sort(list.begin(), list.end(), [](const SpanRec& a, const SpanRec& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;  // enclosing first
    });
    std::vector<const SpanRec*> open;
    for (const SpanRec& s : list) {
      while (!open.empty() && open.back()->ts + open.back()->dur <= s.ts) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.ts + s.dur, open.back()->ts + open.back()->dur + 1e-9)
            << "span " << s.name << " partially overlaps " << open.back()->name << " on worker " << tid;
      }
      open.push_back(&s);
    }
  }
}

class EnvGuard : public testing::Test {
 protected:
  // The launchers' variables too: under one, the file names would get the rank (profile_ranks_test.cpp).
  static constexpr const char* kVars[] = {"WEFT_PROFILE",         "WEFT_TRACE",           "WEFT_TRACE_EDGES",
                                          "WEFT_TRACE_BUFFER",    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                          "PMI_RANK",             "PMI_SIZE",             "PMIX_RANK"};
  void SetUp() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
};

// ------------------------------------------------------------------------------------------------------
// Profile
// ------------------------------------------------------------------------------------------------------

TEST(Profile, OffByDefault) {
  weft::Options o;
  o.num_threads = 2;
  weft::Runtime rt(o);
  rt.run([](weft::Context& cx) { cx.spawn([] {}); });
  EXPECT_FALSE(rt.profile().valid);
  EXPECT_NE(weft::to_text(rt.profile()).find("none"), std::string::npos);
}

TEST(Profile, KnownTasksGiveExactCountsAndConsistentTimes) {
  const int n = 40;
  const double t_us = 500;
  weft::Runtime rt(profiled(2));
  rt.reset_stats();
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) cx.spawn([&] { busy(t_us); }, weft::label("busy"));
    cx.spawn([] {}, weft::label("empty"));
  });
  const weft::Profile p = rt.profile();
  ASSERT_TRUE(p.valid);
  EXPECT_EQ(p.run, 1u);
  ASSERT_EQ(p.workers.size(), 2u);
  EXPECT_EQ(p.stats.tasks_created, n + 1u);
  EXPECT_EQ(p.stats.tasks_executed, n + 1u);
  EXPECT_EQ(p.total.tasks_created, n + 1u);
  EXPECT_EQ(p.total.tasks_executed, n + 1u);
  EXPECT_EQ(p.workers[0].tasks_created, n + 1u);  // the root runs on worker 0
  EXPECT_EQ(p.workers[0].tasks_executed + p.workers[1].tasks_executed, n + 1u);
  // Worker 1 runs only what it steals; of a batch it steals, worker 0 may steal some back (Options::steal_batch).
  EXPECT_LE(p.workers[1].tasks_executed, p.workers[1].tasks_stolen);
  EXPECT_LE(p.workers[1].tasks_stolen - p.workers[1].tasks_executed, p.workers[0].tasks_stolen);
  const weft::Stats s = rt.stats();
  EXPECT_EQ(p.stats.tasks_stolen, s.tasks_stolen);
  EXPECT_EQ(p.stats.immediate_successor, s.immediate_successor);
  EXPECT_EQ(p.root_children, n + 1u);
  EXPECT_EQ(p.spawning_tasks, 0u);
  EXPECT_GT(p.discovery_seconds, 0.0);
  EXPECT_LE(p.discovery_seconds, p.wall_seconds);

  // Durations are compared only with one another (sums, containment, order), never with a number of
  // microseconds: a preemption can lengthen any span on a loaded machine.
  ASSERT_EQ(p.labels.size(), 2u);
  for (std::size_t i = 1; i < p.labels.size(); ++i)
    EXPECT_GE(p.labels[i - 1].total_seconds, p.labels[i].total_seconds) << "sorted by total work";
  std::map<std::string, weft::LabelProfile> by;
  for (const auto& l : p.labels) by[l.label] = l;
  ASSERT_EQ(by.count("busy"), 1u);
  ASSERT_EQ(by.count("empty"), 1u);
  EXPECT_EQ(by["busy"].count, static_cast<std::uint64_t>(n));
  EXPECT_EQ(by["empty"].count, 1u);
  const weft::LabelProfile& b = by["busy"];
  EXPECT_GT(b.total_seconds, 0.0);
  EXPECT_NEAR(b.mean_seconds * n, b.total_seconds, 1e-9 * b.total_seconds);
  EXPECT_GE(b.max_seconds, b.mean_seconds);
  EXPECT_LE(b.max_seconds, b.total_seconds);
  // Work: the labelled bodies plus the root function; no more than the workers' wall time.
  const double tol = 1e-9 * p.wall_seconds;
  EXPECT_GE(p.total.work_seconds + tol, b.total_seconds + by["empty"].total_seconds);
  EXPECT_LE(p.total.work_seconds, p.workers.size() * p.wall_seconds + tol);
  for (const weft::WorkerProfile& w : p.workers) {
    EXPECT_GE(w.overhead_seconds, 0.0);
    EXPECT_GE(w.idle_seconds, 0.0);
    const double sum = w.work_seconds + w.overhead_seconds + w.idle_seconds;
    EXPECT_NEAR(sum, p.wall_seconds, 1e-9 + 1e-9 * p.wall_seconds);
  }
  const std::string text = weft::to_text(p);
  EXPECT_NE(text.find("weft profile: run 1, 2 workers"), std::string::npos) << text;
  EXPECT_NE(text.find("busy"), std::string::npos) << text;
}

TEST(Profile, CountersMatchStatsOfTheRun) {
  weft::Runtime rt(profiled(2));
  long x = 0, y = 0;
  rt.run([&](weft::Context& cx) { cx.spawn([&] { ++x; }, weft::out(x)); });
  rt.reset_stats();
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 200; ++i) cx.spawn([&] { ++x; }, weft::inout(x));
    for (int i = 0; i < 4; ++i) cx.spawn([] {}, weft::inoutset(y));
    for (int i = 0; i < 3; ++i) cx.spawn([&] { (void)y; }, weft::in(y));
  });
  const weft::Profile p = rt.profile();
  const weft::Stats s = rt.stats();  // since reset_stats: the second run only
  EXPECT_EQ(p.run, 2u);
  EXPECT_EQ(p.stats.tasks_created, s.tasks_created);
  EXPECT_EQ(p.stats.tasks_executed, s.tasks_executed);
  EXPECT_EQ(p.stats.edges_created, s.edges_created);
  EXPECT_EQ(p.stats.edges_pruned_finished, s.edges_pruned_finished);
  EXPECT_EQ(p.stats.edges_pruned_duplicate, s.edges_pruned_duplicate);
  EXPECT_EQ(p.stats.edges_saved_inoutset, s.edges_saved_inoutset);
  EXPECT_EQ(p.stats.internal_nodes, s.internal_nodes);
  EXPECT_EQ(p.stats.tasks_created, 207u);
  EXPECT_EQ(p.stats.edges_created + p.stats.edges_pruned_finished + p.stats.edges_pruned_duplicate, 199u + 4u + 3u)
      << "chain: 199 links; the group waits on nothing; a join node after its 4 members; 3 readers after it";
}

TEST(Profile, NestedTasksCountAsTheirOwnWorkNotTheWaiters) {
  // One worker: the children run inline during the parent's taskwait. The parent's own work is short.
  weft::Runtime rt(profiled(1));
  rt.run([&](weft::Context& cx) {
    cx.spawn(
        [&](weft::Context& c) {
          busy(1000);
          for (int i = 0; i < 4; ++i) c.spawn([] { busy(5000); }, weft::label("child"));
          c.taskwait();
        },
        weft::label("parent"));
  });
  const weft::Profile p = rt.profile();
  std::map<std::string, weft::LabelProfile> by;
  for (auto& l : p.labels) by[l.label] = l;
  ASSERT_EQ(by.count("parent"), 1u);
  ASSERT_EQ(by.count("child"), 1u);
  EXPECT_EQ(by["child"].count, 4u);
  EXPECT_GT(by["child"].total_seconds, 0.0);
  EXPECT_GT(by["parent"].total_seconds, 0.0);
  // One worker, so its work time is every body's own work once: counting the inline children in the parent
  // too would count them twice, more than the worker worked.
  EXPECT_LE(by["parent"].total_seconds + by["child"].total_seconds, p.total.work_seconds * (1 + 1e-9))
      << "the parent's work must not include its inline children";
  EXPECT_EQ(p.spawning_tasks, 1u);
  EXPECT_GT(p.nested_discovery_seconds, 0.0);
}

TEST(Profile, PrintsAtTheEndOfEachRun) {
  weft::Options o = profiled(1);
  o.profile.print = true;
  weft::Runtime rt(o);
  testing::internal::CaptureStderr();
  rt.run([](weft::Context& cx) { cx.spawn([] {}, weft::label("printed")); });
  rt.run([](weft::Context& cx) { cx.spawn([] {}); });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("weft profile: run 1, 1 worker,"), std::string::npos) << err;
  EXPECT_NE(err.find("weft profile: run 2, 1 worker,"), std::string::npos) << err;
  EXPECT_NE(err.find("printed"), std::string::npos) << err;
  EXPECT_NE(err.find("(unlabelled)"), std::string::npos) << err;
  EXPECT_NE(err.find("edges_created"), std::string::npos) << err;
}

// A label or phase name with a newline or other control characters stays one row of the text table (escaped).
TEST(Profile, ControlCharactersInLabelsKeepOneRowEach) {
  weft::Options o = profiled(1);
  weft::Runtime rt(o);
  rt.run([](weft::Context& cx) {
    cx.spawn([] {}, weft::label("two\nlines\tand\x01"));
    cx.spawn([] {}, weft::label("plain"));
  });
  const std::string text = weft::to_text(rt.profile());
  EXPECT_NE(text.find("two\\nlines\\tand\\x01"), std::string::npos) << text;
  std::size_t rows = 0;
  for (std::size_t at = 0; (at = text.find('\n', at)) != std::string::npos; ++at) {
    const std::size_t next = text.find_first_not_of(' ', at + 1);
    if (next != std::string::npos && text.compare(next, 5, "lines") == 0) ++rows;  // a row cut by the newline
  }
  EXPECT_EQ(rows, 0u) << text;
  weft::Profile p;
  p.valid = true;
  p.phases.push_back({"phase\r\nname", 1, 0, 0});
  EXPECT_NE(weft::to_text(p).find("phase\\x0d\\nname"), std::string::npos) << weft::to_text(p);
}

TEST(Profile, JsonFileHoldsEveryRunAndIsValidAfterEach) {
  const std::string path = temp_path("profile");
  weft::Options o;
  o.num_threads = 2;
  o.profile.json_file = path;
  {
    weft::Runtime rt(o);
    rt.run([](weft::Context& cx) {
      for (int i = 0; i < 10; ++i) cx.spawn([] {}, weft::label("a\"quoted\\label"));
    });
    json j = read_json(path);
    ASSERT_EQ(j.at("runs").size(), 1u);
    EXPECT_EQ(j["runs"][0]["stats"]["tasks_executed"], 10);
    EXPECT_EQ(j["runs"][0]["labels"][0]["label"], "a\"quoted\\label");
    rt.run([](weft::Context& cx) { cx.spawn([] {}); });
    j = read_json(path);
    ASSERT_EQ(j.at("runs").size(), 2u);
    EXPECT_EQ(j["runs"][1]["run"], 2);
    EXPECT_EQ(j["runs"][1]["stats"]["tasks_executed"], 1);
    EXPECT_EQ(j["runs"][1]["workers"].size(), 2u);
    const json& w = j["runs"][1]["total"];
    for (const char* k : {"work_s", "overhead_s", "idle_s", "tasks_created", "tasks_stolen", "immediate_successor"})
      EXPECT_TRUE(w.contains(k)) << k;
    EXPECT_TRUE(rt.profile().valid);  // the file implies profiling
  }
  std::remove(path.c_str());
}

// ------------------------------------------------------------------------------------------------------
// Trace
// ------------------------------------------------------------------------------------------------------

TEST(Trace, OneSpanPerTaskOnTheWorkerThatRanIt) {
  const int n = static_cast<int>(scaled(300, 50));
  const std::string path = temp_path("trace_spans");
  std::vector<std::string> names(n);
  for (int i = 0; i < n; ++i) names[i] = std::string(1, 't').append(std::to_string(i));
  std::vector<int> ran_on(n, -1);
  weft::Stats stats;
  {
    weft::Options o;
    o.num_threads = 2;
    o.profile.trace_file = path;
    weft::Runtime rt(o);
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < n; ++i)
        cx.spawn([&, i](weft::Context& c) { ran_on[i] = static_cast<int>(c.worker_id()); busy(20); },
                 weft::label(names[i].c_str()), weft::priority(i % 3));
    });
    stats = rt.stats();
  }  // the trace is written here
  const json j = read_json(path);
  EXPECT_EQ(j.at("otherData").at("workers"), 2);
  EXPECT_EQ(j.at("otherData").at("truncated"), false);
  const auto tasks = spans(j, "task");
  ASSERT_EQ(tasks.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(stats.tasks_executed, static_cast<std::uint64_t>(n));
  std::map<std::string, SpanRec> by_name;
  for (const auto& s : tasks) EXPECT_TRUE(by_name.emplace(s.name, s).second) << "two spans for " << s.name;
  for (int i = 0; i < n; ++i) {
    auto it = by_name.find(names[i]);
    ASSERT_NE(it, by_name.end()) << names[i];
    EXPECT_EQ(it->second.tid, ran_on[i]) << names[i];
    EXPECT_GT(it->second.dur, 0.0) << names[i];
  }
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "task") {
      EXPECT_EQ(e["args"]["priority"], std::stoi(e["name"].get<std::string>().substr(1)) % 3);
    }
  }
  const auto roots = spans(j, "root");
  ASSERT_EQ(roots.size(), 1u);
  EXPECT_EQ(roots[0].tid, 0);
  const auto disc = spans(j, "discovery");
  ASSERT_EQ(disc.size(), 1u);
  EXPECT_EQ(disc[0].tid, weft::kMaxThreads + 0);
  EXPECT_EQ(disc[0].id, roots[0].id);
  int run_b = 0, run_e = 0;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "discovery") {
      EXPECT_EQ(e["args"]["children"], n);
    }
    if (e.value("cat", "") == "run") (e["ph"] == "b" ? run_b : run_e)++;
    EXPECT_NE(e["ph"], "s") << "no flow events without trace_edges";
  }
  EXPECT_EQ(run_b, 1);
  EXPECT_EQ(run_e, 1);
  expect_laminar(tasks);
  std::remove(path.c_str());
}

// A binary tree whose inner tasks wait for their children: on each worker track, spans nest or are disjoint,
// and a child that ran on its parent's worker lies inside the parent's span (it ran during the taskwait).
void tree(weft::Context& cx, int node, int depth, const std::vector<std::string>& names) {
  busy(5);
  if (depth == 0) return;
  for (int k = 1; k <= 2; ++k) {
    const int c = 2 * node + k;
    cx.spawn([c, depth, &names](weft::Context& cc) { tree(cc, c, depth - 1, names); },
             weft::label(names[c].c_str()));
  }
  cx.taskwait();
}

TEST(Trace, NestedSpansNestOnTheirTrack) {
  const int depth = kSanitized ? 6 : 8;
  const int nodes = (1 << (depth + 1)) - 1;
  std::vector<std::string> names(nodes);
  for (int i = 0; i < nodes; ++i) names[i] = std::to_string(i);
  const std::string path = temp_path("trace_nested");
  {
    weft::Options o;
    o.num_threads = 2;
    o.profile.trace_file = path;
    weft::Runtime rt(o);
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) { tree(c, 0, depth, names); }, weft::label(names[0].c_str()));
    });
  }
  const json j = read_json(path);
  const auto tasks = spans(j, "task");
  ASSERT_EQ(tasks.size(), static_cast<std::size_t>(nodes));
  expect_laminar(tasks);
  std::map<int, SpanRec> by;
  for (auto& s : tasks) by.emplace(std::stoi(s.name), s);
  int inline_children = 0;
  for (int c = 1; c < nodes; ++c) {
    const SpanRec &child = by.at(c), &parent = by.at((c - 1) / 2);
    EXPECT_GE(child.ts, parent.ts) << c;  // children start after their parent's body did
    if (child.tid != parent.tid) continue;
    ++inline_children;
    EXPECT_LE(child.ts + child.dur, parent.ts + parent.dur + 1e-9) << "child " << c << " outside its parent";
  }
  EXPECT_GT(inline_children, 0);
  // Discovery spans: one per inner node, on the discovery track of the worker that ran it.
  int inner = 0;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "discovery" && e["name"] != "spawn: root") {
      ++inner;
      EXPECT_EQ(e["args"]["children"], 2);
      const int id = std::stoi(e["name"].get<std::string>().substr(7));
      EXPECT_EQ(e["tid"].get<long long>(), weft::kMaxThreads + by.at(id).tid);
    }
  EXPECT_EQ(inner, (1 << depth) - 1);
  std::remove(path.c_str());
}

TEST(Trace, EdgesBecomeFlowArrowsBetweenTaskSpans) {
  const std::string path = temp_path("trace_edges");
  const int chain = 20;
  weft::Stats stats;
  {
    weft::Options o;
    o.num_threads = 2;
    o.profile.trace_file = path;
    o.profile.trace_edges = true;
    weft::Runtime rt(o);
    long x = 0, y = 0;
    std::atomic<bool> go{false};
    rt.run([&](weft::Context& cx) {
      // A chain held back until it is fully spawned (so every link is an edge, none pruned) ...
      cx.spawn([&] { spin_until([&] { return go.load(); }); }, weft::out(x), weft::label("head"));
      for (int i = 1; i < chain; ++i) cx.spawn([&] { ++x; }, weft::inout(x), weft::label("link"));
      // ... and 3 inoutset writers joined by an internal node before one reader.
      cx.spawn([&] { spin_until([&] { return go.load(); }); }, weft::out(y), weft::label("gate"));
      for (int i = 0; i < 3; ++i) cx.spawn([] {}, weft::inoutset(y), weft::label("set"));
      cx.spawn([&] { (void)y; }, weft::in(y), weft::label("reader"));
      go = true;
    });
    stats = rt.stats();
  }
  const json j = read_json(path);
  std::map<std::uint64_t, SpanRec> by_id;
  for (auto& s : spans(j, "task")) by_id.emplace(s.id, s);
  std::map<std::uint64_t, int> starts;  // flow id -> matched
  std::multimap<std::string, std::string> arrows;  // from label -> to label
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] != "s") continue;
    const auto from = e["args"]["from"].get<std::uint64_t>(), to = e["args"]["to"].get<std::uint64_t>();
    ASSERT_EQ(by_id.count(from), 1u);
    ASSERT_EQ(by_id.count(to), 1u);
    EXPECT_EQ(e["tid"].get<long long>(), by_id.at(from).tid);
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), by_id.at(from).ts);
    arrows.emplace(by_id.at(from).name, by_id.at(to).name);
    starts[e["id"].get<std::uint64_t>()] = 0;
  }
  int finishes = 0;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "f") {
      ++finishes;
      EXPECT_EQ(e["bp"], "e");
      EXPECT_EQ(starts.count(e["id"].get<std::uint64_t>()), 1u);
    }
  EXPECT_EQ(finishes, static_cast<int>(starts.size()));
  EXPECT_EQ(stats.edges_pruned_finished, 0u);
  EXPECT_EQ(arrows.count("head"), 1u);
  EXPECT_EQ(arrows.count("link"), static_cast<std::size_t>(chain - 2));
  EXPECT_EQ(arrows.count("gate"), 3u);
  auto [b, e] = arrows.equal_range("set");
  EXPECT_EQ(std::distance(b, e), 3) << "each inoutset writer -> the reader, through the join node";
  for (auto it = b; it != e; ++it) EXPECT_EQ(it->second, "reader");
  std::remove(path.c_str());
}

TEST(Trace, FullBufferStopsTracingWithOneWarning) {
  const std::string path = temp_path("trace_full");
  const int n = 100;
  testing::internal::CaptureStderr();
  {
    weft::Options o;
    o.num_threads = 2;
    o.profile.enabled = true;
    o.profile.trace_file = path;
    o.profile.trace_edges = true;
    o.profile.trace_buffer = 8;
    weft::Runtime rt(o);
    long x = 0;
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < n; ++i) cx.spawn([&] { ++x; }, weft::inout(x));
    });
    rt.run([&](weft::Context& cx) { cx.spawn([] {}); });
    EXPECT_EQ(x, n);
    const weft::Profile p = rt.profile();
    EXPECT_TRUE(p.trace_truncated);
    EXPECT_EQ(p.stats.tasks_executed, 1u);  // the profile is unaffected
  }
  const std::string err = testing::internal::GetCapturedStderr();
  const auto first = err.find("trace buffer");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("trace buffer", first + 1), std::string::npos) << "one warning only: " << err;
  const json j = read_json(path);
  EXPECT_EQ(j["otherData"]["truncated"], true);
  EXPECT_TRUE(j["otherData"].contains("dropped_after_us"));
  const auto tasks = spans(j, "task");
  EXPECT_LE(tasks.size(), 16u);
  std::remove(path.c_str());
}

// The trace is written when the Runtime goes, and only then: until that, the file is as it was (an older trace
// is not wiped, and a process that ends without destroying its Runtime leaves no empty file).
TEST(Trace, FileLeftAsItWasUntilTheRuntimeGoes) {
  const std::string path = temp_path("trace_untouched"), fresh = temp_path("trace_fresh");
  std::remove(fresh.c_str());
  {
    std::ofstream(path) << "an older trace";
  }
  {
    weft::Options o;
    o.profile.trace_file = path;
    weft::Runtime rt(o);
    weft::Options f;
    f.profile.trace_file = fresh;
    weft::Runtime rt2(f);
    rt.run([](weft::Context& cx) { cx.spawn([] {}, weft::label("x")); });
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "an older trace");
    EXPECT_NE(::access(fresh.c_str(), F_OK), 0) << "the trace file exists before the Runtime is destroyed";
  }
  EXPECT_EQ(spans(read_json(path), "task").size(), 1u);
  EXPECT_EQ(spans(read_json(fresh), "root").size(), 0u);  // a Runtime that never ran writes an empty trace
  std::remove(path.c_str());
  std::remove(fresh.c_str());
}

// A label need only outlive its run (weft/tasks.hpp), though the trace is written later: the trace keeps
// copies of the names. Bytes that are not UTF-8 become U+FFFD, so the files stay valid JSON.
TEST(Trace, LabelsNeedOnlyOutliveTheirRun) {
  const std::string path = temp_path("trace_labels"), prof = temp_path("profile_labels");
  {
    weft::Options o;
    o.profile.trace_file = path;
    o.profile.json_file = prof;
    weft::Runtime rt(o);
    for (int run = 0; run < 3; ++run) {
      std::vector<std::string> names;
      for (int i = 0; i < 4; ++i) names.push_back("run" + std::to_string(run) + "-label" + std::to_string(i));
      rt.run([&](weft::Context& cx) {
        for (const std::string& n : names) cx.spawn([] {}, weft::label(n.c_str()));
      });
      for (std::string& n : names) std::fill(n.begin(), n.end(), '\xff');  // then freed
    }
    rt.run([](weft::Context& cx) { cx.spawn([] {}, weft::label("caf\xe9 \xe2\x82 ok \xc3\xa9")); });
  }
  const json j = read_json(path);
  std::multiset<std::string> got;
  for (const auto& s : spans(j, "task")) got.insert(s.name);
  std::multiset<std::string> want;
  for (int run = 0; run < 3; ++run)
    for (int i = 0; i < 4; ++i) want.insert("run" + std::to_string(run) + "-label" + std::to_string(i));
  // Each byte outside well-formed UTF-8 (a Latin-1 byte, a cut sequence's two) as U+FFFD; good UTF-8 kept.
  const std::string mended = "caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd ok \xc3\xa9";
  want.insert(mended);
  EXPECT_EQ(got, want);
  const json p = read_json(prof);
  EXPECT_EQ(p["runs"][3]["labels"][0]["label"], mended);
  std::remove(path.c_str());
  std::remove(prof.c_str());
}

TEST(Trace, PhasesAndTagsFromAFrontEnd) {
  // The hook a persistent-graph front end uses to report recording / replay of each iteration.
  const std::string path = temp_path("trace_phases");
  weft::Profile p;
  {
    weft::Options o;
    o.num_threads = 2;
    o.profile.trace_file = path;
    weft::Runtime rt(o);
    rt.run([&](weft::Context& cx) {
      weft::detail::Worker& w = *weft::detail::ContextAccess::worker(cx);
      for (std::uint64_t it = 1; it <= 3; ++it) {
        weft::detail::trace::set_tag(w, it);
        const auto t0 = weft::detail::trace::now(w);
        cx.spawn([] { busy(50); }, weft::label("iter"));
        cx.taskwait();
        weft::detail::trace::record_phase(w, it == 1 ? "record" : "replay", t0, weft::detail::trace::now(w), it);
      }
    });
    p = rt.profile();
  }
  ASSERT_EQ(p.phases.size(), 3u);
  EXPECT_EQ(p.phases[0].name, "record");
  EXPECT_EQ(p.phases[1].name, "replay");
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p.phases[i].tag, i + 1);
    EXPECT_GT(p.phases[i].seconds, 0.0);
    EXPECT_LE(p.phases[i].begin_seconds + p.phases[i].seconds, p.wall_seconds * (1 + 1e-9));
    if (i) {
      EXPECT_GE(p.phases[i].begin_seconds, p.phases[i - 1].begin_seconds + p.phases[i - 1].seconds);
    }
  }
  EXPECT_NE(weft::to_text(p).find("replay"), std::string::npos);
  const json j = read_json(path);
  std::vector<std::uint64_t> tags;
  int phase_events = 0;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "task") tags.push_back(e["args"]["tag"]);
    if (e.value("cat", "") == "phase") ++phase_events;
  }
  std::sort(tags.begin(), tags.end());
  EXPECT_EQ(tags, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(phase_events, 6);  // a begin and an end per phase
  std::remove(path.c_str());
}

// taskiter reports its recording and replay as phases, and its replayed tasks as spans tagged by iteration.
TEST(Trace, TaskiterRecordAndReplayPhases) {
  const std::string path = temp_path("trace_taskiter");
  weft::Profile p;
  long x = 0, y = 0;
  {
    weft::Options o;
    o.num_threads = 2;
    o.profile.enabled = true;
    o.profile.trace_file = path;
    weft::Runtime rt(o);
    rt.run([&](weft::Context& cx) {
      cx.taskiter(5, [&](weft::Context& it) {
        it.spawn([&] { ++x; }, weft::inout(x), weft::label("a"));
        it.spawn([&] { ++y; }, weft::inout(y), weft::label("b"));
      });
      cx.taskwait();
      cx.taskiter(3, [&](weft::Context& it) { it.spawn([&] { ++x; }, weft::inout(x)); }, weft::replay_barrier);
    });
    p = rt.profile();
  }
  EXPECT_EQ(x, 8);
  EXPECT_EQ(y, 5);
  std::vector<std::string> names;
  for (const auto& ph : p.phases) names.push_back(ph.name + ":" + std::to_string(ph.tag));
  // Pipelined loop: one record, one replay; with replay_barrier: one record, one replay per iteration.
  EXPECT_EQ(names, (std::vector<std::string>{"record:0", "replay:0", "record:0", "replay:0", "replay:1",
                                             "replay:2"}));
  const json j = read_json(path);
  std::vector<std::uint64_t> a_tags;
  int spans = 0;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "task") continue;
    ++spans;
    if (e["name"] == "a") a_tags.push_back(e["args"]["tag"]);
  }
  std::sort(a_tags.begin(), a_tags.end());
  EXPECT_EQ(a_tags, (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(spans, 2 * 5 + 3 + 2);  // replayed instances + the two taskiter tasks themselves
  std::remove(path.c_str());
}

// ------------------------------------------------------------------------------------------------------
// Configuration
// ------------------------------------------------------------------------------------------------------

using ProfileConfig = EnvGuard;

void expect_env_error(const char* var, const char* value) {
  ::setenv(var, value, 1);
  try {
    (void)weft::Options::from_environment();
    ADD_FAILURE() << var << "='" << value << "' accepted";
  } catch (const weft::config_error& e) {
    EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
  }
  ::unsetenv(var);
}

TEST_F(ProfileConfig, EnvironmentValues) {
  weft::Options o = weft::Options::from_environment();
  EXPECT_FALSE(o.profile.active());
  EXPECT_EQ(o.profile.trace_buffer, weft::kDefaultTraceBuffer);
  ::setenv("WEFT_PROFILE", "1", 1);
  o = weft::Options::from_environment();
  EXPECT_TRUE(o.profile.enabled && o.profile.print && o.profile.json_file.empty());
  ::setenv("WEFT_PROFILE", "json:/tmp/p.json", 1);
  o = weft::Options::from_environment();
  EXPECT_TRUE(o.profile.enabled && !o.profile.print);
  EXPECT_EQ(o.profile.json_file, "/tmp/p.json");
  ::setenv("WEFT_PROFILE", "0", 1);
  EXPECT_FALSE(weft::Options::from_environment().profile.active());
  ::setenv("WEFT_TRACE", "/tmp/t.json", 1);
  ::setenv("WEFT_TRACE_EDGES", "1", 1);
  ::setenv("WEFT_TRACE_BUFFER", "1000", 1);
  o = weft::Options::from_environment();
  EXPECT_TRUE(o.profile.active());
  EXPECT_EQ(o.profile.trace_file, "/tmp/t.json");
  EXPECT_TRUE(o.profile.trace_edges);
  EXPECT_EQ(o.profile.trace_buffer, 1000u);
  ::setenv("WEFT_TRACE_BUFFER", std::to_string(weft::kMaxTraceBuffer).c_str(), 1);
  EXPECT_EQ(weft::Options::from_environment().profile.trace_buffer, weft::kMaxTraceBuffer);
}

TEST_F(ProfileConfig, BadEnvironmentValuesAreRejected) {
  for (const char* v : {"2", "yes", "json", "json:", "JSON:x", "1 ", ""}) expect_env_error("WEFT_PROFILE", v);
  expect_env_error("WEFT_TRACE", "");  // empty is rejected by every variable, not read as "off"
  for (const char* v : {"2", "on", ""}) expect_env_error("WEFT_TRACE_EDGES", v);
  for (const char* v : {"0", "-1", "1e6", "lots", ""}) expect_env_error("WEFT_TRACE_BUFFER", v);
  expect_env_error("WEFT_TRACE_BUFFER", std::to_string(weft::kMaxTraceBuffer + 1).c_str());
}

TEST_F(ProfileConfig, BadOptionsAreRejected) {
  weft::Options o;
  o.profile.trace_buffer = 0;
  EXPECT_THROW(o.validate(), weft::config_error);
  o.profile.trace_buffer = weft::kMaxTraceBuffer + 1;
  EXPECT_THROW(weft::Runtime{o}, weft::config_error);
  weft::Options f;
  f.profile.trace_file = "/nonexistent-dir/x/trace.json";
  try {
    weft::Runtime rt(f);
    ADD_FAILURE() << "an uncreatable trace file was accepted";
  } catch (const weft::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x/trace.json"), std::string::npos) << e.what();
  }
  weft::Options g;
  g.profile.json_file = "/nonexistent-dir/x/profile.json";
  EXPECT_THROW(weft::Runtime{g}, weft::config_error);
}

TEST_F(ProfileConfig, RuntimeFromEnvironmentExitsOnABadValue) {
  ::setenv("WEFT_PROFILE", "verbose", 1);
  EXPECT_EXIT({ weft::Runtime rt; }, testing::ExitedWithCode(2), "WEFT_PROFILE='verbose'");
  ::setenv("WEFT_PROFILE", "0", 1);
  ::setenv("WEFT_TRACE", "/nonexistent-dir/x/trace.json", 1);
  EXPECT_EXIT({ weft::Runtime rt; }, testing::ExitedWithCode(2), "WEFT_TRACE");
}

// A file that opens but cannot be written (a full device) loses the profile or trace: one line naming the
// variable and the file, and the process exits with status 2 at its end (or the Runtime is refused up front).
TEST_F(ProfileConfig, UnwritableTraceMakesTheProcessExitWithStatus2) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  EXPECT_EXIT(
      {
        {
          weft::Options o;
          o.profile.trace_file = "/dev/full";
          weft::Runtime rt(o);
          rt.run([](weft::Context& cx) { cx.spawn([] {}); });
        }
        std::exit(0);
      },
      testing::ExitedWithCode(2), "WEFT_TRACE.*'/dev/full' cannot be written");
}

TEST_F(ProfileConfig, UnwritableProfileIsRefused) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  weft::Options o;
  o.profile.json_file = "/dev/full";
  try {
    weft::Runtime rt(o);
    ADD_FAILURE() << "a profile file that cannot be written was accepted";
  } catch (const weft::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("WEFT_PROFILE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'/dev/full' cannot be written"), std::string::npos) << e.what();
  }
}

// One file named for the profile and the trace (here through two spellings of its path) would be written
// by both: refused.
TEST_F(ProfileConfig, ProfileAndTraceInOneFileAreRefused) {
  const std::string path = temp_path("same_file");
  const std::string other = testing::TempDir() + "./" + path.substr(testing::TempDir().size());
  weft::Options o;
  o.profile.json_file = path;
  o.profile.trace_file = other;
  try {
    weft::Runtime rt(o);
    ADD_FAILURE() << "one file for the profile and the trace was accepted";
  } catch (const weft::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("the same file"), std::string::npos) << e.what();
  }
  o.profile.json_file = "/dev/null";  // a device is no file of ours
  o.profile.trace_file = "/dev/null";
  EXPECT_NO_THROW({ weft::Runtime rt(o); });
  std::remove(path.c_str());
}

// A run whose profile cannot be written (here the file-size limit) is reported, the process exits with
// status 2, and the file keeps the runs written before it, as valid JSON.
// Two runs, the second with the file-size limit a few bytes above the first's file (in a death test's child).
void profile_two_runs_past_a_size_limit(const std::string& path) {
  {
    weft::Options o;
    o.profile.json_file = path;
    weft::Runtime rt(o);
    rt.run([](weft::Context& cx) { cx.spawn([] {}); });
    std::signal(SIGXFSZ, SIG_IGN);
    struct stat st {};
    ::stat(path.c_str(), &st);
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(st.st_size) + 16;
    ::setrlimit(RLIMIT_FSIZE, &lim);
    rt.run([](weft::Context& cx) { cx.spawn([] {}, weft::label("second")); });
  }
  std::exit(0);
}

TEST_F(ProfileConfig, ProfileThatCannotGrowKeepsTheRunsBefore) {
  // No pid in the name: a death test's child may be a new process running this test from its start.
  const std::string path = testing::TempDir() + "weft_profile_limit_test.json";
  EXPECT_EXIT(profile_two_runs_past_a_size_limit(path), testing::ExitedWithCode(2), "WEFT_PROFILE.*cannot be written");
  const json j = read_json(path);
  ASSERT_EQ(j.at("runs").size(), 1u);
  EXPECT_EQ(j["runs"][0]["run"], 1);
  std::remove(path.c_str());
}

TEST_F(ProfileConfig, EnvironmentTurnsProfilingOn) {
  ::setenv("WEFT_PROFILE", "1", 1);
  ::setenv("WEFT_NUM_THREADS", "1", 1);
  testing::internal::CaptureStderr();
  {
    weft::Runtime rt;
    rt.run([](weft::Context& cx) { cx.spawn([] {}, weft::label("from-env")); });
  }
  ::unsetenv("WEFT_NUM_THREADS");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("weft profile: run 1, 1 worker,"), std::string::npos) << err;
  EXPECT_NE(err.find("from-env"), std::string::npos) << err;
}

}  // namespace
