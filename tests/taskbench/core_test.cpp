// Task Bench core: dependence formulas against hand-worked cases, graph shape, --dump-graph output, input
// validation (corrupted inputs must fail), exactly-once checking, work counts, SipHash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/core.hpp"
#include "core/internal.hpp"

namespace tb = taskbench;
using tb::DependenceType;
using tb::Interval;
using Ivs = std::vector<Interval>;
using Points = std::vector<long>;

namespace {

tb::TaskGraph make(DependenceType type, long width, long steps = 4, long radix = 3, long period = 0,
                   double fraction = 0.25) {
  tb::TaskGraph g;
  g.dependence = type;
  g.max_width = width;
  g.timesteps = steps;
  g.radix = radix;
  g.period = period;
  g.fraction = fraction;
  return g;
}

Points inputs(const tb::TaskGraph& g, long t, long i) {
  Points v;
  g.inputs_of(t, i, v);
  return v;
}
Points consumers(const tb::TaskGraph& g, long t, long i) {
  Points v;
  g.consumers_of(t, i, v);
  return v;
}

// Mirror property on live points: p is an input of (t+1, j) exactly when j is a consumer of (t, p).
void expect_mirror(const tb::TaskGraph& g) {
  Points in, out;
  for (long t = 0; t + 1 < g.timesteps; ++t) {
    const long o = g.offset_at_timestep(t), w = g.width_at_timestep(t);
    const long o1 = g.offset_at_timestep(t + 1), w1 = g.width_at_timestep(t + 1);
    for (long p = o; p < o + w; ++p) {
      g.consumers_of(t, p, out);
      for (long j = o1; j < o1 + w1; ++j) {
        g.inputs_of(t + 1, j, in);
        const bool is_input = std::find(in.begin(), in.end(), p) != in.end();
        const bool is_consumer = std::find(out.begin(), out.end(), j) != out.end();
        EXPECT_EQ(is_input, is_consumer) << tb::name_of(g.dependence) << " t " << t << " p " << p << " j " << j;
      }
    }
  }
}

std::string dump(const tb::TaskGraph& g) {
  char* buf = nullptr;
  std::size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  tb::dump_graph(g, f);
  std::fclose(f);
  std::string s(buf, size);
  std::free(buf);
  return s;
}

}  // namespace

TEST(Dependencies, TrivialAndNoComm) {
  auto g = make(DependenceType::trivial, 4);
  EXPECT_EQ(g.dependencies(0, 2), Ivs{});
  EXPECT_EQ(g.reverse_dependencies(0, 2), Ivs{});
  EXPECT_EQ(inputs(g, 1, 2), Points{});
  g = make(DependenceType::no_comm, 4);
  EXPECT_EQ(g.dependencies(0, 2), (Ivs{{2, 2}}));
  EXPECT_EQ(g.reverse_dependencies(0, 3), (Ivs{{3, 3}}));
  EXPECT_EQ(inputs(g, 0, 2), Points{});  // no inputs at t = 0
  EXPECT_EQ(inputs(g, 3, 2), Points{2});
  EXPECT_EQ(consumers(g, 3, 2), Points{});  // none at the last timestep
}

TEST(Dependencies, Stencil1dBoundaries) {
  auto g = make(DependenceType::stencil_1d, 4);
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 1}}));
  EXPECT_EQ(g.dependencies(0, 2), (Ivs{{1, 3}}));
  EXPECT_EQ(g.dependencies(0, 3), (Ivs{{2, 3}}));
  EXPECT_EQ(g.reverse_dependencies(0, 3), (Ivs{{2, 3}}));
  g = make(DependenceType::stencil_1d, 1);
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 0}}));
  EXPECT_NO_THROW(g.check());
}

TEST(Dependencies, Stencil1dPeriodicWrapsAround) {
  auto g = make(DependenceType::stencil_1d_periodic, 5);
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 1}, {4, 4}}));
  EXPECT_EQ(g.dependencies(0, 4), (Ivs{{3, 4}, {0, 0}}));
  EXPECT_EQ(g.dependencies(0, 2), (Ivs{{1, 3}}));
  EXPECT_EQ(inputs(g, 1, 0), (Points{0, 1, 4}));  // the order the task checks them
  EXPECT_EQ(consumers(g, 0, 4), (Points{0, 3, 4}));  // ascending
  EXPECT_NO_THROW(make(DependenceType::stencil_1d_periodic, 3).check());
  // Width 2: point 0's neighbour on both sides is point 1, so the list would repeat it.
  EXPECT_THROW(make(DependenceType::stencil_1d_periodic, 2).check(), std::invalid_argument);
}

TEST(Dependencies, DomShapeAndClipping) {
  auto g = make(DependenceType::dom, 4, 6);
  const long offsets[] = {0, 0, 0, 1, 2, 3}, widths[] = {1, 2, 3, 3, 2, 1};
  for (long t = 0; t < 6; ++t) {
    EXPECT_EQ(g.offset_at_timestep(t), offsets[t]) << t;
    EXPECT_EQ(g.width_at_timestep(t), widths[t]) << t;
  }
  EXPECT_EQ(g.offset_at_timestep(-1), 0);
  EXPECT_EQ(g.width_at_timestep(-1), 0);
  EXPECT_EQ(g.width_at_timestep(6), 0);
  EXPECT_EQ(g.dependencies(0, 2), (Ivs{{1, 2}}));
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 0}}));
  EXPECT_EQ(g.reverse_dependencies(0, 1), (Ivs{{1, 2}}));
  EXPECT_EQ(g.reverse_dependencies(0, 3), (Ivs{{3, 3}}));
  EXPECT_EQ(inputs(g, 1, 1), Points{0});        // point 1 is not live at t = 0
  EXPECT_EQ(inputs(g, 3, 1), (Points{0, 1}));
  EXPECT_EQ(inputs(g, 5, 3), (Points{2, 3}));
  EXPECT_EQ(consumers(g, 2, 0), Points{1});     // point 0 is not live at t = 3
  EXPECT_EQ(consumers(g, 0, 0), (Points{0, 1}));
  expect_mirror(g);
}

TEST(Dependencies, TreeShapeAndBoundary) {
  auto g = make(DependenceType::tree, 5, 5);
  const long widths[] = {1, 2, 4, 5, 5};
  for (long t = 0; t < 5; ++t) EXPECT_EQ(g.width_at_timestep(t), widths[t]) << t;
  EXPECT_EQ(make(DependenceType::tree, 1L << 40, 100).width_at_timestep(99), 1L << 40);  // no 2^t overflow
  EXPECT_EQ(g.dependencies(0, 3), (Ivs{{1, 1}}));
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 0}}));
  EXPECT_EQ(g.reverse_dependencies(0, 1), (Ivs{{2, 3}}));
  EXPECT_EQ(g.reverse_dependencies(0, 2), (Ivs{{4, 4}}));  // only 2i < W
  EXPECT_EQ(g.reverse_dependencies(0, 3), Ivs{});          // 2i >= W
  EXPECT_EQ(consumers(g, 1, 1), (Points{2, 3}));
  EXPECT_EQ(consumers(g, 2, 2), Points{4});
  EXPECT_EQ(inputs(g, 3, 4), Points{2});
  expect_mirror(g);
}

TEST(Dependencies, FftSetsAndBoundaries) {
  auto g = make(DependenceType::fft, 8, 7);
  EXPECT_EQ(g.max_dependence_sets(), 3);
  const long sets[] = {2, 0, 1, 2, 0, 1, 2};  // (t + K - 1) mod K, K = 3
  for (long t = 0; t < 7; ++t) EXPECT_EQ(g.dependence_set_at_timestep(t), sets[t]) << t;
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 0}, {1, 1}}));
  EXPECT_EQ(g.dependencies(0, 7), (Ivs{{6, 6}, {7, 7}}));
  EXPECT_EQ(g.dependencies(1, 6), (Ivs{{4, 4}, {6, 6}}));
  EXPECT_EQ(g.dependencies(2, 3), (Ivs{{3, 3}, {7, 7}}));
  EXPECT_EQ(g.dependencies(2, 5), (Ivs{{1, 1}, {5, 5}}));
  EXPECT_EQ(g.dependencies(1, 3), (Ivs{{1, 1}, {3, 3}, {5, 5}}));
  EXPECT_EQ(inputs(g, 2, 3), (Points{1, 3, 5}));  // t = 2 uses set 1
  // Width not a power of two: K = ceil(log2 5) = 3, and the largest stride reaches across.
  auto h = make(DependenceType::fft, 5, 4);
  EXPECT_EQ(h.max_dependence_sets(), 3);
  EXPECT_EQ(h.dependencies(2, 4), (Ivs{{0, 0}, {4, 4}}));
  EXPECT_EQ(h.dependencies(2, 1), (Ivs{{1, 1}}));  // 1 + 4 is past the last point
  EXPECT_NO_THROW(h.check());
  auto two = make(DependenceType::fft, 2, 3);
  EXPECT_EQ(two.max_dependence_sets(), 1);
  EXPECT_EQ(two.dependencies(0, 0), (Ivs{{0, 0}, {1, 1}}));
  EXPECT_THROW(make(DependenceType::fft, 1).check(), std::invalid_argument);
  expect_mirror(g);
  expect_mirror(h);
}

TEST(Dependencies, AllToAll) {
  auto g = make(DependenceType::all_to_all, 3);
  EXPECT_EQ(g.dependencies(0, 1), (Ivs{{0, 2}}));
  EXPECT_EQ(g.reverse_dependencies(0, 2), (Ivs{{0, 2}}));
  EXPECT_EQ(inputs(g, 1, 0), (Points{0, 1, 2}));
}

TEST(Dependencies, NearestRadixAndLargeRadix) {
  auto g = make(DependenceType::nearest, 10, 4, 5);
  EXPECT_EQ(g.dependencies(0, 4), (Ivs{{2, 6}}));
  EXPECT_EQ(g.reverse_dependencies(0, 4), (Ivs{{2, 6}}));
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 2}}));
  EXPECT_EQ(g.dependencies(0, 9), (Ivs{{7, 9}}));
  g.radix = 4;  // even radix: one more point on the left for dependencies, on the right for reverse ones
  EXPECT_EQ(g.dependencies(0, 4), (Ivs{{2, 5}}));
  EXPECT_EQ(g.reverse_dependencies(0, 4), (Ivs{{3, 6}}));
  g.radix = 1;
  EXPECT_EQ(g.dependencies(0, 4), (Ivs{{4, 4}}));
  g.radix = 0;
  EXPECT_EQ(g.dependencies(0, 4), Ivs{});
  EXPECT_EQ(g.reverse_dependencies(0, 4), Ivs{});
  auto big = make(DependenceType::nearest, 6, 4, 100);  // radix > width: clipped to the graph
  EXPECT_EQ(big.dependencies(0, 3), (Ivs{{0, 5}}));
  EXPECT_NO_THROW(big.check());
  g.radix = 4;
  expect_mirror(g);
}

TEST(Dependencies, SpreadFormulaAndRules) {
  auto g = make(DependenceType::spread, 10, 4, 3, 3);
  EXPECT_EQ(g.dependencies(0, 0), (Ivs{{0, 0}, {3, 3}, {6, 6}}));
  EXPECT_EQ(g.dependencies(1, 0), (Ivs{{0, 0}, {4, 4}, {7, 7}}));
  EXPECT_EQ(g.dependencies(1, 8), (Ivs{{8, 8}, {2, 2}, {5, 5}}));  // wraps around
  EXPECT_EQ(g.reverse_dependencies(1, 2), (Ivs{{2, 2}, {8, 8}, {5, 5}}));
  EXPECT_EQ(inputs(g, 1, 8), (Points{8, 2, 5}));  // spec order, not sorted
  EXPECT_EQ(consumers(g, 0, 2), (Points{2, 5, 8}));
  EXPECT_NO_THROW(g.check());
  g.period = 4;  // ceil(10 / 3) = 4
  EXPECT_NO_THROW(g.check());
  g.period = 5;
  EXPECT_THROW(g.check(), std::invalid_argument);
  EXPECT_THROW(make(DependenceType::spread, 4, 4, 5, 1).check(), std::invalid_argument);  // radix > width
  EXPECT_THROW(make(DependenceType::spread, 4, 4, 0, 1).check(), std::invalid_argument);
  EXPECT_THROW(make(DependenceType::spread, 4, 4, 2, 0).check(), std::invalid_argument);  // needs a period
  EXPECT_THROW(make(DependenceType::stencil_1d, 4, 4, 3, 1).check(), std::invalid_argument);  // takes none
  expect_mirror(make(DependenceType::spread, 10, 6, 3, 3));
}

TEST(Dependencies, RandomNearestFollowsTheHash) {
  auto g = make(DependenceType::random_nearest, 12, 6, 5, 3, 0.5);
  g.graph_index = 1;
  for (long d = 0; d < 3; ++d) {
    for (long i = 0; i < 12; ++i) {
      Ivs want;
      for (long j = std::max(0L, i - 2); j <= std::min(i + 2, 11L); ++j) {
        const std::int64_t v[5] = {1, 5, d, j, i};
        if (j == i || tb::hash_uniform(v, 5) < 0.5) want.push_back({j, j});
      }
      EXPECT_EQ(g.dependencies(d, i), want) << d << " " << i;
    }
  }
  EXPECT_NO_THROW(g.check());
  expect_mirror(g);
  // Deterministic: a second graph with the same parameters has the same edges; another graph index differs.
  auto same = g;
  auto other = g;
  other.graph_index = 2;
  bool differs = false;
  for (long d = 0; d < 3; ++d)
    for (long i = 0; i < 12; ++i) {
      EXPECT_EQ(same.dependencies(d, i), g.dependencies(d, i));
      differs = differs || other.dependencies(d, i) != g.dependencies(d, i);
    }
  EXPECT_TRUE(differs);
  // Fraction 0 keeps only the point itself; fraction 1 keeps the whole nearest window.
  g.fraction = 0;
  EXPECT_EQ(g.dependencies(0, 5), (Ivs{{5, 5}}));
  g.fraction = 1;
  EXPECT_EQ(g.dependencies(0, 5), (Ivs{{3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}}));
  g.radix = 0;
  EXPECT_EQ(g.dependencies(0, 5), Ivs{});
}

TEST(Dependencies, RandomNearestDependsOnTheSet) {
  // Over several sets, some window point must be kept in one set and dropped in another (else the set would
  // not enter the hash).
  auto g = make(DependenceType::random_nearest, 16, 4, 7, 4, 0.5);
  bool differs = false;
  for (long i = 0; i < 16; ++i) differs = differs || g.dependencies(0, i) != g.dependencies(1, i);
  EXPECT_TRUE(differs);
}

TEST(Hash, SipHashReferenceVectors) {
  // SipHash-2-4 test vectors of the reference implementation: key 00 01 .. 0f, message 00 01 .. (n-1).
  unsigned char key[16], msg[16];
  for (int k = 0; k < 16; ++k) key[k] = static_cast<unsigned char>(k), msg[k] = static_cast<unsigned char>(k);
  EXPECT_EQ(tb::siphash24(msg, 0, key), 0x726fdb47dd0e0e31ULL);
  EXPECT_EQ(tb::siphash24(msg, 1, key), 0x74f839c593dc67fdULL);
  EXPECT_EQ(tb::siphash24(msg, 8, key), 0x93f5f5799a932462ULL);
}

TEST(Hash, UniformIsInUnitIntervalAndKeyed) {
  const std::int64_t v[3] = {0, 7, -3};
  const double u = tb::hash_uniform(v, 3);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
  unsigned char bytes[24];
  for (int k = 0; k < 3; ++k)  // little-endian, as the spec says
    for (int b = 0; b < 8; ++b)
      bytes[8 * k + b] = static_cast<unsigned char>(static_cast<std::uint64_t>(v[k]) >> (8 * b));
  const unsigned char key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0};
  EXPECT_EQ(u, static_cast<double>(tb::siphash24(bytes, 24, key)) * 0x1p-64);
}

TEST(Check, EveryTypeAtSmallWidthsPassesOrFailsClearly) {
  // The start-up check (no repeated point, exact mirror) passes for every type where the spec's formulas are
  // consistent; only the documented inconsistent cases are rejected.
  const DependenceType all[] = {DependenceType::trivial,    DependenceType::no_comm, DependenceType::stencil_1d,
                                DependenceType::dom,        DependenceType::tree,    DependenceType::all_to_all,
                                DependenceType::nearest,    DependenceType::random_nearest};
  for (auto type : all)
    for (long w = 1; w <= 9; ++w) {
      const long period = type == DependenceType::random_nearest ? 3 : 0;
      EXPECT_NO_THROW(make(type, w, 5, 4, period, 0.5).check()) << tb::name_of(type) << " width " << w;
    }
  for (long w = 2; w <= 9; ++w) EXPECT_NO_THROW(make(DependenceType::fft, w, 5).check()) << w;
  for (long w = 3; w <= 9; ++w) EXPECT_NO_THROW(make(DependenceType::stencil_1d_periodic, w).check()) << w;
  for (long w = 1; w <= 9; ++w)
    for (long r = 1; r <= w; ++r)
      EXPECT_NO_THROW(make(DependenceType::spread, w, 5, r, (w + r - 1) / r).check()) << w << " " << r;
}

TEST(DumpGraph, StencilGolden) {
  auto g = make(DependenceType::stencil_1d, 4, 3);
  EXPECT_EQ(dump(g),
            "graph 0\n"
            "0 0 : | 0 1\n"
            "0 1 : | 0 1 2\n"
            "0 2 : | 1 2 3\n"
            "0 3 : | 2 3\n"
            "1 0 : 0 1 | 0 1\n"
            "1 1 : 0 1 2 | 0 1 2\n"
            "1 2 : 1 2 3 | 1 2 3\n"
            "1 3 : 2 3 | 2 3\n"
            "2 0 : 0 1 |\n"
            "2 1 : 0 1 2 |\n"
            "2 2 : 1 2 3 |\n"
            "2 3 : 2 3 |\n");
}

TEST(DumpGraph, DomAndTreeAndPeriodicGolden) {
  auto dom = make(DependenceType::dom, 3, 4);
  dom.graph_index = 1;
  EXPECT_EQ(dump(dom),
            "graph 1\n"
            "0 0 : | 0 1\n"
            "1 0 : 0 | 1\n"
            "1 1 : 0 | 1 2\n"
            "2 1 : 0 1 | 2\n"
            "2 2 : 1 | 2\n"
            "3 2 : 1 2 |\n");
  EXPECT_EQ(dump(make(DependenceType::tree, 3, 3)),
            "graph 0\n"
            "0 0 : | 0 1\n"
            "1 0 : 0 | 0 1\n"
            "1 1 : 0 | 2\n"
            "2 0 : 0 |\n"
            "2 1 : 0 |\n"
            "2 2 : 1 |\n");
  EXPECT_EQ(dump(make(DependenceType::stencil_1d_periodic, 3, 2)),
            "graph 0\n"
            "0 0 : | 0 1 2\n"
            "0 1 : | 0 1 2\n"
            "0 2 : | 0 1 2\n"
            "1 0 : 0 1 2 |\n"
            "1 1 : 0 1 2 |\n"
            "1 2 : 0 1 2 |\n");
}

// --- validation ----------------------------------------------------------------------------------------------

namespace {

struct Record {
  std::int64_t t, p;
};

// Runs task (t, i) of g with correct inputs (records (t-1, p)), except that `corrupt` may alter them first.
template <class Corrupt>
void run_task(const tb::TaskGraph& g, long t, long i, Corrupt&& corrupt) {
  Points pts;
  g.inputs_of(t, i, pts);
  std::vector<std::vector<Record>> bufs;
  for (long p : pts) bufs.emplace_back(g.output_bytes / 16, Record{t - 1, p});
  std::vector<const char*> ptrs;
  std::vector<std::size_t> sizes;
  for (auto& b : bufs) {
    ptrs.push_back(reinterpret_cast<const char*>(b.data()));
    sizes.push_back(g.output_bytes);
  }
  std::size_t n = ptrs.size();
  corrupt(bufs, sizes, n);
  std::vector<Record> out(g.output_bytes / 16, Record{-1, -1});
  g.execute_point(t, i, reinterpret_cast<char*>(out.data()), g.output_bytes, ptrs.data(), sizes.data(), n,
                  nullptr, 0);
  for (const Record& r : out) {
    EXPECT_EQ(r.t, t);
    EXPECT_EQ(r.p, i);
  }
}

auto no_corruption = [](auto&, auto&, std::size_t&) {};

}  // namespace

TEST(Validation, CorrectInputsPassAndFillTheOutput) {
  auto g = make(DependenceType::stencil_1d, 4, 3);
  g.output_bytes = 64;
  run_task(g, 1, 1, no_corruption);
  run_task(g, 0, 3, no_corruption);
}

TEST(ValidationDeathTest, WrongRecordNamesTaskInputAndRecords) {
  auto g = make(DependenceType::stencil_1d, 4, 3);
  g.output_bytes = 48;
  EXPECT_EXIT(run_task(g, 2, 1, [](auto& bufs, auto&, std::size_t&) { bufs[2][1] = Record{1, 3}; }),
              testing::ExitedWithCode(1),
              "validation failed: graph 0, task \\(t 2, point 1\\): input 2, record 1: expected \\(1, 2\\), "
              "received \\(1, 3\\)");
  EXPECT_EXIT(run_task(g, 2, 1, [](auto& bufs, auto&, std::size_t&) { bufs[0][0].t = 0; }),
              testing::ExitedWithCode(1), "input 0, record 0: expected \\(1, 0\\), received \\(0, 0\\)");
}

TEST(ValidationDeathTest, MissingExtraOrShortInputs) {
  auto g = make(DependenceType::stencil_1d, 4, 3);
  EXPECT_EXIT(run_task(g, 1, 1, [](auto&, auto&, std::size_t& n) { n = 2; }), testing::ExitedWithCode(1),
              "task \\(t 1, point 1\\): input 2 \\(from point 2 at timestep 0\\) is missing: got 2 inputs, "
              "expected 3");
  EXPECT_EXIT(run_task(g, 1, 0, [](auto& bufs, auto& sizes, std::size_t& n) {
                bufs.emplace_back(1, Record{0, 2});
                sizes.push_back(16);
                n = 3;
              }),
              testing::ExitedWithCode(1), "task \\(t 1, point 0\\): received 3 inputs, expected 2");
  EXPECT_EXIT(run_task(g, 1, 1, [](auto&, auto& sizes, std::size_t&) { sizes[1] = 8; }),
              testing::ExitedWithCode(1), "input 1 \\(from point 1\\) has 8 bytes, expected 16");
}

TEST(ValidationDeathTest, ScratchAndTaskRange) {
  auto g = make(DependenceType::trivial, 4, 3);
  g.scratch_bytes = 64;
  std::vector<char> scratch(64, 0), out(16);
  EXPECT_EXIT(g.execute_point(0, 0, out.data(), 16, nullptr, nullptr, 0, scratch.data(), 64),
              testing::ExitedWithCode(1), "scratch buffer starts with 0x0, expected 0x5c4a7c8b");
  tb::TaskGraph::prepare_scratch(scratch.data(), scratch.size());
  g.execute_point(0, 0, out.data(), 16, nullptr, nullptr, 0, scratch.data(), 64);
  EXPECT_EXIT(g.execute_point(3, 0, out.data(), 16, nullptr, nullptr, 0, scratch.data(), 64),
              testing::ExitedWithCode(1), "task \\(t 3, point 0\\) is not a task of the graph");
}

TEST(ValidationDeathTest, TaskRunTwiceOrNeverIsReported) {
  char arg0[] = "taskbench", a1[] = "-steps", a2[] = "2", a3[] = "-width", a4[] = "2";
  char* argv[] = {arg0, a1, a2, a3, a4};
  tb::App app(5, argv);
  const tb::TaskGraph& g = app.graphs[0];
  g.execute_point(0, 0, std::vector<char>(16).data(), 16, nullptr, nullptr, 0, nullptr, 0);
  EXPECT_EXIT(g.execute_point(0, 0, std::vector<char>(16).data(), 16, nullptr, nullptr, 0, nullptr, 0),
              testing::ExitedWithCode(1), "graph 0, task \\(t 0, point 0\\) ran more than once");
  EXPECT_EXIT(app.report_timing(1.0), testing::ExitedWithCode(1),
              "graph 0, task \\(t 0, point 1\\) ran 0 times, expected once");
  // Marks gathered from elsewhere (as an MPI rank would) count too.
  auto marks = g.run_marks();
  EXPECT_EQ(marks, (std::vector<unsigned char>{1, 0, 0, 0}));
  app.graphs[0].set_run_marks({1, 1, 1, 1});
  long t, p;
  unsigned c;
  EXPECT_FALSE(app.graphs[0].first_unrun_task(t, p, c));
}

TEST(ValidationDeathTest, FailureHandlerEndsTheRunInstead) {
  // What a multi-process implementation installs: its own message and its own way out (MPI_Abort there).
  auto g = make(DependenceType::stencil_1d, 4, 3);
  auto in_child = [&](auto&& fail) {
    tb::set_failure_handler([](const char* message) {
      std::fprintf(stderr, "handler: %s\n", message);
      std::_Exit(3);
    });
    fail();
  };
  EXPECT_EXIT(in_child([&] { run_task(g, 2, 1, [](auto& bufs, auto&, std::size_t&) { bufs[1][0].p = 7; }); }),
              testing::ExitedWithCode(3),
              "handler: validation failed: graph 0, task \\(t 2, point 1\\): input 1, record 0: expected "
              "\\(1, 1\\), received \\(1, 7\\)");
  char arg0[] = "taskbench", a1[] = "-steps", a2[] = "2";
  char* argv[] = {arg0, a1, a2};
  tb::App app(3, argv);
  EXPECT_EXIT(in_child([&] { app.report_timing(1.0); }), testing::ExitedWithCode(3),
              "handler: validation failed: graph 0, task \\(t 0, point 0\\) ran 0 times, expected once");
}

// --- work counts -----------------------------------------------------------------------------------------------

TEST(Counts, TasksDependenciesAndLocality) {
  auto g = make(DependenceType::stencil_1d, 4, 3);
  const auto all = tb::count_dependencies(g, 0);
  EXPECT_EQ(all.total, 20);  // (2 + 3 + 3 + 2) per step after the first
  const auto two = tb::count_dependencies(g, 2);
  EXPECT_EQ(two.total, 20);
  EXPECT_EQ(two.local, 16);  // points {0,1} and {2,3}: 1->2 and 2->1 cross, per step
  const auto dom = tb::count_dependencies(make(DependenceType::dom, 3, 4), 0);
  EXPECT_EQ(dom.total, 1 + 1 + 2 + 1 + 2);
  const auto tree = tb::count_dependencies(make(DependenceType::tree, 5, 4), 0);
  EXPECT_EQ(tree.total, 2 + 4 + 5);
}

TEST(Counts, KernelWork) {
  auto g = make(DependenceType::trivial, 4);
  g.kernel = {tb::KernelType::compute_bound, 10, 16, 0};
  EXPECT_EQ(g.flops_of(0, 0), 2 * 64 * 10 + 64);
  g.kernel = {tb::KernelType::compute_bound2, 10, 16, 0};
  EXPECT_EQ(g.flops_of(0, 0), 2 * 32 * 10);
  g.kernel = {tb::KernelType::memory_bound, 3, 4, 0};
  g.scratch_bytes = 256;
  EXPECT_EQ(g.bytes_of(0, 0), 256 * 3 / 4);
  g.kernel = {tb::KernelType::load_imbalance, 1000, 16, 0};
  EXPECT_EQ(g.flops_of(1, 2), 2 * 64 * 1000 + 64);  // no imbalance: exactly iter
  g.kernel.imbalance = 1;
  long lo = 1L << 40, hi = 0;
  for (long i = 0; i < 4; ++i)
    for (long t = 0; t < 4; ++t) {
      const long its = tb::imbalanced_iterations(g, t, i);
      const std::int64_t v[3] = {0, t, i};
      EXPECT_EQ(its, std::lround((1 + (tb::hash_uniform(v, 3) - 0.5)) * 1000.0));
      lo = std::min(lo, its);
      hi = std::max(hi, its);
    }
  EXPECT_GE(lo, 500);
  EXPECT_LE(hi, 1500);
  EXPECT_LT(lo, hi);
}

TEST(Kernels, EveryKernelRunsAndKeepsScratchValid) {
  for (auto k : {tb::KernelType::empty, tb::KernelType::busy_wait, tb::KernelType::compute_bound,
                 tb::KernelType::compute_bound2, tb::KernelType::load_imbalance, tb::KernelType::memory_bound}) {
    auto g = make(DependenceType::no_comm, 2, 3);
    g.kernel = {k, 5, 4, 1.5};
    g.scratch_bytes = 128;
    ASSERT_NO_THROW(g.check()) << tb::name_of(k);
    tb::OutputBuffers bufs(g, 2);
    tb::TaskRunner runner(g.scratch_bytes);
    for (long t = 0; t < 3; ++t)
      for (long i = 0; i < 2; ++i) runner.run(g, bufs, t, i);  // exits on a validation failure
    Record r;
    std::memcpy(&r, bufs.get(2, 1), 16);
    EXPECT_EQ(r.t, 2);
    EXPECT_EQ(r.p, 1);
  }
}

// --- BLAS kernels (spec section 4) ------------------------------------------------------------------------------

TEST(BlasKernels, DgemmAddsTheProductOfTheFirstTwoMatricesToTheThird) {
  if (!tb::blas_available()) GTEST_SKIP() << "built without OpenBLAS: the BLAS kernels are refused";
  constexpr long n = 5;
  auto g = make(DependenceType::trivial, 1, 1);
  g.kernel = {tb::KernelType::compute_dgemm, 3, 16, 0};
  g.scratch_bytes = 24 * n * n + 23;  // rounded down to order 5
  ASSERT_EQ(tb::matrix_order(g.scratch_bytes), n);
  std::vector<double> m(g.scratch_bytes / sizeof(double) + 1, -7.0);  // beyond the three matrices: untouched
  double *a = m.data(), *b = a + n * n, *c = b + n * n;
  for (long i = 0; i < n; ++i)
    for (long j = 0; j < n; ++j) {
      a[i * n + j] = static_cast<double>(i + 2 * j);  // row-major, not symmetric: a transposed layout would fail
      b[i * n + j] = i == j ? 2.0 : (j == 0 ? 1.0 : 0.0);
      c[i * n + j] = 1.0;
    }
  tb::run_kernel(g, 0, 0, reinterpret_cast<char*>(m.data()));
  for (long i = 0; i < n; ++i)
    for (long j = 0; j < n; ++j) {
      double ab = 0;
      for (long k = 0; k < n; ++k) ab += a[i * n + k] * b[k * n + j];
      EXPECT_EQ(c[i * n + j], 1.0 + 3 * ab) << "C(" << i << ", " << j << ") after 3 iterations of C = AB + C";
    }
  for (std::size_t k = 3 * n * n; k < m.size(); ++k) EXPECT_EQ(m[k], -7.0) << "word " << k << " is not C's";
}

TEST(BlasKernels, DaxpyWalksTheSlicesAsMemoryBoundDoes) {
  if (!tb::blas_available()) GTEST_SKIP() << "built without OpenBLAS: the BLAS kernels are refused";
  auto g = make(DependenceType::trivial, 1, 4);
  g.kernel = {tb::KernelType::memory_daxpy, 3, 4, 0};
  g.scratch_bytes = 4 * 72;  // slices of 72 bytes, rounded down to 64: x and y of 4 doubles each
  std::vector<double> m(g.scratch_bytes / sizeof(double));
  for (std::size_t k = 0; k < m.size(); ++k) m[k] = static_cast<double>(k);
  const std::vector<double> before = m;
  // Timestep 1 starts at slice (1 * 3) mod 4 = 3 and wraps: slices 3, 0, 1 get y = x + y; slice 2 is left alone,
  // and so are the 32 bytes past the four rounded slices.
  tb::run_kernel(g, 1, 0, reinterpret_cast<char*>(m.data()));
  for (std::size_t w = 0; w < m.size(); ++w) {
    const std::size_t slice = w / 8, k = w % 8;
    const bool walked = slice < 4 && slice != 2;
    const double want = walked && k >= 4 ? before[w] + before[w - 4] : before[w];
    EXPECT_EQ(m[w], want) << "slice " << slice << ", double " << k;
  }
}

TEST(BlasKernels, TasksValidateKeepTheScratchAndCountTheirWork) {
  if (!tb::blas_available()) GTEST_SKIP() << "built without OpenBLAS: the BLAS kernels are refused";
  for (auto k : {tb::KernelType::compute_dgemm, tb::KernelType::memory_daxpy}) {
    auto g = make(DependenceType::stencil_1d, 3, 4);
    g.kernel = {k, 2, 4, 0};
    g.scratch_bytes = 24 * 8 * 8;  // order 8; daxpy: 4 slices of 384 bytes
    g.output_bytes = 32;
    ASSERT_NO_THROW(g.check()) << tb::name_of(k);
    tb::OutputBuffers bufs(g, 2);
    tb::TaskRunner runner(g.scratch_bytes);
    for (long t = 0; t < 4; ++t)
      for (long i = 0; i < 3; ++i) runner.run(g, bufs, t, i);  // exits on a validation failure (scratch included)
    Record r;
    std::memcpy(&r, bufs.get(3, 2), 16);
    EXPECT_EQ(r.t, 3);
    EXPECT_EQ(r.p, 2);
  }
  auto g = make(DependenceType::trivial, 2);
  g.scratch_bytes = 24 * 8 * 8;
  g.kernel = {tb::KernelType::compute_dgemm, 3, 4, 0};
  EXPECT_EQ(g.flops_of(1, 1), 2 * 8 * 8 * 8 * 3);
  EXPECT_EQ(g.bytes_of(1, 1), 0);
  g.kernel = {tb::KernelType::memory_daxpy, 3, 4, 0};
  EXPECT_EQ(g.flops_of(1, 1), 0);
  EXPECT_EQ(g.bytes_of(1, 1), 24 * 8 * 8 * 3 / 4);
}

TEST(BlasKernels, BadSizesAreRefusedClearly) {
  auto g = make(DependenceType::trivial, 2);
  g.kernel = {tb::KernelType::compute_dgemm, 1, 16, 0};
  g.scratch_bytes = 23;
  EXPECT_THROW(g.check(), std::invalid_argument);
  g.scratch_bytes = 24;
  EXPECT_NO_THROW(g.check());
  g.scratch_bytes = std::size_t{1} << 36;  // order 53509: 2 N^3 x 2^40 iterations overflows
  g.kernel.iterations = 1L << 40;
  EXPECT_THROW(g.check(), std::invalid_argument);
  g.kernel = {tb::KernelType::memory_daxpy, 1, 4, 0};
  g.scratch_bytes = 63;  // slices of 15 bytes
  EXPECT_THROW(g.check(), std::invalid_argument);
  g.kernel.samples = 0;
  g.scratch_bytes = 64;
  EXPECT_THROW(g.check(), std::invalid_argument);
  g.kernel.samples = 4;
  EXPECT_NO_THROW(g.check());
}

// --- -field: output buffers per point ------------------------------------------------------------------------

TEST(Fields, GivenFieldsOverrideTheImplementationsDepthUpToTheSteps) {
  auto g = make(DependenceType::stencil_1d, 4, 10);
  EXPECT_EQ(g.output_fields(2), 2);  // not given
  EXPECT_EQ(g.output_fields(7), 7);
  g.fields = 3;
  EXPECT_EQ(g.output_fields(2), 3);
  EXPECT_EQ(g.output_fields(7), 3);
  g.fields = 25;
  EXPECT_EQ(g.output_fields(2), 10);  // buffers past the last timestep would never be written
}

TEST(Fields, BuffersPerPointAreTheFieldsAndRotateWithTheTimestep) {
  auto g = make(DependenceType::stencil_1d, 5, 12);
  g.output_bytes = 80;  // 128-byte stride (64-byte aligned)
  for (long f : {2L, 3L, 5L}) {
    g.fields = f;
    const tb::OutputBuffers b(g, g.output_fields(2));
    EXPECT_EQ(b.generations(), f);
    EXPECT_EQ(b.point_stride(), static_cast<std::size_t>(f) * 128);  // the footprint: f buffers per point
    for (long p = 0; p < 5; ++p)
      for (long t = 0; t + f < 12; ++t) {
        EXPECT_EQ(b.get(t, p), b.get(t + f, p)) << "t " << t << " is rewritten f steps later";
        for (long d = 1; d < f; ++d) EXPECT_NE(b.get(t, p), b.get(t + d, p)) << "f " << f << " t " << t << " d " << d;
      }
  }
}

TEST(Fields, OneFieldOnlyWithoutDependencies) {
  for (auto type : {DependenceType::trivial, DependenceType::stencil_1d, DependenceType::no_comm,
                    DependenceType::tree, DependenceType::nearest}) {
    auto g = make(type, 4, 6);
    g.fields = 1;
    if (type == DependenceType::trivial)
      EXPECT_NO_THROW(g.check());
    else
      EXPECT_THROW(g.check(), std::invalid_argument) << tb::name_of(type);
    g.fields = 2;
    EXPECT_NO_THROW(g.check()) << tb::name_of(type);
  }
  auto radix0 = make(DependenceType::nearest, 4, 6, 0);
  radix0.fields = 1;
  EXPECT_NO_THROW(radix0.check());
  auto one_step = make(DependenceType::stencil_1d, 4, 1);
  one_step.fields = 1;
  EXPECT_NO_THROW(one_step.check());
}

// Why -field 1 is refused: a timestep that rewrites the buffers the same timestep still reads fails validation.
TEST(FieldsDeathTest, OneBufferPerPointFailsTheValidationOfAStencil) {
  auto g = make(DependenceType::stencil_1d, 3, 3);
  tb::OutputBuffers one(g, 1), two(g, 2);
  tb::TaskRunner runner;
  for (long t = 0; t < 3; ++t)
    for (long i = 0; i < 3; ++i) runner.run(g, two, t, i);
  EXPECT_EXIT(
      {
        for (long t = 0; t < 3; ++t)
          for (long i = 0; i < 3; ++i) runner.run(g, one, t, i);
      },
      testing::ExitedWithCode(1), "task \\(t 1, point 1\\): input 0, record 0: expected \\(0, 0\\), received \\(1, 0\\)");
}
