// Task bodies: firstprivate captures, large and over-aligned bodies, move-only bodies, Context& bodies,
// function pointers, and exactly one destruction of every body object (run, cancelled or throwing).
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

class Bodies : public testing::TestWithParam<unsigned> {};

TEST_P(Bodies, ByValueCaptureIsFirstprivate) {
  weft::Runtime rt(opts(GetParam()));
  std::vector<int> seen(50, -1);
  rt.run([&](weft::Context& cx) {
    int v = 0;
    for (int i = 0; i < 50; ++i) {
      v = i * 3;
      cx.spawn([v, &seen, i] {
        busy_for_us(1);
        seen[i] = v;
      });
      v = -1;  // changing the variable after the spawn must not affect the task
    }
    cx.taskwait();
  });
  for (int i = 0; i < 50; ++i) EXPECT_EQ(seen[i], i * 3);
}

TEST_P(Bodies, LargeBodyCapture) {
  weft::Runtime rt(opts(GetParam()));
  std::vector<double> sums(40, 0);
  rt.run([&](weft::Context& cx) {
    std::array<double, 32> data{};
    static_assert(sizeof(data) > 56);
    for (int t = 0; t < 40; ++t) {
      for (int i = 0; i < 32; ++i) data[i] = t * 100 + i;
      cx.spawn([data, &sums, t] { sums[t] = std::accumulate(data.begin(), data.end(), 0.0); });
      data.fill(-1e9);
    }
  });
  for (int t = 0; t < 40; ++t) EXPECT_DOUBLE_EQ(sums[t], 32.0 * t * 100 + 31 * 32 / 2) << t;
}

struct alignas(64) Aligned64 {
  double v[16];
};

TEST_P(Bodies, OverAlignedBody) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> misaligned{0}, ran{0};
  rt.run([&](weft::Context& cx) {
    for (int t = 0; t < 30; ++t) {
      Aligned64 a{};
      a.v[0] = t;
      cx.spawn([a, &misaligned, &ran, t] {
        if (reinterpret_cast<std::uintptr_t>(&a) % 64 != 0) misaligned.fetch_add(1);
        if (a.v[0] == t) ran.fetch_add(1);
      });
    }
  });
  EXPECT_EQ(misaligned.load(), 0);
  EXPECT_EQ(ran.load(), 30);
}

TEST_P(Bodies, MoveOnlyBody) {
  weft::Runtime rt(opts(GetParam()));
  std::vector<int> out(21, 0);
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 20; ++i) {
      auto p = std::make_unique<int>(i + 1000);
      cx.spawn([p = std::move(p), &out, i]() mutable {
        *p += 1;
        out[i] = *p;
        p.reset();
      });
      EXPECT_EQ(p, nullptr);
    }
    // A large move-only body.
    auto big = std::make_unique<std::array<int, 64>>();
    big->fill(7);
    std::array<char, 100> pad{};
    cx.spawn([big = std::move(big), pad, &out] { out[20] = (*big)[63] + pad[0]; });
  });
  for (int i = 0; i < 20; ++i) EXPECT_EQ(out[i], i + 1001);
  EXPECT_EQ(out[20], 7);
}

TEST_P(Bodies, ContextBodiesSpawnChildren) {
  weft::Runtime rt(opts(GetParam()));
  std::atomic<int> n{0};
  rt.run([&](weft::Context& cx) {
    EXPECT_EQ(cx.num_workers(), GetParam());
    cx.spawn([&](weft::Context& c) {
      EXPECT_LT(c.worker_id(), c.num_workers());
      for (int i = 0; i < 5; ++i)
        c.spawn([&](weft::Context& g) {
          EXPECT_LT(g.worker_id(), g.num_workers());
          g.spawn([&] { n.fetch_add(1); });
        });
    });
  });
  EXPECT_EQ(n.load(), 5);
}

std::atomic<int> g_plain_calls{0};
void plain_function() { g_plain_calls.fetch_add(1); }
void plain_function_cx(weft::Context& cx) { cx.spawn(&plain_function); }

TEST_P(Bodies, FunctionPointersAndStdFunction) {
  weft::Runtime rt(opts(GetParam()));
  g_plain_calls = 0;
  std::atomic<int> f_calls{0};
  std::function<void()> f = [&] { f_calls.fetch_add(1); };
  rt.run([&](weft::Context& cx) {
    cx.spawn(plain_function);
    cx.spawn(&plain_function);
    cx.spawn(plain_function_cx);
    cx.spawn(f);
    cx.spawn(f);
  });
  EXPECT_EQ(g_plain_calls.load(), 3);
  EXPECT_EQ(f_calls.load(), 2);
}

// ---- destruction accounting ----

std::atomic<long> g_constructed{0}, g_destroyed{0}, g_called{0}, g_bad_destroy{0};

constexpr std::uint32_t kAlive = 0xA11CEu, kDead = 0xDEADu;

template <std::size_t Pad, bool Throws = false>
struct Counted {
  std::uint32_t magic = kAlive;
  std::array<char, Pad> pad{};
  Counted() { g_constructed.fetch_add(1); }
  Counted(const Counted& o) : pad(o.pad) { g_constructed.fetch_add(1); }
  Counted(Counted&& o) noexcept : pad(o.pad) { g_constructed.fetch_add(1); }
  Counted& operator=(const Counted&) = delete;
  ~Counted() {
    if (magic != kAlive) g_bad_destroy.fetch_add(1);
    magic = kDead;
    g_destroyed.fetch_add(1);
  }
  void operator()() const {
    g_called.fetch_add(1);
    if constexpr (Throws) throw std::runtime_error("counted");
  }
};

template <class Body>
void check_destroyed_once(weft::Runtime& rt) {
  g_constructed = 0;
  g_destroyed = 0;
  g_called = 0;
  g_bad_destroy = 0;
  int x = 0;
  bool threw = false;
  try {
    rt.run([&](weft::Context& cx) {
      cx.spawn([] { throw std::logic_error("fail"); }, weft::out(x));
      for (int i = 0; i < 10; ++i) cx.spawn(Body{}, weft::inout(x));  // cancelled
      for (int i = 0; i < 10; ++i) {
        Body b;
        cx.spawn(b);                 // copied in, runs
        cx.spawn(std::move(b));      // moved in, runs
      }
    });
  } catch (const std::exception&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(g_called.load(), 20);
  EXPECT_EQ(g_bad_destroy.load(), 0) << "a body object was destroyed twice";
  EXPECT_EQ(g_constructed.load(), g_destroyed.load()) << "body objects leaked or destroyed twice";
}

TEST_P(Bodies, SmallBodyDestroyedExactlyOnce) {
  weft::Runtime rt(opts(GetParam()));
  check_destroyed_once<Counted<8>>(rt);
}

TEST_P(Bodies, LargeBodyDestroyedExactlyOnce) {
  weft::Runtime rt(opts(GetParam()));
  static_assert(sizeof(Counted<200>) > 56);
  check_destroyed_once<Counted<200>>(rt);
}

TEST_P(Bodies, ThrowingBodyDestroyedExactlyOnce) {
  weft::Runtime rt(opts(GetParam()));
  for (bool large : {false, true}) {
    g_constructed = 0;
    g_destroyed = 0;
    g_bad_destroy = 0;
    g_called = 0;
    int caught = 0;
    for (int r = 0; r < 5; ++r) {
      try {
        rt.run([&](weft::Context& cx) {
          if (large)
            cx.spawn(Counted<300, true>{});
          else
            cx.spawn(Counted<4, true>{});
        });
      } catch (const std::runtime_error&) {
        ++caught;
      }
    }
    EXPECT_EQ(caught, 5);
    EXPECT_EQ(g_called.load(), 5);
    EXPECT_EQ(g_bad_destroy.load(), 0);
    EXPECT_EQ(g_constructed.load(), g_destroyed.load()) << "large=" << large;
  }
}

// Captured shared_ptr: the capture is released when the task is done, run or cancelled.
TEST_P(Bodies, CapturesReleasedAfterRun) {
  weft::Runtime rt(opts(GetParam()));
  auto token = std::make_shared<int>(0);
  int x = 0;
  try {
    rt.run([&](weft::Context& cx) {
      for (int i = 0; i < 10; ++i) cx.spawn([token] { (void)*token; });  // read only: these run concurrently
      cx.spawn([] { throw 1; }, weft::out(x));
      for (int i = 0; i < 10; ++i) cx.spawn([token] { (void)*token; }, weft::in(x));
      std::array<char, 128> big{};
      for (int i = 0; i < 10; ++i) cx.spawn([token, big] { (void)big; }, weft::in(x));
    });
  } catch (int) {
  }
  EXPECT_EQ(token.use_count(), 1);
}

INSTANTIATE_TEST_SUITE_P(Workers, Bodies, testing::Values(1u, 2u, 4u), WorkersName());

}  // namespace
