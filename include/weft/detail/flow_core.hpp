// weft internal: the machinery behind weft/flow.hpp (value slots, edges, the template task). Not part of the
// public API; include weft/flow.hpp.
#pragma once

#include <array>
#include <atomic>
#include <cstring>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <ranges>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/detail/flow_table.hpp"
#include "weft/detail/flow_wire.hpp"
#include "weft/detail/task.hpp"
#include "weft/runtime.hpp"
#include "weft/tasks.hpp"

namespace weft::flow {

/// A wiring or protocol error of a flow graph (an input sent twice to one task, a task whose inputs never all
/// arrived, a graph misuse). The message names the template task and, when it can be printed, the key.
class error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Hash of a key type: std::hash<K> when it exists, an element-wise combination for std::tuple and std::pair.
/// Specialise weft::flow::Hash<K> (a default-constructible type with `std::size_t operator()(const K&) const`)
/// for a key type that has neither.
template <class K, class = void>
struct Hash {
  using weft_missing_hash = void;
};

namespace detail {

// The engine's side (weft/detail/task.hpp).
using weft::detail::allocate_large_body;
using weft::detail::current_engine;
using weft::detail::detached_allocate;
using weft::detail::detached_discard;
using weft::detail::detached_submit;
using weft::detail::free_large_body;
using weft::detail::kInlineBody;
using weft::detail::Task;
namespace table = weft::detail::flow;

template <class K>
concept std_hashable = requires(const K& k) {
  { std::hash<K>{}(k) } -> std::convertible_to<std::size_t>;
};
template <class K>
concept has_hash = !requires { typename Hash<K>::weft_missing_hash; };

inline std::size_t hash_combine(std::size_t seed, std::size_t h) {
  return seed ^ (h + 0x9E3779B97F4A7C15ull + (seed << 6) + (seed >> 2));
}

/// The key of a template task declared with a void key type.
struct VoidKey {
  friend bool operator==(VoidKey, VoidKey) { return true; }
};
/// The value of a control-only edge (Edge<K, void>).
struct Void {};

template <class K>
using key_t = std::conditional_t<std::is_void_v<K>, VoidKey, K>;
template <class V>
using value_t = std::conditional_t<std::is_void_v<V>, Void, V>;

}  // namespace detail

template <class K>
struct Hash<K, std::enable_if_t<detail::std_hashable<K>>> {
  std::size_t operator()(const K& k) const { return std::hash<K>{}(k); }
};
template <class... T>
struct Hash<std::tuple<T...>, std::enable_if_t<(detail::has_hash<T> && ...)>> {
  std::size_t operator()(const std::tuple<T...>& k) const {
    return std::apply([](const T&... e) {
      std::size_t h = 0;
      ((h = detail::hash_combine(h, Hash<T>{}(e))), ...);
      return h;
    }, k);
  }
};
template <class A, class B>
struct Hash<std::pair<A, B>, std::enable_if_t<detail::has_hash<A> && detail::has_hash<B>>> {
  std::size_t operator()(const std::pair<A, B>& k) const {
    return detail::hash_combine(Hash<A>{}(k.first), Hash<B>{}(k.second));
  }
};
template <>
struct Hash<detail::VoidKey> {
  std::size_t operator()(detail::VoidKey) const { return 0; }
};

namespace detail {

// --- printing keys in error messages ------------------------------------------------------------------------
template <class T>
concept streamable = requires(std::ostream& os, const T& t) { os << t; };

template <class T>
void print_key(std::ostream& os, const T& k) {
  if constexpr (std::is_same_v<T, VoidKey>) {
    os << "(void key)";
  } else if constexpr (streamable<T>) {
    os << k;
  } else if constexpr (requires { std::tuple_size<T>::value; }) {
    os << '(';
    std::apply([&](const auto&... e) {
      int i = 0;
      ((os << (i++ ? ", " : ""), print_key(os, e)), ...);
    }, k);
    os << ')';
  } else {
    os << "(key not printable)";
  }
}
template <class T>
std::string key_string(const T& k) {
  std::ostringstream os;
  print_key(os, k);
  return os.str();
}

/// Describes the exception being handled (inside a catch block): its what() when it has one.
inline std::string describe_current_exception() {
  try {
    throw;
  } catch (const std::exception& e) {
    return std::string("an exception: ") + e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// --- values --------------------------------------------------------------------------------------------------
/// A distinct address per type (type_tag<A> == type_tag<B> only if A is B), without RTTI.
template <class T>
inline constexpr char type_tag = 0;

/// Small trivially copyable values are copied to every successor: cheaper than sharing a counted copy.
template <class V>
inline constexpr bool cheap_v = std::is_trivially_copyable_v<V> && sizeof(V) <= 16;

/// One read-only copy shared by several successors.
template <class V>
struct Shared {
  template <class U>
  Shared(std::uint32_t n, U&& v) : refs(n), value(std::forward<U>(v)) {}
  /// The value's bytes are written later (received from another process straight into `value`): trivially
  /// copyable values only, whose lifetime begins with those bytes.
  struct Raw {};
  Shared(std::uint32_t n, Raw) requires std::is_trivially_copyable_v<V> : refs(n) {}
  ~Shared() { value.~V(); }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  std::atomic<std::uint32_t> refs;
  union {
    V value;
  };
  void release() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

/// An input value of a pending or ready task. Constructed when the input arrives (the record's mask says which
/// slots are live), destroyed when the task has run.
template <class V, bool Cheap = cheap_v<V>>
struct Slot {  // small trivially copyable: always a private copy
  alignas(V) unsigned char buf[sizeof(V)];
  V& get() { return *std::launder(reinterpret_cast<V*>(buf)); }
  void set(const V& v) { ::new (static_cast<void*>(buf)) V(v); }
  const V& read() { return get(); }
  V& own() { return get(); }
  void destroy() {}
};
template <class V>
struct Slot<V, false> {
  Shared<V>* shared;  ///< non-null: the value is a shared copy (or broken(): its construction threw)
  alignas(V) unsigned char buf[sizeof(V)];
  /// Marks a slot whose value failed to construct: it holds nothing to destroy (its task never runs).
  static Shared<V>* broken() { return reinterpret_cast<Shared<V>*>(alignof(Shared<V>)); }
  V& get() { return *std::launder(reinterpret_cast<V*>(buf)); }
  void set(V&& v) {
    shared = broken();  // until the constructor returns
    ::new (static_cast<void*>(buf)) V(std::move(v));
    shared = nullptr;
  }
  void set(const V& v) {
    shared = broken();
    ::new (static_cast<void*>(buf)) V(v);
    shared = nullptr;
  }
  void set(Shared<V>* s) { shared = s; }
  const V& read() { return shared ? shared->value : get(); }
  /// A value this task may modify: the shared copy itself if no one else holds it any more, else a copy.
  V& own() {
    if (Shared<V>* s = shared) {
      if (s->refs.load(std::memory_order_acquire) == 1) {
        ::new (static_cast<void*>(buf)) V(std::move(s->value));
        delete s;
      } else if constexpr (std::is_copy_constructible_v<V>) {
        ::new (static_cast<void*>(buf)) V(s->value);
        s->release();
      } else {
        throw error("weft::flow: a move-only value sent to several tasks is taken by value (or V&) by one of "
                    "them while others still hold it; take it by const& instead");
      }
      shared = nullptr;
    }
    return get();
  }
  void destroy() {
    if (shared == broken()) return;
    if (shared)
      shared->release();
    else
      get().~V();
  }
};

/// The values an aggregator input collected for one task: this header and `target` slots after it, in one
/// allocation (a task's aggregator costs one allocation, not two). Slots never move once set.
template <class V>
struct AggStore {
  std::size_t target;
  /// Slots reserved so far (under the task's bucket lock): the first `size` slots hold values once their
  /// deliveries have returned, that is, once the task is complete or the graph quiescent.
  std::size_t size = 0;

  static AggStore* make(std::size_t target) {
    if (target > (std::size_t(-1) - kItems) / sizeof(Slot<V>)) throw std::bad_array_new_length();
    void* mem = kOverAligned ? ::operator new(bytes(target), std::align_val_t{kAlign}) : ::operator new(bytes(target));
    return ::new (mem) AggStore(target);
  }
  static void destroy(AggStore* s) noexcept {
    Slot<V>* it = s->items();
    for (std::size_t i = 0; i < s->size; ++i) it[i].destroy();
    s->~AggStore();
    // Unsized: Clang before 19 does not declare the sized forms unless -fsized-deallocation is given.
    if constexpr (kOverAligned)
      ::operator delete(static_cast<void*>(s), std::align_val_t{kAlign});
    else
      ::operator delete(static_cast<void*>(s));
  }
  Slot<V>* items() { return reinterpret_cast<Slot<V>*>(reinterpret_cast<unsigned char*>(this) + kItems); }
  Slot<V>& operator[](std::size_t i) { return items()[i]; }

 private:
  explicit AggStore(std::size_t n) : target(n) {}
  static constexpr std::size_t kAlign = alignof(Slot<V>) > alignof(std::size_t) ? alignof(Slot<V>) : alignof(std::size_t);
  static constexpr bool kOverAligned = kAlign > __STDCPP_DEFAULT_NEW_ALIGNMENT__;  // plain new is cheaper otherwise
  static constexpr std::size_t kItems = (2 * sizeof(std::size_t) + alignof(Slot<V>) - 1) / alignof(Slot<V>) * alignof(Slot<V>);
  static std::size_t bytes(std::size_t n) { return kItems + n * sizeof(Slot<V>); }
};

}  // namespace detail

/// What a task body receives for an aggregator input (see make_aggregator): the values sent to this task on that
/// edge, in arrival order (which is unspecified when several tasks send concurrently). Values sent to several
/// tasks are shared read-only copies, not copied for this one.
template <class V>
class Aggregator {
 public:
  std::size_t size() const { return store_->size; }
  bool empty() const { return size() == 0; }
  const V& operator[](std::size_t i) const { return (*store_)[i].read(); }
  class iterator {
   public:
    using value_type = V;
    using difference_type = std::ptrdiff_t;
    using reference = const V&;
    using pointer = const V*;
    using iterator_category = std::forward_iterator_tag;
    iterator() = default;
    reference operator*() const { return a_->operator[](i_); }
    pointer operator->() const { return &**this; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    iterator operator++(int) {
      iterator t = *this;
      ++i_;
      return t;
    }
    friend bool operator==(const iterator& x, const iterator& y) { return x.i_ == y.i_; }

   private:
    friend class Aggregator;
    iterator(const Aggregator* agg, std::size_t i) : a_(agg), i_(i) {}
    const Aggregator* a_ = nullptr;
    std::size_t i_ = 0;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }

  explicit Aggregator(detail::AggStore<V>* s) : store_(s) {}
  Aggregator(const Aggregator&) = delete;
  Aggregator& operator=(const Aggregator&) = delete;

 private:
  mutable detail::AggStore<V>* store_;
};

namespace detail {

/// Byte buffers of large messages (encoded values sent, payloads received), kept for the next ones. A megabyte
/// allocated and freed per message costs more than the message's copy: glibc hands such blocks back to the
/// system, and the next one is faulted in again page by page. At most kKept buffers of kMinKept to kMaxKept
/// bytes of capacity are kept, until the graph is destroyed. Any thread (a short lock, taken only when some
/// buffer is kept or given back).
class MessageBuffers {
 public:
  static constexpr std::size_t kKept = 4;
  static constexpr std::size_t kMinKept = std::size_t{64} << 10, kMaxKept = std::size_t{16} << 20;

  MessageBuffers() { kept_.reserve(kKept); }
  /// A kept buffer, its size and contents as they were given back (the caller clears or resizes it), or an
  /// empty one.
  WireBytes take() {
    // Relaxed: a hint only; a buffer given back meanwhile is merely missed (a new allocation instead).
    if (count_.load(std::memory_order_relaxed) == 0) return {};
    std::lock_guard lock(m_);
    if (kept_.empty()) return {};
    WireBytes b = std::move(kept_.back());
    kept_.pop_back();
    count_.store(kept_.size(), std::memory_order_relaxed);
    return b;
  }
  /// `b` is kept if its capacity is in range and fewer than kKept are kept; else it is freed with `b`.
  void give(WireBytes&& b) noexcept {
    if (b.capacity() < kMinKept || b.capacity() > kMaxKept) return;
    std::lock_guard lock(m_);
    if (kept_.size() == kKept) return;
    kept_.push_back(std::move(b));  // no allocation: reserved
    count_.store(kept_.size(), std::memory_order_relaxed);
  }
  /// Bytes that go back to `owner` (give) when the lease ends.
  struct Lease {
    Lease(MessageBuffers& o, WireBytes&& b) noexcept : owner(o), bytes(std::move(b)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { owner.give(std::move(bytes)); }
    MessageBuffers& owner;
    WireBytes bytes;
  };

 private:
  std::mutex m_;
  std::vector<WireBytes> kept_;
  std::atomic<std::size_t> count_{0};
};

/// The distributed side of a graph (src/flow/remote.cpp), present only when the graph runs on several MPI
/// processes: what a template task needs to reach the owner of a key.
struct RemoteBase {
  int rank = 0;                ///< this process
  int size = 1;                ///< processes of the graph (> 1)
  std::size_t max_header = 0;  ///< largest message header (WireHeader and the keys)
  std::size_t large = 0;       ///< payloads above this travel by rendezvous (send's `done` then matters)
  /// Outlives the derived class's transport, whose last sends give their buffers back here.
  MessageBuffers buffers;
  virtual ~RemoteBase() = default;
  /// Sends one message (see flow_wire.hpp) to process `dest`. The header is copied; the payload too, unless
  /// `done` is given and the payload is above `large`: then it is borrowed until `done` runs (on a thread that
  /// progresses communication). Only from a worker executing the graph (a body, or a seed).
  virtual void send(int dest, std::span<const std::byte> header, std::span<const std::byte> payload,
                    std::function<void()> done) = 0;
  /// A task of the graph failed on this process: the others would wait for it forever. Prints "weft: rank R:
  /// <what>" and ends the whole job (MPI_Abort).
  [[noreturn]] virtual void fail(const std::string& what) noexcept = 0;
  /// Collective, outside a fence: the sum of `value` over the processes.
  virtual std::uint64_t sum(std::uint64_t value) = 0;
};

/// The bytes of a value as it travels (flow_wire.hpp): a trivially copyable value's own bytes, else its encoding
/// in `encoded`. Nothing for a control edge (Void).
template <class V>
std::span<const std::byte> wire_bytes(const V& v, WireBytes& encoded) {
  if constexpr (std::is_same_v<V, Void>) {
    return {};
  } else if constexpr (std::is_trivially_copyable_v<V>) {
    return std::as_bytes(std::span<const V>(&v, 1));
  } else if constexpr (contiguous_v<V>) {
    return Codec<V>::bytes(v);
  } else if constexpr (Codec<V>::kind == WireKind::fixed) {
    encoded.resize(Codec<V>::size);
    Codec<V>::pack(v, reinterpret_cast<std::byte*>(encoded.data()));
    return std::as_bytes(std::span<const char>(encoded));
  } else {
    Codec<V>::append(v, encoded);
    return std::as_bytes(std::span<const char>(encoded));
  }
}

/// Where wire_bytes encodes a V: a kept buffer of `r` for a value that is encoded (not its own bytes), emptied.
template <class V>
WireBytes encode_buffer(RemoteBase& r) {
  if constexpr (std::is_same_v<V, Void> || std::is_trivially_copyable_v<V> || contiguous_v<V>) {
    (void)r;
    return {};
  } else {
    WireBytes b = r.buffers.take();
    b.clear();
    return b;
  }
}

/// The messages that carry one value to keys of other processes: the keys of every consumer (template task and
/// input) owned by one process go there in one message, the value encoded once for all of them (flow_wire.hpp:
/// a header of several groups). Consumers add their groups (add); send() then sends one message per process. A
/// header that would outgrow the transport's limit (RemoteBase::max_header) goes out first, with the value, and
/// that process's next groups start another message. Nothing is sent unless send() is called (after an
/// exception on the way, the deliveries already made here stay made: a broadcast may be partly delivered).
template <class V>
class ScatterBatch {
 public:
  /// `v`: the value (null for a control edge); `hold`: the shared copy it lives in, if any, then a large value
  /// is sent from it without a copy (one more reference per message, released once sent). Both stay valid
  /// until send() has returned.
  ScatterBatch(RemoteBase& r, const V* v, Shared<V>* hold) : r_(r), v_(v), hold_(hold) {}
  /// A broadcast of the caller's `value` (valid until send() has returned) whose keys on this process share a
  /// copy made only if there is such a key (shared()): moved from `value` if it is a non-const rvalue, else
  /// copied. Keys all elsewhere cost no copy: the value is encoded (or copied, if large) straight from `value`;
  /// but an rvalue vector of fixed elements above `large` is moved into the copy, which MPI then sends from.
  template <class U>
    requires std::is_same_v<std::remove_cvref_t<U>, V>
  ScatterBatch(RemoteBase& r, U&& value)
      : r_(r), v_(&value), hold_(nullptr), movable_(!std::is_lvalue_reference_v<U> && !std::is_const_v<U>) {
    static_assert(std::is_copy_constructible_v<V> || (!std::is_lvalue_reference_v<U> && !std::is_const_v<U>),
                  "weft::flow: a value that cannot be copied is broadcast as an rvalue (std::move)");
  }
  ~ScatterBatch() {
    r_.buffers.give(std::move(encoded_));  // (an encoding that was copied into the messages)
    if (owns_hold_) hold_->release();
  }
  ScatterBatch(const ScatterBatch&) = delete;
  ScatterBatch& operator=(const ScatterBatch&) = delete;

  /// Input `input` of template task `tt` (its name, for errors) gets the value at `keys`, all owned by `dest`.
  template <class KS>
  void add(int dest, std::uint32_t tt, std::uint16_t input, std::span<const KS> keys, const std::string& name) {
    const std::size_t m = message_for(dest);
    std::size_t i = 0;
    while (i < keys.size()) {
      WireBytes& header = msgs_[m].header;
      const std::size_t group = header.size();
      header.resize(group + sizeof(WireHeader));
      std::uint16_t n = 0;
      while (i < keys.size() && n < UINT16_MAX) {
        const std::size_t before = header.size();
        append_key(keys[i], header);
        if (header.size() > r_.max_header) {
          header.resize(before);
          break;
        }
        ++n, ++i;
      }
      if (n == 0) {
        header.resize(group);
        if (group == 0) {  // alone in a message, and still too large
          WireBytes one;
          append_key(keys[i], one);
          throw error("weft::flow: '" + name + "', key " + key_string(keys[i]) + ": a key of " +
                      std::to_string(one.size()) + " bytes is too large to send to another process (at most " +
                      std::to_string(r_.max_header - sizeof(WireHeader)) + ")");
        }
        send_message(msgs_[m]);  // full: it goes now, and dest's next groups start another message
        msgs_[m].header.clear();
        continue;
      }
      const WireHeader h{tt, input, n};
      std::memcpy(header.data() + group, &h, sizeof h);
    }
  }

  /// The value, for a delivery by copy on this process.
  const V& value() const { return *v_; }
  /// The value's shared copy, for a delivery on this process (the caller takes its own reference; the batch
  /// holds one meanwhile): the caller's, or (second constructor) made at the first call.
  Shared<V>* shared() {
    if (!hold_) {
      if constexpr (std::is_copy_constructible_v<V>) {
        // (const_cast: `movable_` says the caller's object is a non-const rvalue)
        hold_ = movable_ ? new Shared<V>(1, std::move(*const_cast<V*>(v_))) : new Shared<V>(1, *v_);
      } else {
        hold_ = new Shared<V>(1, std::move(*const_cast<V*>(v_)));
      }
      owns_hold_ = true;
      v_ = &hold_->value;  // (a value moved from: the messages not yet sent are encoded from the copy)
    }
    return hold_;
  }

  /// The value's bytes, already encoded by the caller (wire_bytes into `encoded`): not encoded again.
  void use_encoded(WireBytes&& encoded) {
    encoded_ = std::move(encoded);
    settle(std::as_bytes(std::span<const char>(encoded_)));
  }

  /// Sends the messages built so far, one per process.
  void send() {
    for (const Message& msg : msgs_)
      if (!msg.header.empty()) send_message(msg);
    msgs_.clear();
  }

 private:
  struct Message {
    int dest;
    WireBytes header;
  };
  std::size_t message_for(int dest) {
    for (std::size_t m = 0; m < msgs_.size(); ++m)
      if (msgs_[m].dest == dest) return m;
    msgs_.push_back({dest, {}});
    return msgs_.size() - 1;
  }
  /// The value's bytes, encoded once for every message. A large value is borrowed until sent: from the shared
  /// copy it lives in, else from bytes of our own (a copy: the caller's value may change once send() returns).
  std::span<const std::byte> payload() {
    if (!ready_) {
      if constexpr (std::is_same_v<V, Void>)
        settle({});
      else if constexpr (!transferable_v<V>)
        throw std::logic_error("weft::flow: a value that cannot cross processes reached a message");
      else {
        if constexpr (contiguous_v<V>) {
          // An rvalue vector of a rendezvous's size: moved into the shared copy, which MPI sends from (no copy).
          if (movable_ && !hold_ && Codec<V>::bytes(*v_).size() > r_.large) shared();
        }
        settle(wire_bytes(*v_, encoded_ = encode_buffer<V>(r_)));
      }
    }
    return payload_;
  }
  void settle(std::span<const std::byte> bytes) {
    payload_ = bytes;
    // The value's own bytes (not an encoding), and the value is the shared copy: borrowed from it.
    from_hold_ = hold_ && encoded_.empty() && v_ == &hold_->value;
    if (bytes.size() > r_.large && !from_hold_) {
      if (encoded_.empty()) {  // the value's own bytes: copied into a kept buffer if there is one
        encoded_ = r_.buffers.take();
        encoded_.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      }
      owned_ = std::make_shared<MessageBuffers::Lease>(r_.buffers, std::move(encoded_));
      payload_ = std::as_bytes(std::span<const char>(owned_->bytes));
    }
    ready_ = true;
  }
  void send_message(const Message& msg) {
    const std::span<const std::byte> value = payload();
    std::function<void()> done;
    if (value.size() > r_.large) {
      if (from_hold_) {
        hold_->refs.fetch_add(1, std::memory_order_relaxed);  // the caller holds one: no release races
        done = [s = hold_] { s->release(); };
      } else {
        done = [owned = owned_] {};
      }
    }
    r_.send(msg.dest, std::as_bytes(std::span<const char>(msg.header)), value, std::move(done));
  }

  RemoteBase& r_;
  const V* v_;
  Shared<V>* hold_;
  bool movable_ = false, owns_hold_ = false;
  bool ready_ = false, from_hold_ = false;
  std::span<const std::byte> payload_;
  WireBytes encoded_;
  std::shared_ptr<MessageBuffers::Lease> owned_;  // bytes the messages borrow, kept again once all are sent
  std::vector<Message> msgs_;
};

class TTBase;
struct GraphState;

/// What edges know of each other, type-erased: for a graph to find every template task connected to the ones it
/// was given.
struct EdgeBase {
  std::string name;
  std::vector<std::weak_ptr<TTBase>> tts;  ///< producers and consumers
  RemoteBase* remote = nullptr;             ///< the graph's, while it is in a graph of several processes
  virtual ~EdgeBase() = default;
};

/// A consumer of an edge: an input terminal of a template task, reached through three entry points (a value
/// moved to it, copied to it, or shared with other consumers: the slot takes one reference).
template <class K, class V>
struct Consumer {
  void* tt;
  void (*move)(void* tt, const K& key, V&& v);
  void (*copy)(void* tt, const K& key, const V& v);
  void (*share)(void* tt, const K& key, Shared<V>* s);
  /// On several processes, a broadcast of batch's value to `keys`: the keys owned here are delivered (sharing
  /// batch.shared()), the others are added to `batch` (one message per owner for all consumers and terminals).
  void (*scatter)(void* tt, std::span<const K> keys, ScatterBatch<V>& batch);
};

template <class K, class V>
struct EdgeState : EdgeBase {
  std::vector<Consumer<K, V>> consumers;
  bool has_producer = false;
};

template <class K, class V>
struct AggregatorSpec;

}  // namespace detail

/// A typed edge: carries values of type Value to the tasks of key type Key of the template tasks that take it as
/// an input. Value = void makes a control-only edge (sendk). Copies of an Edge name the same edge; it has any
/// number of producers and consumers (several consumers each receive every value).
template <class Key, class Value = void>
class Edge {
 public:
  using key_type = Key;
  using value_type = Value;
  explicit Edge(std::string name = "edge") : state_(std::make_shared<State>()) { state_->name = std::move(name); }
  const std::string& name() const { return state_->name; }

  using State = detail::EdgeState<detail::key_t<Key>, detail::value_t<Value>>;
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

/// An input terminal that collects several values per task: see make_aggregator.
template <class Key, class Value>
struct AggregatorEdge {
  using key_type = Key;
  using value_type = Value;
  Edge<Key, Value> edge;
  std::size_t fixed = 0;                                          ///< count when `count_of` is empty
  std::function<std::size_t(const detail::key_t<Key>&)> count_of;  ///< per-key count
};

namespace detail {

// --- classification of a template task's terminals ------------------------------------------------------------
template <class T>
struct edge_traits {
  static constexpr bool is_edge = false;
};
template <class K, class V>
struct edge_traits<Edge<K, V>> {
  static constexpr bool is_edge = true;
  static constexpr bool aggregator = false;
  using key = K;
  using value = V;
};
template <class K, class V>
struct edge_traits<AggregatorEdge<K, V>> {
  static constexpr bool is_edge = true;
  static constexpr bool aggregator = true;
  using key = K;
  using value = V;
};

/// A value sent on an edge that no template task takes as input would be lost: an error of the sending body,
/// whose template task and key the task's trampoline adds to the message (TT::body_failed).
struct LostValue : error {
  using error::error;
};
[[noreturn, gnu::cold]] inline void no_consumer(const std::string& edge) {
  throw LostValue("a value was sent on edge '" + edge +
                  "', which no template task takes as input: it would be lost (a template task whose last "
                  "std::shared_ptr is dropped leaves its input edges: keep every template task until graph() has "
                  "taken it)");
}

/// Output terminal handed to the body (inside the `out` tuple).
template <class K, class V>
class Out {
 public:
  using key_type = K;
  using value_type = V;
  using KS = key_t<K>;
  using VS = value_t<V>;
  explicit Out(EdgeState<KS, VS>* e) : e_(e) {}

  /// Inline for one consumer, the usual case (a call less per send); several go out of line (put_shared).
  template <class U>
  [[gnu::always_inline]] void put(const KS& key, U&& value) const {
    static_assert(std::is_copy_constructible_v<VS> || std::is_rvalue_reference_v<U&&>,
                  "weft::flow: a move-only value must be sent as an rvalue (std::move)");
    const auto& cs = e_->consumers;
    if (cs.size() == 1) [[likely]] {
      if constexpr (std::is_rvalue_reference_v<U&&> && !std::is_const_v<std::remove_reference_t<U>>)
        cs[0].move(cs[0].tt, key, std::move(value));
      else if constexpr (std::is_same_v<std::remove_cvref_t<U>, VS>)
        cs[0].copy(cs[0].tt, key, value);
      else
        cs[0].move(cs[0].tt, key, VS(value));  // converted: the temporary is moved
    } else {
      put_shared(key, std::forward<U>(value));
    }
  }

  template <class Keys, class U>
  void put_many(const Keys& keys, U&& value) const {
    const auto& cs = e_->consumers;
    const std::size_t nk = count_keys(keys);
    if (nk == 0) return;  // nothing sent: no consumer needed
    if (cs.empty()) [[unlikely]]
      no_consumer(e_->name);
    const std::size_t n = nk * cs.size();
    if (e_->remote && nk > 1) [[unlikely]] {  // keys on several processes: grouped by owner
      scatter_value(keys, std::forward<U>(value));
      return;
    }
    if constexpr (cheap_v<VS>) {
      for (const auto& k : keys)
        for (const auto& c : cs) c.copy(c.tt, k, value);
    } else if (n == 1) {
      put(*std::begin(keys), std::forward<U>(value));
    } else {
      auto* s = new Shared<VS>(static_cast<std::uint32_t>(n), std::forward<U>(value));
      for (const auto& k : keys)
        for (const auto& c : cs) c.share(c.tt, k, s);
    }
  }

 private:
  template <class U>
  [[gnu::noinline]] void put_shared(const KS& key, U&& value) const {
    const auto& cs = e_->consumers;
    const std::size_t n = cs.size();
    if (n == 0) no_consumer(e_->name);
    if (n > 1) {
      if (e_->remote) {  // several processes: the consumers on one process share one message
        scatter_value(std::array<KS, 1>{key}, std::forward<U>(value));
        return;
      }
      if constexpr (cheap_v<VS>) {
        for (const auto& c : cs) c.copy(c.tt, key, value);
      } else {
        auto* s = new Shared<VS>(static_cast<std::uint32_t>(n), std::forward<U>(value));
        for (const auto& c : cs) c.share(c.tt, key, s);
      }
    }
  }

  EdgeState<KS, VS>* e_;

  template <class Keys>
  static std::size_t count_keys(const Keys& keys) {
    if constexpr (std::ranges::sized_range<const Keys&>) {
      return static_cast<std::size_t>(std::ranges::size(keys));
    } else {
      std::size_t nk = 0;
      for (const auto& k : keys) {
        (void)k;
        ++nk;
      }
      return nk;
    }
  }

  /// Several processes: the keys go to their owners, one message per owner for every consumer, added to
  /// `batch` (the caller sends it).
  template <class Keys>
  void scatter(const Keys& keys, ScatterBatch<VS>& batch) const {
    std::vector<KS> ks;
    ks.reserve(count_keys(keys));
    for (const auto& k : keys) ks.emplace_back(k);
    for (const auto& c : e_->consumers) c.scatter(c.tt, ks, batch);
  }
  /// scatter() of `value` in a batch of its own, sent here.
  template <class Keys, class U>
  void scatter_value(const Keys& keys, U&& value) const {
    if constexpr (std::is_same_v<std::remove_cvref_t<U>, VS>) {
      ScatterBatch<VS> batch(*e_->remote, std::forward<U>(value));
      scatter(keys, batch);
      batch.send();
    } else {
      scatter_value(keys, VS(std::forward<U>(value)));  // converted once, as a local send would
    }
  }

  template <std::size_t...>
  friend struct Broadcast;
  /// Throws no_consumer if `keys` is not empty and the edge has no consumer (a broadcast over several terminals
  /// checks them all before it sends anything). Returns the number of keys.
  template <class Keys>
  std::size_t require_consumer(const Keys& keys) const {
    const std::size_t nk = count_keys(keys);
    if (e_->consumers.empty() && nk != 0) [[unlikely]]
      no_consumer(e_->name);
    return nk;
  }
  /// This terminal's part of a broadcast over several terminals that share one copy `s` (the caller holds a
  /// reference until every terminal has had its part): each local delivery takes a reference of its own.
  template <class Keys>
  void share_many(const Keys& keys, Shared<VS>* s) const {
    const auto& cs = e_->consumers;
    const std::size_t nk = count_keys(keys);
    if (nk == 0) return;
    // Relaxed: the caller's reference keeps s alive; each delivery's reference is released by its task, which
    // the delivery (a synchronising hand-over to the worker that runs it) orders after this.
    s->refs.fetch_add(static_cast<std::uint32_t>(nk * cs.size()), std::memory_order_relaxed);
    for (const auto& k : keys)
      for (const auto& c : cs) c.share(c.tt, k, s);
  }
};

template <class T>
inline constexpr bool is_char_v =
    std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char> ||
    std::is_same_v<T, wchar_t> || std::is_same_v<T, char8_t> || std::is_same_v<T, char16_t> ||
    std::is_same_v<T, char32_t>;

/// One key list of a broadcast, for an edge of key type KS: one key (anything that converts to KS), or a range
/// of keys that convert to KS. A string is one key of a string-keyed edge, never a list of character keys.
template <class KS, class L>
decltype(auto) key_list(const L& l) {
  if constexpr (std::is_convertible_v<const L&, KS>) {
    return std::array<KS, 1>{KS(l)};
  } else {
    static_assert(std::ranges::range<const L&>,
                  "weft::flow::broadcast: a key list is a range of keys (e.g. std::vector<Key>) or one key of the "
                  "edge's key type");
    using E = std::remove_cvref_t<std::ranges::range_reference_t<const L&>>;
    static_assert(std::is_convertible_v<std::ranges::range_reference_t<const L&>, KS>,
                  "weft::flow::broadcast: the keys of a key list do not convert to the edge's key type");
    static_assert(!is_char_v<E> || std::is_same_v<E, KS>,
                  "weft::flow::broadcast: a string is not a list of keys of this edge: give a range of keys "
                  "(e.g. std::vector<Key>) or one key");
    return (l);
  }
}

/// broadcast<I, J, ...>(keylists, value, out): one value to the keys of several output terminals. Every
/// terminal with keys is checked for a consumer first, so that a missing one sends nothing. Terminals of one
/// value type (not small and trivially copyable) share one copy; otherwise each gets the value as
/// broadcast<i> would.
template <std::size_t... Is>
struct Broadcast {
  template <class Lists, class V, class... O>
  static void run(const Lists& lists, V&& value, std::tuple<O...>& out) {
    std::size_t keys = 0;  // over every terminal
    each(out, [&]<std::size_t K>(const auto& o) { keys += o.require_consumer(list<K>(lists, o)); });
    using VS = typename std::tuple_element_t<std::array{Is...}[0], std::tuple<O...>>::VS;
    constexpr bool one_copy =
        !cheap_v<VS> && (std::is_same_v<typename std::tuple_element_t<Is, std::tuple<O...>>::VS, VS> && ...);
    if constexpr (one_copy) {
      // Several processes (every edge of a graph has its remote side): one message per owner of some keys,
      // for all the terminals.
      if (RemoteBase* r = std::get<std::array{Is...}[0]>(out).e_->remote) [[unlikely]] {
        scatter_all<VS>(*r, lists, out, std::forward<V>(value));
      } else {
        if (keys == 0) return;  // nothing is sent, and an rvalue is left as it was (as broadcast<i> leaves it)
        struct Hold {  // each terminal's deliveries take references of their own; this one goes on the way out
          Shared<VS>* s;
          ~Hold() { s->release(); }
        } hold{new Shared<VS>(1, std::forward<V>(value))};
        each(out, [&]<std::size_t K>(const auto& o) { o.share_many(list<K>(lists, o), hold.s); });
      }
    } else {
      static_assert(
          (std::is_convertible_v<const std::remove_reference_t<V>&,
                                 typename std::tuple_element_t<Is, std::tuple<O...>>::VS> && ...),
          "weft::flow::broadcast<i, j, ...>: terminals of different value types each get a converted copy of "
          "the value, which must therefore be copyable (a move-only value can go to terminals of one type)");
      each(out, [&]<std::size_t K>(const auto& o) { o.put_many(list<K>(lists, o), std::as_const(value)); });
    }
  }

 private:
  // Every terminal's keys in one batch: the keys of this process share one copy, made only if there is one.
  template <class VS, class Lists, class U, class... O>
  static void scatter_all(RemoteBase& r, const Lists& lists, std::tuple<O...>& out, U&& value) {
    if constexpr (std::is_same_v<std::remove_cvref_t<U>, VS>) {
      ScatterBatch<VS> batch(r, std::forward<U>(value));
      each(out, [&]<std::size_t K>(const auto& o) { o.scatter(list<K>(lists, o), batch); });
      batch.send();
    } else {
      scatter_all<VS>(r, lists, out, VS(std::forward<U>(value)));  // converted once
    }
  }
  // f.template operator()<K>(terminal Is[K]) for each K.
  template <class... O, class F>
  static void each(std::tuple<O...>& out, F&& f) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (f.template operator()<K>(std::get<Is>(out)), ...);
    }(std::make_index_sequence<sizeof...(Is)>{});
  }
  // The K-th key list, for terminal o.
  template <std::size_t K, class Lists, class OutT>
  static decltype(auto) list(const Lists& lists, const OutT&) {
    return key_list<typename OutT::KS>(std::get<K>(lists));
  }
};

template <class E>
using out_of = Out<typename edge_traits<E>::key, typename edge_traits<E>::value>;

// --- the body's parameter types, when they can be named --------------------------------------------------------
template <class M>
struct member_params {
  static constexpr bool known = false;
};
template <class... A>
struct known_params {
  static constexpr bool known = true;
  using type = std::tuple<A...>;
};
template <class R, class C, class... A>
struct member_params<R (C::*)(A...)> : known_params<A...> {};
template <class R, class C, class... A>
struct member_params<R (C::*)(A...) const> : known_params<A...> {};
template <class R, class C, class... A>
struct member_params<R (C::*)(A...) noexcept> : known_params<A...> {};
template <class R, class C, class... A>
struct member_params<R (C::*)(A...) const noexcept> : known_params<A...> {};
template <class R, class C, class... A>
struct member_params<R (C::*)(A...) &> : known_params<A...> {};
template <class R, class C, class... A>
struct member_params<R (C::*)(A...) const&> : known_params<A...> {};

/// Parameter types of F: its call operator, or the instantiation of a call operator template whose only template
/// parameter is the `auto& out` parameter (as in `[](const int& k, double x, auto& out)`), or a function. Args:
/// the key and input arguments (lvalue references) the body is called with before `out`. The call operator
/// template is instantiated for OutT only if F can be called with Args then an OutT: a lambda whose one `auto`
/// parameter is an input (`[](const int& k, auto v)`, no output) is not taken for one whose `auto` is `out`
/// (an instantiation with OutT would compile its body with `out` in place of the value).
template <class F, class OutT, class Args, class = void>
struct body_params {
  static constexpr bool known = false;
};
template <class F, class OutT, class Args>
struct body_params<F, OutT, Args, std::void_t<decltype(&F::operator())>>
    : member_params<decltype(&F::operator())> {};
template <class F, class OutT, class... A>
  requires(!requires { &F::operator(); }) && std::is_invocable_v<F&, A&..., OutT&> &&
          requires { &F::template operator()<OutT>; }
struct body_params<F, OutT, std::tuple<A...>, void> : member_params<decltype(&F::template operator()<OutT>)> {};
template <class R, class... A, class OutT, class Args>
struct body_params<R (*)(A...), OutT, Args, void> {
  static constexpr bool known = true;
  using type = std::tuple<A...>;
};

/// How an input is passed to the body.
enum class Pass { read, own, own_lvalue };
template <class P>
constexpr Pass pass_for() {
  if constexpr (std::is_lvalue_reference_v<P>)
    return std::is_const_v<std::remove_reference_t<P>> ? Pass::read : Pass::own_lvalue;
  else
    return Pass::own;  // by value or by rvalue reference: the task gets a value of its own
}

/// Base of all template tasks: what a graph needs without knowing the types.
class TTBase : public std::enable_shared_from_this<TTBase> {
 public:
  virtual ~TTBase() = default;
  const std::string& name() const { return name_; }
  const std::vector<EdgeBase*>& edges() const { return edges_; }
  /// Pending tasks (some inputs arrived, not all). Quiescent only.
  virtual std::size_t pending() const = 0;
  /// Describes up to `max` pending tasks into `os`, then discards every pending task. Quiescent only, on a worker
  /// of the graph's runtime.
  virtual void drain(std::ostream* os, std::size_t max) = 0;
  /// Joins a graph (g, executing on `workers` workers) or leaves it (nullptr).
  virtual void attach(GraphState* g, unsigned workers) = 0;
  /// A large value is about to arrive from another process (its header has, not its payload): returns where
  /// its `size` bytes go, and sets `handle` for deliver_remote; an empty span lets the caller choose a buffer.
  /// Under the transport's progress token. Throws error for an input or size that does not match the types.
  virtual std::span<std::byte> place_remote(const WireHeader& h, std::size_t size, void*& handle) = 0;
  /// One group of a message from another process (`keys`: the header after the group's WireHeader, which starts
  /// with its keys; payload: the value): delivered here as local sends of input h.input to each key would be.
  /// Returns the bytes of keys read (the next group follows them). `handle`: null, or the message's shared copy
  /// of the value (set by place_remote, or by the first group that decoded it: then release_remote releases it
  /// once every group is delivered). On a worker executing the graph, under the progress token. Throws error for
  /// a message that does not match the types.
  virtual std::size_t deliver_remote(const WireHeader& h, std::span<const std::byte> keys,
                                     std::span<const std::byte> value, void*& handle) = 0;
  /// Releases the message's reference to `handle` (not null), a value of input `input`.
  virtual void release_remote(std::uint16_t input, void* handle) = 0;
  /// A tag of input `input`'s value type: the groups of one message must agree (they share one copy).
  virtual const void* input_type(std::uint16_t input) const = 0;
  /// Null when every key and value type of its inputs can cross processes, else a description of one that
  /// cannot (for the error when the graph runs on several processes).
  virtual const char* untransferable() const = 0;
  /// The user chose where keys go (set_keymap).
  virtual bool has_keymap() const = 0;
  /// Index of this template task in its graph (the same on every process that builds the same graph).
  std::uint32_t id() const { return id_; }
  void set_id(std::uint32_t id) { id_ = id; }
  GraphState* graph() const { return graph_; }
  /// The graph's distributed side (null on one process), kept here for the check every send makes.
  void set_remote(RemoteBase* r) {
    remote_ = r;
    refresh_plain();
  }
  /// Lets the edges name this template task (for graph() to find the connected ones).
  void link_edges() {
    for (EdgeBase* e : edges_) e->tts.push_back(weak_from_this());
  }

 protected:
  std::string name_;
  std::vector<EdgeBase*> edges_;
  /// Sets plain_ anew, after a change of graph, remote side, keymap or priomap.
  virtual void refresh_plain() = 0;
  GraphState* graph_ = nullptr;
  RemoteBase* remote_ = nullptr;
  /// In a graph, on one process, without keymap or priomap: a send then tests this flag only (configuration
  /// happens before the graph executes, so workers only read it).
  bool plain_ = false;
  std::uint32_t id_ = 0;
};

/// Execution state of a graph, shared with its template tasks.
struct GraphState {
  weft::Runtime* rt = nullptr;
  std::unique_ptr<weft::Runtime> owned_rt;
  Task* anchor = nullptr;            ///< root task of the run executing the graph
  const void* engine = nullptr;      ///< that run's runtime (current_engine())
  std::atomic<bool> executing{false};
  std::atomic<bool> failed{false};   ///< a body threw: later bodies are skipped
  struct Seed {
    explicit Seed(const std::string& w) : who(&w) {}
    virtual ~Seed() = default;
    virtual void run() = 0;
    /// The name of the template task invoked (named if the call fails on a graph of several processes; the
    /// graph holds the task, so its name outlives the seed).
    const std::string* who;
  };
  template <class F>
  struct SeedOf final : Seed {
    SeedOf(const std::string& w, F&& fn) : Seed(w), f(std::move(fn)) {}
    void run() override { f(); }
    F f;
  };
  std::mutex seeds_mutex;
  std::vector<std::unique_ptr<Seed>> seeds;  ///< invoke() calls made while not executing
  std::vector<std::shared_ptr<TTBase>> tts;
  /// Non-null when the graph runs on several processes (src/flow/remote.cpp).
  RemoteBase* remote = nullptr;
  std::unique_ptr<RemoteBase> remote_owned;  ///< destroyed first (collective: it holds the transport)

  /// Runs f now if the calling thread executes this graph, else queues it for the next fence()/wait().
  template <class F>
  void seed(const std::string& who, F&& f) {
    if (executing.load(std::memory_order_acquire)) {
      if (current_engine() != engine)
        throw error("weft::flow: invoke on '" + who +
                    "' from a thread that does not execute the graph, while the graph executes");
      f();
      return;
    }
    auto s = std::make_unique<SeedOf<std::decay_t<F>>>(who, std::forward<F>(f));
    std::lock_guard<std::mutex> g(seeds_mutex);
    seeds.push_back(std::move(s));
  }
};

}  // namespace detail
}  // namespace weft::flow
