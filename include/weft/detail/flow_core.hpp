// weft internal: the machinery behind weft/flow.hpp (value slots, edges, the template task). Not part of the
// public API; include weft/flow.hpp.
#pragma once

#include <atomic>
#include <cstring>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/detail/flow_table.hpp"
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

// --- values --------------------------------------------------------------------------------------------------
/// Small trivially copyable values are copied to every successor: cheaper than sharing a counted copy.
template <class V>
inline constexpr bool cheap_v = std::is_trivially_copyable_v<V> && sizeof(V) <= 16;

/// One read-only copy shared by several successors.
template <class V>
struct Shared {
  template <class U>
  Shared(std::uint32_t n, U&& v) : refs(n), value(std::forward<U>(v)) {}
  std::atomic<std::uint32_t> refs;
  V value;
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
    const std::size_t n = bytes(s->target);
    s->~AggStore();
    if constexpr (kOverAligned)
      ::operator delete(static_cast<void*>(s), n, std::align_val_t{kAlign});
    else
      ::operator delete(static_cast<void*>(s), n);
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
    iterator(const Aggregator* a, std::size_t i) : a_(a), i_(i) {}
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

// --- values and keys across processes -------------------------------------------------------------------------
/// How a key or value type travels to another process, as bytes of a fixed size: trivially copyable types as
/// they are, std::pair and std::tuple element by element (they are not trivially copyable themselves). Other
/// types cannot cross processes yet (`ok` is false).
template <class T, class = void>
struct wire {
  static constexpr bool ok = false;
};
template <class T>
struct wire<T, std::enable_if_t<std::is_trivially_copyable_v<T>>> {
  static constexpr bool ok = true;
  static constexpr std::size_t size = sizeof(T);
  static void pack(const T& v, std::byte* p) { std::memcpy(p, static_cast<const void*>(&v), sizeof(T)); }
  static T unpack(const std::byte* p) {
    alignas(T) unsigned char buf[sizeof(T)];
    std::memcpy(buf, p, sizeof(T));  // implicitly creates the object (trivially copyable)
    return *std::launder(reinterpret_cast<T*>(buf));
  }
};
template <class... T>
struct wire<std::tuple<T...>, std::enable_if_t<!std::is_trivially_copyable_v<std::tuple<T...>> && (wire<T>::ok && ...)>> {
  static constexpr bool ok = true;
  static constexpr std::size_t size = (std::size_t{0} + ... + wire<T>::size);
  static void pack(const std::tuple<T...>& v, std::byte* p) {
    std::apply([&](const T&... e) { ((wire<T>::pack(e, p), p += wire<T>::size), ...); }, v);
  }
  static std::tuple<T...> unpack(const std::byte* p) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<T...>{wire<T>::unpack(p + offset<I>())...};
    }(std::index_sequence_for<T...>{});
  }
  template <std::size_t I>
  static constexpr std::size_t offset() {
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return (std::size_t{0} + ... + wire<std::tuple_element_t<J, std::tuple<T...>>>::size);
    }(std::make_index_sequence<I>{});
  }
};
template <class A, class B>
struct wire<std::pair<A, B>, std::enable_if_t<!std::is_trivially_copyable_v<std::pair<A, B>> && wire<A>::ok && wire<B>::ok>> {
  static constexpr bool ok = true;
  static constexpr std::size_t size = wire<A>::size + wire<B>::size;
  static void pack(const std::pair<A, B>& v, std::byte* p) {
    wire<A>::pack(v.first, p);
    wire<B>::pack(v.second, p + wire<A>::size);
  }
  static std::pair<A, B> unpack(const std::byte* p) {
    return std::pair<A, B>{wire<A>::unpack(p), wire<B>::unpack(p + wire<A>::size)};
  }
};

/// The distributed side of a graph (src/flow/remote.cpp), present only when the graph runs on several MPI
/// processes: what a template task needs to send to the owner of a key.
struct RemoteBase {
  int rank = 0;  ///< this process
  int size = 1;  ///< processes of the graph (> 1)
  virtual ~RemoteBase() = default;
  /// Sends input `input` of the task of `key` of template task `tt` (its index in the graph, agreed by
  /// construction order) to process `dest`: key and value as bytes (wire<>). Only from a worker executing the
  /// graph (a body, or a seed).
  virtual void send(int dest, std::uint32_t tt, std::uint32_t input, std::span<const std::byte> key,
                    std::span<const std::byte> value) = 0;
};

class TTBase;
struct GraphState;

/// What edges know of each other, type-erased: for a graph to find every template task connected to the ones it
/// was given.
struct EdgeBase {
  std::string name;
  std::vector<std::weak_ptr<TTBase>> tts;  ///< producers and consumers
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

/// Output terminal handed to the body (inside the `out` tuple).
template <class K, class V>
class Out {
 public:
  using key_type = K;
  using value_type = V;
  using KS = key_t<K>;
  using VS = value_t<V>;
  explicit Out(EdgeState<KS, VS>* e) : e_(e) {}

  template <class U>
  void put(const KS& key, U&& value) const {
    static_assert(std::is_copy_constructible_v<VS> || std::is_rvalue_reference_v<U&&>,
                  "weft::flow: a move-only value must be sent as an rvalue (std::move)");
    const auto& cs = e_->consumers;
    const std::size_t n = cs.size();
    if (n == 1) {
      if constexpr (std::is_rvalue_reference_v<U&&> && !std::is_const_v<std::remove_reference_t<U>>)
        cs[0].move(cs[0].tt, key, std::move(value));
      else if constexpr (std::is_same_v<std::remove_cvref_t<U>, VS>)
        cs[0].copy(cs[0].tt, key, value);
      else
        cs[0].move(cs[0].tt, key, VS(value));  // converted: the temporary is moved
    } else if (n > 1) {
      if constexpr (cheap_v<VS>) {
        for (const auto& c : cs) c.copy(c.tt, key, value);
      } else {
        auto* s = new Shared<VS>(static_cast<std::uint32_t>(n), std::forward<U>(value));
        for (const auto& c : cs) c.share(c.tt, key, s);
      }
    }
  }

  template <class Keys, class U>
  void put_many(const Keys& keys, U&& value) const {
    const auto& cs = e_->consumers;
    std::size_t nk = 0;
    for (const auto& k : keys) {
      (void)k;
      ++nk;
    }
    const std::size_t n = nk * cs.size();
    if (n == 0) return;
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
  EdgeState<KS, VS>* e_;
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
/// parameter is the `auto& out` parameter (as in `[](const int& k, double x, auto& out)`), or a function.
template <class F, class OutT, class = void>
struct body_params {
  static constexpr bool known = false;
};
template <class F, class OutT>
struct body_params<F, OutT, std::void_t<decltype(&F::operator())>> : member_params<decltype(&F::operator())> {};
template <class F, class OutT>
  requires(!requires { &F::operator(); }) && requires { &F::template operator()<OutT>; }
struct body_params<F, OutT, void> : member_params<decltype(&F::template operator()<OutT>)> {};
template <class R, class... A, class OutT>
struct body_params<R (*)(A...), OutT, void> {
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
  /// A value sent from another process arrives (RemoteBase::send's bytes): delivered here as a local send of
  /// input `input` would be. On a worker executing the graph. Throws error for an unknown input or a size that
  /// does not match the types.
  virtual void deliver_remote(std::uint32_t input, std::span<const std::byte> key,
                              std::span<const std::byte> value) = 0;
  /// Index of this template task in its graph (the same on every process that builds the same graph).
  std::uint32_t id() const { return id_; }
  void set_id(std::uint32_t id) { id_ = id; }
  GraphState* graph() const { return graph_; }
  /// Lets the edges name this template task (for graph() to find the connected ones).
  void link_edges() {
    for (EdgeBase* e : edges_) e->tts.push_back(weak_from_this());
  }

 protected:
  std::string name_;
  std::vector<EdgeBase*> edges_;
  GraphState* graph_ = nullptr;
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
    virtual ~Seed() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct SeedOf final : Seed {
    explicit SeedOf(F&& f) : f(std::move(f)) {}
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
    auto s = std::make_unique<SeedOf<std::decay_t<F>>>(std::forward<F>(f));
    std::lock_guard<std::mutex> g(seeds_mutex);
    seeds.push_back(std::move(s));
  }
};

}  // namespace detail
}  // namespace weft::flow
