// Memory stays bounded however many tasks run: each pattern of bench/micro/memory_patterns.hpp (the patterns of
// weft-bench-memory) runs 10^6 tasks (WEFT_MEMORY_TASKS) and the resident memory may grow by at most 48 MiB
// (WEFT_MEMORY_BOUND_MIB) from after the runtime's start-up: a bound on RSS, not on time. What weft keeps per
// finished task would show as ~n * bytes; the bound leaves room for the pools of the live window (max_tasks),
// the pending tasks of the flow pattern and allocator slack.
// Skipped under sanitizers (their shadow memory and quarantine make RSS meaningless). Each TEST is one ctest
// test, i.e. one process; within one process, start() trims the heap so an earlier pattern cannot hide growth.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "../../bench/micro/memory_patterns.hpp"
#include "../common/test_util.hpp"

namespace {

long long tasks() {
  if (const char* e = std::getenv("WEFT_MEMORY_TASKS")) return static_cast<long long>(std::strtod(e, nullptr));
  return 1000000;
}
double bound_mib() {
  if (const char* e = std::getenv("WEFT_MEMORY_BOUND_MIB")) return std::strtod(e, nullptr);
  return 48.0;
}

class Memory : public testing::TestWithParam<std::tuple<std::string, unsigned>> {};

TEST_P(Memory, RssGrowthBounded) {
  if (weft_test::kSanitized) GTEST_SKIP() << "RSS is meaningless under sanitizers";
  const std::string pattern = std::get<0>(GetParam());
  const unsigned workers = std::get<1>(GetParam());
  weft::Runtime rt(weft_test::opts(workers));
  weft_memory::Sampler s;
  weft_memory::run_pattern(rt, pattern, 4096, s);  // warm-up: threads, pools, first chunks
  s.start();
  const weft_memory::Outcome o = weft_memory::run_pattern(rt, pattern, tasks(), s);
  const double growth = s.growth_mib();
  std::printf("[memory] %-11s workers=%u tasks=%lld rss_growth_mib=%.1f (%.0f B/task)\n", pattern.c_str(), workers,
              o.expected, growth, growth * 1024 * 1024 / static_cast<double>(o.expected));
  EXPECT_EQ(o.ran, o.expected);
  EXPECT_GT(o.expected, tasks() * 9 / 10);
  EXPECT_LE(growth, bound_mib()) << pattern << ": resident memory grows with the number of tasks";
}

std::string name(const testing::TestParamInfo<std::tuple<std::string, unsigned>>& info) {
  return std::string(std::get<0>(info.param)) + "_w" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Patterns, Memory,
                         testing::Combine(testing::ValuesIn(std::vector<std::string>(std::begin(weft_memory::kPatterns),
                                                                                     std::end(weft_memory::kPatterns))),
                                          testing::Values(1u, 2u)),
                         name);

// The sampler itself must see growth (so the test above can fail): 64 MiB touched after start() show.
TEST(MemorySampler, SeesGrowth) {
  if (weft_test::kSanitized) GTEST_SKIP() << "RSS is meaningless under sanitizers";
  weft_memory::Sampler s;
  s.start();
  std::vector<char> block(64u << 20, 1);
  s.sample();
  EXPECT_GE(s.growth_mib(), 60.0);
  EXPECT_EQ(block[12345], 1);
}

}  // namespace
