// The flow front end's keyed task table: the rare paths (resize, quiescent maintenance). See
// weft/detail/flow_table.hpp.
#include "weft/detail/flow_table.hpp"

namespace weft::detail::flow {

BravoLock::BravoLock(unsigned readers) : n_(readers), flags_(new Flag[readers == 0 ? 1 : readers]) {}

void BravoLock::lock() {
  underlying_.lock();  // excludes the other writers and the slow-path readers
  writer_.store(true, std::memory_order_seq_cst);
  // Readers that published their flag before seeing `writer_` are inside; wait for them to leave. Readers
  // arriving now see `writer_` and queue on the underlying lock.
  for (unsigned i = 0; i < n_; ++i)
    while (flags_[i].active.load(std::memory_order_seq_cst)) cpu_relax();
}

void BravoLock::unlock() {
  writer_.store(false, std::memory_order_release);
  underlying_.unlock();
}

TaskTable::Table::Table(unsigned log2)
    : shift(64 - log2), size(std::size_t{1} << log2), buckets(new Bucket[std::size_t{1} << log2]) {}

TaskTable::TaskTable(unsigned workers) : resize_(workers), main_(nullptr) {
  unsigned log2 = 0;
  while ((1u << log2) < kInitialBuckets) ++log2;
  main_.store(new Table(log2), std::memory_order_release);
}

TaskTable::~TaskTable() {
  Table* t = main_.load(std::memory_order_relaxed);
  while (t) {
    Table* o = t->older;
    delete t;
    t = o;
  }
}

void TaskTable::grow(Table* seen) {
  resize_.lock();
  Table* m = main_.load(std::memory_order_relaxed);
  if (m == seen) {  // nobody grew it meanwhile
    unsigned log2 = 64 - m->shift + 1;
    Table* bigger = new Table(log2);
    bigger->older = m;
    main_.store(bigger, std::memory_order_release);
    shrink_chain();  // no reader is inside: older tables that emptied can go
  }
  resize_.unlock();
}

void TaskTable::shrink_chain() {
  Table* prev = main_.load(std::memory_order_relaxed);
  Table* t = prev->older;
  while (t) {
    bool empty = true;
    for (std::size_t i = 0; i < t->size && empty; ++i) empty = t->buckets[i].head == nullptr;
    Table* o = t->older;
    if (empty) {
      prev->older = o;
      delete t;
    } else {
      prev = t;
    }
    t = o;
  }
}

std::size_t TaskTable::count() const {
  std::size_t n = 0;
  for (Table* t = main_.load(std::memory_order_relaxed); t; t = t->older)
    for (std::size_t i = 0; i < t->size; ++i) n += t->buckets[i].size;
  return n;
}

std::size_t TaskTable::tables() const {
  std::size_t n = 0;
  for (Table* t = main_.load(std::memory_order_relaxed); t; t = t->older) ++n;
  return n;
}

}  // namespace weft::detail::flow
