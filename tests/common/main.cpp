// gtest main for the weft tests: a per-test watchdog turns a hang into a failure with the test's name
// (WEFT_TEST_TIMEOUT seconds, default 240, 600 under sanitizers), and death tests use the "threadsafe"
// style because the runtime starts threads.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "test_util.hpp"
#include "watchdog.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Far above any test's time on a quiet machine (the longest, the differential tests, take about 7 s, and 55-60 s
  // while a build keeps both cores busy), below ctest's own timeout (tests/CMakeLists.txt).
  long secs = weft_test::kSanitized ? 600 : 240;
  if (const char* e = std::getenv("WEFT_TEST_TIMEOUT")) {
    long v = std::strtol(e, nullptr, 10);
    if (v > 0) secs = v;
  }
  testing::UnitTest::GetInstance()->listeners().Append(
      new weft_test::Watchdog(std::chrono::seconds(secs), [](const std::string& message) {
        std::fprintf(stderr, "\n%s; aborting\n", message.c_str());
        std::fflush(stderr);
        std::abort();
      }));
  return RUN_ALL_TESTS();
}
