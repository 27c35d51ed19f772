// Profiles and traces of a job of several ranks: WEFT_PROFILE=json:FILE and WEFT_TRACE=FILE (the same on every
// rank) give one file per rank (FILE.rR.json; the plain name on a single process), each valid JSON and carrying
// its rank (the profile's "rank", the trace's pid = rank + 1 and process name "rank R"), and the profile holds
// the communication the run did (the transport's and the termination detector's counter sections).
// Traffic: a flow-graph chain whose consecutive keys alternate ranks, so that every hop is a message.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <weft/flow.hpp>
#include <weft/mpi.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"

using namespace weft_mpi_test;
using json = nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing: " << path;
  return json::parse(in);  // throws (fails the test, which ends the job) on malformed JSON
}

// A directory every rank names the same: rank 0 creates it and sends its name to the others.
std::string shared_temp_dir() {
  char dir[512] = {};
  if (world_rank() == 0) {
    const std::string pattern = testing::TempDir() + "weft_obsrank_XXXXXX";
    std::snprintf(dir, sizeof dir, "%s", pattern.c_str());
    if (!::mkdtemp(dir)) abort_job("cannot create a directory from " + pattern);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

std::string ranked(const std::string& dir, const char* stem, int rank, int size) {
  return size > 1 ? dir + "/" + stem + ".r" + std::to_string(rank) + ".json" : dir + "/" + stem + ".json";
}

const json* find_counter(const json& run, const char* section, const char* name) {
  const json& c = run.at("counters");
  if (!c.contains(section) || !c[section].contains(name)) return nullptr;
  return &c[section][name];
}

TEST(Observability, OneProfileAndTraceFilePerRankWithItsCommunication) {
  const int me = world_rank(), n = world_size();
  const weft::ProcessRank pr = weft::process_rank();  // from mpirun's environment, no MPI call
  EXPECT_EQ(pr.rank, me);
  EXPECT_EQ(pr.size, n);

  const std::string dir = shared_temp_dir();
  ::setenv("WEFT_PROFILE", ("json:" + dir + "/prof.json").c_str(), 1);
  ::setenv("WEFT_TRACE", (dir + "/trace.json").c_str(), 1);
  weft::Options o = weft::Options::from_environment();
  ::unsetenv("WEFT_PROFILE");
  ::unsetenv("WEFT_TRACE");
  o.num_threads = 2;
  EXPECT_EQ(o.profile.json_file, ranked(dir, "prof", me, n));
  EXPECT_EQ(o.profile.trace_file, ranked(dir, "trace", me, n));

  const std::int64_t N = 400;  // hops: keys 0..N, key k on rank k % n
  std::atomic<std::int64_t> ran{0};
  weft::Profile p;
  {
    weft::Runtime rt(o);
    weft::flow::Edge<std::int64_t, std::int64_t> e("hop");
    auto step = weft::flow::make_tt<std::int64_t>(
        [&](const std::int64_t& k, const std::int64_t& v, auto& out) {
          ran.fetch_add(1);
          if (k < N) weft::flow::send<0>(k + 1, v + 1, out);
        },
        weft::flow::edges(e), weft::flow::edges(e), "step");
    step->set_keymap([n](const std::int64_t& k) { return static_cast<int>(k % n); });
    auto g = weft::flow::graph(rt, step);
    if (me == 0) g.invoke(0, 0);
    g.fence();
    p = rt.profile();
  }  // the trace is written here, and the transport is gone
  // Rank r's keys, and the hops it sent and received over MPI.
  struct Share {
    std::uint64_t keys = 0, sends = 0, receives = 0;
  };
  auto share = [&](int r) {
    Share s;
    for (std::int64_t k = 0; k <= N; ++k) {
      if (k % n != r) continue;
      ++s.keys;
      if (n > 1 && k < N) ++s.sends;
      if (n > 1 && k > 0) ++s.receives;
    }
    return s;
  };
  EXPECT_EQ(static_cast<std::uint64_t>(ran.load()), share(me).keys);

  // In the program: the run's profile counts the hops (and the detector's control messages on top).
  ASSERT_TRUE(p.valid);
  EXPECT_EQ(p.rank, n > 1 ? me : 0);
  EXPECT_EQ(p.ranks, n);
  std::uint64_t sent = 0, received = 0;
  for (const weft::CounterSection& s : p.counters)
    for (const weft::Counter& c : s.counters)
      if (s.name == "transport" && c.name == "messages_sent") sent = c.count;
      else if (s.name == "transport" && c.name == "messages_received") received = c.count;
  EXPECT_GE(sent, share(me).sends);
  EXPECT_GE(received, share(me).receives);

  // Every rank's files, read by every rank once all have written theirs.
  MPI_Barrier(MPI_COMM_WORLD);
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + "'s files");
    const json prof = read_json(ranked(dir, "prof", r, n));
    EXPECT_EQ(prof.at("rank"), n > 1 ? r : 0);
    EXPECT_EQ(prof.at("ranks"), n);
    ASSERT_EQ(prof.at("runs").size(), 1u);  // one fence, one run
    const json& run = prof["runs"][0];
    EXPECT_EQ(run.at("rank"), r);
    if (n > 1) {
      for (const char* c : {"messages_sent", "bytes_sent", "messages_received", "bytes_received",
                            "mpi_messages_sent", "mpi_bytes_sent", "busy_polls"}) {
        const json* v = find_counter(run, "transport", c);
        ASSERT_NE(v, nullptr) << c;
        EXPECT_GT(v->get<std::uint64_t>(), 0u) << c;
      }
      EXPECT_GT(find_counter(run, "transport", "poll_s")->get<double>(), 0.0);
      const json* epochs = find_counter(run, "termination", "epochs");
      ASSERT_NE(epochs, nullptr);
      EXPECT_EQ(epochs->get<std::uint64_t>(), 1u);  // the fence's epoch
      // Each hop is a message (control messages of the detector come on top); bytes are headers and
      // payloads, at least the hop's 8-byte value.
      const Share sh = share(r);
      EXPECT_GE(find_counter(run, "transport", "messages_sent")->get<std::uint64_t>(), sh.sends);
      EXPECT_GE(find_counter(run, "transport", "messages_received")->get<std::uint64_t>(), sh.receives);
      EXPECT_GE(find_counter(run, "transport", "bytes_sent")->get<std::uint64_t>(), 8 * sh.sends);
      EXPECT_GE(find_counter(run, "transport", "bytes_received")->get<std::uint64_t>(), 8 * sh.receives);
    } else {
      const json* v = find_counter(run, "transport", "messages_sent");
      EXPECT_TRUE(v == nullptr || *v == 0) << "a single process sends nothing";
    }

    const json trace = read_json(ranked(dir, "trace", r, n));
    EXPECT_EQ(trace.at("otherData").at("rank"), n > 1 ? r : 0);
    EXPECT_EQ(trace.at("otherData").at("ranks"), n);
    const int pid = (n > 1 ? r : 0) + 1;
    std::int64_t tasks = 0;
    std::string process;
    for (const json& ev : trace.at("traceEvents")) {
      EXPECT_EQ(ev.at("pid"), pid) << ev.dump();
      if (ev.at("ph") == "M" && ev.at("name") == "process_name") process = ev.at("args").at("name");
      tasks += ev.at("ph") == "X" && ev.at("cat") == "task";
    }
    EXPECT_EQ(process, n > 1 ? "rank " + std::to_string(r) : "weft");
    EXPECT_EQ(static_cast<std::uint64_t>(tasks), share(r).keys) << "one span per key the rank owns";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    for (int r = 0; r < n; ++r) {
      std::remove(ranked(dir, "prof", r, n).c_str());
      std::remove(ranked(dir, "trace", r, n).c_str());
    }
    ::rmdir(dir.c_str());
  }
}

// MPI requests bound to tasks (weft/mpi.hpp) are async spans of category "mpi" in the trace: one begin and one
// end per request, named by the call that posted it (a request the program posted and bound: "MPI request"),
// with the peer rank (-1 for a collective), the bytes, and the id of the task it belongs to (a task span). The
// profile has the time in MPI per thread.
TEST(Observability, MpiRequestsAreSpansInTheTrace) {
  const int me = world_rank(), n = world_size();
  const int left = (me + n - 1) % n, right = (me + 1) % n;
  const std::string dir = shared_temp_dir();
  // The workers complete the requests, or the communication thread (which keeps no log of its own: its spans
  // are on a track named after it).
  for (const weft::CommThread mode : {weft::CommThread::off, weft::CommThread::on}) {
    const bool comm_thread = mode == weft::CommThread::on;
    SCOPED_TRACE(comm_thread ? "with a communication thread" : "without a communication thread");
    weft::Options o;
    o.num_threads = 2;
    o.comm_thread = mode;
    const std::string file = ranked(dir, comm_thread ? "requests_ct" : "requests", me, n);
    o.profile.trace_file = file;
    constexpr int kRounds = 5, kInts = 300;
    std::vector<int> out(kInts, me), in(kInts, -1);
    int ring = 0, sum = 0, one = 1;
    weft::Profile profile;
    {
      weft::Runtime rt(o);
      rt.run([&](weft::Context& cx) {
        for (int round = 0; round < kRounds; ++round) {
          cx.spawn([&, round](weft::Context& cx) { weft::mpi::irecv(cx, std::span(in), left, round, MPI_COMM_WORLD); },
                   weft::out(in), weft::label("receive"));
          cx.spawn([&, round](weft::Context& cx) { weft::mpi::isend(cx, std::span(out), right, round, MPI_COMM_WORLD); },
                   weft::in(out), weft::label("send"));
          cx.spawn([&] { ring += in[0]; }, weft::in(in));
        }
        cx.spawn([&](weft::Context& cx) { weft::mpi::iallreduce(cx, &one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); },
                 weft::out(sum), weft::label("allreduce"));
        cx.spawn(
            [&](weft::Context& cx) {
              MPI_Request r;
              MPI_Ibarrier(MPI_COMM_WORLD, &r);
              weft::mpi::bind(cx, r);
            },
            weft::inout(sum), weft::label("barrier"));
      });
      profile = rt.profile();
    }  // the trace is written here
    EXPECT_EQ(ring, kRounds * left);
    EXPECT_EQ(sum, n);

    // The profile's section: the time in MPI, and the same per thread (the shares add up to it).
    std::map<std::string, double> seconds;
    for (const weft::CounterSection& sec : profile.counters)
      if (sec.name == "mpi_requests")
        for (const weft::Counter& c : sec.counters) seconds[c.name] = c.seconds;
    ASSERT_TRUE(seconds.count("mpi_s") && seconds.count("mpi_s.worker0") &&
                seconds.count("mpi_s.worker1"));
    EXPECT_GT(seconds["mpi_s"], 0.0);
    EXPECT_EQ(seconds.count("mpi_s.comm_thread"), comm_thread ? 1u : 0u);
    EXPECT_NEAR(seconds["mpi_s.worker0"] + seconds["mpi_s.worker1"] + seconds["mpi_s.comm_thread"],
                seconds["mpi_s"], 1e-6);
    if (comm_thread) {
      EXPECT_GT(seconds["mpi_s.comm_thread"], 0.0);  // it tests the requests
    }

    const json trace = read_json(file);
    std::map<std::uint64_t, std::string> task_labels;  // task id -> label
    struct Span {
      std::string name;
      int begins = 0, ends = 0;
      double begin = 0, end = 0;
      json args;
    };
    std::map<std::uint64_t, Span> spans;  // by async id
    for (const json& ev : trace.at("traceEvents")) {
      if (ev.at("ph") == "X" && ev.at("cat") == "task") task_labels[ev.at("args").at("id")] = ev.at("name");
      if (!ev.contains("cat") || ev.at("cat") != "mpi") continue;
      Span& s = spans[ev.at("id").get<std::uint64_t>()];
      const bool begin = ev.at("ph") == "b";
      ASSERT_TRUE(begin || ev.at("ph") == "e") << ev.dump();
      (begin ? s.begins : s.ends) += 1;
      (begin ? s.begin : s.end) = ev.at("ts").get<double>();
      s.name = ev.at("name");
      s.args = ev.at("args");
    }
    std::map<std::string, int> count;
    for (const auto& [id, s] : spans) {
      SCOPED_TRACE(s.name);
      EXPECT_EQ(s.begins, 1);
      EXPECT_EQ(s.ends, 1);
      EXPECT_LE(s.begin, s.end);
      ++count[s.name];
      const auto label = task_labels.find(s.args.at("task").get<std::uint64_t>());
      ASSERT_NE(label, task_labels.end()) << "the span names a task of the trace: " << s.args.dump();
      const int peer = s.args.at("peer");
      const std::uint64_t bytes = s.args.at("bytes");
      if (s.name == "MPI_Irecv") {
        EXPECT_EQ(label->second, "receive");
        EXPECT_EQ(peer, left);
        EXPECT_EQ(bytes, kInts * sizeof(int));
      } else if (s.name == "MPI_Isend") {
        EXPECT_EQ(label->second, "send");
        EXPECT_EQ(peer, right);
        EXPECT_EQ(bytes, kInts * sizeof(int));
      } else if (s.name == "MPI_Iallreduce") {
        EXPECT_EQ(label->second, "allreduce");
        EXPECT_EQ(peer, -1);
        EXPECT_EQ(bytes, sizeof(int));
      } else {
        EXPECT_EQ(s.name, "MPI request");
        EXPECT_EQ(label->second, "barrier");
      }
    }
    EXPECT_EQ(count, (std::map<std::string, int>{
                         {"MPI_Irecv", kRounds}, {"MPI_Isend", kRounds}, {"MPI_Iallreduce", 1}, {"MPI request", 1}}));
    MPI_Barrier(MPI_COMM_WORLD);
    std::remove(file.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) ::rmdir(dir.c_str());
}

}  // namespace
