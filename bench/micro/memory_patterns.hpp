// Task patterns whose memory must stay bounded however many tasks run (weft-bench-memory and the memory test):
// each spawns about n tasks through a small window of live ones, so what weft keeps per finished task (records,
// descriptors, join nodes, table entries) shows as resident memory growing with n.
//
//   independent  n tasks without accesses
//   chain        n tasks inout(x)
//   readers      out(x), then n - 2 readers in(x), then out(x)
//   writers      n tasks out(a_i), a_i distinct addresses of a reserved, never touched range (names only: the
//                program itself keeps no memory per task)
//   inoutset     groups of 8 inoutset(x) members followed by one in(x)
//   commutative  groups of 8 commutative(x) members followed by one in(x)
//   weak         parents weak_inout(x), each spawning 4 children inout(x)
//   reduction    groups of 8 reduction(x, sum) members (each adds to its private copy) followed by one in(x)
//   reduction_open  n reduction(x, sum) tasks in one group, combined only at the end (its member list is
//                pruned as it grows; its copies are one per worker)
//   weak_reduction  parents weak_reduction(x, sum), each spawning 4 children reduction(x, sum)
//   taskiter     a taskiter whose recorded task inout(x) spawns 8 nested tasks inout(x) every iteration
//   flow         a flow graph of tasks with 2 inputs: batches of 1024 keys get their first input, and their
//                second input only when the next batch gets its first, so 1024-2048 tasks are always pending;
//                the two-input tasks have a higher priority than the sources, so they run once ready (this
//                measures the pending-task tables)
//   flow_ready   the same without priorities: a source's continuation, sent after its ready tasks, would run
//                ahead of them without the throttling of sends
#pragma once

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <weft/flow.hpp>
#include <weft/weft.hpp>

namespace weft_memory {

inline const char* const kPatterns[] = {"independent", "chain",     "readers",        "writers",
                                        "inoutset",    "commutative", "weak",         "reduction",
                                        "reduction_open", "weak_reduction", "taskiter", "flow",
                                        "flow_ready"};

inline bool is_pattern(const std::string& p) {
  return std::find_if(std::begin(kPatterns), std::end(kPatterns), [&](const char* k) { return p == k; }) !=
         std::end(kPatterns);
}

/// Resident set size now, in bytes (/proc/self/statm).
inline long long rss_bytes() {
  long long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lld %lld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE);
}

/// Peak RSS growth over a region: start() after the runtime has started (and a warm-up), tick() from the
/// spawning loops (samples every 4096 calls), finish() at the end.
class Sampler {
 public:
  void start() {
    malloc_trim(0);  // memory freed by an earlier measurement goes back to the system: it cannot hide growth
    base_ = rss_bytes();
    peak_.store(base_);
    count_.store(0);
  }
  void tick() {
    if ((count_.fetch_add(1, std::memory_order_relaxed) & 4095) == 4095) sample();
  }
  void sample() {
    long long now = rss_bytes(), cur = peak_.load(std::memory_order_relaxed);
    while (now > cur && !peak_.compare_exchange_weak(cur, now, std::memory_order_relaxed)) {
    }
  }
  double growth_mib() const { return static_cast<double>(peak_.load() - base_) / (1024.0 * 1024.0); }

 private:
  long long base_ = 0;
  std::atomic<long long> peak_{0};
  std::atomic<std::uint64_t> count_{0};
};

struct Outcome {
  long long ran = 0;       // bodies that ran
  long long expected = 0;  // bodies that should have run (about n)
};

namespace detail {
struct alignas(64) Slot {
  long long v = 0;
};
// One counter per worker (a body counts itself on its worker's slot: no shared atomic in the measured loop).
struct Counts {
  explicit Counts(unsigned workers) : slots(workers) {}
  std::vector<Slot> slots;
  long long total() const {
    long long t = 0;
    for (const Slot& s : slots) t += s.v;
    return t;
  }
};
inline void count(Slot* s) { ++s[weft::detail::current_worker_index()].v; }
}  // namespace detail

/// Runs `pattern` with about n tasks on rt (several runs for flow). `s` is ticked per task spawned.
inline Outcome run_pattern(weft::Runtime& rt, const std::string& pattern, long long n, Sampler& s) {
  detail::Counts counts(rt.num_workers());
  detail::Slot* c = counts.slots.data();
  Outcome o;
  long long x = 0;  // the datum of the single-datum patterns (a name only, but for the reductions' result)
  long long reduced = -1;  // reduction patterns: what x must hold at the end
  auto body = [c] { detail::count(c); };
  if (pattern == "flow" || pattern == "flow_ready") {
    namespace wf = weft::flow;
    constexpr long kBatch = 1024;
    const long batches = std::max(1L, static_cast<long>(n / kBatch));
    wf::Edge<long, void> next;
    wf::Edge<long, int> first, second;
    auto pair = wf::make_tt<long>([c](const long&, int, int) { detail::count(c); }, wf::edges(first, second),
                                  wf::edges(), "pair");
    auto source = wf::make_tt<long>(
        [&s, batches](const long& b, auto& out) {
          if (b < batches)
            for (long k = b * kBatch; k < (b + 1) * kBatch; ++k) {
              wf::send<0>(k, 1, out);
              s.tick();
            }
          if (b > 0)
            for (long k = (b - 1) * kBatch; k < b * kBatch; ++k) wf::send<1>(k, 2, out);
          if (b < batches) wf::sendk<2>(b + 1, out);
        },
        wf::edges(next), wf::edges(first, second, next), "source");
    if (pattern == "flow") pair->set_priomap([](const long&) { return 1; });
    auto g = wf::graph(rt, source, pair);
    g.invoke(0L);
    g.wait();
    o.expected = batches * kBatch;
  } else if (pattern == "writers") {
    // Addresses as names only: a reserved range that is never touched (nor made accessible).
    const std::size_t bytes = static_cast<std::size_t>(n);
    void* range = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) return o;
    const char* a = static_cast<const char*>(range);
    rt.run([&](weft::Context& cx) {
      for (long long i = 0; i < n; ++i) {
        cx.spawn(body, weft::out(a + i, 1));
        s.tick();
      }
    });
    munmap(range, bytes);
    o.expected = n;
  } else if (pattern == "taskiter") {
    const long long iters = std::max(1LL, n / 9);
    rt.run([&](weft::Context& cx) {
      cx.taskiter(
          static_cast<std::uint64_t>(iters),
          [&](weft::Context& it) {
            it.spawn(
                [&x, &s, c](weft::Context& t) {
                  detail::count(c);
                  for (int k = 0; k < 8; ++k) {
                    t.spawn([c] { detail::count(c); }, weft::inout(x));
                    s.tick();
                  }
                },
                weft::inout(x));
          },
          weft::inout(x));
    });
    o.expected = iters * 9;
  } else {
    rt.run([&](weft::Context& cx) {
      if (pattern == "independent") {
        for (long long i = 0; i < n; ++i, s.tick()) cx.spawn(body);
        o.expected = n;
      } else if (pattern == "chain") {
        for (long long i = 0; i < n; ++i, s.tick()) cx.spawn(body, weft::inout(x));
        o.expected = n;
      } else if (pattern == "readers") {
        cx.spawn(body, weft::out(x));
        for (long long i = 2; i < n; ++i, s.tick()) cx.spawn(body, weft::in(x));
        cx.spawn(body, weft::out(x));
        o.expected = std::max(n, 2LL);
      } else if (pattern == "inoutset" || pattern == "commutative") {
        const bool set = pattern == "inoutset";
        const long long groups = std::max(1LL, n / 9);
        for (long long g = 0; g < groups; ++g) {
          for (int k = 0; k < 8; ++k, s.tick()) {
            if (set)
              cx.spawn(body, weft::inoutset(x));
            else
              cx.spawn(body, weft::commutative(x));
          }
          cx.spawn(body, weft::in(x));
          s.tick();
        }
        o.expected = groups * 9;
      } else if (pattern == "reduction") {
        const long long groups = std::max(1LL, n / 9);
        auto add = [c, &x](weft::Context& t) {
          detail::count(c);
          t.local(x) += 1;
        };
        for (long long g = 0; g < groups; ++g) {
          for (int k = 0; k < 8; ++k, s.tick()) cx.spawn(add, weft::reduction(x, weft::sum));
          cx.spawn(body, weft::in(x));
          s.tick();
        }
        o.expected = groups * 9;
        reduced = groups * 8;
      } else if (pattern == "reduction_open") {
        for (long long i = 0; i < n; ++i, s.tick())
          cx.spawn([c, &x](weft::Context& t) {
            detail::count(c);
            t.local(x) += 1;
          }, weft::reduction(x, weft::sum));
        o.expected = n;
        reduced = n;
      } else if (pattern == "weak_reduction") {
        const long long parents = std::max(1LL, n / 5);
        for (long long i = 0; i < parents; ++i) {
          cx.spawn(
              [c, &x](weft::Context& p) {
                detail::count(c);
                for (int k = 0; k < 4; ++k)
                  p.spawn([c, &x](weft::Context& t) {
                    detail::count(c);
                    t.local(x) += 1;
                  }, weft::reduction(x, weft::sum));
              },
              weft::weak_reduction(x, weft::sum));
          for (int k = 0; k < 5; ++k) s.tick();
        }
        o.expected = parents * 5;
        reduced = parents * 4;
      } else if (pattern == "weak") {
        const long long parents = std::max(1LL, n / 5);
        for (long long i = 0; i < parents; ++i) {
          cx.spawn(
              [c, &x](weft::Context& p) {
                detail::count(c);
                for (int k = 0; k < 4; ++k) p.spawn([c] { detail::count(c); }, weft::inout(x));
              },
              weft::weak_inout(x));
          for (int k = 0; k < 5; ++k) s.tick();
        }
        o.expected = parents * 5;
      }
    });
  }
  s.sample();
  o.ran = counts.total();
  if (reduced >= 0 && x != reduced) o.ran = -1;  // a wrong combination fails the pattern
  return o;
}

}  // namespace weft_memory
