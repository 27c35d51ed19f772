// Code addresses across processes (see code_address.hpp).
#include "cluster/code_address.hpp"

#include <elf.h>
#include <link.h>

#include <cstring>
#include <stdexcept>

namespace weft::detail {

CodeMap::CodeMap() { scan(); }

void CodeMap::scan() {
  std::vector<Object> objs;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        Object o;
        o.name = info->dlpi_name ? info->dlpi_name : "";
        o.base = info->dlpi_addr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD)
            o.segments.emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
          if (ph.p_type == PT_NOTE && o.build_id.empty()) {
            // Notes, each a header, a name and a descriptor, both padded to 4 bytes (the ELF note layout).
            const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
            const unsigned char* end = p + ph.p_memsz;
            auto pad = [](std::size_t n) { return (n + 3) & ~std::size_t{3}; };
            while (p + sizeof(ElfW(Nhdr)) <= end) {
              ElfW(Nhdr) nh;
              std::memcpy(&nh, p, sizeof nh);
              const unsigned char* name = p + sizeof nh;
              const unsigned char* desc = name + pad(nh.n_namesz);
              if (desc + nh.n_descsz > end) break;
              if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
                o.build_id.assign(reinterpret_cast<const char*>(desc), nh.n_descsz);
                break;
              }
              p = desc + pad(nh.n_descsz);
            }
          }
        }
        static_cast<std::vector<Object>*>(out)->push_back(std::move(o));
        return 0;
      },
      &objs);
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  for (const Object& o : objs) {
    // The vDSO's name and size may differ between kernels of one cluster's nodes; no task code lives there.
    if (o.name.find("linux-vdso") != std::string::npos || o.name.find("linux-gate") != std::string::npos) continue;
    mix(o.name.data(), o.name.size());
    mix(o.build_id.data(), o.build_id.size());
    for (const auto& s : o.segments) {
      const std::uintptr_t size = s.second - s.first;
      mix(&size, sizeof size);
    }
  }
  objects_ = std::move(objs);
  signature_ = h;
}

CodeAddress CodeMap::encode(const void* p) {
  if (!p) return {};
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> g(m_);
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < objects_.size(); ++i)
      for (const auto& s : objects_[i].segments)
        if (a >= s.first && a < s.second) return {static_cast<std::uint32_t>(i), a - objects_[i].base};
    if (pass == 0) scan();  // an object loaded since (dlopen)
  }
  throw std::invalid_argument("weft: an address that lies in no loaded executable or shared object cannot be "
                              "named on another process");
}

const void* CodeMap::decode(CodeAddress c) const {
  if (c.object == ~0u) return nullptr;
  std::lock_guard<std::mutex> g(m_);
  if (c.object >= objects_.size())
    throw std::runtime_error("weft: a process named code in a shared object this process has not loaded (do all "
                             "processes run the same executable with the same libraries?)");
  return reinterpret_cast<const void*>(objects_[c.object].base + c.offset);
}

}  // namespace weft::detail
