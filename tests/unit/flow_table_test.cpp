// The flow front end's pending-task table (weft/detail/flow_table.hpp): the reader-biased resize lock and the
// chained-growth hash table under concurrent use by the workers of a runtime.
#include <gtest/gtest.h>
#include <weft/flow.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "../common/test_util.hpp"

namespace {

using weft::detail::Task;
using weft::detail::flow::BravoLock;
using weft::detail::flow::TaskTable;

TEST(FlowTable, BravoWritersExcludeFastAndSlowReaders) {
  constexpr unsigned kReaders = 3;
  BravoLock lock(kReaders);
  long a = 0, b = 0;  // the writer keeps a == b; plain variables: TSan checks the exclusion
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0}, fast{0}, reads{0};
  std::vector<std::thread> ts;
  for (unsigned r = 0; r <= kReaders; ++r)  // reader kReaders has no flag: always the slow path
    ts.emplace_back([&, r] {
      while (!stop.load()) {
        const bool f = lock.lock_shared(r);
        if (a != b) bad.fetch_add(1);
        lock.unlock_shared(r, f);
        fast.fetch_add(f ? 1 : 0);
        reads.fetch_add(1);
      }
    });
  const int writes = static_cast<int>(weft_test::scaled(2000));
  for (int i = 0; i < writes; ++i) {
    lock.lock();
    ++a;
    ++b;
    lock.unlock();
    if (i % 64 == 0) std::this_thread::yield();
  }
  // No writer any more: readers must take the fast path now (while writers were active, a loaded machine may
  // have let every read find one).
  const long fast_before = fast.load();
  weft_test::spin_until([&] { return reads.load() > 1000 && fast.load() > fast_before; });
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(a, writes);
  EXPECT_GT(fast.load(), 0);
}

// Entries are bare descriptors whose `priority` field is the key.
struct Keyed {
  explicit Keyed(std::size_t n) : tasks(new Task[n]) {
    for (std::size_t i = 0; i < n; ++i) tasks[i].priority = static_cast<std::int32_t>(i);
  }
  std::unique_ptr<Task[]> tasks;
};

TEST(FlowTable, ConcurrentInsertFindEraseWithGrowth) {
  const unsigned workers = 4;
  const std::size_t per = weft_test::scaled(4000), n = per * workers;
  weft::Runtime rt(weft_test::opts(workers));
  TaskTable table(workers);
  Keyed keyed(n);
  // A degenerate hash for a quarter of the keys forces long buckets, hence growth.
  auto hash = [](std::int32_t k) { return std::size_t(k % 4 == 0 ? 7 : k); };
  std::atomic<long> inserted{0}, found{0}, missing{0};
  rt.run([&](weft::Context& cx) {
    for (unsigned w = 0; w < workers; ++w)
      cx.spawn([&, w] {
        for (std::size_t i = w * per; i < (w + 1) * per; ++i) {
          const auto k = static_cast<std::int32_t>(i);
          TaskTable::Locked b(table, hash(k));
          if (!b.find([&](Task* e) { return e->priority == k; })) {
            b.insert(&keyed.tasks[i]);
            inserted.fetch_add(1);
          }
        }
      });
  });
  EXPECT_EQ(inserted.load(), static_cast<long>(n));
  EXPECT_EQ(table.count(), n);
  EXPECT_GT(table.tables(), 1u);  // it grew
  rt.run([&](weft::Context& cx) {
    for (unsigned w = 0; w < workers; ++w)
      cx.spawn([&, w] {
        // Each worker erases another worker's keys, in reverse order.
        const std::size_t base = ((w + 1) % workers) * per;
        for (std::size_t j = per; j-- > 0;) {
          const auto k = static_cast<std::int32_t>(base + j);
          TaskTable::Locked b(table, hash(k));
          if (Task* e = b.find([&](Task* x) { return x->priority == k; })) {
            b.erase(e);
            found.fetch_add(1);
          } else {
            missing.fetch_add(1);
          }
        }
      });
  });
  EXPECT_EQ(found.load(), static_cast<long>(n));
  EXPECT_EQ(missing.load(), 0);
  EXPECT_EQ(table.count(), 0u);
  table.shrink_chain();
  EXPECT_EQ(table.tables(), 1u);  // older tables freed once empty
}

}  // namespace
