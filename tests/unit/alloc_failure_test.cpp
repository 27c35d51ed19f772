// Allocation failures: a small program covering every allocation path of the runtime (spawns with 1-3 accesses
// of all modes, nested tasks, weak accesses, a taskwait, a body too large for the descriptor, a taskiter, a flow
// graph with a two-input template task) runs once per allocation it makes, with that allocation failing
// (std::bad_alloc). Each run must return or throw (std::bad_alloc, or the program's own error) - a hang is caught
// by the watchdog, a leak by LeakSanitizer in the asan build - and the runtime must stay usable.
// Also: bodies whose copy/move constructor throws, spawned many times, must not leak.
//
// Its own executable: it replaces the global operator new/delete (every variant), counting allocations while
// armed and throwing at the N-th (nothrow variants return null). Each failing allocation is tried in a child
// process, so that one that crashes or hangs the runtime is reported with its number and the others still run.
#include <gtest/gtest.h>
#include <weft/flow.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "../common/test_util.hpp"

namespace {

std::atomic<bool> g_armed{false};
std::atomic<long> g_count{0};    // allocations while armed
std::atomic<long> g_fail_at{0};  // the allocation (1-based) that fails; 0: none

// Null when this allocation is the one to fail.
void* allocate(std::size_t n, std::size_t align) {
  if (g_armed.load(std::memory_order_relaxed)) {
    const long k = g_count.fetch_add(1, std::memory_order_relaxed) + 1;
    if (k == g_fail_at.load(std::memory_order_relaxed)) return nullptr;
  }
  if (n == 0) n = 1;
  if (align <= alignof(std::max_align_t)) return std::malloc(n);
  void* p = nullptr;
  return posix_memalign(&p, align, n) == 0 ? p : nullptr;
}
// Out of line: GCC would otherwise warn that free() releases what operator new returned (it does, by design).
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
void* allocate_or_throw(std::size_t n, std::size_t align) {
  void* p = allocate(n, align);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new[](std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }

namespace {

using namespace weft_test;

struct ProgramError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The program under test. Its tasks check their inputs; a wrong value throws ProgramError (which the test
// reports: an allocation failure must not make a task run with wrong data).
void program(weft::Runtime& rt) {
  // Outside the root's body: when a spawn throws, the body unwinds while its children still run.
  int a = 0, b = 0, c = 0;
  std::atomic<int> set{0}, comm{0};
  rt.run([&](weft::Context& cx) {
    cx.spawn([&] { a = 1; }, weft::out(a));
    cx.spawn([&] { if (a != 1) throw ProgramError("in(a)"); }, weft::in(a));
    cx.spawn([&] { b = a + 1; }, weft::in(a), weft::out(b));
    cx.spawn([&] { set.fetch_add(1); }, weft::inoutset(c), weft::in(b));
    cx.spawn([&] { set.fetch_add(1); }, weft::inoutset(c));
    cx.spawn([&] { comm.fetch_add(1); }, weft::commutative(c), weft::in(a), weft::in(b));
    cx.spawn([&] { comm.fetch_add(1); }, weft::commutative(c));
    cx.spawn([&] { if (set != 2 || comm != 2) throw ProgramError("groups"); c = 7; }, weft::inout(c));
    cx.spawn([&](weft::Context& t) {  // nested
      t.spawn([&] { ++a; }, weft::inout(a));
      t.spawn([&] { if (a != 2) throw ProgramError("nested"); }, weft::in(a));
    }, weft::inout(a), weft::in(c));
    cx.spawn([&](weft::Context& t) {  // weak parent, strong children
      t.spawn([&] { ++b; }, weft::inout(b));
      t.spawn([&] { ++b; }, weft::inout(b));
    }, weft::weak_inout(b));
    std::array<long, 32> big{};  // does not fit the descriptor's inline body
    big[31] = 5;
    cx.spawn([big, &c] { if (big[31] != 5 || c != 7) throw ProgramError("large body"); }, weft::in(c));
    cx.taskwait();
    if (a != 2 || b != 4) throw ProgramError("after taskwait");
    cx.taskiter(3, [&](weft::Context& it) {
      it.spawn([&] { ++a; }, weft::inout(a));
      it.spawn([&](weft::Context& t) { t.spawn([&] { ++b; }, weft::inout(b)); }, weft::in(a), weft::inout(b));
    }, weft::inout(a), weft::inout(b));
    cx.taskwait();
    if (a != 5 || b != 7) throw ProgramError("after taskiter");
  });
  namespace wf = weft::flow;
  wf::Edge<int, void> start;
  wf::Edge<int, int> first, second;
  std::atomic<int> sum{0};
  auto pair = wf::make_tt<int>([&sum](const int& k, int x, int y) { sum.fetch_add(k + x + y); },
                               wf::edges(first, second), wf::edges(), "pair");
  auto source = wf::make_tt<int>(
      [](const int&, auto& out) {
        for (int k = 0; k < 4; ++k) wf::send<0>(k, 1, out);
        for (int k = 0; k < 4; ++k) wf::send<1>(k, 2, out);
      },
      wf::edges(start), wf::edges(first, second), "source");
  auto g = wf::graph(rt, source, pair);
  g.invoke(0);
  g.wait();
  if (sum != 0 + 1 + 2 + 3 + 4 * 3) throw ProgramError("flow");
}

// A run after a failure: dependencies and a taskwait still work. Empty if so, else what went wrong.
std::string still_usable(weft::Runtime& rt) {
  int x = 0, y = 0;
  try {
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 100; ++i) cx.spawn([&] { ++x; }, weft::inout(x));
      cx.spawn([&] { y = x; }, weft::in(x), weft::out(y));
      cx.taskwait();
    });
  } catch (const std::exception& e) {
    return std::string("run() threw: ") + e.what();
  }
  return x == 100 && y == 100 ? std::string() : "wrong results";
}

enum class Outcome { returned, bad_alloc, program_error, other };

Outcome run_failing_at(weft::Runtime& rt, long n, std::string& what) {
  g_count.store(0);
  g_fail_at.store(n);
  g_armed.store(true);
  Outcome o = Outcome::returned;
  try {
    program(rt);
  } catch (const std::bad_alloc&) {
    o = Outcome::bad_alloc;
  } catch (const ProgramError& e) {
    o = Outcome::program_error;
    what = e.what();
  } catch (const std::exception& e) {
    o = Outcome::other;
    what = e.what();
  }
  g_armed.store(false);
  g_fail_at.store(0);
  return o;
}

// One trial in a child process (fork): a crash, a hang (the child is killed after `patience`) or state the
// failure leaves behind cannot spoil the trials that follow. The child's exit code: kTrial + the Outcome,
// + kUnusable if the second run failed, + kLeaked if LeakSanitizer finds a leak (asan build); an exit code
// without kTrial is a sanitizer's error report (they exit with 1).
constexpr int kUnusable = 8, kLeaked = 16, kTrial = 64;
enum class Verdict { exited, crashed, hung };

Verdict run_trial(unsigned workers, long n, std::chrono::seconds patience, int& code, int& signal) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    int c = kTrial;
    {
      weft::Runtime rt(opts(workers));
      std::string what;
      const Outcome o = run_failing_at(rt, n, what);
      if (o == Outcome::program_error || o == Outcome::other)
        std::fprintf(stderr, "allocation %ld: %s\n", n, what.c_str());
      c |= static_cast<int>(o);
      const std::string usable = still_usable(rt);
      if (!usable.empty()) {
        std::fprintf(stderr, "allocation %ld: second run: %s\n", n, usable.c_str());
        c |= kUnusable;
      }
    }
#if defined(__SANITIZE_ADDRESS__)
    if (__lsan_do_recoverable_leak_check()) c |= kLeaked;
#endif
    std::fflush(stderr);
    _exit(c);
  }
  if (pid < 0) return Verdict::crashed;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return Verdict::hung;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status)) {
    signal = WTERMSIG(status);
    return Verdict::crashed;
  }
  code = WEXITSTATUS(status);
  return Verdict::exited;
}

class AllocFailure : public testing::TestWithParam<unsigned> {};

TEST_P(AllocFailure, EveryAllocationOfASmallProgram) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after fork (the trials' runtimes)";
#endif
  long total = 0;
  {
    weft::Runtime rt(opts(GetParam()));
    std::string what;
    ASSERT_EQ(run_failing_at(rt, 0, what), Outcome::returned) << what;
    total = g_count.load();
  }
  ASSERT_GT(total, 10);
  // With 2 workers the count varies from run to run (stealing, pools): go a little beyond.
  long from = 1, last = total + total / 4;
  if (const char* e = std::getenv("WEFT_ALLOC_FAIL_AT")) {  // N, or a range N-M
    char* end = nullptr;
    from = last = std::max(1L, std::strtol(e, &end, 10));
    if (*end == '-') last = std::max(from, std::strtol(end + 1, nullptr, 10));
  }
  // A trial takes milliseconds; a hang costs `patience`, and the loop gives up after max_hangs of them
  // (WEFT_ALLOC_MAX_HANGS) to bound the test's time.
  const auto patience = std::chrono::seconds(kSanitized ? 10 : 2);
  int max_hangs = 8;
  if (const char* e = std::getenv("WEFT_ALLOC_MAX_HANGS")) max_hangs = std::max(1, std::atoi(e));
  const std::string again = std::string(" (reproduce: WEFT_ALLOC_FAIL_AT=N ./weft_alloc_failure_test --gtest_filter=") +
                            testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "." +
                            testing::UnitTest::GetInstance()->current_test_info()->name() + ")";
  int returned = 0, bad_alloc = 0, wrong = 0, unusable = 0, leaked = 0, hangs = 0, crashes = 0, reports = 0;
  std::string hung_at, crashed_at;
  long n = from;
  for (; n <= last && hangs < max_hangs; ++n) {
    int code = 0, sig = 0;
    switch (run_trial(GetParam(), n, patience, code, sig)) {
      case Verdict::hung:
        ++hangs;
        hung_at += " " + std::to_string(n);
        continue;
      case Verdict::crashed:
        ++crashes;
        crashed_at += " " + std::to_string(n) + "(signal " + std::to_string(sig) + ")";
        continue;
      case Verdict::exited: break;
    }
    if (!(code & kTrial)) {
      ++reports;
      ADD_FAILURE() << "allocation " << n << " failing: the trial exited with " << code
                    << " (a sanitizer's report above?)" << again;
      continue;
    }
    const auto o = static_cast<Outcome>(code & 7);
    returned += o == Outcome::returned;
    bad_alloc += o == Outcome::bad_alloc;
    if (o == Outcome::program_error || o == Outcome::other) {
      ++wrong;
      ADD_FAILURE() << "allocation " << n << " failing: wrong data or an unexpected exception (see above)" << again;
    }
    if (code & kUnusable) {
      ++unusable;
      ADD_FAILURE() << "allocation " << n << " failing: the runtime is not usable afterwards (see above)" << again;
    }
    if (code & kLeaked) {
      ++leaked;
      ADD_FAILURE() << "allocation " << n << " failing: memory leaked (see LeakSanitizer's report above)" << again;
    }
  }
  EXPECT_EQ(hangs, 0) << "runs that never return when these allocations fail:" << hung_at << again
                      << (hangs == max_hangs ? "; stopped after " + std::to_string(max_hangs) + " hangs" : "");
  EXPECT_EQ(crashes, 0) << "runs that crash when these allocations fail:" << crashed_at << again;
  std::printf("[alloc failure] %u workers: %ld allocations, allocations %ld-%ld failed in turn: %d returned, %d threw "
              "bad_alloc, %d wrong, %d unusable after, %d leaked, %d hung, %d crashed, %d sanitizer reports\n",
              GetParam(), total, from, n - 1, returned, bad_alloc, wrong, unusable, leaked, hangs, crashes, reports);
  if (from == 1 && hangs == 0) {
    EXPECT_GT(bad_alloc, 0);  // the injection works
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, AllocFailure, testing::Values(1u, 2u), WorkersName{});

// A body whose copy and move constructors throw: the spawn throws, nothing of the task may remain.
template <std::size_t Bytes>
struct ThrowsOnCopy {
  std::array<char, Bytes> pad{};
  ThrowsOnCopy() = default;
  ThrowsOnCopy(const ThrowsOnCopy&) { throw std::runtime_error("copy"); }
  ThrowsOnCopy(ThrowsOnCopy&&) { throw std::runtime_error("move"); }
  void operator()() const {}
};

long long rss_kib() {
  long long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lld %lld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

template <std::size_t Bytes>
void spawn_throwing_bodies(unsigned workers) {
  weft::Runtime rt(opts(workers));
  ASSERT_EQ(still_usable(rt), "");  // start-up allocations before the measurement
  const std::size_t n = scaled(300000, 1000);
  const long long before = rss_kib();
  std::size_t thrown = 0;
  int x = 0;
  rt.run([&](weft::Context& cx) {
    ThrowsOnCopy<Bytes> body;
    for (std::size_t i = 0; i < n; ++i) {
      try {
        if (i & 1)
          cx.spawn(body, weft::inout(x));
        else
          cx.spawn(ThrowsOnCopy<Bytes>{});
      } catch (const std::runtime_error&) {
        ++thrown;
      }
    }
  });
  const long long growth_kib = rss_kib() - before;
  EXPECT_EQ(thrown, n);
  EXPECT_EQ(still_usable(rt), "");
  const weft::Stats s = rt.stats();
  std::printf("[throwing body %zu B] %zu spawns threw, RSS growth %.1f MiB, %llu tasks created\n", Bytes, n,
              static_cast<double>(growth_kib) / 1024.0, static_cast<unsigned long long>(s.tasks_created));
  if (!kSanitized) {  // RSS means little under sanitizers
    EXPECT_LT(growth_kib, 16 * 1024) << "a spawn whose body cannot be copied leaks memory";
  }
#if defined(__SANITIZE_ADDRESS__)
  // Descriptors come from the runtime's pools (freed with it): only what is allocated per body shows here.
  EXPECT_EQ(__lsan_do_recoverable_leak_check(), 0) << "a spawn whose body cannot be copied leaks (see the report)";
#endif
}

TEST_P(AllocFailure, BodyCopyThrowsInline) { spawn_throwing_bodies<16>(GetParam()); }
TEST_P(AllocFailure, BodyCopyThrowsLarge) { spawn_throwing_bodies<200>(GetParam()); }

}  // namespace
