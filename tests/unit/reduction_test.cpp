// Task reductions: weft::reduction / weft::weak_reduction clauses and Context::local. Every built-in operator,
// user-defined ones, groups ended by other accesses or another operator, taskwait / taskwait_on / the parent's
// end seeing the combined value, nesting through weak (and strong) reductions at depth 2 and 3, exceptions,
// the errors the API reports, and taskiter's refusal.
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../common/test_util.hpp"

using namespace weft_test;

namespace {

class Reduction : public testing::TestWithParam<unsigned> {};

// n members of one group, member i contributing f(i); the result is read after a taskwait.
template <class T, class Op, class F>
T reduce_n(weft::Runtime& rt, T init, const Op& op, int n, F f) {
  T x = init;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i)
      cx.spawn([&x, &op, f, i](weft::Context& t) { Op::combine(t.local(x), static_cast<T>(f(i))); },
               weft::reduction(x, op));
    cx.taskwait();
  });
  return x;
}

// One task may reduce several objects, each with its own operator; groups on both are formed and combined.
TEST_P(Reduction, SeveralReductionsInOneTask) {
  weft::Runtime rt(opts(GetParam()));
  const int n = static_cast<int>(scaled(300, 30));
  long long s = 1;
  int m = 1000;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i)
      cx.spawn(
          [&s, &m, i](weft::Context& t) {
            t.local(s) += i;
            t.local(m) = std::min(t.local(m), (i * 37) % 101 + 5);
          },
          weft::reduction(s, weft::sum), weft::reduction(m, weft::minimum));
    cx.taskwait();
  });
  EXPECT_EQ(s, 1 + static_cast<long long>(n) * (n - 1) / 2);
  EXPECT_EQ(m, 5);
}

TEST_P(Reduction, BuiltinOperators) {
  weft::Runtime rt(opts(GetParam()));
  const int n = static_cast<int>(scaled(400, 40));
  EXPECT_EQ(reduce_n(rt, 7LL, weft::sum, n, [](int i) { return i; }), 7LL + static_cast<long long>(n) * (n - 1) / 2);
  EXPECT_EQ(reduce_n(rt, 3.0, weft::sum, n, [](int i) { return i; }), 3.0 + static_cast<double>(n) * (n - 1) / 2);
  EXPECT_EQ(reduce_n(rt, 1ULL, weft::product, 40, [](int i) { return i % 3 == 0 ? 2 : 1; }), 1ULL << 14);
  EXPECT_EQ(reduce_n(rt, 1000, weft::minimum, n, [](int i) { return (i * 37) % 101 + 5; }), 5);
  EXPECT_EQ(reduce_n(rt, -5, weft::maximum, n, [](int i) { return (i * 37) % 101 - 50; }), 50);
  EXPECT_EQ(reduce_n(rt, 2.5, weft::minimum, n, [](int i) { return i + 3; }), 2.5);
  EXPECT_EQ(reduce_n(rt, -1.0, weft::maximum, n, [](int i) { return -i - 3; }), -1.0);
  EXPECT_EQ(reduce_n(rt, 0xFFu, weft::bit_and, 8, [](int i) { return ~(1u << i); }), 0u);
  EXPECT_EQ(reduce_n(rt, 0x100u, weft::bit_or, 8, [](int i) { return 1u << i; }), 0x1FFu);
  EXPECT_EQ(reduce_n(rt, 0u, weft::bit_xor, n, [](int i) { return static_cast<unsigned>(i); }), [&] {
    unsigned e = 0;
    for (int i = 0; i < n; ++i) e ^= static_cast<unsigned>(i);
    return e;
  }());
  EXPECT_TRUE(reduce_n(rt, true, weft::logical_and, n, [](int) { return true; }));
  EXPECT_FALSE(reduce_n(rt, true, weft::logical_and, n, [n](int i) { return i != n / 2; }));
  EXPECT_TRUE(reduce_n(rt, false, weft::logical_or, n, [n](int i) { return i == n - 1; }));
  EXPECT_FALSE(reduce_n(rt, false, weft::logical_or, n, [](int) { return false; }));
}

// A member that never calls local() contributes the identity: the datum keeps its value.
TEST_P(Reduction, UntouchedCopiesAndEmptyBodies) {
  weft::Runtime rt(opts(GetParam()));
  int x = 42;
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < 50; ++i) cx.spawn([] {}, weft::reduction(x, weft::product));
  });
  EXPECT_EQ(x, 42);
}

struct Histogram {
  std::array<long, 8> bins{};
  std::string tag = "h";  // a non-trivial member: copies are real objects
};

TEST_P(Reduction, UserDefined) {
  weft::Runtime rt(opts(GetParam()));
  const int n = static_cast<int>(scaled(500, 40));
  Histogram h;
  h.bins[0] = 1000;
  auto add = weft::reducer(Histogram{}, [](Histogram& into, const Histogram& from) {
    for (std::size_t k = 0; k < into.bins.size(); ++k) into.bins[k] += from.bins[k];
  });
  // A combiner returning the result, with state (the identity) of its own.
  long m = 0;
  auto gcd_max = weft::reducer(-1L, [](long a, long b) { return a > b ? a : b; });
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) {
      cx.spawn([&h, i](weft::Context& t) { ++t.local(h).bins[static_cast<std::size_t>(i % 8)]; },
               weft::reduction(h, add));
      cx.spawn([&m, i](weft::Context& t) {
        long& v = t.local(m);
        EXPECT_GE(v, -1L);
        v = std::max(v, static_cast<long>((i * 7919) % 1009));
      }, weft::reduction(m, gcd_max));
    }
  });
  long total = 0;
  for (int k = 0; k < 8; ++k) {
    long expect = n / 8 + (k < n % 8 ? 1 : 0) + (k == 0 ? 1000 : 0);
    EXPECT_EQ(h.bins[static_cast<std::size_t>(k)], expect) << k;
    total += h.bins[static_cast<std::size_t>(k)];
  }
  EXPECT_EQ(total, n + 1000);
  long expect_m = 0;
  for (int i = 0; i < n; ++i) expect_m = std::max(expect_m, static_cast<long>((i * 7919) % 1009));
  EXPECT_EQ(m, expect_m);
}

// Groups are ended by any other access, and by a reduction with another operator: sequential semantics.
TEST_P(Reduction, GroupsSeparatedByOtherAccesses) {
  weft::Runtime rt(opts(GetParam()));
  const int rounds = static_cast<int>(scaled(100, 10));
  long x = 1;
  std::vector<long> seen(static_cast<std::size_t>(rounds));
  long expect = 1;
  std::vector<long> expect_seen;
  rt.run([&](weft::Context& cx) {
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 5; ++k)
        cx.spawn([&x, k](weft::Context& t) { t.local(x) += k + 1; }, weft::reduction(x, weft::sum));
      expect += 15;
      if (r % 3 == 0) {
        cx.spawn([&x] { x *= 2; }, weft::inout(x));
        expect *= 2;
      } else if (r % 3 == 1) {
        // another operator: a new group, after the sums are combined
        for (int k = 0; k < 3; ++k)
          cx.spawn([&x, r, k](weft::Context& t) { long& v = t.local(x); v = std::max(v, 100L * r + k); },
                   weft::reduction(x, weft::maximum));
        expect = std::max(expect, 100L * r + 2);
      }
      cx.spawn([&x, &seen, r] { seen[static_cast<std::size_t>(r)] = x; }, weft::in(x));
      expect_seen.push_back(expect);
    }
  });
  EXPECT_EQ(x, expect);
  for (int r = 0; r < rounds; ++r) ASSERT_EQ(seen[static_cast<std::size_t>(r)], expect_seen[static_cast<std::size_t>(r)]) << r;
}

// A reduction group after readers waits for all of them; a writer after the group waits for the combination.
TEST_P(Reduction, AfterReadersAndBeforeWriter) {
  weft::Runtime rt(opts(GetParam()));
  int x = 10;
  std::atomic<int> readers_done{0};
  int seen_by_writer = 0;
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < 4; ++k)
      cx.spawn([&] {
        busy_for_us(50);
        EXPECT_EQ(x, 10);
        readers_done.fetch_add(1);
      }, weft::in(x));
    for (int k = 0; k < 6; ++k)
      cx.spawn([&](weft::Context& t) {
        EXPECT_EQ(readers_done.load(), 4);
        t.local(x) += 1;
      }, weft::reduction(x, weft::sum));
    cx.spawn([&] { seen_by_writer = x; }, weft::out(x));
  });
  EXPECT_EQ(seen_by_writer, 16);
}

TEST_P(Reduction, TaskwaitAndTaskwaitOnSeeCombinedValue) {
  weft::Runtime rt(opts(GetParam()));
  const int n = static_cast<int>(scaled(300, 30));
  long x = 0, y = 0;
  rt.run([&](weft::Context& cx) {
    for (int round = 1; round <= 3; ++round) {
      for (int i = 0; i < n; ++i) {
        cx.spawn([&x](weft::Context& t) { t.local(x) += 1; }, weft::reduction(x, weft::sum));
        cx.spawn([&y](weft::Context& t) { t.local(y) += 2; }, weft::reduction(y, weft::sum));
      }
      cx.taskwait_on(x);
      EXPECT_EQ(x, static_cast<long>(round) * n);
      cx.taskwait();
      EXPECT_EQ(y, 2L * round * n);
    }
    // taskwait_on with no open group, and on a datum never named
    cx.taskwait_on(x);
    int z = 0;
    cx.taskwait_on(z);
  });
  EXPECT_EQ(x, 3L * n);
}

// Reductions still open when the parent ends are combined before its accesses are released.
TEST_P(Reduction, ParentEndCombines) {
  weft::Runtime rt(opts(GetParam()));
  const int parents = static_cast<int>(scaled(50, 5));
  long x = 0;
  std::vector<long> seen;
  rt.run([&](weft::Context& cx) {
    for (int p = 0; p < parents; ++p) {
      cx.spawn([&x](weft::Context& c) {
        for (int k = 0; k < 10; ++k) c.spawn([&x](weft::Context& t) { t.local(x) += 1; }, weft::reduction(x, weft::sum));
      }, weft::inout(x));
      cx.spawn([&x, &seen] { seen.push_back(x); }, weft::in(x));
    }
  });
  EXPECT_EQ(x, 10L * parents);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(parents));
  for (int p = 0; p < parents; ++p) EXPECT_EQ(seen[static_cast<std::size_t>(p)], 10L * (p + 1));
  // The root's own open group: combined before run returns.
  long r = 5;
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < 20; ++k) cx.spawn([&r](weft::Context& t) { t.local(r) += 1; }, weft::reduction(r, weft::sum));
  });
  EXPECT_EQ(r, 25);
}

// Weak reductions: the parent's children join the parent's group (depth 2), through two levels (depth 3), next
// to strong members; later siblings see everything combined.
TEST_P(Reduction, WeakNesting) {
  weft::Runtime rt(opts(GetParam()));
  const int parents = static_cast<int>(scaled(40, 4));
  long x = 0;
  long expect = 0;
  std::vector<long> seen;
  std::vector<long> expect_seen;
  rt.run([&](weft::Context& cx) {
    for (int p = 0; p < parents; ++p) {
      // depth 2: weak parent, strong children
      cx.spawn([&x](weft::Context& c) {
        for (int k = 0; k < 4; ++k) c.spawn([&x](weft::Context& t) { t.local(x) += 1; }, weft::reduction(x, weft::sum));
      }, weft::weak_reduction(x, weft::sum));
      // a strong sibling member that also has reducing children (they share its group)
      cx.spawn([&x](weft::Context& c) {
        c.local(x) += 100;
        for (int k = 0; k < 3; ++k) c.spawn([&x](weft::Context& t) { t.local(x) += 10; }, weft::reduction(x, weft::sum));
      }, weft::reduction(x, weft::sum));
      // depth 3: weak, weak, strong
      cx.spawn([&x](weft::Context& c) {
        for (int k = 0; k < 2; ++k)
          c.spawn([&x](weft::Context& d) {
            for (int j = 0; j < 3; ++j)
              d.spawn([&x](weft::Context& t) { t.local(x) += 1000; }, weft::reduction(x, weft::sum));
          }, weft::weak_reduction(x, weft::sum));
      }, weft::weak_reduction(x, weft::sum));
      expect += 4 + 130 + 6000;
      if (p % 2 == 0) {
        cx.spawn([&x, &seen] { seen.push_back(x); }, weft::in(x));
        expect_seen.push_back(expect);
      }
    }
  });
  EXPECT_EQ(x, expect);
  EXPECT_EQ(seen, expect_seen);
}

// A weak reduction after a writer: its children wait for the writer (through the weak node).
TEST_P(Reduction, WeakReductionChildrenWaitForPredecessor) {
  weft::Runtime rt(opts(GetParam()));
  long x = 0;
  rt.run([&](weft::Context& cx) {
    for (int r = 0; r < 20; ++r) {
      cx.spawn([&x] {
        busy_for_us(20);
        x = x * 2;
      }, weft::inout(x));
      cx.spawn([&x](weft::Context& c) {
        for (int k = 0; k < 3; ++k) c.spawn([&x](weft::Context& t) { t.local(x) += 1; }, weft::reduction(x, weft::sum));
      }, weft::weak_reduction(x, weft::sum));
    }
  });
  long expect = 0;
  for (int r = 0; r < 20; ++r) expect = expect * 2 + 3;
  EXPECT_EQ(x, expect);
}

// A member that throws: nothing of its group is combined (the datum keeps its earlier value), later accessors
// are cancelled, the parent's taskwait rethrows; an independent reduction is unaffected.
TEST_P(Reduction, ExceptionCancelsGroupAndDependents) {
  weft::Runtime rt(opts(GetParam()));
  long x = 5, y = 0;
  std::atomic<int> later_ran{0};
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < 8; ++k)
      cx.spawn([&x, k](weft::Context& t) {
        t.local(x) += 1;
        if (k == 3) throw std::runtime_error("member 3");
      }, weft::reduction(x, weft::sum));
    for (int k = 0; k < 8; ++k) cx.spawn([&y](weft::Context& t) { t.local(y) += 1; }, weft::reduction(y, weft::sum));
    cx.spawn([&] { later_ran.fetch_add(1); }, weft::in(x));
    cx.spawn([&](weft::Context& t) { t.local(x) += 1; later_ran.fetch_add(1); }, weft::reduction(x, weft::maximum));
    try {
      cx.taskwait();
      ADD_FAILURE() << "taskwait should rethrow";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "member 3");
    }
    EXPECT_EQ(x, 5);
    EXPECT_EQ(y, 8);
  });
  EXPECT_EQ(later_ran.load(), 0);
  // Failing while the group is still open at the taskwait (settled there): same outcome.
  long z = 1;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    for (int k = 0; k < 4; ++k)
      cx.spawn([&z, k](weft::Context& t) {
        t.local(z) += 1;
        if (k == 0) throw std::logic_error("first");
      }, weft::reduction(z, weft::sum));
  }), std::logic_error);
  EXPECT_EQ(z, 1);
  // A failing child of a weak reduction fails its parent, hence the group.
  long w = 0;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.spawn([&w](weft::Context& c) {
      c.spawn([&w](weft::Context& t) { t.local(w) += 1; throw std::runtime_error("child"); }, weft::reduction(w, weft::sum));
    }, weft::weak_reduction(w, weft::sum));
    cx.spawn([&w](weft::Context& t) { t.local(w) += 1; }, weft::reduction(w, weft::sum));
  }), std::runtime_error);
  EXPECT_EQ(w, 0);
  // The runtime stays usable.
  EXPECT_EQ(reduce_n(rt, 0, weft::sum, 10, [](int) { return 1; }), 10);
}

// A combiner that throws: the exception reaches the parent and later accessors are cancelled.
TEST_P(Reduction, ThrowingCombiner) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0;
  auto bad = weft::reducer(0, [](int&, const int&) { throw std::runtime_error("combine"); });
  std::atomic<bool> ran{false};
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < 4; ++k) cx.spawn([&x](weft::Context& t) { t.local(x) += 1; }, weft::reduction(x, bad));
    cx.spawn([&] { ran = true; }, weft::inout(x));
    EXPECT_THROW(cx.taskwait(), std::runtime_error);
  });
  EXPECT_FALSE(ran.load());
}

TEST_P(Reduction, ErrorsAreReported) {
  weft::Runtime rt(opts(GetParam()));
  int x = 0, y = 0;
  rt.run([&](weft::Context& cx) {
    // local() without a reduction on the datum, or with another type
    cx.spawn([&](weft::Context& t) { EXPECT_THROW(t.local(x), std::logic_error); }, weft::inout(x));
    cx.spawn([&](weft::Context& t) {
      EXPECT_THROW(t.local(y), std::logic_error);
      EXPECT_THROW(t.local(reinterpret_cast<float&>(x)), std::logic_error);
      t.local(x) += 1;
    }, weft::reduction(x, weft::sum));
    // a reduction and another access of one task to one datum
    EXPECT_THROW(cx.spawn([] {}, weft::reduction(x, weft::sum), weft::in(x)), std::invalid_argument);
    // a reduction access without its operator (built by hand)
    weft::Access a{&y, sizeof y, weft::AccessMode::reduction};
    EXPECT_THROW(cx.spawn_accesses([] {}, &a, 1), std::invalid_argument);
    // children of a reducing task may only join its reduction
    cx.spawn([&](weft::Context& c) {
      EXPECT_THROW(c.spawn([] {}, weft::inout(x)), std::logic_error);
      EXPECT_THROW(c.spawn([] {}, weft::in(x)), std::logic_error);
      EXPECT_THROW(c.spawn([] {}, weft::reduction(x, weft::maximum)), std::logic_error);
      c.spawn([&x](weft::Context& t) { t.local(x) += 1; }, weft::reduction(x, weft::sum));
    }, weft::weak_reduction(x, weft::sum));
    cx.taskwait();
    EXPECT_EQ(x, 2);
  });
  // taskiter: update cannot replay reductions; weak reductions are refused as every weak access
  long s = 0;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) {
      it.spawn([&s](weft::Context& t) { t.local(s) += 1; }, weft::reduction(s, weft::sum));
    }, weft::inout(s), weft::update);
  }), weft::taskiter_error);
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) {
      it.spawn([&s](weft::Context&) {}, weft::weak_reduction(s, weft::sum));
    }, weft::inout(s));
  }), weft::taskiter_error);
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter(3, [&](weft::Context& it) {
      it.spawn([] {}, weft::reduction(s, weft::sum), weft::in(s));
    }, weft::inout(s));
  }), std::invalid_argument);
  EXPECT_EQ(s, 0);
}

// Recorded tasks with reductions: combined every iteration by a vertex of the graph (dependencies, no barrier),
// against the sequential loop. Groups ended by another access, by another operator, and by the end of the body;
// contributions that vary with the iteration; nested reducing children of a recorded member.
struct IterCase {
  std::uint32_t unroll;
  bool barrier;
};
void taskiter_reductions(weft::Runtime& rt, IterCase c) {
  const std::uint64_t n = scaled(300, 30);
  long x = 0, y = 1000, z = 0;
  std::vector<long> seen;
  rt.run([&](weft::Context& cx) {
    auto body = [&](weft::Context& it) {
      for (int k = 0; k < 6; ++k)
        it.spawn([&x, k](weft::Context& t) {
          t.local(x) += static_cast<long>(k + 1) * static_cast<long>(1 + weft::taskiter_iteration(t) % 7);
        }, weft::reduction(x, weft::sum));
      for (int k = 0; k < 3; ++k)  // another operator on x: a new group, after the sum is combined
        it.spawn([&x, k](weft::Context& t) {
          long& m = t.local(x);
          m = std::max(m, static_cast<long>(weft::taskiter_iteration(t) * 10 + static_cast<std::uint64_t>(k)));
        }, weft::reduction(x, weft::maximum));
      it.spawn([&] { seen.push_back(x); }, weft::in(x));
      it.spawn([&] { x = x % 1000003; }, weft::inout(x));
      // y: only reduced, combined at the end of each iteration's body
      for (int k = 0; k < 4; ++k)
        it.spawn([&y](weft::Context& t) { long& m = t.local(y); m = std::min(m, 1000 - static_cast<long>(weft::taskiter_iteration(t))); },
                 weft::reduction(y, weft::minimum));
      // z: a member whose children join its reduction
      it.spawn([&z](weft::Context& t) {
        t.local(z) += 1;
        for (int k = 0; k < 3; ++k) t.spawn([&z](weft::Context& u) { u.local(z) += 10; }, weft::reduction(z, weft::sum));
      }, weft::reduction(z, weft::sum));
    };
    if (c.barrier)
      cx.taskiter(n, body, weft::unroll(c.unroll), weft::replay_barrier, weft::inout(x), weft::inout(y), weft::inout(z));
    else
      cx.taskiter(n, body, weft::unroll(c.unroll), weft::inout(x), weft::inout(y), weft::inout(z));
    cx.spawn([&] { seen.push_back(-x); }, weft::in(x));
  });
  long ex = 0, ey = 1000, ez = 0;
  std::vector<long> expect;
  for (std::uint64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 6; ++k) ex += static_cast<long>(k + 1) * static_cast<long>(1 + i % 7);
    ex = std::max(ex, static_cast<long>(i * 10 + 2));
    expect.push_back(ex);
    ex %= 1000003;
    ey = std::min(ey, 1000 - static_cast<long>(i));
    ez += 31;
  }
  expect.push_back(-ex);
  EXPECT_EQ(seen, expect);
  EXPECT_EQ(x, ex);
  EXPECT_EQ(y, ey);
  EXPECT_EQ(z, ez);
}

TEST_P(Reduction, Taskiter) { 
  weft::Runtime rt(opts(GetParam()));
  taskiter_reductions(rt, {1, false});
  taskiter_reductions(rt, {3, false});
  taskiter_reductions(rt, {1, true});
  taskiter_reductions(rt, {2, true});
}

// taskiter_while: the condition sees each iteration's combined value.
TEST_P(Reduction, TaskiterWhile) {
  weft::Runtime rt(opts(GetParam()));
  long x = 0;
  int iterations = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter_while([&] { return x < 1000; }, [&](weft::Context& it) {
      for (int k = 0; k < 5; ++k) it.spawn([&x](weft::Context& t) { t.local(x) += 3; }, weft::reduction(x, weft::sum));
      it.spawn([&] { ++iterations; }, weft::inout(iterations));
    }, weft::inout(x), weft::inout(iterations));
  });
  EXPECT_EQ(x, 1005);
  EXPECT_EQ(iterations, 67);
}

// A member that throws stops the loop; the iterations combined before stay.
TEST_P(Reduction, TaskiterException) {
  weft::Runtime rt(opts(GetParam()));
  long x = 0;
  EXPECT_THROW(rt.run([&](weft::Context& cx) {
    cx.taskiter(50, [&](weft::Context& it) {
      for (int k = 0; k < 3; ++k)
        it.spawn([&x, k](weft::Context& t) {
          if (k == 1 && weft::taskiter_iteration(t) == 10) throw std::runtime_error("iteration 10");
          t.local(x) += 1;
        }, weft::reduction(x, weft::sum));
    }, weft::inout(x));
  }), std::runtime_error);
  EXPECT_EQ(x, 30);  // iterations 0..9: their combinations precede every task of iteration 10
}

// Tasks nested in a recorded (inout) taskiter task use reductions as any task does.
TEST_P(Reduction, InsideReplayedTask) {
  weft::Runtime rt(opts(GetParam()));
  long s = 0;
  rt.run([&](weft::Context& cx) {
    cx.taskiter(20, [&](weft::Context& it) {
      it.spawn([&s](weft::Context& t) {
        for (int k = 0; k < 5; ++k) t.spawn([&s](weft::Context& c) { c.local(s) += 1; }, weft::reduction(s, weft::sum));
      }, weft::inout(s));
    }, weft::inout(s));
  });
  EXPECT_EQ(s, 100);
}

// A reducing task may take a completion event: the group is combined only once it is fulfilled.
TEST_P(Reduction, CompletionEventDelaysCombination) {
  weft::Runtime rt(opts(GetParam()));
  long x = 0;
  long seen = -1;
  std::vector<weft::Event> events;
  std::atomic<int> taken{0};
  std::thread fulfiller;
  rt.run([&](weft::Context& cx) {
    for (int k = 0; k < 4; ++k)
      cx.spawn([&, k](weft::Context& t) {
        t.local(x) += k + 1;
        if (k == 2) {
          events.push_back(t.event());
          taken.store(1, std::memory_order_release);
        }
      }, weft::reduction(x, weft::sum));
    cx.spawn([&] { seen = x; }, weft::in(x));
    fulfiller = std::thread([&] {
      spin_until([&] { return taken.load(std::memory_order_acquire) == 1; });
      sleep_ms(5);
      events.back().fulfill();
    });
  });
  fulfiller.join();
  EXPECT_EQ(seen, 10);
  EXPECT_EQ(x, 10);
}

// Many reductions, mixed with other accesses and priorities, across many data.
TEST_P(Reduction, ManyData) {
  weft::Runtime rt(opts(GetParam(), 64));
  constexpr int kData = 16;
  const int n = static_cast<int>(scaled(20000, 2000));
  std::array<long long, kData> v{};
  std::array<long long, kData> expect{};
  rt.run([&](weft::Context& cx) {
    for (int i = 0; i < n; ++i) {
      const int d = (i * 7) % kData;
      if (i % 13 == 0) {
        cx.spawn([&v, d] { v[static_cast<std::size_t>(d)] -= 3; }, weft::inout(v[static_cast<std::size_t>(d)]));
        expect[static_cast<std::size_t>(d)] -= 3;
      } else {
        cx.spawn([&v, d, i](weft::Context& t) { t.local(v[static_cast<std::size_t>(d)]) += i; },
                 weft::reduction(v[static_cast<std::size_t>(d)], weft::sum), weft::priority(i % 3));
        expect[static_cast<std::size_t>(d)] += i;
      }
    }
  });
  EXPECT_EQ(v, expect);
}

INSTANTIATE_TEST_SUITE_P(Workers, Reduction, testing::Values(1u, 2u, 4u), WorkersName());

}  // namespace
