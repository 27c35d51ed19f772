// The per-test watchdog of the test mains (common/main.cpp, mpi/mpi_main.cpp): a test still running `limit`
// after it started is reported by `expire(message)`, which must end the process (a hang becomes a failure with
// the test's name).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace weft_test {

class Watchdog : public testing::EmptyTestEventListener {
 public:
  Watchdog(std::chrono::seconds limit, std::function<void(const std::string&)> expire)
      : limit_(limit), expire_(std::move(expire)), thread_([this] { loop(); }) {}
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
        expire_("WATCHDOG: test " + name_ + " did not finish within " + std::to_string(limit_.count()) +
                " s (hang?)");
    }
  }
  std::chrono::seconds limit_;
  std::function<void(const std::string&)> expire_;
  std::mutex m_;
  std::condition_variable cv_;
  bool armed_ = false, quit_ = false;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

}  // namespace weft_test
