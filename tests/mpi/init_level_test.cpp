// A program that initialised MPI itself, at the thread level named by its first argument (single, funneled,
// serialized, multiple): weft must refuse a level below MPI_THREAD_SERIALIZED with one clear error, work at
// the others, and never finalise the program's MPI (the program's own MPI_Finalize at the end would fail).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <weft/mpi.hpp>
#include <weft/weft.hpp>

#include "comm/mpi_env.hpp"
#include "comm/transport.hpp"
#include "mpi_test_util.hpp"

using namespace weft::comm;

namespace {

int g_provided = MPI_THREAD_SINGLE;

TEST(ProgramInitialisedMpi, LevelRule) {
  if (g_provided < MPI_THREAD_SERIALIZED) {
    for (int attempt = 0; attempt < 2; ++attempt) {  // a later call checks again, and fails again
      try {
        MpiEnv::get();
        ADD_FAILURE() << "no error at " << thread_level_name(g_provided);
      } catch (const comm_error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
        EXPECT_EQ(msg.rfind("weft: ", 0), 0u) << msg;
        EXPECT_NE(msg.find(thread_level_name(g_provided)), std::string::npos) << msg;
        EXPECT_NE(msg.find("MPI_THREAD_SERIALIZED"), std::string::npos) << msg;
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (attempt == 0 && rank == 0) std::printf("  refused as expected: %s\n", msg.c_str());
      }
    }
    EXPECT_THROW(Transport{}, comm_error);
    return;
  }
  MpiEnv& env = MpiEnv::get();
  EXPECT_FALSE(env.initialised_by_weft());
  EXPECT_EQ(env.thread_level(), g_provided);
  // The layer works: one message around the ring of ranks.
  Transport t;
  bool got = false;
  Kind k = t.register_kind("ring", {.deliver = [&](const Message& m) {
                                      got = m.source() == (t.rank() + t.size() - 1) % t.size();
                                    }});
  t.send((t.rank() + 1) % t.size(), k, {}, {});
  weft_mpi_test::poll_until(t, [&] { return got; }, "the ring message");
  weft_mpi_test::barrier(t);
}

// MPI inside tasks (weft/mpi.hpp) at the program's level: refused below MPI_THREAD_SERIALIZED (the task fails
// with weft::mpi::error naming the level, nothing hangs); a ring exchange in tasks on two workers otherwise,
// with a raw MPI call of the program's own through weft::mpi::serialized.
TEST(ProgramInitialisedMpi, TasksPostingMpi) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  weft::Options o;
  o.num_threads = 2;
  weft::Runtime rt(o);
  int in = -1, out = rank;
  auto ring = [&] {
    rt.run([&](weft::Context& cx) {
      cx.spawn([&](weft::Context& c) { weft::mpi::irecv(c, &in, 1, MPI_INT, (rank + size - 1) % size, 4, MPI_COMM_WORLD); },
               weft::out(in));
      cx.spawn([&](weft::Context& c) { weft::mpi::isend(c, &out, 1, MPI_INT, (rank + 1) % size, 4, MPI_COMM_WORLD); });
    });
  };
  if (g_provided < MPI_THREAD_SERIALIZED) {
    try {
      ring();
      ADD_FAILURE() << "no error at " << thread_level_name(g_provided);
    } catch (const weft::mpi::error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("weft: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(thread_level_name(g_provided)), std::string::npos) << msg;
    }
    EXPECT_THROW(weft::mpi::serialized([] {}), weft::mpi::error);
    return;
  }
  ring();
  EXPECT_EQ(in, (rank + size - 1) % size);
  int probe = 0;
  weft::mpi::serialized([&] { MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &probe, MPI_STATUS_IGNORE); });
  EXPECT_EQ(probe, 0);  // every message of the ring was received
}

int level_of(const char* name) {
  if (!std::strcmp(name, "single")) return MPI_THREAD_SINGLE;
  if (!std::strcmp(name, "funneled")) return MPI_THREAD_FUNNELED;
  if (!std::strcmp(name, "serialized")) return MPI_THREAD_SERIALIZED;
  if (!std::strcmp(name, "multiple")) return MPI_THREAD_MULTIPLE;
  std::fprintf(stderr, "init_level_test: unknown level '%s'\n", name);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s single|funneled|serialized|multiple [gtest flags]\n", argv[0]);
    return 2;
  }
  MPI_Init_thread(&argc, &argv, level_of(argv[1]), &g_provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& l = testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  int all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  // Still initialised: weft never finalises an MPI it did not initialise. The program's own finalise.
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized) {
    std::fprintf(stderr, "init_level_test: MPI was finalised behind the program's back\n");
    return 1;
  }
  MPI_Finalize();
  return all;
}
