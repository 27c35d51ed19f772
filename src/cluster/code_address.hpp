// Naming code (and constant data, such as task labels) across the processes of a cluster without sending raw
// pointers: every process runs the same executable with the same shared objects, but each may load them at other
// addresses (ASLR). An address is sent as (index of the loaded object, offset from its load address), and
// translated back on the receiving process.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace weft::detail {

struct CodeAddress {
  std::uint32_t object = ~0u;  ///< ~0u: the null pointer
  std::uint64_t offset = 0;
};

class CodeMap {
 public:
  /// The objects loaded now (dl_iterate_phdr), in load order.
  CodeMap();
  /// Throws std::invalid_argument if p lies in no loaded object's segments (a pointer into the heap or a stack).
  CodeAddress encode(const void* p);
  /// Throws std::runtime_error for an object index this process does not have.
  const void* decode(CodeAddress a) const;
  /// A hash of the loaded objects' names, segment sizes and build ids (the linker's GNU build-id note, where
  /// present): equal on processes that run the same program. Without build ids, two builds of a program whose
  /// segments happen to have the same sizes would pass for one, and each would run the other's code by offset.
  std::uint64_t signature() const noexcept { return signature_; }

 private:
  struct Object {
    std::string name;
    std::uintptr_t base;
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> segments;  // [lo, hi) absolute
    std::string build_id;  // the NT_GNU_BUILD_ID note's bytes (empty without one)
  };
  void scan();
  mutable std::mutex m_;
  std::vector<Object> objects_;
  std::uint64_t signature_ = 0;
};

}  // namespace weft::detail
