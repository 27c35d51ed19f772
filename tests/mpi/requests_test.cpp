// MPI inside tasks (weft/mpi.hpp), on 1-4 ranks: a task completes only once the requests bound to it have
// completed, its successors see the data, one worker per rank never deadlocks on a receive posted before its
// send, exceptions and failed requests reach the parent, many requests at once, collectives, statuses.
// The jobs run with WEFT_COMM_THREAD=on too (then the communication thread tests the requests).
#include <gtest/gtest.h>
#include <mpi.h>
#include <weft/mpi.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_util.hpp"

namespace {

using weft_mpi_test::world_rank;
using weft_mpi_test::world_size;

weft::Options options(unsigned workers) {
  weft::Options o;
  o.num_threads = workers;
  o.comm_thread = weft::Options::from_environment().comm_thread;
  return o;
}

// A communicator of the test's own, so that a failed test leaves no message behind for the next one.
struct Comm {
  MPI_Comm c = MPI_COMM_NULL;
  Comm() { MPI_Comm_dup(MPI_COMM_WORLD, &c); }
  ~Comm() { MPI_Comm_free(&c); }
};

void busy(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

class Requests : public testing::TestWithParam<unsigned> {};

// A ring: every rank receives from its left neighbour into `in` (a task bound to the receive), a successor
// reads it; the send is posted late, after busy work, so the receive is outstanding when its task's body
// returns. The successor must see the data: it runs only after the receive completed.
TEST_P(Requests, SuccessorsWaitForTheRequests) {
  Comm comm;
  const int r = world_rank(), n = world_size();
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  weft::Runtime rt(options(GetParam()));
  for (int round = 0; round < 20; ++round) {
    std::vector<int> in(1000, -1), out(1000);
    std::iota(out.begin(), out.end(), r * 100000 + round);
    bool checked = false;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& cx) { weft::mpi::irecv(cx, std::span(in), left, round, comm.c); },
               weft::out(in));
      cx.spawn(
          [&] {
            for (int i = 0; i < 1000; ++i) ASSERT_EQ(in[i], left * 100000 + round + i);
            checked = true;
          },
          weft::in(in));
      cx.spawn(
          [&](weft::Context& cx) {
            busy(std::chrono::microseconds(200));
            weft::mpi::isend(cx, std::span<const int>(out), right, round, comm.c);
          },
          weft::in(out));
    });
    EXPECT_TRUE(checked);
  }
}

// One worker per rank, a ping-pong of dependent tasks where each rank's receive is posted before the send it
// waits for is posted on the other rank: a blocking receive would deadlock, bound requests never do.
TEST_P(Requests, ReceiveBeforeSendNeverDeadlocks) {
  Comm comm;
  const int r = world_rank(), n = world_size();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  const int peer = r ^ 1;
  if (peer >= n) return;  // the odd rank out of 3 ranks
  weft::Runtime rt(options(GetParam()));
  long ball = r % 2 == 0 ? 1 : 0;  // the even rank of each pair serves
  const int kRounds = 200;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < kRounds; ++i) {
      const bool mine = (i % 2) == (r % 2);  // whose turn to hit the ball
      if (mine) {
        cx.spawn([&, i] { ball = ball * 3 % 1000003 + i; }, weft::inout(ball));
        cx.spawn([&, i](weft::Context& cx) { weft::mpi::isend(cx, &ball, 1, MPI_LONG, peer, i, comm.c); },
                 weft::in(ball));
      } else {
        cx.spawn([&, i](weft::Context& cx) { weft::mpi::irecv(cx, &ball, 1, MPI_LONG, peer, i, comm.c); },
                 weft::out(ball));
      }
    }
  });
  long expect = 1;
  for (int i = 0; i < kRounds; ++i) expect = expect * 3 % 1000003 + i;
  EXPECT_EQ(ball, expect);  // the last hitter computed it, the other received it
}

// Many requests outstanding at once (more than one poll's batch), completed in the reverse order of their
// posting; each receive's successor checks its message.
TEST_P(Requests, ManyRequestsInAnyOrder) {
  Comm comm;
  const int r = world_rank(), n = world_size();
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  const int kMessages = 300;
  weft::Runtime rt(options(GetParam()));
  std::vector<int> in(kMessages, -1), out(kMessages);
  std::atomic<int> seen{0};
  const weft::mpi::Stats before = weft::mpi::stats();
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < kMessages; ++i) {
      cx.spawn([&, i](weft::Context& cx) { weft::mpi::irecv(cx, &in[i], 1, MPI_INT, left, i, comm.c); },
               weft::out(in[i]));
      cx.spawn(
          [&, i] {
            EXPECT_EQ(in[i], left * 1000 + i);
            seen.fetch_add(1);
          },
          weft::in(in[i]));
    }
    for (int i = kMessages - 1; i >= 0; --i) {
      out[i] = r * 1000 + i;
      cx.spawn([&, i](weft::Context& cx) { weft::mpi::isend(cx, &out[i], 1, MPI_INT, right, i, comm.c); },
               weft::in(out[i]));
    }
  });
  EXPECT_EQ(seen.load(), kMessages);
  const weft::mpi::Stats after = weft::mpi::stats();
  EXPECT_EQ(after.requests_bound - before.requests_bound, 2u * kMessages);
  EXPECT_EQ(after.requests_completed, after.requests_bound);  // none left once the run has returned
  EXPECT_GT(after.polls, before.polls);
  // The times only grow; idle time is a part of the worker time; with a communication thread the workers
  // never poll, so neither is measured.
  EXPECT_GT(after.mpi_seconds, before.mpi_seconds);
  EXPECT_GE(after.outstanding_seconds, before.outstanding_seconds);
  // (Idle time is sampled per worker at its polls and communication time at the poller's: near an interval's
  // edge idle time may exceed it by a poll's stretch, which a loaded machine makes long; overlap() clamps.)
  EXPECT_GE(after.idle_seconds, before.idle_seconds);
  if (weft::Options::from_environment().comm_thread == weft::CommThread::on) {
    EXPECT_EQ(after.worker_seconds, 0.0);
    EXPECT_LT(after.overlap(), 0.0);
  } else if (after.worker_seconds > 0) {
    EXPECT_GE(after.overlap(), 0.0);
    EXPECT_LE(after.overlap(), 1.0);
  }
}

// Collectives in tasks, ordered by the data they touch: a non-blocking allreduce of a value a task computed,
// a broadcast of the result, a barrier; then a successor reads.
TEST_P(Requests, Collectives) {
  Comm comm;
  const int r = world_rank(), n = world_size();
  weft::Runtime rt(options(GetParam()));
  for (int round = 0; round < 10; ++round) {
    double local = 0, sum = 0, root_value = 0;
    bool done = false;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] { local = r + round; }, weft::out(local));
      cx.spawn([&](weft::Context& cx) { weft::mpi::iallreduce(cx, &local, &sum, 1, MPI_SUM, comm.c); },
               weft::in(local), weft::out(sum));
      cx.spawn(
          [&](weft::Context& cx) {
            root_value = r == 0 ? sum * 2 : -1;
            weft::mpi::ibcast(cx, &root_value, 1, MPI_DOUBLE, 0, comm.c);
          },
          weft::in(sum), weft::out(root_value));
      // Collectives on one communicator must be posted in the same order on every rank: the barrier is
      // ordered after the broadcast by a dependency (without it, two workers could post them either way).
      cx.spawn([&](weft::Context& cx) { weft::mpi::ibarrier(cx, comm.c); }, weft::inout(done),
               weft::in(root_value));
      cx.spawn([&] { done = true; }, weft::inout(done), weft::in(root_value));
    });
    const double expect = n * (n - 1) / 2.0 + n * round;
    EXPECT_EQ(sum, expect);
    EXPECT_EQ(root_value, 2 * expect);
    EXPECT_TRUE(done);
  }
}

// A request the program posted itself, bound with its status; a null request; statuses of several at once.
TEST_P(Requests, BindProgramRequestsAndStatuses) {
  Comm comm;
  const int r = world_rank(), n = world_size();
  const int right = (r + 1) % n;
  weft::Runtime rt(options(GetParam()));
  std::vector<char> buf(64, 0);
  MPI_Status st{};
  int count = -1, from = -1;
  const std::string msg = "from rank " + std::to_string(r);
  MPI_Status two[2];
  int a = 0, b = 0;
  const int a_out = 11 + r, b_out = 22 + r;
  rt.run([&](weft::Context& cx) {
    cx.spawn(
        [&](weft::Context& cx) {
          MPI_Request q;
          MPI_Irecv(buf.data(), 64, MPI_CHAR, MPI_ANY_SOURCE, 7, comm.c, &q);
          weft::mpi::bind(cx, q, &st);
          weft::mpi::bind(cx, MPI_REQUEST_NULL);  // nothing to wait for
        },
        weft::out(buf));
    cx.spawn(
        [&] {
          MPI_Get_count(&st, MPI_CHAR, &count);
          from = st.MPI_SOURCE;
        },
        weft::in(buf));
    cx.spawn([&](weft::Context& cx) {
      weft::mpi::isend(cx, msg.data(), static_cast<int>(msg.size()), MPI_CHAR, right, 7, comm.c);
    });
    cx.spawn([&](weft::Context& cx) {
      MPI_Request q[2];
      MPI_Irecv(&a, 1, MPI_INT, r, 8, comm.c, &q[0]);
      MPI_Irecv(&b, 1, MPI_INT, r, 9, comm.c, &q[1]);
      weft::mpi::bind(cx, std::span<const MPI_Request>(q, 2), std::span<MPI_Status>(two, 2));
      weft::mpi::isend(cx, &b_out, 1, MPI_INT, r, 9, comm.c);
      weft::mpi::isend(cx, &a_out, 1, MPI_INT, r, 8, comm.c);
    });
  });
  const int left = (r + n - 1) % n;
  EXPECT_EQ(from, left);
  EXPECT_EQ(count, static_cast<int>(("from rank " + std::to_string(left)).size()));
  EXPECT_EQ(std::string(buf.data(), static_cast<std::size_t>(count)), "from rank " + std::to_string(left));
  EXPECT_EQ(a, a_out);
  EXPECT_EQ(b, b_out);
  EXPECT_EQ(two[0].MPI_TAG, 8);
  EXPECT_EQ(two[1].MPI_TAG, 9);
  MPI_Status s2[1];
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
                 MPI_Request q = MPI_REQUEST_NULL;
                 weft::mpi::bind(cx, std::span<const MPI_Request>(&q, 1), std::span<MPI_Status>(s2, 0));
                 weft::mpi::bind(cx, std::span<const MPI_Request>(&q, 1), std::span<MPI_Status>(two, 2));
               }),
               std::invalid_argument);
}

// A body that throws with a request outstanding: the task fails once the request has completed (the peer's
// send still arrives), its dependents are cancelled, the exception leaves run(); the runtime stays usable.
TEST_P(Requests, ExceptionWhileRequestsPending) {
  Comm comm;
  const int r = world_rank(), n = world_size();
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  weft::Runtime rt(options(GetParam()));
  int in = -1;
  const int out = r;
  bool dependent_ran = false;
  try {
    rt.run([&](weft::Context& cx) {
      cx.spawn(
          [&](weft::Context& cx) {
            weft::mpi::irecv(cx, &in, 1, MPI_INT, left, 3, comm.c);
            throw std::runtime_error("body failed after posting");
          },
          weft::out(in));
      cx.spawn([&] { dependent_ran = true; }, weft::in(in));
      cx.spawn(
          [&](weft::Context& cx) {
            busy(std::chrono::microseconds(500));
            weft::mpi::isend(cx, &out, 1, MPI_INT, right, 3, comm.c);
          });
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "body failed after posting");
  }
  EXPECT_FALSE(dependent_ran);
  EXPECT_EQ(in, left);  // the receive completed before the task did
  // Usable afterwards.
  int twice = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&](weft::Context& cx) { weft::mpi::iallreduce(cx, &out, &twice, 1, MPI_SUM, comm.c); });
  });
  EXPECT_EQ(twice, n * (n - 1) / 2);
}

// A request that completes with an error (a message longer than the receive buffer, on a communicator that
// returns errors): the task fails with weft::mpi::error, its dependents are cancelled.
bool is_mpich() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  return std::string(version, static_cast<std::size_t>(len)).find("MPICH") != std::string::npos;
}

TEST_P(Requests, FailedRequestFailsTheTask) {
  if (world_size() == 1 && is_mpich())
    GTEST_SKIP() << "MPICH 4.0: a truncated message a rank sends to itself never completes (the job hangs)";
  Comm comm;
  MPI_Comm_set_errhandler(comm.c, MPI_ERRORS_RETURN);
  // MPICH raises an error that MPI_Testsome finds in a request on MPI_COMM_WORLD's handler (Open MPI on the
  // request's communicator's): returned errors on both for this test, the world's handler restored after.
  MPI_Errhandler world_handler;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  struct Restore {
    MPI_Errhandler h;
    ~Restore() {
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, h);
      MPI_Errhandler_free(&h);
    }
  } restore{world_handler};
  const int r = world_rank(), n = world_size();
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  weft::Runtime rt(options(GetParam()));
  int small = 0;
  const int big[4] = {1, 2, 3, 4};
  // Both orders: the receive posted first (it fails when the message arrives), or the message already there
  // when the receive is posted (it may fail at once). The orders are made by the graph, never left to timing.
  // On one rank only the second: Open MPI 4.1 truncates a message a rank sends to itself without an error when
  // the receive was posted first.
  for (const bool send_first : {false, true}) {
    if (n == 1 && !send_first) continue;
    bool dependent_ran = false;
    char order = 0;  // orders the send before the receive when it is spawned first
    auto send = [&](weft::Context& cx) { weft::mpi::isend(cx, big, 4, MPI_INT, right, 5, comm.c); };
    MPI_Barrier(comm.c);
    try {
      rt.run([&](weft::Context& cx) {
        if (send_first) cx.spawn(send, weft::out(order));
        cx.spawn(
            [&](weft::Context& cx) {
              if (send_first) busy(std::chrono::microseconds(300));  // let the message arrive
              weft::mpi::irecv(cx, &small, 1, MPI_INT, left, 5, comm.c);
              if (!send_first) cx.spawn(send);  // a child: posted after the receive
            },
            weft::out(small), weft::in(order));  // after the send when it came first
        cx.spawn([&] { dependent_ran = true; }, weft::in(small));
      });
      ADD_FAILURE() << "no exception (send first: " << send_first << ")";
    } catch (const weft::mpi::error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("weft: ", 0), 0u) << what;
      EXPECT_NE(what.find("MPI"), std::string::npos) << what;
    }
    EXPECT_FALSE(dependent_ran);
  }
  // A wrapper whose post fails throws from the body: a rank out of range.
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
                 cx.spawn([&](weft::Context& cx) { weft::mpi::isend(cx, &small, 1, MPI_INT, n + 5, 0, comm.c); });
               }),
               weft::mpi::error);
}

// A halo exchange around the ring under taskiter: the recorded receive and send tasks post fresh requests every
// iteration, the graph is discovered once, and the result equals a sequential simulation of every rank.
TEST_P(Requests, TaskiterPostsFreshRequestsEveryIteration) {
  Comm comm;
  const int r = world_rank(), n = world_size();
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  constexpr long kP = 1000003;
  constexpr int kIters = 150;
  weft::Runtime rt(options(GetParam()));
  long u = r + 1, edge = 0, ghost = 0;
  const weft::mpi::Stats before = weft::mpi::stats();
  rt.run([&](weft::Context& cx) {
    cx.taskiter(
        kIters,
        [&](weft::Context& it) {
          it.spawn([&] { edge = u; }, weft::in(u), weft::out(edge));
          it.spawn([&](weft::Context& c) { weft::mpi::isend(c, &edge, 1, MPI_LONG, right, 1, comm.c); },
                   weft::in(edge));
          it.spawn([&](weft::Context& c) { weft::mpi::irecv(c, &ghost, 1, MPI_LONG, left, 1, comm.c); },
                   weft::out(ghost));
          it.spawn([&] { u = (u * 31 + ghost) % kP; }, weft::inout(u), weft::in(ghost));
        },
        weft::inout(u), weft::inout(edge), weft::inout(ghost));
  });
  std::vector<long> all(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) all[k] = k + 1;
  for (int i = 0; i < kIters; ++i) {
    std::vector<long> next(all.size());
    for (int k = 0; k < n; ++k) next[k] = (all[k] * 31 + all[(k + n - 1) % n]) % kP;
    all = next;
  }
  EXPECT_EQ(u, all[r]);
  EXPECT_EQ(weft::mpi::stats().requests_bound - before.requests_bound, 2u * kIters);
}

// Not in a taskiter body itself: the wrapper refuses before it posts anything.
TEST_P(Requests, RefusedInTaskiterBodies) {
  Comm comm;
  weft::Runtime rt(options(GetParam()));
  int x = 0;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
                 cx.taskiter(
                     3, [&](weft::Context& it) { weft::mpi::isend(it, &x, 1, MPI_INT, 0, 0, comm.c); },
                     weft::inout(x));
               }),
               weft::taskiter_error);
  // Nothing was posted: the communicator has no message pending.
  int flag = 1;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm.c, &flag, MPI_STATUS_IGNORE);
  EXPECT_EQ(flag, 0);
}

INSTANTIATE_TEST_SUITE_P(Workers, Requests, testing::Values(1u, 2u),
                         [](const testing::TestParamInfo<unsigned>& i) { return std::to_string(i.param) + "w"; });

}  // namespace

// Run by tests/mpi/failure.cmake (MODE=mpiexit0): rank 1 calls exit(0) inside a task while rank 0's task waits
// for its message (weft::mpi). Rank 1 must leave with status 1 and a rank-tagged line, not wait in MPI at exit
// for rank 0, which waits for it.
TEST(RequestsFailure, ExitZeroInTask) {
  const char* file = std::getenv("WEFT_TEST_KILL_FILE");
  if (!file) GTEST_SKIP() << "run by tests/mpi/failure.cmake";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  weft::Runtime rt;
  int x = 0;
  rt.run([&](weft::Context& cx) {
    cx.spawn(
        [&](weft::Context& t) {
          if (rank == 1) {
            if (FILE* f = std::fopen(file, "w")) {
              std::fprintf(f, "%lld\n", static_cast<long long>(std::time(nullptr)));
              std::fclose(f);
            }
            std::exit(0);
          }
          weft::mpi::irecv(t, &x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
        },
        weft::out(x));
  });
  std::_Exit(3);
}
