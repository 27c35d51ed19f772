// Configuration: Options::from_environment, Options::validate, Runtime(Options) and Runtime() with bad
// WEFT_* variables (exit status 2).
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

const char* const kVars[] = {"WEFT_NUM_THREADS", "WEFT_BIND", "WEFT_MAX_TASKS", "WEFT_IMMEDIATE_SUCCESSOR",
                             "WEFT_WATCHDOG", "WEFT_COMM_THREAD", "WEFT_STEAL_BATCH", "WEFT_LOCAL_COUNTS", "WEFT_BIASED_LOCK",
                             "WEFT_SCHEDULER", "WEFT_LFQ_BUFFER", "WEFT_IDLE_PAUSES", "WEFT_EAGER",
                             "WEFT_DIRECT_SATISFY", "WEFT_CLUSTER_HOLDER_BITS"};

class Config : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
  }
};

// Expects from_environment() to throw config_error whose message names the variable.
void expect_env_error(const char* var, const char* value) {
  ::setenv(var, value, 1);
  try {
    weft::Options o = weft::Options::from_environment();
    ADD_FAILURE() << var << "=" << value << " was accepted (num_threads=" << o.num_threads
                  << ", max_tasks=" << o.max_tasks << ")";
  } catch (const weft::config_error& e) {
    EXPECT_NE(std::string(e.what()).find(var), std::string::npos)
        << var << "=" << value << ": message does not name the variable: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << var << "=" << value << ": wrong exception type: " << e.what();
  }
  ::unsetenv(var);
}

TEST_F(Config, ConfigErrorIsInvalidArgument) {
  static_assert(std::is_base_of_v<std::invalid_argument, weft::config_error>);
  weft::config_error e("x");
  EXPECT_STREQ(e.what(), "x");
}

// A variable that looks like a setting (a typo, another runtime's name for the worker count) is ignored with a
// warning naming the setting meant, once per name; a program's own WEFT_* variables get none.
TEST_F(Config, MisspelledSettingsAreWarnedAbout) {
  struct Case {
    const char* name;
    const char* meant;  // null: no warning
  } cases[] = {{"WEFT_NUM_THREAD", "WEFT_NUM_THREADS"},
               {"WEFT_MAXTASKS", "WEFT_MAX_TASKS"},
               {"WEFT_WORKERS", "WEFT_NUM_THREADS"},
               {"WEFT_SHEDULER", "WEFT_SCHEDULER"},
               {"WEFT_MY_APPLICATION_SEED", nullptr}};
  for (const Case& c : cases) {
    ::setenv(c.name, "2", 1);
    testing::internal::CaptureStderr();
    weft::Options o = weft::Options::from_environment();
    const std::string first = testing::internal::GetCapturedStderr();
    testing::internal::CaptureStderr();
    (void)weft::Options::from_environment();
    const std::string second = testing::internal::GetCapturedStderr();
    ::unsetenv(c.name);
    EXPECT_EQ(o.num_threads, std::thread::hardware_concurrency() ? std::thread::hardware_concurrency() : 1u)
        << c.name << " changed a setting";
    if (c.meant) {
      EXPECT_NE(first.find(std::string("weft: warning: ") + c.name + " is not a weft setting and is ignored; did "
                           "you mean " + c.meant + "?"),
                std::string::npos)
          << c.name << ": " << first;
      EXPECT_EQ(second, "") << c.name << ": warned twice";
    } else {
      EXPECT_EQ(first, "") << c.name;
    }
  }
}

TEST_F(Config, DefaultsWhenUnset) {
  weft::Options o = weft::Options::from_environment();
  EXPECT_GE(o.num_threads, 1u);
  EXPECT_LE(o.num_threads, weft::kMaxThreads);
  // "all hardware threads": std::thread::hardware_concurrency(), or the CPUs this process may run on.
  unsigned hw = std::thread::hardware_concurrency();
  cpu_set_t set;
  CPU_ZERO(&set);
  unsigned affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : hw;
  if (hw != 0 && hw <= weft::kMaxThreads) {
    EXPECT_TRUE(o.num_threads == hw || o.num_threads == affinity)
        << "default num_threads " << o.num_threads << ", hardware threads " << hw << ", affinity " << affinity;
  }
  EXPECT_FALSE(o.bind_to_cores);
  EXPECT_EQ(o.max_tasks, weft::kDefaultMaxTasks);
  EXPECT_TRUE(o.immediate_successor);
  EXPECT_NO_THROW(o.validate());
}

TEST_F(Config, ValidValuesAreRead) {
  ::setenv("WEFT_NUM_THREADS", "3", 1);
  ::setenv("WEFT_BIND", "cores", 1);
  ::setenv("WEFT_MAX_TASKS", "100", 1);
  ::setenv("WEFT_IMMEDIATE_SUCCESSOR", "0", 1);
  weft::Options o = weft::Options::from_environment();
  EXPECT_EQ(o.num_threads, 3u);
  EXPECT_TRUE(o.bind_to_cores);
  EXPECT_EQ(o.max_tasks, 100u);
  EXPECT_FALSE(o.immediate_successor);

  ::setenv("WEFT_BIND", "none", 1);
  ::setenv("WEFT_IMMEDIATE_SUCCESSOR", "1", 1);
  ::setenv("WEFT_NUM_THREADS", "1", 1);
  o = weft::Options::from_environment();
  EXPECT_FALSE(o.bind_to_cores);
  EXPECT_TRUE(o.immediate_successor);
  EXPECT_EQ(o.num_threads, 1u);
}

TEST_F(Config, BoundaryValuesAccepted) {
  ::setenv("WEFT_NUM_THREADS", std::to_string(weft::kMaxThreads).c_str(), 1);
  ::setenv("WEFT_MAX_TASKS", std::to_string(weft::kMaxMaxTasks).c_str(), 1);
  weft::Options o = weft::Options::from_environment();
  EXPECT_EQ(o.num_threads, weft::kMaxThreads);
  EXPECT_EQ(o.max_tasks, weft::kMaxMaxTasks);
  ::setenv("WEFT_MAX_TASKS", "1", 1);
  o = weft::Options::from_environment();
  EXPECT_EQ(o.max_tasks, 1u);
}

TEST_F(Config, BadNumThreads) {
  expect_env_error("WEFT_NUM_THREADS", "abc");
  expect_env_error("WEFT_NUM_THREADS", "0");
  expect_env_error("WEFT_NUM_THREADS", "-3");
  expect_env_error("WEFT_NUM_THREADS", "99999999");
  expect_env_error("WEFT_NUM_THREADS", "99999999999999999999999");
  expect_env_error("WEFT_NUM_THREADS", std::to_string(weft::kMaxThreads + 1).c_str());
  expect_env_error("WEFT_NUM_THREADS", "4x");
  expect_env_error("WEFT_NUM_THREADS", "2.5");
}

TEST_F(Config, BadMaxTasks) {
  expect_env_error("WEFT_MAX_TASKS", "0");
  expect_env_error("WEFT_MAX_TASKS", "-1");
  expect_env_error("WEFT_MAX_TASKS", "lots");
  expect_env_error("WEFT_MAX_TASKS", std::to_string(weft::kMaxMaxTasks + 1).c_str());
}

// An unsigned option read from `var`: `dflt` when unset; `lo` and `hi` accepted; below `lo` (or a negative
// number), a word and above `hi` rejected with an error naming the variable; validate() rejects the same.
void expect_unsigned_option(const char* var, unsigned weft::Options::*field, unsigned dflt, unsigned lo, unsigned hi,
                            const char* word) {
  EXPECT_EQ(weft::Options::from_environment().*field, dflt) << var;
  for (unsigned v : {lo, hi}) {
    ::setenv(var, std::to_string(v).c_str(), 1);
    EXPECT_EQ(weft::Options::from_environment().*field, v) << var;
  }
  expect_env_error(var, lo > 0 ? std::to_string(lo - 1).c_str() : "-1");
  expect_env_error(var, word);
  expect_env_error(var, std::to_string(std::uint64_t{hi} + 1).c_str());
  weft::Options o;
  o.*field = hi + 1;
  EXPECT_THROW(o.validate(), weft::config_error) << var;
  if (lo > 0) {
    o.*field = lo - 1;
    EXPECT_THROW(o.validate(), weft::config_error) << var;
  }
}

TEST_F(Config, StealBatch) {
  expect_unsigned_option("WEFT_STEAL_BATCH", &weft::Options::steal_batch, weft::kDefaultStealBatch, 1,
                         weft::kMaxStealBatch, "half");
}

TEST_F(Config, IdlePauses) {
  expect_unsigned_option("WEFT_IDLE_PAUSES", &weft::Options::idle_pauses, 0 /* automatic */, 0, weft::kMaxIdlePauses,
                         "many");
  ::unsetenv("WEFT_IDLE_PAUSES");
  // Any setting runs tasks (a round of one pause, and the largest one).
  for (unsigned p : {1u, weft::kMaxIdlePauses}) {
    weft::Options r = opts(2);
    r.idle_pauses = p;
    weft::Runtime rt(r);
    std::atomic<int> done{0};
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 1000; ++i) cx.spawn([&] { done.fetch_add(1); });
    });
    EXPECT_EQ(done.load(), 1000) << p;
  }
}

// A switch read from WEFT_<name>=1|0: on by default, off with 0, any other value an error naming the variable.
void expect_switch(const char* var, bool weft::Options::*field, const char* bad) {
  EXPECT_TRUE(weft::Options::from_environment().*field) << var;
  ::setenv(var, "0", 1);
  EXPECT_FALSE(weft::Options::from_environment().*field) << var;
  ::setenv(var, "1", 1);
  EXPECT_TRUE(weft::Options::from_environment().*field) << var;
  expect_env_error(var, bad);
}

TEST_F(Config, AblationSwitches) {
  expect_switch("WEFT_LOCAL_COUNTS", &weft::Options::local_counts, "no");
  expect_switch("WEFT_BIASED_LOCK", &weft::Options::biased_lock, "2");
}

// The cluster's switches (weft/cluster.hpp).
TEST_F(Config, ClusterSwitches) {
  expect_switch("WEFT_EAGER", &weft::Options::eager_transfers, "yes");
  expect_switch("WEFT_DIRECT_SATISFY", &weft::Options::direct_satisfy, "on");
}

TEST_F(Config, Scheduler) {
  weft::Options o = weft::Options::from_environment();
  EXPECT_EQ(o.scheduler, weft::Scheduler::llp);
  EXPECT_EQ(o.lfq_buffer, 0u);
  ::setenv("WEFT_SCHEDULER", "lfq", 1);
  ::setenv("WEFT_LFQ_BUFFER", "256", 1);
  o = weft::Options::from_environment();
  EXPECT_EQ(o.scheduler, weft::Scheduler::lfq);
  EXPECT_EQ(o.lfq_buffer, 256u);
  ::setenv("WEFT_SCHEDULER", "llp", 1);
  EXPECT_EQ(weft::Options::from_environment().scheduler, weft::Scheduler::llp);
  ::unsetenv("WEFT_SCHEDULER");
  ::unsetenv("WEFT_LFQ_BUFFER");
  expect_env_error("WEFT_SCHEDULER", "bogus");
  expect_env_error("WEFT_SCHEDULER", "LFQ");
  expect_env_error("WEFT_LFQ_BUFFER", "0");
  expect_env_error("WEFT_LFQ_BUFFER", std::to_string(weft::kMaxLfqBuffer + 1).c_str());
}

TEST_F(Config, ClusterHolderBits) {
  EXPECT_EQ(weft::Options::from_environment().cluster_holder_bits, 63u);
  ::setenv("WEFT_CLUSTER_HOLDER_BITS", "1", 1);
  EXPECT_EQ(weft::Options::from_environment().cluster_holder_bits, 1u);
  ::unsetenv("WEFT_CLUSTER_HOLDER_BITS");
  expect_env_error("WEFT_CLUSTER_HOLDER_BITS", "0");
  expect_env_error("WEFT_CLUSTER_HOLDER_BITS", "64");
  weft::Options o;
  o.cluster_holder_bits = 64;
  EXPECT_THROW(o.validate(), weft::config_error);
}

TEST_F(Config, BadBind) {
  expect_env_error("WEFT_BIND", "banana");
  expect_env_error("WEFT_BIND", "2");
  expect_env_error("WEFT_BIND", "");  // as every other variable: empty is not a value
}

TEST_F(Config, EmptyValuesAreRejected) {
  for (const char* v : kVars) expect_env_error(v, "");
}

TEST_F(Config, BadImmediateSuccessor) {
  expect_env_error("WEFT_IMMEDIATE_SUCCESSOR", "2");
  expect_env_error("WEFT_IMMEDIATE_SUCCESSOR", "yes please");
}

TEST_F(Config, Watchdog) {
  EXPECT_EQ(weft::Options::from_environment().watchdog_seconds, 0.0);  // off by default
  ::setenv("WEFT_WATCHDOG", "30", 1);
  EXPECT_EQ(weft::Options::from_environment().watchdog_seconds, 30.0);
  ::setenv("WEFT_WATCHDOG", "0.5", 1);
  EXPECT_EQ(weft::Options::from_environment().watchdog_seconds, 0.5);
  ::setenv("WEFT_WATCHDOG", "0", 1);
  EXPECT_EQ(weft::Options::from_environment().watchdog_seconds, 0.0);
  for (const char* bad : {"-1", "soon", "10s", "nan", "inf", "1e9", "0x10", " 5"}) expect_env_error("WEFT_WATCHDOG", bad);
  weft::Options o;
  o.watchdog_seconds = -1;
  EXPECT_THROW(o.validate(), weft::config_error);
}

TEST_F(Config, CommThread) {
  EXPECT_EQ(weft::Options::from_environment().comm_thread, weft::CommThread::automatic);
  ::setenv("WEFT_COMM_THREAD", "on", 1);
  EXPECT_EQ(weft::Options::from_environment().comm_thread, weft::CommThread::on);
  ::setenv("WEFT_COMM_THREAD", "off", 1);
  EXPECT_EQ(weft::Options::from_environment().comm_thread, weft::CommThread::off);
  ::setenv("WEFT_COMM_THREAD", "auto", 1);
  EXPECT_EQ(weft::Options::from_environment().comm_thread, weft::CommThread::automatic);
  for (const char* bad : {"", "1", "yes", "ON", "auto "}) expect_env_error("WEFT_COMM_THREAD", bad);
  weft::Options o;
  o.comm_thread = static_cast<weft::CommThread>(7);
  EXPECT_THROW(o.validate(), weft::config_error);
  // A single process has nothing to communicate: `on` still builds a runtime that runs tasks as usual.
  o.comm_thread = weft::CommThread::on;
  o.num_threads = 2;
  weft::Runtime rt(o);
  EXPECT_EQ(rt.num_workers(), 2u);
  std::atomic<int> ran{0};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 100; ++i) cx.spawn([&] { ran.fetch_add(1, std::memory_order_relaxed); });
  });
  EXPECT_EQ(ran.load(), 100);
}

TEST_F(Config, ValidateRejectsOutOfRange) {
  weft::Options o;
  EXPECT_NO_THROW(o.validate());
  o.num_threads = 0;
  EXPECT_THROW(o.validate(), weft::config_error);
  o.num_threads = weft::kMaxThreads + 1;
  EXPECT_THROW(o.validate(), weft::config_error);
  o.num_threads = weft::kMaxThreads;
  EXPECT_NO_THROW(o.validate());
  o = weft::Options{};
  o.max_tasks = 0;
  EXPECT_THROW(o.validate(), weft::config_error);
  o.max_tasks = weft::kMaxMaxTasks + 1;
  EXPECT_THROW(o.validate(), weft::config_error);
  o.max_tasks = weft::kMaxMaxTasks;
  EXPECT_NO_THROW(o.validate());
}

TEST_F(Config, RuntimeWithInvalidOptionsThrows) {
  weft::Options o;
  o.num_threads = 0;
  EXPECT_THROW(weft::Runtime rt(o), weft::config_error);
  o = weft::Options{};
  o.max_tasks = 0;
  EXPECT_THROW(weft::Runtime rt(o), weft::config_error);
}

TEST_F(Config, RuntimeOptionsReflectConstruction) {
  weft::Options o = opts(3, 77, false);
  weft::Runtime rt(o);
  EXPECT_EQ(rt.num_workers(), 3u);
  EXPECT_EQ(rt.options().num_threads, 3u);
  EXPECT_EQ(rt.options().max_tasks, 77u);
  EXPECT_FALSE(rt.options().immediate_successor);
}

TEST_F(Config, DefaultRuntimeReadsEnvironment) {
  ::setenv("WEFT_NUM_THREADS", "2", 1);
  ::setenv("WEFT_MAX_TASKS", "50", 1);
  weft::Runtime rt;
  EXPECT_EQ(rt.num_workers(), 2u);
  EXPECT_EQ(rt.options().max_tasks, 50u);
  int x = 0;
  rt.run([&](weft::Context& cx) { cx.spawn([&] { x = 1; }, weft::out(x)); });
  EXPECT_EQ(x, 1);
}

using ConfigDeathTest = Config;

TEST_F(ConfigDeathTest, DefaultRuntimeExitsWithStatus2OnBadNumThreads) {
  EXPECT_EXIT(
      {
        ::setenv("WEFT_NUM_THREADS", "abc", 1);
        weft::Runtime rt;
        std::exit(0);
      },
      testing::ExitedWithCode(2), "WEFT_NUM_THREADS");
}

TEST_F(ConfigDeathTest, DefaultRuntimeExitsWithStatus2OnBadBind) {
  EXPECT_EXIT(
      {
        ::setenv("WEFT_BIND", "banana", 1);
        weft::Runtime rt;
        std::exit(0);
      },
      testing::ExitedWithCode(2), "WEFT_BIND");
}

TEST_F(ConfigDeathTest, DefaultRuntimeExitsWithStatus2OnBadMaxTasks) {
  EXPECT_EXIT(
      {
        ::setenv("WEFT_MAX_TASKS", "0", 1);
        weft::Runtime rt;
        std::exit(0);
      },
      testing::ExitedWithCode(2), "WEFT_MAX_TASKS");
}

}  // namespace
