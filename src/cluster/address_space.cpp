// The common address space of a cluster (see address_space.hpp).
#include "cluster/address_space.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace weft::detail {

namespace {
constexpr std::size_t kGranule = 64;
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

// ThreadSanitizer's mmap interceptor turns a hint outside its application ranges into 0 and keeps the flags, so
// that MAP_FIXED_NOREPLACE then asks for page 0: under it the address is only a hint (the result is checked).
#if defined(__SANITIZE_THREAD__)
constexpr int kNoReplace = 0;
#else
constexpr int kNoReplace = MAP_FIXED_NOREPLACE;
#endif

void* map_at(std::uintptr_t hint, std::size_t bytes, bool fixed) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? kNoReplace : 0);
  void* p = mmap(reinterpret_cast<void*>(hint), bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (fixed && reinterpret_cast<std::uintptr_t>(p) != hint) {  // a kernel without MAP_FIXED_NOREPLACE: a hint
    munmap(p, bytes);
    return nullptr;
  }
  return p;
}
}  // namespace

void RangeAllocator::reset(std::uintptr_t base, std::size_t size) {
  std::lock_guard<std::mutex> g(m_);
  base_ = base;
  size_ = size;
  free_.clear();
  used_.clear();
  if (size) free_.emplace(base, size);
}

void* RangeAllocator::allocate(std::size_t bytes, std::size_t align) {
  bytes = round_up(std::max<std::size_t>(bytes, 1), kGranule);
  std::lock_guard<std::mutex> g(m_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::uintptr_t start = round_up(it->first, align);
    const std::uintptr_t end = it->first + it->second;
    if (start + bytes > end) continue;
    const std::uintptr_t block = it->first;
    free_.erase(it);
    if (start > block) free_.emplace(block, start - block);
    if (start + bytes < end) free_.emplace(start + bytes, end - (start + bytes));
    used_.emplace(start, bytes);
    return reinterpret_cast<void*>(start);
  }
  return nullptr;
}

std::size_t RangeAllocator::take_used(void* p) {
  auto u = used_.find(reinterpret_cast<std::uintptr_t>(p));
  if (u == used_.end()) throw std::invalid_argument("weft: freeing a pointer that was not allocated there");
  const std::size_t size = u->second;
  used_.erase(u);
  return size;
}

void RangeAllocator::add_free(std::uintptr_t start, std::size_t bytes) {
  // Coalesce with the free neighbours.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, bytes);
}

std::size_t RangeAllocator::release(void* p) {
  std::lock_guard<std::mutex> g(m_);
  const std::size_t size = take_used(p);
  add_free(reinterpret_cast<std::uintptr_t>(p), size);
  return size;
}

std::size_t RangeAllocator::retire(void* p) {
  std::lock_guard<std::mutex> g(m_);
  const std::size_t size = take_used(p);
  retired_.emplace(reinterpret_cast<std::uintptr_t>(p), size);
  return size;
}

void RangeAllocator::reuse_retired() {
  std::lock_guard<std::mutex> g(m_);
  for (const auto& [start, bytes] : retired_) add_free(start, bytes);
  retired_.clear();
}

void RangeAllocator::reuse_retired(std::uintptr_t start) {
  std::lock_guard<std::mutex> g(m_);
  if (auto it = retired_.find(start); it != retired_.end()) {
    add_free(it->first, it->second);
    retired_.erase(it);
  }
}

AddressSpace& AddressSpace::get() {
  static AddressSpace* s = new AddressSpace;  // never destroyed: pointers into it may outlive static objects
  return *s;
}

void AddressSpace::reserve(std::size_t bytes, int nodes, int rank, Agree agree, void* ctx) {
  std::lock_guard<std::mutex> g(m_);
  const std::size_t asked = bytes;
  bytes = round_up(bytes, kPage * static_cast<std::size_t>(2 * nodes));  // whole pages per half and process
  if (base_) {
    if (size_ == bytes && nodes_ == nodes && rank_ == rank) return;
    throw std::runtime_error("weft: a cluster's common address space is already reserved for " +
                             std::to_string(nodes_) + " process(es) and " + std::to_string(size_) +
                             " bytes (it lasts as long as the process), but this Runtime asks for " +
                             std::to_string(nodes) + " process(es) and Options::cluster_memory " +
                             std::to_string(asked) + " (" + std::to_string(bytes) +
                             " bytes once rounded up to whole pages): every cluster Runtime of a process must use "
                             "the same job and Options::cluster_memory (WEFT_CLUSTER_MEMORY)");
  }
  std::uintptr_t base = 0;
  if (nodes == 1) {
    void* p = map_at(0, bytes, false);
    if (!p)
      throw std::runtime_error("weft: cannot reserve " + std::to_string(bytes) +
                               " bytes of address space for weft::dmalloc (" + std::strerror(errno) +
                               "): lower Options::cluster_memory (WEFT_CLUSTER_MEMORY)");
    base = reinterpret_cast<std::uintptr_t>(p);
  } else {
    // Candidates: where the kernel put rank 0's mapping, then fixed addresses high in the user half of the
    // 47-bit address space, below where shared objects and stacks usually go (the first ones also lie in the
    // ranges ThreadSanitizer gives applications), then lower ones.
    auto candidate = [&](int c) -> std::uintptr_t {
      if (c <= 8) return std::uintptr_t{0x7e8000000000} + std::uintptr_t(c - 1) * 0x2000000000ull;
      return std::uintptr_t{0x100000000000} + std::uintptr_t(c - 8) * 0x40000000000ull;
    };
    constexpr int kCandidates = 16;
    for (int c = 0; c <= kCandidates && !base; ++c) {
      void* mine = nullptr;
      std::uintptr_t proposal = 0;
      if (c == 0) {
        if (rank == 0) mine = map_at(0, bytes, false);
        proposal = agree(ctx, reinterpret_cast<std::uintptr_t>(mine), mine != nullptr);  // broadcast + check
        if (rank != 0 && proposal) mine = map_at(proposal, bytes, true);
      } else {
        proposal = candidate(c);
        if (proposal + bytes > std::uintptr_t{0x7fff00000000}) continue;  // too large for this candidate
        mine = map_at(proposal, bytes, true);
      }
      // Everybody reports; 0 back means that someone failed: unmap and try the next candidate.
      const std::uintptr_t agreed = agree(ctx, proposal, proposal != 0 && mine == reinterpret_cast<void*>(proposal));
      if (agreed) {
        base = agreed;
      } else if (mine) {
        munmap(mine, bytes);
      }
    }
    if (!base)
      throw std::runtime_error("weft: the processes found no address range of " + std::to_string(bytes) +
                               " bytes free on all of them for the cluster's common address space: lower "
                               "Options::cluster_memory (WEFT_CLUSTER_MEMORY)");
  }
  base_ = base;
  size_ = bytes;
  nodes_ = nodes;
  rank_ = rank;
  local_size_ = bytes / 2 / static_cast<std::size_t>(nodes) / kPage * kPage;
  distributed_.reset(base, bytes / 2);
  local_.reset(base + bytes / 2 + static_cast<std::size_t>(rank) * local_size_, local_size_);
}

namespace {
/// A std::bad_alloc (as documented) that says which reservation ran out and what sizes it.
class SpaceExhausted : public std::bad_alloc {
 public:
  SpaceExhausted(const char* call, std::size_t bytes, std::size_t range)
      : what_(std::string("weft::") + call + ": no free block of " + std::to_string(bytes) + " bytes in its " +
              std::to_string(range) + "-byte part of the common address space (sized by Options::cluster_memory, "
              "WEFT_CLUSTER_MEMORY: half for dmalloc, half shared by the processes' lmalloc)") {}
  const char* what() const noexcept override { return what_.what(); }

 private:
  std::runtime_error what_;  // (its copy does not throw, as an exception's must not)
};
}  // namespace

void* AddressSpace::dmalloc(std::size_t bytes) {
  void* p = distributed_.allocate(bytes, kPage);
  if (!p) throw SpaceExhausted("dmalloc", bytes, size_ / 2);
  return p;
}

std::size_t AddressSpace::dfree(void* p, bool defer) {
  const std::size_t n = defer ? distributed_.retire(p) : distributed_.release(p);
  release_pages(p, n);
  return n;
}

void* AddressSpace::lmalloc(std::size_t bytes) {
  void* p = local_.allocate(bytes, kGranule);
  if (!p) throw SpaceExhausted("lmalloc", bytes, local_size_);
  return p;
}

std::size_t AddressSpace::lfree(void* p, bool defer) {
  const std::size_t n = defer ? local_.retire(p) : local_.release(p);
  release_pages(p, n);
  return n;
}

int AddressSpace::local_owner(const void* address) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (!base_ || a < base_ + size_ / 2 || a >= base_ + size_ || local_size_ == 0) return -1;
  const std::size_t r = (a - base_ - size_ / 2) / local_size_;
  return r < static_cast<std::size_t>(nodes_) ? static_cast<int>(r) : -1;
}

void AddressSpace::release_pages(void* p, std::size_t bytes) noexcept {
  // Whole pages only (dmalloc regions are page-aligned; their last page may be partly another's).
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t lo = round_up(a, kPage), hi = (a + bytes) / kPage * kPage;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

void AddressSpace::add_region(const DistributedRegion& r) {
  std::lock_guard<std::mutex> g(regions_m_);
  regions_[r.start] = r;
}

void AddressSpace::remove_region(std::uintptr_t start) {
  std::lock_guard<std::mutex> g(regions_m_);
  regions_.erase(start);
}

int AddressSpace::affinity(const void* address) const {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (!base_ || a < base_ || a >= base_ + size_) return -1;
  if (a >= base_ + size_ / 2) {
    const std::size_t r = (a - base_ - size_ / 2) / local_size_;
    return r < static_cast<std::size_t>(nodes_) ? static_cast<int>(r) : -1;
  }
  std::lock_guard<std::mutex> g(regions_m_);
  auto it = regions_.upper_bound(a);
  if (it == regions_.begin()) return -1;
  --it;
  const DistributedRegion& r = it->second;
  if (a >= r.start + r.bytes) return -1;
  const std::size_t off = a - r.start;
  const auto n = static_cast<std::size_t>(nodes_);
  switch (r.distribution.kind) {
    case Distribution::Kind::blocked: {
      const std::size_t per = std::max<std::size_t>(1, (r.bytes + n - 1) / n);
      return static_cast<int>(std::min(off / per, n - 1));
    }
    case Distribution::Kind::cyclic: {
      const std::size_t b = std::max<std::size_t>(1, r.distribution.block);
      return static_cast<int>((off / b) % n);
    }
    case Distribution::Kind::custom: {
      const int k = r.distribution.rank_of(off, r.bytes, nodes_);
      return k >= 0 && k < nodes_ ? k : -1;
    }
  }
  return -1;
}

}  // namespace weft::detail
