// weft-bench-cluster: the costs of offloading dependency tasks (weft/cluster.hpp) next to raw MPI, 2 ranks:
//   - hop: a chain of tasks updating one 8-byte datum (inout), on rank 0 and rank 1 in turn: per hop, the task
//     goes to rank 1 with the datum and reports back (task + data, done), then rank 0's task fetches the datum
//     back (fetch, data); against a raw MPI ping-pong's one-way time;
//   - chain: the same chain of tasks all on rank 1 (weft::node(1)), against the same chain here: each task is
//     sent when spawned and linked after the previous one on rank 1, so a step costs no message;
//   - offload: independent empty tasks spawned on rank 0 with weft::node(1), against the same tasks kept on rank
//     0: the cost of one offloaded task as rank 0 sees it (throughput, not latency);
//   - transfer: a 1 MiB block written by a task on rank 1 and read by a task on rank 0 (fetched: lazy), and one
//     held by rank 0 read on rank 1 (sent with the task: eager), against a raw MPI transfer of 1 MiB.
// Each number is the median of --reps runs, the columns interleaved within each repetition.
// On 3 ranks it measures instead a hop between two ranks that did not spawn the tasks (paper 004's Fig. 4): a
// chain of tasks on ranks 1 and 2 in turn, spawned on rank 0, the predecessor's rank reporting each end straight
// to the successor's (Options::direct_satisfy, a link satisfy message with the datum) against the same chain
// through rank 0 (a done message to rank 0, then the next task's message from it), a Runtime of each kind in
// turn in each repetition.
//
//   mpirun -np 2 weft-bench-cluster [--reps=R] [--hops=N] [--tasks=N]
//   mpirun -np 3 --oversubscribe weft-bench-cluster [--reps=R] [--hops=N]
// In a container add --mca btl_vader_single_copy_mechanism none (see tests/mpi/CMakeLists.txt).
#include <mpi.h>
#include <weft/cluster.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kBig = std::size_t{1} << 20;  // the transfers' block

struct Args {
  int reps = 7;
  int hops = 2000;
  int tasks = 20000;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One-way seconds of a `bytes`-byte ping-pong between ranks 0 and 1 (`iters` round trips).
double raw_pingpong(std::size_t bytes, int iters) {
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::vector<char> buf(bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (me == 0) {
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - t0) / (2.0 * iters);
}

int parse(const char* a, const char* key, int lo) {
  const std::size_t n = std::strlen(key);
  if (std::strncmp(a, key, n) != 0) return -1;
  char* end = nullptr;
  const long v = std::strtol(a + n, &end, 10);
  if (*end || v < lo || v > (1 << 24)) {
    std::fprintf(stderr, "weft-bench-cluster: bad value in %s\n", a);
    std::exit(2);
  }
  return static_cast<int>(v);
}

// Seconds per hop of a chain of `hops` tasks on ranks 1 and 2 in turn (spawned here, on rank 0); false in `ok`
// if the datum's count is wrong.
double third_rank_hop(bool direct, int hops, bool& ok, weft::ClusterStats& stats) {
  weft::Options o = weft::Options::from_environment();
  o.num_threads = 1;
  o.cluster = true;
  o.direct_satisfy = direct;
  weft::Runtime rt(o);
  std::int64_t* x = nullptr;
  rt.run([&](weft::Context& cx) {
    x = weft::dmalloc<std::int64_t>(1);
    cx.spawn([x] { *x = 0; }, weft::out(*x), weft::node(2));
  });
  const double t = now();
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < hops; ++i) cx.spawn([x] { ++*x; }, weft::inout(*x), weft::node(1 + i % 2));
    cx.taskwait_on(*x);
  });
  const double per_hop = (now() - t) / hops;
  if (weft::node_id() == 0) ok &= *x == hops;
  stats = rt.cluster_stats();
  rt.run([&](weft::Context&) { weft::dfree(x); });
  return per_hop;
}

int third_rank_main(const Args& a, int me) {
  std::vector<double> direct, through;
  bool ok = true;
  weft::ClusterStats sd, st;
  for (int r = 0; r < a.reps; ++r) {
    direct.push_back(third_rank_hop(true, a.hops, ok, sd));
    through.push_back(third_rank_hop(false, a.hops, ok, st));
  }
  if (me != 0) return 0;
  const auto us = [](double s) { return s * 1e6; };
  std::printf("# weft-bench-cluster: 3 ranks x 1 worker, median of %d runs, interleaved\n", a.reps);
  std::printf("%-52s %12s %12s %8s\n", "hop between ranks 1 and 2, tasks spawned on rank 0", "direct", "via rank 0",
              "ratio");
  std::printf("%-52s %10.2f us %10.2f us %7.2fx\n", "8 B datum, inout, chain of tasks on ranks 1, 2, 1, ...",
              us(median(direct)), us(median(through)), median(direct) / median(through));
  for (const auto& [name, s] : {std::pair{"direct", sd}, std::pair{"via rank 0", st}})
    std::printf("rank 0, %s (last run): tasks offloaded %llu (linked %llu, to a third rank %llu), control messages "
                "%llu (task %llu, done %llu, connect %llu, link satisfy %llu, fetch %llu)\n",
                name, (unsigned long long)s.tasks_offloaded, (unsigned long long)s.tasks_linked,
                (unsigned long long)s.tasks_linked_remotely, (unsigned long long)s.control_messages,
                (unsigned long long)s.task_messages, (unsigned long long)s.done_messages,
                (unsigned long long)s.connect_messages, (unsigned long long)s.link_satisfy_messages,
                (unsigned long long)s.fetch_messages);
  std::printf("check: %s\n", ok ? "the chain's count is right" : "WRONG chain count");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int me = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Args a;
  for (int i = 1; i < argc; ++i) {
    int v;
    if ((v = parse(argv[i], "--reps=", 1)) >= 0) a.reps = v;
    else if ((v = parse(argv[i], "--hops=", 2)) >= 0) a.hops = v;
    else if ((v = parse(argv[i], "--tasks=", 1)) >= 0) a.tasks = v;
    else {
      if (me == 0) std::fprintf(stderr, "weft-bench-cluster: unknown option %s\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
  }
  if (size == 3) {
    const int rc = third_rank_main(a, me);
    MPI_Finalize();
    return rc;
  }
  if (size != 2) {
    if (me == 0) std::fprintf(stderr, "weft-bench-cluster: run it on 2 ranks (mpirun -np 2), or 3\n");
    MPI_Finalize();
    return 2;
  }
  int rc = 0;
  {
    weft::Options o = weft::Options::from_environment();
    o.num_threads = 1;
    o.cluster = true;
    weft::Runtime rt(o);

    std::int64_t* x = nullptr;
    char* big = nullptr;
    rt.run([&](weft::Context& cx) {
      x = weft::dmalloc<std::int64_t>(1);
      big = weft::dmalloc<char>(2 * kBig);
      cx.spawn([x] { *x = 0; }, weft::out(*x));
    });
    std::vector<double> hop, mpi8, chain, chain_here, off, local, lazy, eager, mpi1m;
    bool ok = true;
    for (int r = 0; r < a.reps; ++r) {
      double t = now();
      rt.run([&](weft::Context& cx) {
        for (int i = 0; i < a.hops; ++i) cx.spawn([x] { ++*x; }, weft::inout(*x), weft::node(i % 2));
        cx.taskwait_on(*x);
      });
      hop.push_back((now() - t) / a.hops);
      if (me == 0) ok &= *x == static_cast<std::int64_t>(r * 3 + 1) * a.hops;
      mpi8.push_back(raw_pingpong(8, a.hops));
      for (int where : {1, 0}) {
        t = now();
        rt.run([&](weft::Context& cx) {
          for (int i = 0; i < a.hops; ++i) cx.spawn([x] { ++*x; }, weft::inout(*x), weft::node(where));
          cx.taskwait_on(*x);
        });
        (where ? chain : chain_here).push_back((now() - t) / a.hops);
        if (me == 0) ok &= *x == static_cast<std::int64_t>(r + 1) * a.hops * 3 - (where ? a.hops : 0);
      }
      t = now();
      rt.run([&](weft::Context& cx) {
        for (int i = 0; i < a.tasks; ++i) cx.spawn([] {}, weft::node(1));
        cx.taskwait();
      });
      off.push_back((now() - t) / a.tasks);
      t = now();
      rt.run([&](weft::Context& cx) {
        for (int i = 0; i < a.tasks; ++i) cx.spawn([] {});
        cx.taskwait();
      });
      local.push_back((now() - t) / a.tasks);
      // Lazy: written on rank 1, then read here. Eager: written here, then read on rank 1 (sent with the task).
      double lz = 0, eg = 0;
      rt.run([&](weft::Context& cx) {
        char* b = big;
        cx.spawn([b] { std::memset(b, 1, kBig); }, weft::out(b, kBig), weft::node(1));
        cx.taskwait_noflush();
        const double t0 = now();
        cx.spawn([b] { (void)b; }, weft::in(b, kBig));
        cx.taskwait_noflush();
        lz = now() - t0;
        char* c = big + kBig;
        cx.spawn([c] { std::memset(c, 2, kBig); }, weft::out(c, kBig));
        cx.taskwait_noflush();
        const double t1 = now();
        cx.spawn([c] { (void)c; }, weft::in(c, kBig), weft::node(1));
        cx.taskwait_noflush();
        eg = now() - t1;
      });
      lazy.push_back(lz);
      eager.push_back(eg);
      MPI_Barrier(MPI_COMM_WORLD);
      mpi1m.push_back(raw_pingpong(kBig, 20));
    }
    if (me == 0) {
      const auto us = [](double s) { return s * 1e6; };
      std::printf("# weft-bench-cluster: 2 ranks x 1 worker, median of %d runs, interleaved; eager transfers %s\n",
                  a.reps, o.eager_transfers ? "on" : "off");
      std::printf("%-44s %12s %12s %8s\n", "measure (reference: raw MPI one-way; local tasks)", "weft", "reference",
                  "ratio");
      std::printf("%-44s %10.2f us %10.2f us %7.1fx\n", "hop (8 B datum, task on the other rank)", us(median(hop)),
                  us(median(mpi8)), median(hop) / median(mpi8));
      std::printf("%-44s %10.2f us %10.2f us %7.1fx\n", "chain step on rank 1 vs the chain here", us(median(chain)),
                  us(median(chain_here)), median(chain) / median(chain_here));
      std::printf("%-44s %10.2f us %10.2f us %7.1fx\n", "offloaded empty task (throughput) vs local",
                  us(median(off)), us(median(local)), median(off) / median(local));
      std::printf("%-44s %10.2f us %10.2f us %7.1fx\n", "1 MiB written on rank 1, read here (lazy)",
                  us(median(lazy)), us(median(mpi1m)), median(lazy) / median(mpi1m));
      std::printf("%-44s %10.2f us %10.2f us %7.1fx\n", "1 MiB held here, read on rank 1 (eager)", us(median(eager)),
                  us(median(mpi1m)), median(eager) / median(mpi1m));
      const weft::ClusterStats s = rt.cluster_stats();
      std::printf("rank 0: tasks offloaded %llu (sent at spawn %llu, linked %llu), control messages %llu (task %llu, "
                  "done %llu, fetch %llu), data messages %llu, bytes eager %llu, lazy %llu\n",
                  (unsigned long long)s.tasks_offloaded, (unsigned long long)s.tasks_offloaded_at_spawn,
                  (unsigned long long)s.tasks_linked, (unsigned long long)s.control_messages,
                  (unsigned long long)s.task_messages, (unsigned long long)s.done_messages,
                  (unsigned long long)s.fetch_messages, (unsigned long long)s.data_messages,
                  (unsigned long long)s.bytes_eager, (unsigned long long)s.bytes_lazy);
      std::printf("check: %s\n", ok ? "the chain's count is right" : "WRONG chain count");
      rc = ok ? 0 : 1;
    }
    rt.run([&](weft::Context&) {
      weft::dfree(x);
      weft::dfree(big);
    });
  }
  MPI_Finalize();
  return rc;
}
