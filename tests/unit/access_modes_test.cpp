// Access modes between sibling tasks: in / out / inout ordering, concurrent readers, inoutset, commutative,
// regions named by their start address, merging of several accesses to one datum.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <random>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

class AccessModes : public testing::TestWithParam<unsigned> {};

// A chain of inout tasks applying a non-commutative update must produce the sequential result.
TEST_P(AccessModes, InoutChainRunsInSpawnOrder) {
  weft::Runtime rt(opts(GetParam()));
  const std::uint32_t n = static_cast<std::uint32_t>(scaled(2000, 50));
  std::uint32_t x = 1;
  std::vector<std::uint32_t> order;
  rt.run([&](weft::Context& cx) {
    for (std::uint32_t i = 0; i < n; ++i)
      cx.spawn([&x, &order, i] {
        x = x * 31u + i;
        order.push_back(i);
      }, weft::inout(x));
    cx.taskwait();
  });
  std::uint32_t expect = 1;
  for (std::uint32_t i = 0; i < n; ++i) expect = expect * 31u + i;
  EXPECT_EQ(x, expect);
  ASSERT_EQ(order.size(), n);
  for (std::uint32_t i = 0; i < n; ++i) ASSERT_EQ(order[i], i);
}

// Readers see the value of the last writer spawned before them, never a later one.
TEST_P(AccessModes, ReadersSeeLastPrecedingWriter) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(300, 20));
  int x = -1;
  std::vector<std::array<int, 3>> seen(rounds);
  rt.run([&](weft::Context& cx) {
    for (int r = 0; r < rounds; ++r) {
      cx.spawn([&x, r] { x = r; }, weft::out(x));
      for (int k = 0; k < 3; ++k)
        cx.spawn([&x, &seen, r, k] {
          if (k == 1) busy_for_us(20);
          seen[r][k] = x;
        }, weft::in(x));
    }
  });
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < 3; ++k) ASSERT_EQ(seen[r][k], r) << "round " << r << " reader " << k;
  EXPECT_EQ(x, rounds - 1);
}

// A writer waits for every reader spawned since the previous writer.
TEST_P(AccessModes, WriterWaitsForAllPrecedingReaders) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  std::atomic<int> readers_done{0};
  int seen_by_writer = -1;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { x = 7; }, weft::out(x));
    for (int k = 0; k < 5; ++k)
      cx.spawn([&, k] {
        sleep_ms(2 + k);
        EXPECT_EQ(x, 7);
        readers_done.fetch_add(1);
      }, weft::in(x));
    cx.spawn([&] {
      seen_by_writer = readers_done.load();
      x = 8;
    }, weft::out(x));
    cx.taskwait();
  });
  EXPECT_EQ(seen_by_writer, 5);
  EXPECT_EQ(x, 8);
}

// Random in/out/inout programs over a few variables equal their sequential execution.
TEST_P(AccessModes, RandomStrongProgramsMatchSequential) {
  weft::Runtime rt(opts(GetParam()));
  const int programs = static_cast<int>(scaled(100, 10));
  for (int p = 0; p < programs; ++p) {
    std::mt19937 gen(1000 + p);
    constexpr int kVars = 4;
    const int ntasks = 60;
    struct T {
      int mode[kVars];  // 0 none, 1 in, 2 out, 3 inout
    };
    std::vector<T> tasks(ntasks);
    for (auto& t : tasks)
      for (int v = 0; v < kVars; ++v) t.mode[v] = static_cast<int>(gen() % 4);
    auto body = [&](std::uint32_t* vars, std::vector<std::uint64_t>& log, int id) {
      std::uint64_t h = static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull;
      for (int v = 0; v < kVars; ++v)
        if (tasks[id].mode[v] == 1 || tasks[id].mode[v] == 3) {
          log[id] = log[id] * 1000003u + vars[v];
          h = h * 31 + vars[v];
        }
      for (int v = 0; v < kVars; ++v)
        if (tasks[id].mode[v] >= 2) vars[v] = static_cast<std::uint32_t>(h + v);
    };
    std::uint32_t ref_vars[kVars] = {1, 2, 3, 4};
    std::vector<std::uint64_t> ref_log(ntasks, 0);
    for (int i = 0; i < ntasks; ++i) body(ref_vars, ref_log, i);

    std::uint32_t vars[kVars] = {1, 2, 3, 4};
    std::vector<std::uint64_t> log(ntasks, 0);
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < ntasks; ++i) {
        weft::Access acc[kVars];
        for (int v = 0; v < kVars; ++v) {
          switch (tasks[i].mode[v]) {
            case 0: acc[v] = weft::in(log[i]); break;  // private datum: no conflict with anyone
            case 1: acc[v] = weft::in(vars[v]); break;
            case 2: acc[v] = weft::out(vars[v]); break;
            default: acc[v] = weft::inout(vars[v]); break;
          }
        }
        cx.spawn([&, i] {
          if (i % 7 == 0) busy_for_us(10);
          body(vars, log, i);
        }, acc[0], acc[1], acc[2], acc[3]);
      }
    });
    ASSERT_EQ(log, ref_log) << "program " << p;
    for (int v = 0; v < kVars; ++v) ASSERT_EQ(vars[v], ref_vars[v]) << "program " << p << " var " << v;
  }
}

// inoutset: members after a writer see its value; a later reader sees all members' updates; a later
// set waits for the reader in between.
TEST_P(AccessModes, InoutsetLaterAccessSeesAllMembers) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(100, 10));
  for (int r = 0; r < rounds; ++r) {
    std::uint32_t x = 0;
    std::atomic<int> first_set_done{0};
    std::atomic<bool> reader_done{false};
    std::atomic<int> bad{0};
    std::uint32_t read_between = 0, read_after = 0;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] { x = 1000; }, weft::out(x));
      for (int k = 0; k < 6; ++k)
        cx.spawn([&, k] {
          if (k == 2) busy_for_us(30);
          std::atomic_ref<std::uint32_t>(x).fetch_add(1u << k);
          first_set_done.fetch_add(1);
        }, weft::inoutset(x));
      cx.spawn([&] {
        if (first_set_done.load() != 6) bad.fetch_add(1);
        busy_for_us(20);
        read_between = x;
        reader_done = true;
      }, weft::in(x));
      for (int k = 0; k < 4; ++k)
        cx.spawn([&] {
          if (!reader_done.load()) bad.fetch_add(1);
          std::atomic_ref<std::uint32_t>(x).fetch_add(100000);
        }, weft::inoutset(x));
      cx.spawn([&] { read_after = x; }, weft::in(x));
    });
    ASSERT_EQ(bad.load(), 0) << "round " << r;
    ASSERT_EQ(read_between, 1000u + 63u) << "round " << r;
    ASSERT_EQ(read_after, 1000u + 63u + 400000u) << "round " << r;
  }
}

// A writer after an inoutset set waits for all members.
TEST_P(AccessModes, WriterAfterInoutsetWaitsForAllMembers) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> members_done{0};
  int seen = -1;
  int x = 0;
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < 5; ++k)
      cx.spawn([&, k] {
        sleep_ms(1 + k);
        members_done.fetch_add(1);
      }, weft::inoutset(x));
    cx.spawn([&] { seen = members_done.load(); }, weft::inout(x));
  });
  EXPECT_EQ(seen, 5);
}

// A task with k predecessors keeps its k edge nodes in an array (beyond two), from a per-worker pool by size
// class (4 to 64 nodes) or, beyond, the heap; arrays are recycled when tasks are. Gathers of every width around
// the class boundaries, over and over (the pools fill and empty), each reading what its writers wrote.
TEST_P(AccessModes, GathersOfEveryWidthSeeTheirWriters) {
  weft::Runtime rt(opts(GetParam()));
  const std::size_t widths[] = {3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 64, 65, 130};
  const int rounds = static_cast<int>(scaled(40, 4));
  std::vector<long> cells(130, 0);
  std::vector<long> sums(static_cast<std::size_t>(rounds) * std::size(widths), -1);
  rt.run([&](weft::Context& cx) {
    std::vector<weft::Access> acc;
    std::size_t g = 0;
    for (int r = 0; r < rounds; ++r)
      for (std::size_t w : widths) {
        for (std::size_t k = 0; k < w; ++k)
          cx.spawn([&cells, k, r] { cells[k] = r * 1000 + static_cast<long>(k); }, weft::out(cells[k]));
        acc.clear();
        for (std::size_t k = 0; k < w; ++k) acc.push_back(weft::in(cells[k]));
        long* out = &sums[g++];
        cx.spawn_accesses(
            [&cells, w, out] {
              long s = 0;
              for (std::size_t k = 0; k < w; ++k) s += cells[k];
              *out = s;
            },
            acc.data(), acc.size());
      }
  });
  std::size_t i = 0;
  for (int r = 0; r < rounds; ++r)
    for (std::size_t w : widths) {
      const long n = static_cast<long>(w);
      ASSERT_EQ(sums[i], r * 1000 * n + n * (n - 1) / 2) << "round " << r << ", width " << w;
      ++i;
    }
}

INSTANTIATE_TEST_SUITE_P(Workers, AccessModes, testing::Values(1u, 2u, 3u, 4u), WorkersName());

// ---- tests that need real concurrency (at least 2 workers) ----

class AccessModesConcurrent : public testing::TestWithParam<unsigned> {};

// Two readers of the same datum between two writers run at the same time.
TEST_P(AccessModesConcurrent, ReadersRunConcurrently) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  Rendezvous rv(2);
  std::atomic<int> ok{0};
  int after = -1;
  std::atomic<int> readers_done{0};
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { x = 5; }, weft::out(x));
    for (int k = 0; k < 2; ++k)
      cx.spawn([&] {
        if (x == 5 && rv.arrive_and_wait()) ok.fetch_add(1);
        readers_done.fetch_add(1);
      }, weft::in(x));
    cx.spawn([&] {
      after = readers_done.load();
      x = 6;
    }, weft::out(x));
  });
  EXPECT_EQ(ok.load(), 2) << "the two readers did not run concurrently";
  EXPECT_EQ(after, 2);
  EXPECT_EQ(x, 6);
}

// Members of an inoutset set run concurrently.
TEST_P(AccessModesConcurrent, InoutsetMembersRunConcurrently) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  Rendezvous rv(2);
  std::atomic<int> ok{0};
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { x = 1; }, weft::out(x));
    for (int k = 0; k < 2; ++k)
      cx.spawn([&] {
        if (rv.arrive_and_wait()) ok.fetch_add(1);
        std::atomic_ref<int>(x).fetch_add(10);
      }, weft::inoutset(x));
    cx.spawn([&] { EXPECT_EQ(x, 21); }, weft::in(x));
  });
  EXPECT_EQ(ok.load(), 2) << "inoutset members did not run concurrently";
  EXPECT_EQ(x, 21);
}

// Commutative members never overlap, all run, and a later reader sees all of them.
TEST_P(AccessModesConcurrent, CommutativeMembersMutuallyExclusive) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(20, 3));
  for (int r = 0; r < rounds; ++r) {
    std::atomic<int> inside{0}, overlaps{0}, ran{0};
    long x = 0;
    long seen = -1;
    const int members = 24;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] { x = 1; }, weft::out(x));
      for (int k = 0; k < members; ++k)
        cx.spawn([&, k] {
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          long v = x;
          busy_for_us(50);
          x = v + k;  // a non-atomic read-modify-write: lost updates if members overlap
          ran.fetch_add(1);
          inside.fetch_sub(1);
        }, weft::commutative(x));
      cx.spawn([&] { seen = x; }, weft::in(x));
    });
    ASSERT_EQ(overlaps.load(), 0) << "round " << r;
    ASSERT_EQ(ran.load(), members);
    ASSERT_EQ(seen, 1 + members * (members - 1) / 2) << "round " << r;
  }
}

// Commutative tasks on several data (clauses in varying order) exclude each other per datum and do not
// deadlock.
TEST_P(AccessModesConcurrent, CommutativeOnSeveralData) {
  weft::Runtime rt(opts(GetParam()));
  long a = 0, b = 0, c = 0;
  std::atomic<int> in_a{0}, in_b{0}, in_c{0}, overlaps{0};
  const int n = static_cast<int>(scaled(200, 30));
  auto enter = [&](std::atomic<int>& f) {
    if (f.fetch_add(1) != 0) overlaps.fetch_add(1);
  };
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) {
      switch (i % 4) {
        case 0:
          cx.spawn([&] {
            enter(in_a); enter(in_b);
            busy_for_us(5);
            ++a; ++b;
            in_a.fetch_sub(1); in_b.fetch_sub(1);
          }, weft::commutative(a), weft::commutative(b));
          break;
        case 1:
          cx.spawn([&] {
            enter(in_b); enter(in_a);
            busy_for_us(5);
            ++a; ++b;
            in_b.fetch_sub(1); in_a.fetch_sub(1);
          }, weft::commutative(b), weft::commutative(a));
          break;
        case 2:
          cx.spawn([&] {
            enter(in_c); enter(in_a);
            busy_for_us(5);
            ++a; ++c;
            in_c.fetch_sub(1); in_a.fetch_sub(1);
          }, weft::commutative(c), weft::commutative(a));
          break;
        default:
          cx.spawn([&] {
            enter(in_b); enter(in_c);
            busy_for_us(5);
            ++b; ++c;
            in_b.fetch_sub(1); in_c.fetch_sub(1);
          }, weft::commutative(b), weft::commutative(c));
          break;
      }
    }
    cx.taskwait();
  });
  EXPECT_EQ(overlaps.load(), 0);
  int q = n / 4, rem = n % 4;
  long ea = 3 * q + (rem > 0) + (rem > 1) + (rem > 2);
  long eb = 3 * q + (rem > 0) + (rem > 1);
  long ec = 2 * q + (rem > 2);
  EXPECT_EQ(a, ea);
  EXPECT_EQ(b, eb);
  EXPECT_EQ(c, ec);
}

// Commutative accesses to different data do not exclude each other.
TEST_P(AccessModesConcurrent, CommutativeOnDifferentDataRunConcurrently) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0, y = 0;
  Rendezvous rv(2);
  std::atomic<int> ok{0};
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { if (rv.arrive_and_wait()) ok.fetch_add(1); ++x; }, weft::commutative(x));
    cx.spawn([&] { if (rv.arrive_and_wait()) ok.fetch_add(1); ++y; }, weft::commutative(y));
  });
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(x + y, 2);
}

// Tasks writing different data run concurrently.
TEST_P(AccessModesConcurrent, IndependentWritersRunConcurrently) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0, y = 0;
  Rendezvous rv(2);
  std::atomic<int> ok{0};
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { if (rv.arrive_and_wait()) ok.fetch_add(1); x = 1; }, weft::out(x));
    cx.spawn([&] { if (rv.arrive_and_wait()) ok.fetch_add(1); y = 1; }, weft::inout(y));
  });
  EXPECT_EQ(ok.load(), 2);
}

// Regions are named by their start address: overlapping regions with different starts are not ordered
// (two writers run concurrently), the same start address is ordered whatever the length.
TEST_P(AccessModesConcurrent, RegionsNamedByStartAddress) {
  weft::Runtime rt(opts(GetParam()));
  std::array<int, 16> arr{};
  Rendezvous rv(2);
  std::atomic<int> ok{0};
  std::atomic<bool> first_done{false};
  bool ordered = false;
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] {
      if (rv.arrive_and_wait()) ok.fetch_add(1);
      arr[0] = 1;
      sleep_ms(5);
      first_done = true;
    }, weft::out(arr.data(), 8));
    cx.spawn([&] { if (rv.arrive_and_wait()) ok.fetch_add(1); arr[12] = 1; }, weft::out(&arr[4], 12));
    // Same start address as the first, different length: ordered after it.
    cx.spawn([&] { ordered = first_done.load() && arr[0] == 1; }, weft::in(arr.data(), 2));
  });
  EXPECT_EQ(ok.load(), 2) << "regions with different start addresses were ordered";
  EXPECT_TRUE(ordered);
}

// in(x) + out(x) on one task merge into inout(x): it waits for preceding readers and sees the previous value.
TEST_P(AccessModesConcurrent, SeveralAccessesToOneDatumMerge) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(20, 3));
  for (int r = 0; r < rounds; ++r) {
    int x = 0;
    std::atomic<bool> reader_done{false};
    int seen = -1;
    bool waited = false;
    int final_seen = -1;
    rt.run([&](weft::Context& cx) {
      cx.spawn([&] { x = 5; }, weft::out(x));
      cx.spawn([&] {
        sleep_ms(3);
        reader_done = true;
      }, weft::in(x));
      cx.spawn([&] {
        waited = reader_done.load();
        seen = x;
        x = seen + 1;
      }, weft::in(x), weft::out(x));
      cx.spawn([&] { final_seen = x; }, weft::in(x), weft::in(x));
    });
    ASSERT_TRUE(waited) << "in(x)+out(x) did not wait for the preceding reader";
    ASSERT_EQ(seen, 5);
    ASSERT_EQ(final_seen, 6);
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, AccessModesConcurrent, testing::Values(2u, 4u), WorkersName());

}  // namespace
