// weft-bench-dist: flow graphs across ranks (public API only) next to raw MPI in the same binary, 2 ranks:
//   - hop: a flow chain whose consecutive keys live on alternating ranks (keymap k % 2), values of 8 B and
//     64 KiB, one fence per run; reported as time per hop, against a raw MPI ping-pong of the same size (one-way
//     time) and, for 64 KiB, as bandwidth;
//   - broadcast: rank 0's task i sends one 64 KiB value to key i of two template tasks on rank 1
//     (broadcast<0, 1>), which both answer rank 0's task i + 1; reported as time per round, against raw MPI's
//     64 KiB one way plus 8 B back (the value crosses once: one message for both terminals); the same with a
//     1 MiB std::vector<double> (an lvalue: copied once on the sender, received into the vector the tasks
//     read), against 1 MiB one way plus
//     8 B back; and a 1 MiB std::vector passed along a chain alternating ranks, moved from task to task (each
//     takes it by value and sends it as an rvalue), against raw MPI's 1 MiB one way;
//   - fence: an empty fence() on every rank (the termination detector's two waves and nothing else);
//   - tree: a binary tree of flow tasks (TTG's Fig. 6 shape: each task sends to its two children) with keys
//     spread over the ranks by the default keymap, against the same tree with every key on rank 0.
// Raw MPI pre-posts its receives and polls with MPI_Test, the best a hand-written MPI code does. Each number is
// the median of --reps runs, the runs of every column interleaved.
//
//   mpirun -np 2 --bind-to none weft-bench-dist [--reps=R] [--hops=N] [--workers=W] [--depth=D]
//   weft-bench-dist --depth=D     (one process: the tree alone, the reference for the spread tree)
// In a container add --mca btl_vader_single_copy_mechanism none (see tests/mpi/CMakeLists.txt).
#include <mpi.h>
#include <weft/flow.hpp>

#include <cereal/types/vector.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Args {
  int reps = 7;
  long hops = 20000;      // 8-byte hops per run
  long big_hops = 2000;   // 64 KiB hops per run
  long vector_rounds = 312;  // broadcasts of a 1 MiB std::vector per run (hops / 64)
  unsigned workers = 1;   // per rank
  int depth = 14;         // tree: 2^(depth+1) - 1 tasks
  int fences = 2000;      // empty fences per run
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void wait_req(MPI_Request* r) {
  for (int flag = 0; !flag;) MPI_Test(r, &flag, MPI_STATUS_IGNORE);
}

// One-way time in microseconds of a `bytes`-byte ping-pong, `iters` round trips, receives posted first.
double raw_pingpong(MPI_Comm comm, std::size_t bytes, long iters) {
  int me;
  MPI_Comm_rank(comm, &me);
  const int peer = 1 - me;
  std::vector<std::byte> out(bytes), in(bytes);
  const int n = static_cast<int>(bytes);
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  MPI_Request rr, sr;
  MPI_Irecv(in.data(), n, MPI_BYTE, peer, 0, comm, &rr);
  for (long i = 0; i < iters; ++i) {
    if (me == 0) {
      MPI_Isend(out.data(), n, MPI_BYTE, peer, 0, comm, &sr);
      wait_req(&sr);
      wait_req(&rr);
      if (i + 1 < iters) MPI_Irecv(in.data(), n, MPI_BYTE, peer, 0, comm, &rr);
    } else {
      wait_req(&rr);
      if (i + 1 < iters) MPI_Irecv(in.data(), n, MPI_BYTE, peer, 0, comm, &rr);
      std::memcpy(out.data(), in.data(), bytes);
      MPI_Isend(out.data(), n, MPI_BYTE, peer, 0, comm, &sr);
      wait_req(&sr);
    }
  }
  const double t = MPI_Wtime() - t0;
  MPI_Barrier(comm);
  return t / static_cast<double>(2 * iters) * 1e6;
}

// Runs a graph once, timed: a fence first (its set-up, collective, outside the timing), then seed() on rank 0
// and a fence. Ends the job unless the ranks ran `expected` tasks in all (`what` names the graph). Returns the
// seconds of the timed fence.
template <class Graph, class Seed>
double timed_run(Graph& g, Seed&& seed, const std::atomic<long>& ran, long expected, const char* what) {
  g.fence();
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (me == 0) seed();
  g.fence();
  const double t = MPI_Wtime() - t0;
  long total = 0, mine = ran.load();
  MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (total != expected) {
    std::fprintf(stderr, "weft-bench-dist: the %s ran %ld tasks, expected %ld\n", what, total, expected);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return t;
}

// Microseconds per hop of a flow chain of `hops` keys alternating ranks, values of type V.
template <class V>
double flow_hops(weft::Runtime& rt, long hops) {
  weft::flow::Edge<std::int64_t, V> e("hop");
  std::atomic<long> ran{0};
  auto step = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t& k, const V& v, auto& out) {
        ran.fetch_add(1, std::memory_order_relaxed);
        if (k < hops) weft::flow::send<0>(k + 1, v, out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "step");
  step->set_keymap([](const std::int64_t& k) { return static_cast<int>(k % 2); });
  auto g = weft::flow::graph(rt, step);
  const double t = timed_run(g, [&] { g.invoke(0, V{}); }, ran, hops + 1, "chain");
  return t / static_cast<double>(hops) * 1e6;
}

// Microseconds per hop of a chain of `hops` keys alternating ranks passing one std::vector on: each task takes it
// by value and sends it on as an rvalue (moved all the way: the program copies nothing).
double vector_hops(weft::Runtime& rt, const std::vector<double>& first, long hops) {
  weft::flow::Edge<std::int64_t, std::vector<double>> e("hop");
  std::atomic<long> ran{0};
  auto step = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t& k, std::vector<double> v, auto& out) {
        ran.fetch_add(1, std::memory_order_relaxed);
        if (k < hops) weft::flow::send<0>(k + 1, std::move(v), out);
      },
      weft::flow::edges(e), weft::flow::edges(e), "step");
  step->set_keymap([](const std::int64_t& k) { return static_cast<int>(k % 2); });
  auto g = weft::flow::graph(rt, step);
  const double t = timed_run(g, [&] { g.invoke(0, first); }, ran, hops + 1, "vector chain");
  return t / static_cast<double>(hops) * 1e6;
}

// Microseconds per round of a broadcast of a V to two template tasks on rank 1 that both answer rank 0.
template <class V>
double broadcast_rounds(weft::Runtime& rt, const V& value, long rounds) {
  weft::flow::Edge<std::int64_t, V> a("a"), b("b");
  weft::flow::Edge<std::int64_t, int> back("back");
  std::atomic<long> ran{0};
  auto src = weft::flow::make_tt<std::int64_t>(
      [&](const std::int64_t& i, const weft::flow::Aggregator<int>&, auto& out) {
        if (i < rounds) weft::flow::broadcast<0, 1>(std::make_tuple(i, i), value, out);
      },
      weft::flow::edges(weft::flow::make_aggregator(back, 2)), weft::flow::edges(a, b), "source");
  auto reply = [&](auto& edge, const char* name) {
    auto tt = weft::flow::make_tt<std::int64_t>(
        [&](const std::int64_t& i, const V&, auto& out) {
          ran.fetch_add(1, std::memory_order_relaxed);
          weft::flow::send<0>(i + 1, 1, out);
        },
        weft::flow::edges(edge), weft::flow::edges(back), name);
    tt->set_keymap([](const std::int64_t&) { return 1; });
    return tt;
  };
  auto ra = reply(a, "a"), rb = reply(b, "b");
  src->set_keymap([](const std::int64_t&) { return 0; });
  auto g = weft::flow::graph(rt, src);
  const auto seed = [&] {  // the source's first task: its aggregator's two values
    g.invoke(0, 1);
    g.invoke(0, 1);
  };
  const double t = timed_run(g, seed, ran, 2 * rounds, "broadcast");
  return t / static_cast<double>(rounds) * 1e6;
}

// Microseconds per empty fence.
double empty_fences(weft::Runtime& rt, int fences) {
  weft::flow::Edge<int, int> e("e");
  auto t = weft::flow::make_tt<int>([](const int&, int) {}, weft::flow::edges(e), weft::flow::edges(), "idle");
  auto g = weft::flow::graph(rt, t);
  g.fence();
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < fences; ++i) g.fence();
  const double el = MPI_Wtime() - t0;
  return el / fences * 1e6;
}

// Nanoseconds per task of a binary tree of depth `depth`; every key on rank 0 when `spread` is false.
double tree(weft::Runtime& rt, int depth, bool spread) {
  using Key = std::pair<int, std::int64_t>;
  weft::flow::Edge<Key, std::int64_t> down("down");
  std::atomic<long> ran{0};
  auto node = weft::flow::make_tt<Key>(
      [&](const Key& k, std::int64_t v, auto& out) {
        ran.fetch_add(1, std::memory_order_relaxed);
        if (k.first < depth) {
          weft::flow::send<0>(Key{k.first + 1, 2 * k.second}, v + 1, out);
          weft::flow::send<0>(Key{k.first + 1, 2 * k.second + 1}, v + 1, out);
        }
      },
      weft::flow::edges(down), weft::flow::edges(down), "node");
  if (!spread) node->set_keymap([](const Key&) { return 0; });
  auto g = weft::flow::graph(rt, node);
  const long tasks = (2L << depth) - 1;
  const double el = timed_run(g, [&] { g.invoke(Key{0, 0}, 0); }, ran, tasks, "tree");
  return el / static_cast<double>(tasks) * 1e9;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto val = [&](const char* key) -> const char* {
      const std::size_t n = std::strlen(key);
      return s.compare(0, n, key) == 0 ? s.c_str() + n : nullptr;
    };
    if (const char* v = val("--reps=")) {
      a.reps = std::max(1, std::atoi(v));
    } else if (const char* v2 = val("--hops=")) {
      a.hops = std::max(10L, std::atol(v2));
      a.big_hops = std::max(10L, a.hops / 10);
      a.vector_rounds = std::max(10L, a.hops / 64);
    } else if (const char* v3 = val("--workers=")) {
      a.workers = static_cast<unsigned>(std::max(1, std::atoi(v3)));
    } else if (const char* v4 = val("--depth=")) {
      a.depth = std::clamp(std::atoi(v4), 1, 24);
    } else if (const char* v5 = val("--fences=")) {
      a.fences = std::max(1, std::atoi(v5));
    } else if (s == "-h" || s == "--help") {
      std::printf("usage: mpirun -np 2 --bind-to none weft-bench-dist [--reps=R] [--hops=N] [--workers=W] "
                  "[--depth=D] [--fences=F]\n");
      std::exit(0);
    } else {
      std::fprintf(stderr, "weft-bench-dist: unknown option '%s' (try --help)\n", s.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

// The WEFT_* environment (WEFT_COMM_THREAD, WEFT_BIND, ...) with --workers workers; a bad variable ends the
// program with its message.
weft::Options options(unsigned workers) {
  try {
    weft::Options o = weft::Options::from_environment();
    o.num_threads = workers;
    return o;
  } catch (const weft::config_error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(2);
  }
}

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int me = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n == 1) {
    // One process: the binary tree only, the reference for the spread tree of a 2-rank run.
    weft::Runtime rt(options(a.workers));
    std::vector<double> one;
    for (int r = 0; r < a.reps; ++r) one.push_back(tree(rt, a.depth, false));
    std::printf("weft-bench-dist: 1 process x %u worker%s, median of %d runs\n  binary tree, depth %d (ns/task) %.1f\n",
                a.workers, a.workers == 1 ? "" : "s", a.reps, a.depth, median(one));
    MPI_Finalize();
    return 0;
  }
  if (n != 2) {
    if (me == 0) std::fprintf(stderr, "weft-bench-dist: run with 2 ranks (mpirun -np 2), or 1 for the tree alone\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  using Big = std::array<std::byte, 64 * 1024>;
  std::vector<double> raw8, weft8, raw64, weft64, bcast, raw1m, vhop, vbcast, fence, spread, local;
  const std::vector<double> vec(1 << 17, 1.5);  // 1 MiB
  {
    weft::Runtime rt(options(a.workers));
    const auto big = std::make_unique<Big>();
    for (std::size_t i = 0; i < big->size(); ++i) (*big)[i] = static_cast<std::byte>(i * 7);
    for (int r = 0; r < a.reps; ++r) {
      raw8.push_back(raw_pingpong(raw, 8, a.hops));
      weft8.push_back(flow_hops<std::uint64_t>(rt, a.hops));
      raw64.push_back(raw_pingpong(raw, sizeof(Big), a.big_hops));
      weft64.push_back(flow_hops<Big>(rt, a.big_hops));
      bcast.push_back(broadcast_rounds(rt, *big, a.big_hops));
      raw1m.push_back(raw_pingpong(raw, vec.size() * sizeof(double), a.vector_rounds));
      vhop.push_back(vector_hops(rt, vec, a.vector_rounds));
      vbcast.push_back(broadcast_rounds(rt, vec, a.vector_rounds));
      fence.push_back(empty_fences(rt, a.fences));
      spread.push_back(tree(rt, a.depth, true));
      local.push_back(tree(rt, a.depth, false));
    }
  }
  if (me == 0) {
    const bool threaded = options(a.workers).comm_thread == weft::CommThread::on;
    auto mbs = [](double us) { return 64.0 * 1024 / us; };  // MB/s of one 64 KiB message per `us`
    std::printf("weft-bench-dist: 2 ranks x %u worker%s%s, medians of %d runs (%ld and %ld hops, %d fences, tree "
                "depth %d)\n",
                a.workers, a.workers == 1 ? "" : "s", threaded ? " + a communication thread" : "", a.reps, a.hops,
                a.big_hops, a.fences, a.depth);
    std::printf("  %-34s %12s %12s %8s\n", "", "raw MPI", "weft flow", "ratio");
    std::printf("  %-34s %12.2f %12.2f %7.2fx\n", "hop, 8 B (us)", median(raw8), median(weft8),
                median(weft8) / median(raw8));
    std::printf("  %-34s %12.2f %12.2f %7.2fx\n", "hop, 64 KiB (us)", median(raw64), median(weft64),
                median(weft64) / median(raw64));
    std::printf("  %-34s %12.0f %12.0f %7.0f%%\n", "bandwidth, 64 KiB hops (MB/s)", mbs(median(raw64)),
                mbs(median(weft64)), 100.0 * median(raw64) / median(weft64));
    std::printf("  %-34s %12.2f %12.2f %7.2fx\n", "broadcast 64 KiB to 2 terminals (us)", median(raw64) + median(raw8),
                median(bcast), median(bcast) / (median(raw64) + median(raw8)));
    std::printf("  %-34s %12.2f %12.2f %7.2fx\n", "hop, 1 MiB vector, moved (us)", median(raw1m), median(vhop),
                median(vhop) / median(raw1m));
    std::printf("  %-34s %12.2f %12.2f %7.2fx\n", "broadcast 1 MiB vector to 2 (us)", median(raw1m) + median(raw8),
                median(vbcast), median(vbcast) / (median(raw1m) + median(raw8)));
    std::printf("  %-34s %12s %12.2f\n", "empty fence (us)", "", median(fence));
    std::printf("  %-34s %12s %12.1f\n", "binary tree, keys on rank 0 (ns/task)", "", median(local));
    std::printf("  %-34s %12s %12.1f %7.2fx\n", "binary tree, keys spread (ns/task)", "", median(spread),
                median(spread) / median(local));
  }
  MPI_Comm_free(&raw);
  MPI_Finalize();
  return 0;
}
