// Minimal JSON output helpers shared by the profile and trace writers.
#pragma once

#include <cstdio>
#include <string>

namespace weft::detail::trace {

/// Length of the well-formed UTF-8 sequence at c (1-4), or 0 if there is none: a label is the program's
/// bytes, and a JSON file must be UTF-8.
inline int utf8_sequence(const unsigned char* c) {
  const unsigned char u = c[0];
  if (u < 0x80) return 1;
  auto cont = [&](int i) { return (c[i] & 0xC0) == 0x80; };  // (stops at the terminator: 0 is not one)
  if (u >= 0xC2 && u <= 0xDF) return cont(1) ? 2 : 0;
  if (u >= 0xE0 && u <= 0xEF) {
    // No overlong forms (E0 followed by < A0) and no surrogates (ED followed by >= A0).
    if (!cont(1) || (u == 0xE0 && c[1] < 0xA0) || (u == 0xED && c[1] >= 0xA0)) return 0;
    return cont(2) ? 3 : 0;
  }
  if (u >= 0xF0 && u <= 0xF4) {
    if (!cont(1) || (u == 0xF0 && c[1] < 0x90) || (u == 0xF4 && c[1] >= 0x90)) return 0;
    return cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

/// Appends s as a JSON string literal (quotes included): quotes, backslashes and control characters are
/// escaped, UTF-8 passes through, and a byte that is not part of well-formed UTF-8 becomes U+FFFD.
inline void append_json_string(std::string& out, const char* s) {
  out += '"';
  for (const unsigned char* c = reinterpret_cast<const unsigned char*>(s); *c;) {
    const unsigned char u = *c;
    if (u == '"' || u == '\\') {
      out += '\\';
      out += static_cast<char>(u);
      ++c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
      ++c;
    } else if (const int n = utf8_sequence(c)) {
      out.append(reinterpret_cast<const char*>(c), static_cast<std::size_t>(n));
      c += n;
    } else {
      out += "\\ufffd";
      ++c;
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
