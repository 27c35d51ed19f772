// weft internal: how keys and values of flow graphs travel between processes (see weft/flow.hpp, "Several
// processes"). Not part of the public API.
//
// A type travels in one of two ways (Codec<T>::kind):
//   - fixed: trivially copyable types as their bytes, std::pair / std::tuple of fixed types element by element
//     (they are not trivially copyable themselves). No copy beyond MPI's: a large value is received straight
//     into the storage its tasks read.
//   - serialized: a std::vector of a trivially copyable type (not bool) as its elements' bytes, without cereal:
//     sent from the vector's own storage when it is a shared copy, and a large one received straight into the
//     vector its tasks read (as a fixed value is); any other type that cereal can serialize (std containers,
//     strings, and user types with a `serialize(Archive&)` member or the other cereal conventions), in
//     cereal's portable binary archive. Cereal's headers (Debian: libcereal-dev) are needed when the program is
//     compiled; without them only fixed types and such vectors travel.
// Anything else cannot cross processes (kind none): a send to a key owned by another process is then an error.
//
// Messages (one transport message kind per graph; src/flow/remote.cpp dispatches on the header):
//   header  = one or more groups, each WireHeader { template-task id, input terminal, number of keys } + the
//             keys (fixed: their bytes; serialized: a 32-bit length then the bytes, each)
//   payload = the value, once for all the keys of all the groups (fixed: its bytes; serialized: the archive;
//             empty for a control edge). The groups' inputs have one value type (checked on receipt).
// A value for several keys owned by one process (a broadcast, over one terminal or several, or an edge with
// several consuming template tasks) is one message with all of them (or as few as the header size allows:
// ScatterBatch in flow_core.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if __has_include(<cereal/cereal.hpp>) && !defined(WEFT_FLOW_NO_CEREAL)
#define WEFT_FLOW_CEREAL 1
#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>
// The standard types a value is most often made of. A program that sends other standard types includes the
// matching cereal/types/*.hpp itself.
#include <cereal/types/array.hpp>
#include <cereal/types/complex.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>
#include <istream>
#include <ostream>
#include <streambuf>
#else
#define WEFT_FLOW_CEREAL 0
#endif

namespace weft::flow::detail {

/// The fixed part of every flow message's header.
struct WireHeader {
  std::uint32_t tt;     ///< template task: its index in the graph
  std::uint16_t input;  ///< input terminal
  std::uint16_t keys;   ///< keys that follow (>= 1)
};

enum class WireKind { none, fixed, serialized };

/// Bytes being built (a header or a serialized value).
using WireBytes = std::string;

inline void wire_append(WireBytes& out, const void* p, std::size_t n) {
  out.append(static_cast<const char*>(p), n);
}

/// Reads bytes in order; a read past the end throws (a message that does not match the types).
class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> s) : p_(s.data()), end_(s.data() + s.size()) {}
  const std::byte* take(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) throw std::length_error("a message shorter than its types");
    const std::byte* q = p_;
    p_ += n;
    return q;
  }
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }

 private:
  const std::byte* p_;
  const std::byte* end_;
};

template <class T>
struct is_pair_or_tuple : std::false_type {};
template <class A, class B>
struct is_pair_or_tuple<std::pair<A, B>> : std::true_type {};
template <class... T>
struct is_pair_or_tuple<std::tuple<T...>> : std::true_type {};

template <class T>
constexpr WireKind wire_kind();

template <class... T>
constexpr bool all_fixed(std::tuple<T...>*) {
  return ((wire_kind<T>() == WireKind::fixed) && ...);
}
template <class A, class B>
constexpr bool all_fixed(std::pair<A, B>*) {
  return wire_kind<A>() == WireKind::fixed && wire_kind<B>() == WireKind::fixed;
}

#if WEFT_FLOW_CEREAL
template <class T>
inline constexpr bool cereal_serializable_v =
    cereal::traits::is_output_serializable<T, cereal::PortableBinaryOutputArchive>::value &&
    cereal::traits::is_input_serializable<T, cereal::PortableBinaryInputArchive>::value &&
    std::is_default_constructible_v<T>;
#else
template <class T>
inline constexpr bool cereal_serializable_v = false;
#endif

/// A std::vector whose elements travel as their bytes (see the top of this file).
template <class T>
struct is_contiguous_vector : std::false_type {};
template <class E>
struct is_contiguous_vector<std::vector<E>>
    : std::bool_constant<std::is_trivially_copyable_v<E> && !std::is_same_v<E, bool>> {};
template <class T>
inline constexpr bool contiguous_v = is_contiguous_vector<T>::value;

/// How T travels (see the top of this file).
template <class T>
constexpr WireKind wire_kind() {
  if constexpr (contiguous_v<T>) {
    return WireKind::serialized;
  } else if constexpr (is_pair_or_tuple<T>::value) {
    if (all_fixed(static_cast<T*>(nullptr))) return WireKind::fixed;
  } else if constexpr (std::is_trivially_copyable_v<T>) {
    return WireKind::fixed;
  }
  return cereal_serializable_v<T> ? WireKind::serialized : WireKind::none;
}

template <class T, WireKind = wire_kind<T>()>
struct Codec {
  static constexpr WireKind kind = WireKind::none;
};

template <class T>
struct Codec<T, WireKind::fixed> {
  static constexpr WireKind kind = WireKind::fixed;
  static constexpr std::size_t size = sizeof(T);
  static void pack(const T& v, std::byte* p) { std::memcpy(p, static_cast<const void*>(&v), sizeof(T)); }
  /// Constructs a T at `storage` from its bytes.
  static T* unpack_to(void* storage, const std::byte* p) {
    std::memcpy(storage, p, sizeof(T));  // implicitly creates the object (trivially copyable)
    return std::launder(static_cast<T*>(storage));
  }
};

template <class... T>
struct Codec<std::tuple<T...>, WireKind::fixed> {
  static constexpr WireKind kind = WireKind::fixed;
  static constexpr std::size_t size = (std::size_t{0} + ... + Codec<T>::size);
  static void pack(const std::tuple<T...>& v, std::byte* p) {
    std::apply([&](const T&... e) { ((Codec<T>::pack(e, p), p += Codec<T>::size), ...); }, v);
  }
  static std::tuple<T...>* unpack_to(void* storage, const std::byte* p) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ::new (storage) std::tuple<T...>(element<T>(p + offset<I>())...);
    }(std::index_sequence_for<T...>{});
  }
  template <class E>
  static E element(const std::byte* p) {
    alignas(E) unsigned char buf[sizeof(E)];
    return std::move(*Codec<E>::unpack_to(buf, p));
  }
  template <std::size_t I>
  static constexpr std::size_t offset() {
    return []<std::size_t... J>(std::index_sequence<J...>) {
      return (std::size_t{0} + ... + Codec<std::tuple_element_t<J, std::tuple<T...>>>::size);
    }(std::make_index_sequence<I>{});
  }
};

template <class A, class B>
struct Codec<std::pair<A, B>, WireKind::fixed> {
  static constexpr WireKind kind = WireKind::fixed;
  static constexpr std::size_t size = Codec<A>::size + Codec<B>::size;
  static void pack(const std::pair<A, B>& v, std::byte* p) {
    Codec<A>::pack(v.first, p);
    Codec<B>::pack(v.second, p + Codec<A>::size);
  }
  static std::pair<A, B>* unpack_to(void* storage, const std::byte* p) {
    alignas(A) unsigned char a[sizeof(A)];
    alignas(B) unsigned char b[sizeof(B)];
    return ::new (storage) std::pair<A, B>(std::move(*Codec<A>::unpack_to(a, p)),
                                           std::move(*Codec<B>::unpack_to(b, p + Codec<A>::size)));
  }
};

template <class T>
  requires contiguous_v<T>
struct Codec<T, WireKind::serialized> {
  static constexpr WireKind kind = WireKind::serialized;
  using E = typename T::value_type;
  /// The bytes that travel: the elements', in place.
  static std::span<const std::byte> bytes(const T& v) { return std::as_bytes(std::span<const E>(v)); }
  static void append(const T& v, WireBytes& out) {
    const std::span<const std::byte> b = bytes(v);
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  static T decode(std::span<const std::byte> b) {
    if (b.size() % sizeof(E) != 0) throw std::length_error("a message that does not match its types");
    T v(b.size() / sizeof(E));
    if (!b.empty()) std::memcpy(static_cast<void*>(v.data()), b.data(), b.size());  // (b may be unaligned)
    return v;
  }
};

#if WEFT_FLOW_CEREAL
/// A read-only stream over bytes (cereal reads from a std::istream).
class WireInBuf : public std::streambuf {
 public:
  explicit WireInBuf(std::span<const std::byte> s) {
    char* b = const_cast<char*>(reinterpret_cast<const char*>(s.data()));  // only read
    setg(b, b, b + s.size());
  }
};
/// Appends what is written to a WireBytes.
class WireOutBuf : public std::streambuf {
 public:
  explicit WireOutBuf(WireBytes& out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) out_.push_back(traits_type::to_char_type(c));
    return traits_type::not_eof(c);
  }

 private:
  WireBytes& out_;
};

template <class T>
struct Codec<T, WireKind::serialized> {
  static constexpr WireKind kind = WireKind::serialized;
  static void append(const T& v, WireBytes& out) {
    WireOutBuf buf(out);
    std::ostream os(&buf);
    cereal::PortableBinaryOutputArchive ar(os);
    ar(v);
  }
  static T decode(std::span<const std::byte> bytes) {
    WireInBuf buf(bytes);
    std::istream is(&buf);
    cereal::PortableBinaryInputArchive ar(is);
    T v{};
    ar(v);
    return v;
  }
};
#endif

/// Can T cross processes?
template <class T>
inline constexpr bool transferable_v = Codec<T>::kind != WireKind::none;

/// Appends a key to a header: its bytes (fixed) or a 32-bit length and its archive (serialized).
template <class K>
void append_key(const K& k, WireBytes& out) {
  if constexpr (Codec<K>::kind == WireKind::fixed) {
    const std::size_t at = out.size();
    out.resize(at + Codec<K>::size);
    Codec<K>::pack(k, reinterpret_cast<std::byte*>(out.data() + at));
  } else {
    const std::size_t at = out.size();
    out.resize(at + sizeof(std::uint32_t));
    Codec<K>::append(k, out);
    const auto n = static_cast<std::uint32_t>(out.size() - at - sizeof(std::uint32_t));
    std::memcpy(out.data() + at, &n, sizeof n);
  }
}

/// Reads a key written by append_key.
template <class K>
K read_key(WireReader& r) {
  if constexpr (Codec<K>::kind == WireKind::fixed) {
    alignas(K) unsigned char buf[sizeof(K)];
    K* k = Codec<K>::unpack_to(buf, r.take(Codec<K>::size));
    K out(std::move(*k));
    k->~K();
    return out;
  } else {
    std::uint32_t n;
    std::memcpy(&n, r.take(sizeof n), sizeof n);
    return Codec<K>::decode({r.take(n), n});
  }
}

}  // namespace weft::flow::detail
