// Profiles and traces of a process in a job of several (MPI ranks), without MPI: the rank as the launcher's
// environment gives it, the per-rank file names, the rank in the trace (pid, process name) and in the profile;
// and the counter sections that components register with the profile (src/trace/counters.hpp).
#include <gtest/gtest.h>
#include <unistd.h>
#include <weft/weft.hpp>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trace/counters.hpp"  // internal: the registry a component (the MPI transport) uses

using json = nlohmann::json;
namespace wt = weft::detail::trace;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);  // throws (fails the test) on malformed JSON
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The launchers' variables and weft's own, unset around each test (the test may itself run under a launcher).
class Env : public testing::Test {
 protected:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                          "PMIX_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                          "WEFT_PROFILE", "WEFT_TRACE"};
  void SetUp() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
  static void set(const char* var, const char* value) { ::setenv(var, value, 1); }
};

// ------------------------------------------------------------------------------------------------------
// The rank and the file names
// ------------------------------------------------------------------------------------------------------

using Ranks = Env;

TEST_F(Ranks, RankFileNames) {
  const weft::ProcessRank one{}, r1{1, 2}, r0{0, 2}, unknown{3, 0};
  EXPECT_FALSE(one.several());
  EXPECT_EQ(weft::rank_file_name("prof.json", one), "prof.json");  // a single process: unchanged
  EXPECT_EQ(weft::rank_file_name("prof.json", r1), "prof.r1.json");
  EXPECT_EQ(weft::rank_file_name("prof.json", r0), "prof.r0.json");  // rank 0 too: one pattern for all ranks
  EXPECT_EQ(weft::rank_file_name("prof.json", unknown), "prof.r3.json");
  EXPECT_EQ(weft::rank_file_name("/tmp/run.v2/trace.json", r1), "/tmp/run.v2/trace.r1.json");
  EXPECT_EQ(weft::rank_file_name("/tmp/run.v2/trace", r1), "/tmp/run.v2/trace.r1");  // the dot is the folder's
  EXPECT_EQ(weft::rank_file_name("x.tar.json", r1), "x.tar.r1.json");
  EXPECT_EQ(weft::rank_file_name(".trace", r1), ".trace.r1");
  EXPECT_EQ(weft::rank_file_name("dir/.trace", r1), "dir/.trace.r1");
  EXPECT_EQ(weft::rank_file_name("/dev/null", r1), "/dev/null");  // devices are shared as they are
  EXPECT_EQ(weft::rank_file_name("", r1), "");
}

TEST_F(Ranks, RankFromTheLaunchersEnvironment) {
  weft::ProcessRank r = weft::process_rank();
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.size, 1);
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("PMI_RANK", "5");  // Open MPI's variables come first
  set("PMI_SIZE", "8");
  r = weft::process_rank();
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.size, 2);
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  r = weft::process_rank();  // MPICH's Hydra
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.size, 8);
  set("PMI_RANK", "8");  // not below the size: not believed
  set("PMIX_RANK", "3");
  r = weft::process_rank();  // PMIx names the rank, not the size
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.size, 0);
  EXPECT_TRUE(r.several());
  for (const char* bad : {"", "x", "-1", "1x", "99999999999"}) {
    set("PMIX_RANK", bad);
    r = weft::process_rank();
    EXPECT_EQ(r.rank, 0) << "PMIX_RANK='" << bad << "'";
    EXPECT_EQ(r.size, 1) << "PMIX_RANK='" << bad << "'";
  }
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "1");  // mpirun -np 1: a single process
  EXPECT_FALSE(weft::process_rank().several());
}

TEST_F(Ranks, ProcessesOnThisNode) {
  EXPECT_EQ(weft::process_rank().local_size, 1);  // a single process
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_EQ(weft::process_rank().local_size, 0);  // not said: unknown
  set("MPI_LOCALNRANKS", "2");  // Hydra's
  EXPECT_EQ(weft::process_rank().local_size, 2);
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");  // Open MPI's first
  EXPECT_EQ(weft::process_rank().local_size, 3);
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "x");
  set("MPI_LOCALNRANKS", "0");
  EXPECT_EQ(weft::process_rank().local_size, 0);
}

TEST_F(Ranks, EnvironmentFileNamesArePerRank) {
  set("WEFT_PROFILE", "json:/tmp/p.json");
  set("WEFT_TRACE", "/tmp/t.json");
  weft::Options o = weft::Options::from_environment();
  EXPECT_EQ(o.profile.json_file, "/tmp/p.json");  // no launcher: today's names exactly
  EXPECT_EQ(o.profile.trace_file, "/tmp/t.json");
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "3");
  o = weft::Options::from_environment();
  EXPECT_EQ(o.profile.json_file, "/tmp/p.r1.json");
  EXPECT_EQ(o.profile.trace_file, "/tmp/t.r1.json");
  set("WEFT_PROFILE", "1");  // stderr: no file to name
  EXPECT_TRUE(weft::Options::from_environment().profile.json_file.empty());
}

std::string temp_base(const std::string& name) {
  return testing::TempDir() + "weft_" + name + "_" + std::to_string(::getpid());
}

// As rank 1 of 2 (the launcher's variables set by hand; no MPI involved): the files get the rank in their
// names, the trace the rank as its process, the profile the rank.
TEST_F(Ranks, FilesTraceAndProfileCarryTheRank) {
  const std::string base = temp_base("ranked");
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("WEFT_PROFILE", ("json:" + base + "_prof.json").c_str());
  set("WEFT_TRACE", (base + "_trace.json").c_str());
  weft::Options o = weft::Options::from_environment();
  o.num_threads = 2;
  const std::string prof = base + "_prof.r1.json", trace = base + "_trace.r1.json";
  ASSERT_EQ(o.profile.json_file, prof);
  ASSERT_EQ(o.profile.trace_file, trace);
  weft::Profile p;
  {
    weft::Runtime rt(o);
    rt.run([](weft::Context& cx) {
      for (int i = 0; i < 20; ++i) cx.spawn([] {}, weft::label("ranked"));
    });
    p = rt.profile();
  }
  EXPECT_FALSE(exists(base + "_prof.json"));
  EXPECT_FALSE(exists(base + "_trace.json"));
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.ranks, 2);
  EXPECT_NE(weft::to_text(p).find("weft profile: rank 1 of 2, run 1, 2 workers"), std::string::npos)
      << weft::to_text(p);

  const json pj = read_json(prof);
  EXPECT_EQ(pj.at("rank"), 1);
  EXPECT_EQ(pj.at("ranks"), 2);
  ASSERT_EQ(pj.at("runs").size(), 1u);
  EXPECT_EQ(pj["runs"][0].at("rank"), 1);
  EXPECT_EQ(pj["runs"][0]["stats"]["tasks_executed"], 20);

  const json tj = read_json(trace);
  EXPECT_EQ(tj.at("otherData").at("rank"), 1);
  EXPECT_EQ(tj.at("otherData").at("ranks"), 2);
  EXPECT_GT(tj.at("otherData").at("origin_unix_ns").get<long long>(), 0);
  int named = 0, tasks = 0;
  for (const json& e : tj.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 2) << "pid = rank + 1: " << e.dump();
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      EXPECT_EQ(e.at("args").at("name"), "rank 1");
      ++named;
    }
    if (e.at("ph") == "M" && e.at("name") == "process_sort_index") {
      EXPECT_EQ(e.at("args").at("sort_index"), 1);
    }
    tasks += e.at("ph") == "X" && e.at("cat") == "task";
  }
  EXPECT_EQ(named, 1);
  EXPECT_EQ(tasks, 20);
  std::remove(prof.c_str());
  std::remove(trace.c_str());
}

TEST_F(Ranks, SingleProcessTraceIsProcessOneNamedWeft) {
  const std::string trace = temp_base("single") + "_trace.json";
  weft::Options o;
  o.num_threads = 1;
  o.profile.trace_file = trace;
  {
    weft::Runtime rt(o);
    rt.run([](weft::Context& cx) { cx.spawn([] {}); });
    EXPECT_EQ(rt.profile().ranks, 1);
    EXPECT_NE(weft::to_text(rt.profile()).find("weft profile: run 1, 1 worker,"), std::string::npos);
  }
  const json tj = read_json(trace);
  EXPECT_EQ(tj.at("otherData").at("rank"), 0);
  EXPECT_EQ(tj.at("otherData").at("ranks"), 1);
  for (const json& e : tj.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 1);
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      EXPECT_EQ(e.at("args").at("name"), "weft");
    }
  }
  std::remove(trace.c_str());
}

// ------------------------------------------------------------------------------------------------------
// Counter sections
// ------------------------------------------------------------------------------------------------------

// A component with a count and a time, registered under `section` for its lifetime, as the transport does.
struct Component {
  Component(const std::string& section, std::atomic<std::uint64_t>* shared = nullptr)
      : n(shared ? *shared : own) {
    id = wt::add_counter_source(section, [this](std::vector<weft::Counter>& out) {
      out.push_back(weft::Counter{"events", false, n.load(), 0});
      out.push_back(weft::Counter{"busy_s", true, 0, 0.25 * static_cast<double>(n.load())});
    });
  }
  ~Component() { wt::remove_counter_source(id); }
  std::atomic<std::uint64_t> own{0};
  std::atomic<std::uint64_t>& n;
  std::uint64_t id;
};

const weft::CounterSection* section(const weft::Profile& p, const std::string& name) {
  for (const auto& s : p.counters)
    if (s.name == name) return &s;
  return nullptr;
}

const weft::Counter* counter(const weft::CounterSection* s, const std::string& name) {
  if (!s) return nullptr;
  for (const auto& c : s->counters)
    if (c.name == name) return &c;
  return nullptr;
}

weft::Options profiled(unsigned workers) {
  weft::Options o;
  o.num_threads = workers;
  o.profile.enabled = true;
  return o;
}

TEST(Counters, ARunReportsWhatItsComponentsCountedDuringIt) {
  const std::string name = "test.component." + std::to_string(::getpid());
  Component c(name);
  c.n = 100;  // before the run: not this run's
  weft::Runtime rt(profiled(2));
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 7; ++i) cx.spawn([&] { c.n.fetch_add(1); });
  });
  weft::Profile p = rt.profile();
  const weft::CounterSection* s = section(p, name);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->counters.size(), 2u);
  EXPECT_EQ(s->counters[0].name, "events");  // in the source's order
  EXPECT_FALSE(s->counters[0].is_time);
  EXPECT_EQ(s->counters[0].count, 7u);
  EXPECT_TRUE(s->counters[1].is_time);
  EXPECT_DOUBLE_EQ(s->counters[1].seconds, 0.25 * 7);
  const std::string text = weft::to_text(p);
  EXPECT_NE(text.find("  " + name + ": events 7 busy_s 1.750000\n"), std::string::npos) << text;
  const json j = json::parse(weft::to_json(p));
  EXPECT_EQ(j.at("counters").at(name).at("events"), 7);
  EXPECT_DOUBLE_EQ(j.at("counters").at(name).at("busy_s").get<double>(), 1.75);

  rt.run([](weft::Context& cx) { cx.spawn([] {}); });  // counts nothing: the section is there, at 0
  p = rt.profile();
  EXPECT_EQ(counter(section(p, name), "events")->count, 0u);
}

TEST(Counters, AComponentDestroyedDuringTheRunStillCounts) {
  const std::string name = "test.shortlived." + std::to_string(::getpid());
  auto c = std::make_unique<Component>(name);
  c->n = 3;
  weft::Runtime rt(profiled(1));
  rt.run([&](weft::Context&) {
    c->n += 4;
    c.reset();  // before the profile is built: its last values are kept
  });
  weft::Profile p = rt.profile();
  ASSERT_NE(counter(section(p, name), "events"), nullptr);
  EXPECT_EQ(counter(section(p, name), "events")->count, 4u);
  // Created during the run: counts from 0. Two of a section are summed.
  std::unique_ptr<Component> a, b;
  rt.run([&](weft::Context&) {
    a = std::make_unique<Component>(name);
    b = std::make_unique<Component>(name);
    a->n = 5;
    b->n = 6;
  });
  p = rt.profile();
  EXPECT_EQ(counter(section(p, name), "events")->count, 11u);
  EXPECT_DOUBLE_EQ(counter(section(p, name), "busy_s")->seconds, 0.25 * 11);
  a.reset();
  b.reset();
  rt.run([](weft::Context&) {});
  EXPECT_EQ(counter(section(rt.profile(), name), "events")->count, 0u) << "retired totals do not count again";
}

TEST(Counters, DeltaAndSample) {
  const std::string name = "test.sample." + std::to_string(::getpid());
  std::atomic<std::uint64_t> shared{0};
  const auto before = wt::sample_counters();
  {
    Component x(name, &shared), y(name, &shared);
    shared = 2;
    auto mid = wt::counter_delta(before, wt::sample_counters());
    const weft::CounterSection* s = nullptr;
    for (const auto& m : mid)
      if (m.name == name) s = &m;
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->counters[0].count, 4u);  // two sources reading 2 each
  }
  // Removed: their last values (2 + 2) stay in the section; nothing is called any more.
  shared = 1000;
  const auto after = wt::counter_delta(before, wt::sample_counters());
  for (const auto& m : after)
    if (m.name == name) {
      EXPECT_EQ(m.counters[0].count, 4u);
    }
  wt::remove_counter_source(0);  // unknown ids are ignored
}

}  // namespace
