// gtest main of the MPI tests, run by every rank under mpiexec. weft initialises MPI (MpiEnv::get(), which asks
// for MPI_THREAD_MULTIPLE) and finalises it at exit.
//
// A distributed test cannot go on once one rank has failed an assertion (the others would wait for messages
// that never come), so the first failure on any rank prints its line and ends the job (MPI_Abort): the job
// fails at once instead of hanging until the timeout. A watchdog does the same for a test that hangs.
// Only rank 0 prints gtest's progress; the other ranks print their failures.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "comm/mpi_env.hpp"
#include "test_util.hpp"

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

class Watchdog : public testing::EmptyTestEventListener {
 public:
  explicit Watchdog(std::chrono::seconds limit) : limit_(limit), thread_([this] { loop(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const testing::TestInfo& info) override {
    std::lock_guard<std::mutex> g(m_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    deadline_ = std::chrono::steady_clock::now() + limit_;
    armed_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const testing::TestInfo&) override {
    std::lock_guard<std::mutex> g(m_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(m_);
    while (!quit_) {
      if (!armed_) {
        cv_.wait(lk);
        continue;
      }
      if (cv_.wait_until(lk, deadline_) == std::cv_status::timeout && armed_ && !quit_ &&
          std::chrono::steady_clock::now() >= deadline_)
        weft::comm::abort_job("WATCHDOG: test " + name_ + " did not finish within " +
                              std::to_string(limit_.count()) + " s (hang?)");
    }
  }
  std::chrono::seconds limit_;
  std::mutex m_;
  std::condition_variable cv_;
  bool armed_ = false, quit_ = false;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
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
  listeners.Append(new Watchdog(std::chrono::seconds(secs)));
  return RUN_ALL_TESTS();
}
