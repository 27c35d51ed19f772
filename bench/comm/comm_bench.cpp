// weft-bench-comm: weft's MPI transport (src/comm) next to raw MPI in the same binary, 2 ranks:
//   - latency: round trips of an 8-byte message, reported as one-way time (round trip / 2);
//   - bandwidth: windows of W messages of 64 KiB and 1 MiB from rank 0 to rank 1, one acknowledgement per
//     window (the OSU osu_bw scheme);
//   - --send-cost (1 rank): the cost of Transport::send() itself, 1 and 2 threads, one destination.
// Raw MPI pre-posts its receives and polls with MPI_Test, the best a hand-written MPI code does; the transport
// runs both of its receive modes (pre-posted ring, MPI_Improbe). Each number is the median of --reps runs.
//
//   mpirun -np 2 weft-bench-comm [--reps=R] [--iters=N] [--window=W]
//   mpirun -np 1 weft-bench-comm --send-cost
// In a container add --mca btl_vader_single_copy_mechanism none (see tests/mpi/CMakeLists.txt).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_env.hpp"
#include "comm/transport.hpp"

using namespace weft::comm;

namespace {

struct Args {
  int reps = 7;
  long iters = 20000;  // latency round trips per run
  int window = 16;     // bandwidth: messages per window
  bool send_cost = false;
  bool latency = true, bw64 = true, bw1m = true;  // --only
  bool ring = true, probe = true;                 // --modes
};

double now() { return MPI_Wtime(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void wait_req(MPI_Request* r) {
  for (int flag = 0; !flag;) MPI_Test(r, &flag, MPI_STATUS_IGNORE);
}

void wait_all(std::vector<MPI_Request>& rs) {
  for (int flag = 0; !flag;) MPI_Testall(static_cast<int>(rs.size()), rs.data(), &flag, MPI_STATUSES_IGNORE);
}

// --- raw MPI ----------------------------------------------------------------------------------------------

// One-way latency in microseconds: `iters` round trips of 8 bytes, receives posted before the sends.
double raw_latency(MPI_Comm comm, long iters) {
  int me;
  MPI_Comm_rank(comm, &me);
  const int peer = 1 - me;
  std::uint64_t out = 0, in = 0;
  MPI_Barrier(comm);
  const double t0 = now();
  MPI_Request rr, sr;
  MPI_Irecv(&in, 8, MPI_BYTE, peer, 0, comm, &rr);
  for (long i = 0; i < iters; ++i) {
    if (me == 0) {
      out = static_cast<std::uint64_t>(i);
      MPI_Isend(&out, 8, MPI_BYTE, peer, 0, comm, &sr);
      wait_req(&sr);
      wait_req(&rr);
      if (i + 1 < iters) MPI_Irecv(&in, 8, MPI_BYTE, peer, 0, comm, &rr);
    } else {
      wait_req(&rr);
      if (i + 1 < iters) MPI_Irecv(&in, 8, MPI_BYTE, peer, 0, comm, &rr);
      out = in;
      MPI_Isend(&out, 8, MPI_BYTE, peer, 0, comm, &sr);
      wait_req(&sr);
    }
  }
  const double t = now() - t0;
  return t / static_cast<double>(iters) / 2 * 1e6;
}

// Bandwidth in MB/s (10^6 bytes): `windows` windows of `w` messages of `size` bytes, one ack per window.
double raw_bandwidth(MPI_Comm comm, std::size_t size, int w, int windows) {
  int me;
  MPI_Comm_rank(comm, &me);
  std::vector<std::unique_ptr<std::byte[]>> bufs;
  for (int i = 0; i < w; ++i) {
    bufs.push_back(std::make_unique<std::byte[]>(size));
    std::memset(bufs.back().get(), i, size);
  }
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(w));
  char ack = 0;
  MPI_Barrier(comm);
  const double t0 = now();
  for (int k = 0; k < windows; ++k) {
    if (me == 0) {
      for (int i = 0; i < w; ++i)
        MPI_Isend(bufs[static_cast<std::size_t>(i)].get(), static_cast<int>(size), MPI_BYTE, 1, 1, comm,
                  &reqs[static_cast<std::size_t>(i)]);
      wait_all(reqs);
      MPI_Request r;
      MPI_Irecv(&ack, 1, MPI_BYTE, 1, 2, comm, &r);
      wait_req(&r);
    } else {
      for (int i = 0; i < w; ++i)
        MPI_Irecv(bufs[static_cast<std::size_t>(i)].get(), static_cast<int>(size), MPI_BYTE, 0, 1, comm,
                  &reqs[static_cast<std::size_t>(i)]);
      wait_all(reqs);
      MPI_Request r;
      MPI_Isend(&ack, 1, MPI_BYTE, 0, 2, comm, &r);
      wait_req(&r);
    }
  }
  const double t = now() - t0;
  return static_cast<double>(size) * w * windows / t / 1e6;
}

// --- transport --------------------------------------------------------------------------------------------

double transport_latency(Transport& t, long iters) {
  const int me = t.rank(), peer = 1 - me;
  long got = 0;
  Kind k = 0;
  k = t.register_kind("bench.ping", {.deliver = [&](const Message& m) {
                                       ++got;
                                       if (me == 1) t.send(peer, k, {}, m.payload());  // the pong, from the handler
                                     }});
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  const std::uint64_t v = 42;
  const auto payload = std::as_bytes(std::span<const std::uint64_t>(&v, 1));
  if (me == 0) {
    for (long i = 0; i < iters; ++i) {
      t.send(peer, k, {}, payload);
      while (got <= i) t.poll();
    }
  } else {
    while (got < iters) t.poll();
    while (t.outstanding()) t.poll();  // the last pong leaves
  }
  const double el = now() - t0;
  return el / static_cast<double>(iters) / 2 * 1e6;
}

double transport_bandwidth(Transport& t, std::size_t size, int w, int windows) {
  const int me = t.rank();
  std::vector<std::unique_ptr<std::byte[]>> bufs;
  for (int i = 0; i < w; ++i) {
    bufs.push_back(std::make_unique<std::byte[]>(size));
    std::memset(bufs[static_cast<std::size_t>(i)].get(), i, size);
  }
  // Receiver: payloads go straight into its window of buffers (place), a slot per message of the window.
  int delivered = 0, placed = 0, acks = 0, sent_done = 0;
  Kind data = t.register_kind(
      "bench.data", {.deliver = [&](const Message&) { ++delivered; },
                     .place = [&](const Message& m) {
                       std::byte* p = bufs[static_cast<std::size_t>(placed++ % w)].get();
                       return std::span<std::byte>(p, m.payload_size());
                     }});
  Kind ack = t.register_kind("bench.ack", {.deliver = [&](const Message&) { ++acks; }});
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int k = 0; k < windows; ++k) {
    if (me == 0) {
      for (int i = 0; i < w; ++i)
        t.send(1, data, {}, std::span<const std::byte>(bufs[static_cast<std::size_t>(i)].get(), size),
               [&] { ++sent_done; });
      while (acks <= k || sent_done < (k + 1) * w) t.poll();
    } else {
      while (delivered < (k + 1) * w) t.poll();
      t.send(0, ack, {}, {});
    }
  }
  while (t.outstanding()) t.poll();
  const double el = now() - t0;
  return static_cast<double>(size) * w * windows / el / 1e6;
}

// --- send() cost ------------------------------------------------------------------------------------------

void send_cost(const Args& a) {
  std::printf("Transport::send() of an 8-byte message to one destination (this rank), ns per call, median of %d\n",
              a.reps);
  std::printf("  %-8s %12s\n", "threads", "ns/send");
  const long per_thread = 1000000;
  for (int threads : {1, 2}) {
    std::vector<double> runs;
    for (int r = 0; r < a.reps; ++r) {
      TransportConfig c;
      Transport t(c);
      std::atomic<long> got{0};
      Kind k = t.register_kind("bench.cost", {.deliver = [&](const Message&) {
                                                got.fetch_add(1, std::memory_order_relaxed);
                                              }});
      std::atomic<int> ready{0};
      std::vector<double> per(static_cast<std::size_t>(threads));
      std::vector<std::thread> ts;
      for (int th = 0; th < threads; ++th)
        ts.emplace_back([&, th] {
          ready.fetch_add(1);
          while (ready.load() < threads) {
          }
          const std::uint64_t v = 7;
          const auto p = std::as_bytes(std::span<const std::uint64_t>(&v, 1));
          const auto t0 = std::chrono::steady_clock::now();
          for (long i = 0; i < per_thread; ++i) t.send(0, k, {}, p);
          per[static_cast<std::size_t>(th)] =
              std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
              static_cast<double>(per_thread);
        });
      for (auto& th : ts) th.join();
      while (got.load() < per_thread * threads) t.poll(1 << 16);
      runs.push_back(*std::max_element(per.begin(), per.end()));
    }
    std::printf("  %-8d %12.1f\n", threads, median(runs));
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto val = [&](const char* key) -> const char* {
      const std::size_t n = std::strlen(key);
      return s.compare(0, n, key) == 0 ? s.c_str() + n : nullptr;
    };
    if (const char* v = val("--reps=")) {
      a.reps = std::max(1, std::atoi(v));
    } else if (const char* v2 = val("--iters=")) {
      a.iters = std::max(10L, std::atol(v2));
    } else if (const char* v3 = val("--window=")) {
      a.window = std::max(1, std::atoi(v3));
    } else if (const char* v4 = val("--only=")) {
      const std::string l = v4;
      a.latency = l.find("latency") != std::string::npos;
      a.bw64 = l.find("bw64k") != std::string::npos;
      a.bw1m = l.find("bw1m") != std::string::npos;
    } else if (const char* v5 = val("--modes=")) {
      const std::string l = v5;
      a.ring = l.find("ring") != std::string::npos;
      a.probe = l.find("probe") != std::string::npos;
    } else if (s == "--send-cost") {
      a.send_cost = true;
    } else if (s == "-h" || s == "--help") {
      std::printf(
          "usage: mpirun -np 2 weft-bench-comm [--reps=R] [--iters=N] [--window=W] [--only=latency,bw64k,bw1m]\n"
          "                                    [--modes=ring,probe]\n"
          "       mpirun -np 1 weft-bench-comm --send-cost [--reps=R]\n");
      std::exit(0);
    } else {
      std::fprintf(stderr, "weft-bench-comm: unknown option '%s' (try --help)\n", s.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  MpiEnv& env = MpiEnv::get();
  if (a.send_cost) {
    if (env.rank() == 0) send_cost(a);
    return 0;
  }
  if (env.size() != 2) {
    if (env.rank() == 0) std::fprintf(stderr, "weft-bench-comm: run with 2 ranks (mpirun -np 2)\n");
    return 2;
  }
  const int me = env.rank();
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  std::string ver(version, static_cast<std::size_t>(vlen));
  ver = ver.substr(0, ver.find_first_of(",\n"));

  struct Row {
    const char* name;
    std::vector<double> raw, ring, probe;
  };
  Row lat{"latency, 8 B one-way (us)", {}, {}, {}};
  Row bw64{"bandwidth, 64 KiB (MB/s)", {}, {}, {}};
  Row bw1m{"bandwidth, 1 MiB (MB/s)", {}, {}, {}};
  const int win64 = 200, win1m = 20;  // windows per run
  for (int r = 0; r < a.reps; ++r) {
    // Interleaved: a slow moment of the machine hits every column alike.
    if (a.latency) lat.raw.push_back(raw_latency(raw, a.iters));
    if (a.bw64) bw64.raw.push_back(raw_bandwidth(raw, 64 * 1024, a.window, win64));
    if (a.bw1m) bw1m.raw.push_back(raw_bandwidth(raw, 1 << 20, a.window, win1m));
    for (RecvMode mode : {RecvMode::ring, RecvMode::probe}) {
      if (!(mode == RecvMode::ring ? a.ring : a.probe)) continue;
      TransportConfig c;
      c.recv_mode = mode;
      auto& L = mode == RecvMode::ring ? lat.ring : lat.probe;
      auto& B64 = mode == RecvMode::ring ? bw64.ring : bw64.probe;
      auto& B1 = mode == RecvMode::ring ? bw1m.ring : bw1m.probe;
      if (a.latency) {
        Transport t(c);
        L.push_back(transport_latency(t, a.iters));
      }
      if (a.bw64) {
        Transport t(c);
        B64.push_back(transport_bandwidth(t, 64 * 1024, a.window, win64));
      }
      if (a.bw1m) {
        Transport t(c);
        B1.push_back(transport_bandwidth(t, 1 << 20, a.window, win1m));
      }
    }
  }
  if (me == 0) {
    std::printf("weft-bench-comm: 2 ranks, %s, thread level %s, %d runs (%ld round trips; windows of %d)\n",
                ver.c_str(), thread_level_name(env.thread_level()), a.reps, a.iters, a.window);
    // Best of the runs (lowest latency, highest bandwidth: what the code costs when nothing else runs), then
    // the median (what a loaded machine gives).
    for (int pass = 0; pass < 2; ++pass) {
      std::printf("%-28s %10s %12s %7s %12s %7s\n", pass == 0 ? "best of the runs" : "median of the runs", "raw MPI",
                  "weft ring", "ratio", "weft probe", "ratio");
      for (const Row* row : {&lat, &bw64, &bw1m}) {
        if (row->raw.empty()) continue;
        const bool lower_better = row == &lat;
        auto pick = [&](const std::vector<double>& v) {
          if (v.empty()) return 0.0;
          if (pass == 1) return median(v);
          return lower_better ? *std::min_element(v.begin(), v.end()) : *std::max_element(v.begin(), v.end());
        };
        const double rw = pick(row->raw), rg = pick(row->ring), pb = pick(row->probe);
        std::printf("  %-26s %10.2f %12.2f %6.2fx %12.2f %6.2fx\n", row->name, rw, rg, rg / rw, pb, pb / rw);
      }
    }
  }
  MPI_Comm_free(&raw);
  return 0;
}
