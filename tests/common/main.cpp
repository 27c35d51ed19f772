// gtest main for the weft tests: a per-test watchdog turns a hang into a failure with the test's name
// (WEFT_TEST_TIMEOUT seconds, default 120, 600 under sanitizers), and death tests use the "threadsafe"
// style because the runtime starts threads.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "test_util.hpp"

namespace {

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
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr, "\nWATCHDOG: test %s did not finish within %lld s (hang?); aborting\n", name_.c_str(),
                     static_cast<long long>(limit_.count()));
        std::fflush(stderr);
        std::abort();
      }
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
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  long secs = weft_test::kSanitized ? 600 : 120;
  if (const char* e = std::getenv("WEFT_TEST_TIMEOUT")) {
    long v = std::strtol(e, nullptr, 10);
    if (v > 0) secs = v;
  }
  testing::UnitTest::GetInstance()->listeners().Append(new Watchdog(std::chrono::seconds(secs)));
  return RUN_ALL_TESTS();
}
