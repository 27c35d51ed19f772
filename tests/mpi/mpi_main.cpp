// gtest main of the MPI tests, run by every rank under mpiexec. weft initialises MPI (MpiEnv::get(), which asks
// for MPI_THREAD_MULTIPLE) and finalises it at exit.
//
// A distributed test cannot go on once one rank has failed an assertion (the others would wait for messages
// that never come), so the first failure on any rank prints its line and ends the job (MPI_Abort): the job
// fails at once instead of hanging until the timeout. A watchdog does the same for a test that hangs.
// Only rank 0 prints gtest's progress; the other ranks print their failures.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/mpi_env.hpp"
#include "test_util.hpp"
#include "watchdog.hpp"

namespace {

class FailFast : public testing::EmptyTestEventListener {
 public:
  void OnTestStart(const testing::TestInfo& info) override {
    name_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "weft: rank %d: %s failed at %s:%d: %s\n", weft::comm::MpiEnv::get().rank(),
                 name_.c_str(), r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stderr);
    weft::comm::abort_job("ending the job: " + name_ + " failed on this rank");
  }

 private:
  std::string name_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rank = weft::comm::MpiEnv::get().rank();
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new FailFast);
  // Below the job's ctest timeout (WEFT_MPI_TEST_TIMEOUT, 300 s), so that a hang is reported by the watchdog
  // with the test's name; above poll_until's bound (weft_test::kLongWait), which names the wait.
  long secs = weft_test::kSanitized ? 240 : 120;
  if (const char* e = std::getenv("WEFT_TEST_TIMEOUT")) {
    long v = std::strtol(e, nullptr, 10);
    if (v > 0) secs = v;
  }
  listeners.Append(new weft_test::Watchdog(std::chrono::seconds(secs),
                                           [](const std::string& message) { weft::comm::abort_job(message); }));
  return RUN_ALL_TESTS();
}
