// Minimal JSON output helpers shared by the profile and trace writers.
#pragma once

#include <cstdio>
#include <string>

namespace weft::detail::trace {

/// Appends s as a JSON string literal (quotes included); control characters are escaped, other bytes
/// (UTF-8) pass through.
inline void append_json_string(std::string& out, const char* s) {
  out += '"';
  for (const char* c = s; *c; ++c) {
    const unsigned char u = static_cast<unsigned char>(*c);
    if (u == '"' || u == '\\') {
      out += '\\';
      out += *c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += *c;
    }
  }
  out += '"';
}

/// printf-style append.
template <class... A>
void appendf(std::string& out, const char* fmt, A... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  if (n < 0) return;
  if (static_cast<std::size_t>(n) < sizeof buf) {
    out.append(buf, static_cast<std::size_t>(n));
  } else {
    std::string big(static_cast<std::size_t>(n) + 1, '\0');
    std::snprintf(big.data(), big.size(), fmt, args...);
    out.append(big.data(), static_cast<std::size_t>(n));
  }
}

}  // namespace weft::detail::trace
