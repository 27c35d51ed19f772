// The common address space of a cluster (weft::dmalloc, weft::lmalloc): one range of virtual memory reserved
// at the same address on every process, so that a pointer into it means the same datum everywhere.
//
//   [ base, base + size/2 )                    dmalloc: allocated by rank 0 alone (no coordination needed: every
//                                              process has the whole range reserved)
//   [ base + size/2 + r*L, base + size/2 + (r+1)*L )   lmalloc of rank r (L = size/2 / processes)
//
// The range is anonymous, private, read-write and MAP_NORESERVE: only pages a process touches take memory
// there. The processes agree on the address without relying on ASLR being off: rank 0 maps the range where the
// kernel puts it and proposes that address; every other rank maps it there with MAP_FIXED_NOREPLACE (which fails
// instead of replacing a mapping); if any rank fails, they all unmap and try the next of a fixed list of
// candidate addresses. The reservation lives as long as the process (a later cluster Runtime reuses it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "weft/cluster.hpp"

namespace weft::detail {

/// First-fit allocator over one range (offsets, 64-byte granules); thread-safe.
class RangeAllocator {
 public:
  void reset(std::uintptr_t base, std::size_t size);
  /// Null when no free block is large enough.
  void* allocate(std::size_t bytes, std::size_t align);
  /// The size it was allocated with; throws std::invalid_argument for a pointer it did not return.
  std::size_t release(void* p);
  /// The same, but the block is allocated again only after reuse_retired().
  std::size_t retire(void* p);
  void reuse_retired();
  /// One retired block, the one that starts at `start` (none: nothing happens).
  void reuse_retired(std::uintptr_t start);
  bool contains(const void* p) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= base_ && a < base_ + size_;
  }

 private:
  mutable std::mutex m_;
  std::uintptr_t base_ = 0;
  std::size_t size_ = 0;
  std::map<std::uintptr_t, std::size_t> free_;  // start -> bytes
  std::map<std::uintptr_t, std::size_t> used_;  // start -> bytes
  std::map<std::uintptr_t, std::size_t> retired_;  // start -> bytes: freed, not yet reusable
  std::size_t take_used(void* p);                  // under m_
  void add_free(std::uintptr_t start, std::size_t bytes);  // under m_: coalesced with its free neighbours
};

/// One dmalloc allocation, as every process knows it (its affinity, for the offload policy).
struct DistributedRegion {
  std::uintptr_t start;
  std::size_t bytes;
  Distribution distribution;
};

class AddressSpace {
 public:
  static AddressSpace& get();

  /// Reserves the range for `nodes` processes, this one being `rank`. `agree(candidate)` is the collective step
  /// of the agreement (see the top of this file): given this process's mapping result it returns the address
  /// every process mapped, or 0 if some process failed. One process: `agree` is not called. Throws
  /// std::runtime_error if no candidate works, or if a reservation of another size or layout exists.
  using Agree = std::uintptr_t (*)(void* ctx, std::uintptr_t mine, bool ok);
  void reserve(std::size_t bytes, int nodes, int rank, Agree agree, void* ctx);
  bool reserved() const noexcept { return base_ != 0; }
  int nodes() const noexcept { return nodes_; }

  void* dmalloc(std::size_t bytes);
  /// Frees a dmalloc block and gives its pages back; returns its size. `defer`: its addresses are allocated again
  /// only after reuse_freed() (a cluster calls it at the start of each run, once every process knows of the
  /// free: see src/cluster/cluster.cpp).
  std::size_t dfree(void* p, bool defer);
  void reuse_freed() { distributed_.reuse_retired(); }
  void* lmalloc(std::size_t bytes);
  /// Frees a block of this process's lmalloc range and gives its pages back; returns its size. `defer`: its
  /// addresses are allocated again only after reuse_local(start) (a cluster calls it once every process has
  /// dropped what it knew of the block: see Cluster::local_freed).
  std::size_t lfree(void* p, bool defer);
  void reuse_local(std::uintptr_t start) { local_.reuse_retired(start); }
  /// The rank whose lmalloc range holds `address`, or -1 (dmalloc memory, or outside the common address space).
  int local_owner(const void* address) const noexcept;
  /// Gives the pages of [p, p + bytes) back to the system (another process freed a dmalloc region).
  void release_pages(void* p, std::size_t bytes) noexcept;

  /// The distribution of dmalloc regions (replicated on every process by the cluster's messages).
  void add_region(const DistributedRegion& r);
  void remove_region(std::uintptr_t start);
  /// The rank whose affinity the byte at `address` has: its dmalloc region's distribution, or the owner of the
  /// lmalloc range it lies in; -1 outside the common address space.
  int affinity(const void* address) const;
  bool contains(const void* p) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= base_ && a < base_ + size_;
  }

 private:
  std::mutex m_;
  std::uintptr_t base_ = 0;
  std::size_t size_ = 0;
  int nodes_ = 1, rank_ = 0;
  std::size_t local_size_ = 0;
  RangeAllocator distributed_, local_;
  mutable std::mutex regions_m_;
  std::map<std::uintptr_t, DistributedRegion> regions_;
};

}  // namespace weft::detail
