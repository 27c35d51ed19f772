// WEFT_ASSERT(cond): an internal invariant of the engine (descriptors, counters, queues, tables). Compiled in by
// the CMake option WEFT_INTERNAL_CHECKS (the `debug` and `asan` presets; CI runs the whole suite in the latter),
// out of every other build: it costs nothing in release. A failure prints the condition and its place, then aborts.
#pragma once

namespace weft::detail {
[[noreturn]] void internal_check_failed(const char* cond, const char* file, int line) noexcept;
}

#if defined(WEFT_INTERNAL_CHECKS)
#define WEFT_ASSERT(cond) \
  ((cond) ? static_cast<void>(0) : ::weft::detail::internal_check_failed(#cond, __FILE__, __LINE__))
#else
#define WEFT_ASSERT(cond) static_cast<void>(0)
#endif
