// weft internal: the template task of weft/flow.hpp. Not part of the public API; include weft/flow.hpp.
#pragma once

#include <algorithm>
#include <ostream>

#include "weft/detail/flow_core.hpp"

namespace weft::flow {

template <class Key, class Body, class Ins, class Outs>
class TT;

/// A template task: `body` runs once per key, when every input terminal has its value(s) for that key. Created
/// by make_tt (which documents the body's signature); held by std::shared_ptr. Configure it (set_priomap,
/// set_keymap) before the graph first executes.
template <class Key, class Body, class... In, class... Out>
class TT<Key, Body, std::tuple<In...>, std::tuple<Out...>> final : public detail::TTBase {
 public:
  using key_type = Key;
  using KS = detail::key_t<Key>;
  using out_type = std::tuple<detail::out_of<Out>...>;

  TT(Body body, const std::tuple<In...>& ins, const std::tuple<Out...>& outs, std::string name)
      : body_(std::move(body)), out_(make_outs(outs, std::index_sequence_for<Out...>{})) {
    name_ = std::move(name);
    label_ = weft::detail::intern_label(name_.c_str());  // a trace may be written after this task is gone
    connect_inputs(ins, std::index_sequence_for<In...>{});
    std::apply([&](const auto&... e) { (keep(e.state(), false), ...); }, outs);
  }
  /// Leaves its input edges: a producer that outlives it then sends into an edge without this consumer (an
  /// error if it has no other), not into a destroyed object.
  ~TT() override { leave_inputs(std::index_sequence_for<In...>{}); }

  /// Seeds the task of `key`: delivers one value per data input (control inputs need none), in input order. If
  /// the graph is not executing, the call is queued and runs at the start of the next fence()/wait().
  template <class... A>
    requires(!std::is_void_v<Key>)
  void invoke(const KS& key, A&&... values) {
    seed(key, std::forward<A>(values)...);
  }
  template <class... A>
    requires std::is_void_v<Key>
  void invoke(A&&... values) {
    seed(detail::VoidKey{}, std::forward<A>(values)...);
  }

  /// Seeds input J of the task of `key` only (TTG's in<J>()->send): the task runs once its other inputs have
  /// arrived too, from tasks or other calls. `value` is the input's value; none for a control input. Queued
  /// and delivered as invoke() is.
  template <std::size_t J, class... A>
    requires(!std::is_void_v<Key>)
  void invoke_input(const KS& key, A&&... value) {
    seed_input<J>(key, std::forward<A>(value)...);
  }
  template <std::size_t J, class... A>
    requires std::is_void_v<Key>
  void invoke_input(A&&... value) {
    seed_input<J>(detail::VoidKey{}, std::forward<A>(value)...);
  }

  /// Priority of the task of each key (larger runs earlier among ready tasks); default 0 for every key.
  void set_priomap(std::function<std::int32_t(const KS&)> f) {
    priomap_ = std::move(f);
    refresh_plain();
  }
  /// The process (MPI rank) that owns the task of each key: a value sent to a key runs its task there. Default on
  /// several processes: Hash<Key>(key) modulo the number of processes. On one process every key must map to 0.
  void set_keymap(std::function<int(const KS&)> f) {
    keymap_ = std::move(f);
    refresh_plain();
  }

  std::size_t pending() const override { return table_ ? table_->count() : 0; }

  void drain(std::ostream* os, std::size_t max) override {
    if (!table_) return;
    std::size_t shown = 0;
    table_->drain([&](detail::Task* t) {
      Record* r = rec(t);
      if (os && shown < max) {
        *os << (shown ? "; " : "") << "key " << detail::key_string(r->key) << " missing input";
        describe_missing(*os, *r, std::index_sequence_for<In...>{});
        ++shown;
      }
      destroy_record(t);
      detail::detached_discard(t);
    });
  }

  std::span<std::byte> place_remote(const detail::WireHeader& h, std::size_t size, void*& handle) override {
    std::span<std::byte> out;
    if (!for_input(h.input, [&]<std::size_t J>() { out = place_input<J>(h, size, handle); })) bad_input(h.input);
    return out;
  }

  std::size_t deliver_remote(const detail::WireHeader& h, std::span<const std::byte> keys,
                             std::span<const std::byte> value, void*& handle) override {
    std::size_t used = 0;
    if (!for_input(h.input, [&]<std::size_t J>() { used = deliver_input<J>(h, keys, value, handle); }))
      bad_input(h.input);
    return used;
  }

  void release_remote(std::uint16_t input, void* handle) override {
    for_input(input, [&]<std::size_t J>() { release_input<J>(handle); });
  }

  const void* input_type(std::uint16_t input) const override {
    const void* type = nullptr;
    if (!for_input(input, [&]<std::size_t J>() { type = &detail::type_tag<InV<J>>; })) bad_input(input);
    return type;
  }

  const char* untransferable() const override {
    const char* what = nullptr;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((what = what ? what
                    : !detail::transferable_v<KS>                ? "its key type"
                    : (kData<J> && !detail::transferable_v<InV<J>>) ? "the value type of one of its inputs"
                                                                    : nullptr),
       ...);
    }(std::index_sequence_for<In...>{});
    return what;
  }

  bool has_keymap() const override { return static_cast<bool>(keymap_); }

  void attach(detail::GraphState* g, unsigned workers) override {
    graph_ = g;
    refresh_plain();
    if constexpr (!kBypass) {
      if (g)
        table_ = std::make_unique<detail::table::TaskTable>(workers);
      else
        table_.reset();
    }
  }

 private:
  static constexpr std::size_t kIn = sizeof...(In);
  static_assert(kIn >= 1 && kIn <= 32,
                "weft::flow::make_tt: a template task needs 1 to 32 input edges (use a control edge, "
                "Edge<Key, void>, for a task that is only invoked)");
  template <std::size_t J>
  using InE = std::tuple_element_t<J, std::tuple<In...>>;
  template <std::size_t J>
  using InV = detail::value_t<typename detail::edge_traits<InE<J>>::value>;
  template <std::size_t J>
  static constexpr bool kAgg = detail::edge_traits<InE<J>>::aggregator;
  template <std::size_t J>
  static constexpr bool kData = !std::is_void_v<typename detail::edge_traits<InE<J>>::value>;
  static constexpr bool kBypass = kIn == 1 && !kAgg<0>;  // a single input: ready at once, no table
  static constexpr bool kHasKey = !std::is_void_v<Key>;

  template <std::size_t J>
  using SlotFor = std::conditional_t<kAgg<J>, detail::AggStore<InV<J>>*, detail::Slot<InV<J>>>;
  template <class Seq>
  struct Slots;
  template <std::size_t... J>
  struct Slots<std::index_sequence<J...>> {
    using type = std::tuple<SlotFor<J>...>;
  };

  /// A task of this template: key and inputs, in the engine descriptor's body (or on the heap if too large).
  struct Record {
    TT* tt;
    std::uint32_t mask;  ///< inputs reserved (aggregators: that started collecting); under the bucket lock
    std::uint32_t open;  ///< inputs not fully reserved yet (0: out of the table); under the bucket lock
    KS key;
    typename Slots<std::index_sequence_for<In...>>::type slots;
  };
  static constexpr bool kInline = sizeof(Record) <= detail::kInlineBody && alignof(Record) <= 16;

  static Record* rec(detail::Task* t) {
    if constexpr (kInline)
      return std::launder(reinterpret_cast<Record*>(t->body));
    else
      return *reinterpret_cast<Record**>(t->body);
  }

  // --- data inputs' positions among the body's parameters -------------------------------------------------------
  template <std::size_t J>
  static constexpr std::size_t data_index() {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + (kData<I> ? 1 : 0));
    }(std::make_index_sequence<J>{});
  }
  // The arguments before `out`, as lvalues (they bind to every documented parameter form but V&&), for
  // body_params' test of a generic body.
  template <std::size_t J>
  using ProbeArg = std::conditional_t<
      !kData<J>, std::tuple<>,
      std::tuple<std::conditional_t<kAgg<J>, const Aggregator<InV<J>>&, InV<J>&>>>;
  template <class Seq>
  struct Probe;
  template <std::size_t... J>
  struct Probe<std::index_sequence<J...>> {
    using type = decltype(std::tuple_cat(
        std::declval<std::conditional_t<kHasKey, std::tuple<const KS&>, std::tuple<>>>(), std::declval<ProbeArg<J>>()...));
  };
  using Params = detail::body_params<Body, out_type, typename Probe<std::index_sequence_for<In...>>::type>;
  template <std::size_t J>
  static constexpr detail::Pass pass() {
    constexpr std::size_t p = (kHasKey ? 1 : 0) + data_index<J>();
    if constexpr (!kData<J> || kAgg<J>) {
      return detail::Pass::read;  // nothing, or an Aggregator view
    } else if constexpr (Params::known) {
      if constexpr (p < std::tuple_size_v<typename Params::type>) {
        using P = std::tuple_element_t<p, typename Params::type>;
        static_assert(std::is_same_v<std::remove_cvref_t<P>, InV<J>>,
                      "weft::flow::make_tt: a body parameter for a data input must have the edge's value type (by "
                      "value, const& or &): another type would convert every value silently");
        return detail::pass_for<P>();
      } else
        return detail::Pass::own;  // wrong arity: the static_assert below explains
    } else {
      return detail::Pass::own;  // parameter types unknown (generic lambda): give the task its own value
    }
  }
  template <std::size_t J>
  using ArgT = std::conditional_t<
      kAgg<J>, Aggregator<InV<J>>&,
      std::conditional_t<pass<J>() == detail::Pass::read, const InV<J>&,
                         std::conditional_t<pass<J>() == detail::Pass::own, InV<J>&&, InV<J>&>>>;
  template <std::size_t J>
  using ArgTuple = std::conditional_t<kData<J>, std::tuple<ArgT<J>>, std::tuple<>>;
  template <class Seq>
  struct Call;
  template <std::size_t... J>
  struct Call<std::index_sequence<J...>> {
    using args = decltype(std::tuple_cat(std::declval<ArgTuple<J>>()...));
    using key_args = std::conditional_t<kHasKey, std::tuple<const KS&>, std::tuple<>>;
    template <class T>
    struct invocable;
    template <class... A>
    struct invocable<std::tuple<A...>> {
      static constexpr bool with_out = std::is_invocable_v<Body&, A..., out_type&>;
      static constexpr bool without_out = sizeof...(Out) == 0 && std::is_invocable_v<Body&, A...>;
    };
    using all = decltype(std::tuple_cat(std::declval<key_args>(), std::declval<args>()));
    static constexpr bool with_out = invocable<all>::with_out;
    static constexpr bool without_out = invocable<all>::without_out;
  };
  using CallInfo = Call<std::index_sequence_for<In...>>;
  static_assert(CallInfo::with_out || CallInfo::without_out,
                "weft::flow::make_tt: the body cannot be called as body(key, inputs..., out): it must take "
                "`const Key&` (omitted for a void key), then one parameter per input edge that carries data, in "
                "order (the edge's value type, by value, const& or &; `const weft::flow::Aggregator<V>&` for an "
                "aggregator input; nothing for a control edge), then `auto& out` (optional when there are no "
                "output edges)");

  // --- construction --------------------------------------------------------------------------------------------
  template <std::size_t... I>
  static out_type make_outs(const std::tuple<Out...>& outs, std::index_sequence<I...>) {
    return out_type(detail::out_of<Out>(std::get<I>(outs).state().get())...);
  }
  template <class S>
  void keep(const std::shared_ptr<S>& s, bool consumer) {
    edges_.push_back(s.get());
    held_.push_back(s);
    if (!consumer) s->has_producer = true;
  }
  template <std::size_t... J>
  void connect_inputs(const std::tuple<In...>& ins, std::index_sequence<J...>) {
    (connect_input<J>(std::get<J>(ins)), ...);
  }
  template <std::size_t J>
  void connect_input(const InE<J>& in) {
    using V = InV<J>;
    const auto& st = [&]() -> const auto& {
      if constexpr (kAgg<J>) {
        if (in.count_of)
          count_of_[J] = in.count_of;
        else
          fixed_[J] = in.fixed;
        return in.edge.state();
      } else {
        return in.state();
      }
    }();
    detail::Consumer<KS, V> c{this, &move_in<J>, nullptr, nullptr, &scatter_in<J>};
    if constexpr (std::is_copy_constructible_v<V>) c.copy = &copy_in<J>;
    if constexpr (!detail::cheap_v<V>) c.share = &share_in<J>;
    st->consumers.push_back(c);
    static_assert(std::is_same_v<typename std::remove_cvref_t<decltype(st)>::element_type, detail::EdgeState<KS, V>>);
    keep(st, true);  // held_[J]: input J's edge (the inputs are connected first, in order; see leave_inputs)
  }
  template <std::size_t... J>
  void leave_inputs(std::index_sequence<J...>) {
    (std::erase_if(static_cast<detail::EdgeState<KS, InV<J>>*>(held_[J].get())->consumers,
                   [this](const detail::Consumer<KS, InV<J>>& x) { return x.tt == this; }),
     ...);
  }
  template <std::size_t J>
  static void move_in(void* tt, const KS& k, InV<J>&& v) {
    static_cast<TT*>(tt)->template deliver<J>(k, std::move(v));
  }
  template <std::size_t J>
  static void copy_in(void* tt, const KS& k, const InV<J>& v) {
    static_cast<TT*>(tt)->template deliver<J>(k, v);
  }
  template <std::size_t J>
  static void share_in(void* tt, const KS& k, detail::Shared<InV<J>>* s) {
    static_cast<TT*>(tt)->template deliver<J>(k, s);
  }

  // --- tasks ---------------------------------------------------------------------------------------------------
  detail::GraphState& graph_state() const {
    if (!graph_) [[unlikely]]
      not_in_graph();
    return *graph_;
  }
  // The errors' messages are built out of line: inlined, their strings cost every delivery a larger frame.
  [[noreturn, gnu::noinline, gnu::cold]] void not_in_graph() const {
    throw error("weft::flow: template task '" + name_ + "' is not part of a graph (call weft::flow::graph)");
  }
  [[gnu::noinline, gnu::cold]] void check_keymap_one_process(const KS& key) const {
    const int owner = keymap_(key);
    if (owner != 0)
      throw error("weft::flow: the keymap of '" + name_ + "' maps key " + detail::key_string(key) +
                  " to process " + std::to_string(owner) + ", but the graph runs on one process (process 0)");
  }

  void refresh_plain() override { plain_ = graph_ && !remote_ && !keymap_ && !priomap_; }
  /// new_task's tests when the template task is not plain_; returns the key's priority.
  [[gnu::noinline]] std::int32_t checked_priority(const KS& key) {
    detail::GraphState& g = graph_state();  // throws if this template task is in no graph
    if (keymap_ && !g.remote) [[unlikely]]  // (on several processes deliver() has placed the key)
      check_keymap_one_process(key);
    return priomap_ ? priomap_(key) : 0;
  }

  detail::Task* new_task(const KS& key) {
    std::int32_t priority = 0;
    if (!plain_) [[unlikely]]
      priority = checked_priority(key);
    detail::Task* t = detail::detached_allocate(label_, priority);
    void* mem = t->body;
    if constexpr (!kInline) {
      mem = detail::allocate_large_body(sizeof(Record), alignof(Record));
      *reinterpret_cast<void**>(t->body) = mem;
    }
    try {
      ::new (mem) Record{this, 0, kIn, key, {}};
    } catch (...) {
      if constexpr (!kInline) detail::free_large_body(mem, sizeof(Record), alignof(Record));
      detail::detached_discard(t);
      throw;
    }
    t->body_ops = &kBodyOps;
    return t;
  }

  template <std::size_t J>
  static constexpr std::uint32_t bit = std::uint32_t{1} << J;

  /// Input J of the task of `key` arrives (src: an rvalue, a const lvalue or a Shared<V>*).
  ///
  /// No user code runs under the bucket lock but the key's operator== (hashing happens before): under the lock
  /// a delivery only finds the task and reserves its input (sets the input's bit; for an aggregator, takes the
  /// next index). The task of a new key is built after unlocking when that runs user code (keymap, priomap, a
  /// key's copy constructor), then inserted unless another delivery was first; an aggregator's store too (its
  /// count callback); the value is constructed into the reserved slot after unlocking.
  /// Arrivals of constructed values are counted in the descriptor's `pending` (one unit per input, one per value
  /// once an aggregator knows its count): the last one submits the task. So a callback or a value's constructor
  /// may itself send to this template task, even to the same key, and other workers never spin on user code.
  template <std::size_t J, class Src>
  void deliver(const KS& key, Src&& src) {
    if (!plain_ && remote_) [[unlikely]] {  // several processes: the key's owner may be another one
      if (sent_away<J>(key, std::forward<Src>(src))) return;
    }
    deliver_here<J>(key, std::forward<Src>(src));
  }
  /// Several processes: sends input J of `key` to the key's owner if that is another process (then true; else
  /// `src` is left as it was). Out of line, as the path of one process does not take it.
  template <std::size_t J, class Src>
  [[gnu::noinline]] bool sent_away(const KS& key, Src&& src) {
    const int owner = owner_of(key);
    if (owner == remote_->rank) return false;
    send_one<J>(owner, key, std::forward<Src>(src));
    return true;
  }

  // --- across processes (see flow_wire.hpp) ---------------------------------------------------------------------
  /// Calls f.template operator()<J>() for input J == input; false if there is no such input.
  template <class F>
  static bool for_input(std::uint32_t input, F&& f) {
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return ((input == J ? (f.template operator()<J>(), true) : false) || ...);
    }(std::index_sequence_for<In...>{});
  }
  [[noreturn]] void bad_input(std::uint32_t input) const {
    throw error("weft::flow: '" + name_ + "': a message from another process names input " + std::to_string(input) +
                ", which this template task does not have (different graphs?)");
  }

  int owner_of(const KS& key) const {
    const int n = graph_->remote->size;
    const int owner = keymap_ ? keymap_(key) : static_cast<int>(Hash<KS>{}(key) % static_cast<std::size_t>(n));
    if (owner < 0 || owner >= n) [[unlikely]]
      throw error("weft::flow: the keymap of '" + name_ + "' maps key " + detail::key_string(key) + " to process " +
                  std::to_string(owner) + ", but the graph runs on " + std::to_string(n) + " processes");
    return owner;
  }

  template <std::size_t J>
  static constexpr bool kTransferable =
      detail::transferable_v<KS> && (!kData<J> || detail::transferable_v<InV<J>>);

  template <std::size_t J>
  [[noreturn]] void cannot_cross(const KS& key) const {
    throw error("weft::flow: '" + name_ + "', key " + detail::key_string(key) + ", input " + std::to_string(J) +
                ": sent to a key owned by another process, but its " +
                (detail::transferable_v<KS> ? "value" : "key") +
                " type cannot cross processes (it must be trivially copyable, a std::pair / std::tuple of such "
                "types, or serializable with cereal: see weft/flow.hpp)");
  }

  /// Input J of the tasks of `keys` (all owned by process `dest`) gets the value `v` (null for a control edge):
  /// as few messages as the header size allows, the value encoded once. `hold`: the shared copy `v` lives in, if
  /// any; a large fixed value is then sent from it without a copy (one more reference, released once sent).
  template <std::size_t J>
  void send_remote(int dest, std::span<const KS> keys, const InV<J>* v, detail::Shared<InV<J>>* hold) {
    using V = InV<J>;
    if constexpr (!kTransferable<J>) {
      (void)dest, (void)v, (void)hold;
      cannot_cross<J>(keys.front());
    } else {
      detail::RemoteBase& remote = *graph_->remote;
      detail::WireBytes encoded = detail::encode_buffer<V>(remote);
      std::span<const std::byte> payload;
      if constexpr (kData<J>) payload = detail::wire_bytes(*v, encoded);
      if constexpr (detail::Codec<KS>::kind == detail::WireKind::fixed) {
        // The common case, one key of fixed size and a small value: the header on the stack, no allocation.
        constexpr std::size_t hsize = sizeof(detail::WireHeader) + detail::Codec<KS>::size;
        if (keys.size() == 1 && hsize <= 256 && hsize <= remote.max_header && payload.size() <= remote.large) {
          std::byte header[hsize <= 256 ? hsize : 1];
          const detail::WireHeader h{id_, static_cast<std::uint16_t>(J), 1};
          std::memcpy(header, &h, sizeof h);
          detail::Codec<KS>::pack(keys[0], header + sizeof h);
          remote.send(dest, {header, hsize}, payload, nullptr);  // (copied)
          remote.buffers.give(std::move(encoded));
          return;
        }
      }
      detail::ScatterBatch<V> batch(remote, v, hold);
      if (!encoded.empty()) batch.use_encoded(std::move(encoded));  // (else its bytes are the value's own)
      batch.add(dest, id_, static_cast<std::uint16_t>(J), keys, name_);
      batch.send();
    }
  }

  /// A value for a key owned by process `dest`.
  template <std::size_t J, class Src>
  void send_one(int dest, const KS& key, Src&& src) {
    using V = InV<J>;
    const std::span<const KS> keys(&key, 1);
    if constexpr (!kData<J>) {
      send_remote<J>(dest, keys, nullptr, nullptr);
    } else if constexpr (std::is_same_v<std::remove_cvref_t<Src>, detail::Shared<V>*>) {
      struct Release {
        detail::Shared<V>* s;
        ~Release() { s->release(); }
      } release{src};
      send_remote<J>(dest, keys, &src->value, src);
    } else if constexpr (std::is_same_v<std::remove_cvref_t<Src>, V>) {
      if constexpr (detail::contiguous_v<V> && !std::is_reference_v<Src> && !std::is_const_v<Src>) {
        // An rvalue vector of a rendezvous's size: moved into a shared copy that MPI sends from (no copy).
        if (detail::Codec<V>::bytes(src).size() > graph_->remote->large) {
          send_one<J>(dest, key, new detail::Shared<V>(1, std::move(src)));
          return;
        }
      }
      send_remote<J>(dest, keys, &std::as_const(src), nullptr);
    } else {
      send_one<J>(dest, key, V(std::forward<Src>(src)));  // a seed's value of another type: converted once
    }
  }

  /// A broadcast of batch's value to `keys`: the keys owned here share batch.shared() (or get copies of a cheap
  /// value), the others join `batch`'s message for their owner.
  template <std::size_t J>
  static void scatter_in(void* self, std::span<const KS> keys, detail::ScatterBatch<InV<J>>& batch) {
    TT& tt = *static_cast<TT*>(self);
    const int me = tt.graph_->remote->rank;
    std::vector<std::pair<int, std::uint32_t>> by_owner;  // (owner, index): stable by index within an owner
    by_owner.reserve(keys.size());
    for (std::uint32_t i = 0; i < keys.size(); ++i) by_owner.emplace_back(tt.owner_of(keys[i]), i);
    std::sort(by_owner.begin(), by_owner.end());
    std::vector<KS> group;
    for (std::size_t a = 0; a < by_owner.size();) {
      const int owner = by_owner[a].first;
      std::size_t b = a;
      while (b < by_owner.size() && by_owner[b].first == owner) ++b;
      if (owner == me) {
        for (std::size_t i = a; i < b; ++i) {
          const KS& k = keys[by_owner[i].second];
          if constexpr (!kData<J>) {
            tt.template deliver_here<J>(k, detail::Void{});
          } else if constexpr (detail::cheap_v<InV<J>>) {
            tt.template deliver_here<J>(k, batch.value());
          } else {
            detail::Shared<InV<J>>* s = batch.shared();
            s->refs.fetch_add(1, std::memory_order_relaxed);  // the batch's reference keeps s alive meanwhile
            tt.template deliver_here<J>(k, s);
          }
        }
      } else {
        group.clear();
        for (std::size_t i = a; i < b; ++i) group.push_back(keys[by_owner[i].second]);
        if constexpr (!kTransferable<J>)
          tt.template cannot_cross<J>(group.front());
        else
          batch.add(owner, tt.id_, static_cast<std::uint16_t>(J), std::span<const KS>(group), tt.name_);
      }
      a = b;
    }
  }

  /// place_remote for input J: a large fixed value, or vector of fixed elements, goes straight into a shared
  /// copy for its keys.
  template <std::size_t J>
  std::span<std::byte> place_input(const detail::WireHeader& h, std::size_t size, void*& handle) {
    using V = InV<J>;
    if constexpr (kData<J> && kTransferable<J> && !detail::cheap_v<V>) {
      if constexpr (std::is_trivially_copyable_v<V>) {
        if (size != sizeof(V)) wrong_message<J>();
        auto* s = new detail::Shared<V>(1, typename detail::Shared<V>::Raw{});  // the message's reference
        handle = s;
        return {reinterpret_cast<std::byte*>(&s->value), sizeof(V)};
      } else if constexpr (detail::contiguous_v<V>) {
        using E = typename V::value_type;
        if (size % sizeof(E) != 0) wrong_message<J>();
        auto* s = new detail::Shared<V>(1, V(size / sizeof(E)));  // the message's reference
        handle = s;
        return std::as_writable_bytes(std::span<E>(s->value));
      }
    }
    (void)h, (void)size, (void)handle;
    return {};
  }

  template <std::size_t J>
  [[noreturn]] void wrong_message() const {
    throw error("weft::flow: '" + name_ + "', input " + std::to_string(J) +
                ": a message from another process does not match the key and value types (different graphs?)");
  }

  /// deliver_remote for input J: one group of a message (its keys at the start of `key_bytes`); returns the bytes
  /// of keys it read. A value shared by the keys lives in one copy for every group of the message: `handle`, set
  /// by place_input or by the first group that decodes it, holds the message's reference (release_remote).
  template <std::size_t J>
  std::size_t deliver_input(const detail::WireHeader& h, std::span<const std::byte> key_bytes,
                            std::span<const std::byte> value, void*& handle) {
    using V = InV<J>;
    if constexpr (!kTransferable<J>) {
      (void)h, (void)key_bytes, (void)value, (void)handle;
      throw error("weft::flow: '" + name_ + "', input " + std::to_string(J) +
                  ": a message from another process for a type that cannot cross processes (different programs?)");
    } else {
      detail::WireReader keys(key_bytes);
      if (h.keys == 0) wrong_message<J>();
      if constexpr (!kData<J>) {
        if (!value.empty()) wrong_message<J>();
        for (std::uint16_t i = 0; i < h.keys; ++i) deliver_here<J>(detail::read_key<KS>(keys), detail::Void{});
      } else if constexpr (detail::cheap_v<V>) {
        if (value.size() != sizeof(V)) wrong_message<J>();
        alignas(V) unsigned char buf[sizeof(V)];
        const V& v = *detail::Codec<V>::unpack_to(buf, value.data());
        for (std::uint16_t i = 0; i < h.keys; ++i) deliver_here<J>(detail::read_key<KS>(keys), v);
      } else {
        detail::Shared<V>* s = static_cast<detail::Shared<V>*>(handle);
        if (!s) {  // the first group of the message: the shared copy, with the message's reference
          if constexpr (detail::Codec<V>::kind == detail::WireKind::fixed) {
            if (value.size() != detail::Codec<V>::size) wrong_message<J>();
            if constexpr (std::is_trivially_copyable_v<V>) {
              s = new detail::Shared<V>(1, typename detail::Shared<V>::Raw{});
              std::memcpy(static_cast<void*>(&s->value), value.data(), sizeof(V));
            } else {
              alignas(V) unsigned char buf[sizeof(V)];
              V* v = detail::Codec<V>::unpack_to(buf, value.data());
              s = new detail::Shared<V>(1, std::move(*v));
              v->~V();
            }
          } else {
            s = new detail::Shared<V>(1, detail::Codec<V>::decode(value));
          }
          handle = s;
        }
        // One reference per key of this group (relaxed: the message's keeps s alive meanwhile); a key that fails
        // to decode or deliver leaves its reference unused, released here.
        s->refs.fetch_add(h.keys, std::memory_order_relaxed);
        std::uint16_t given = 0;
        struct Unused {
          detail::Shared<V>* s;
          std::uint16_t& given;
          std::uint16_t n;
          ~Unused() {
            for (std::uint16_t i = given; i < n; ++i) s->release();
          }
        } unused{s, given, h.keys};
        for (std::uint16_t i = 0; i < h.keys; ++i) {
          KS k = detail::read_key<KS>(keys);
          ++given;  // deliver_here takes the reference, also when it throws
          deliver_here<J>(k, s);
        }
      }
      return key_bytes.size() - keys.left();
    }
  }

  /// release_remote for input J.
  template <std::size_t J>
  static void release_input(void* handle) {
    if constexpr (kData<J> && !detail::cheap_v<InV<J>>) static_cast<detail::Shared<InV<J>>*>(handle)->release();
  }

  /// deliver() for a key owned by this process.
  template <std::size_t J, class Src>
  void deliver_here(const KS& key, Src&& src) {
    if constexpr (kBypass) {
      detail::Task* t = new_task(key);
      Record* r = rec(t);
      try {
        std::get<0>(r->slots).set(std::forward<Src>(src));
      } catch (...) {
        destroy_record(t);
        detail::detached_discard(t);
        throw;
      }
      r->mask = 1;
      detail::detached_submit(t, graph_->anchor);  // the run executing now
    } else {
      const std::size_t h = Hash<KS>{}(key);
      using Store = detail::AggStore<InV<J>>;
      // Built outside the lock and not used (another delivery was first, or an error): discarded on the way out,
      // outside the lock too (the key's destructor is user code).
      struct Spare {
        detail::Task* task = nullptr;
        Store* store = nullptr;
        ~Spare() {
          if (task) {
            destroy_record(task);
            detail::detached_discard(task);
          }
          if constexpr (kAgg<J>)
            if (store) Store::destroy(store);
        }
      } spare;
      detail::Task* t;
      Got got;
      std::size_t at = 0;  // aggregator: the index reserved
      for (;;) {
        {
          detail::table::TaskTable::Locked bucket(*table_, h);
          t = bucket.find([&](detail::Task* e) { return rec(e)->key == key; });
          if (!t && (spare.task || plain_new_task())) {
            t = spare.task ? spare.task : new_pending_task(key);
            spare.task = nullptr;
            bucket.insert(t);
          }
          got = t ? reserve<J>(t, spare.store, at) : Got::no_task;
          if (got == Got::reserved && rec(t)->open == 0) bucket.erase(t);  // no delivery will look for it
        }
        if (got == Got::reserved) break;
        if (got == Got::no_task) {
          spare.task = new_pending_task(key);
        } else if (got == Got::no_store) {
          if constexpr (kAgg<J>) {
            const std::size_t n = count_of_[J] ? count_of_[J](key) : fixed_[J];
            if (n == 0)
              throw error("weft::flow: '" + name_ + "', key " + detail::key_string(key) + ": aggregator input " +
                          std::to_string(J) + ": its count function gave 0 (an aggregator's count is at least 1)");
            spare.store = Store::make(n);
          }
        } else if (got == Got::twice) {
          throw error("weft::flow: '" + name_ + "', key " + detail::key_string(key) + ": input " +
                      std::to_string(J) + " received twice");
        } else {  // too_many: `at` holds the count
          throw error("weft::flow: '" + name_ + "', key " + detail::key_string(key) + ": aggregator input " +
                      std::to_string(J) + " received more than the " + std::to_string(at) + " values it expects");
        }
      }
      Record* r = rec(t);
      try {
        if constexpr (kAgg<J>) {
          auto* slot = ::new (static_cast<void*>(std::get<J>(r->slots)->items() + at)) detail::Slot<InV<J>>;
          slot->set(std::forward<Src>(src));
        } else {
          std::get<J>(r->slots).set(std::forward<Src>(src));
        }
      } catch (...) {
        // The slot holds no value (Slot::set marks it so): the task must not run. It is still counted, so that
        // it leaves like any other: submitted (and destroyed unrun) once complete, or discarded as pending.
        t->cancelled.store(true, std::memory_order_relaxed);  // published by the release below
        arrive(t);
        throw;
      }
      arrive(t);
    }
  }

  enum class Got { reserved, no_task, no_store, twice, too_many };

  /// Whether a new task can be built under the bucket lock: no callback, and a key copied without user code.
  /// (Building it outside would cost a second lock and lookup.) On several processes new_task() does not call
  /// the keymap (deliver() has placed the key already): only the priomap counts then.
  bool plain_new_task() const {
    return std::is_trivially_copyable_v<KS> && (!keymap_ || remote_) && !priomap_;
  }
  detail::Task* new_pending_task(const KS& key) {
    detail::Task* t = new_task(key);
    t->pending.store(static_cast<std::int32_t>(kIn), std::memory_order_relaxed);  // one unit per input
    return t;
  }

  /// Under t's bucket lock: reserves input J of t (for an aggregator, index `at`), or says what is missing.
  template <std::size_t J>
  static Got reserve(detail::Task* t, detail::AggStore<InV<J>>*& store, std::size_t& at) {
    Record* r = rec(t);
    if constexpr (kAgg<J>) {
      auto& slot = std::get<J>(r->slots);
      if (!(r->mask & bit<J>)) {
        if (!store) return Got::no_store;
        slot = store;
        store = nullptr;
        r->mask |= bit<J>;
        // The input counts one unit per value from now on. Its single unit so far is still owed, so the count
        // cannot reach zero meanwhile; the arrivals' acq_rel decrements order this before the submission.
        t->pending.fetch_add(static_cast<std::int32_t>(slot->target) - 1, std::memory_order_relaxed);
      }
      if (slot->size == slot->target) {
        at = slot->target;
        return Got::too_many;
      }
      at = slot->size++;
      if (slot->size == slot->target) --r->open;
    } else {
      if (r->mask & bit<J>) return Got::twice;
      r->mask |= bit<J>;
      --r->open;
    }
    return Got::reserved;
  }

  /// A value of t has been constructed (or has failed to be). acq_rel: the last arrival sees every slot
  /// constructed by the others, and hands them to the worker that runs the task through the queue it submits to.
  void arrive(detail::Task* t) {
    if (t->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) detail::detached_submit(t, graph_->anchor);
  }

  template <std::size_t... J>
  void describe_missing(std::ostream& os, const Record& r, std::index_sequence<J...>) const {
    int n = 0;
    auto one = [&](std::size_t j, bool missing, std::size_t have, std::size_t want) {
      if (!missing) return;
      os << (n++ ? ", " : " ") << j;
      if (want) os << " (" << have << " of " << want << " values)";
    };
    (
        [&] {
          if constexpr (kAgg<J>) {
            const auto* st = std::get<J>(r.slots);
            const bool started = r.mask & bit<J>;
            one(J, !started || st->size < st->target, started ? st->size : 0,
                started ? st->target : 0);
          } else {
            one(J, !(r.mask & bit<J>), 0, 0);
          }
        }(),
        ...);
  }

  static void destroy_record(detail::Task* t) {
    Record* r = rec(t);
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            if (r->mask & bit<J>) {
              if constexpr (kAgg<J>)
                detail::AggStore<InV<J>>::destroy(std::get<J>(r->slots));
              else
                std::get<J>(r->slots).destroy();
            }
          }(),
          ...);
    }(std::index_sequence_for<In...>{});
    r->~Record();
    if constexpr (!kInline) detail::free_large_body(r, sizeof(Record), alignof(Record));
  }

  // Engine entry: runs the body (unless an earlier body failed), then destroys the record.
  static void run(detail::Task* t, weft::Context&) {
    struct Cleanup {
      detail::Task* t;
      ~Cleanup() { destroy_record(t); }
    } cleanup{t};
    Record* r = rec(t);
    TT& tt = *r->tt;
    if (tt.graph_->failed.load(std::memory_order_relaxed)) return;
    try {
      tt.call(*r, std::index_sequence_for<In...>{});
    } catch (...) {
      tt.body_failed(*r);
      throw;
    }
  }
  // Out of line: the trampoline above stays small (its frame is paid by every task).
  // Called while the body's exception is handled (run rethrows it). A lost value (a send on an edge without
  // consumer) is rethrown as an error that names this template task and the key.
  [[gnu::cold, gnu::noinline]] void body_failed(const Record& r) {
    graph_->failed.store(true, std::memory_order_relaxed);
    if (graph_->remote)  // the other processes would wait for this one: end the job
      graph_->remote->fail("weft::flow: the task of '" + name_ + "', key " + detail::key_string(r.key) + ", threw " +
                           detail::describe_current_exception());
    try {
      throw;
    } catch (const detail::LostValue& x) {
      throw error("weft::flow: template task '" + name_ + "', key " + detail::key_string(r.key) + ": " + x.what());
    } catch (...) {
    }
  }
  static constexpr weft::detail::BodyOps kBodyOps{&run, nullptr, &destroy_record};

  template <std::size_t J>
  static auto arg(Record& r, Aggregator<InV<J>>* views) {
    auto& slot = std::get<J>(r.slots);
    if constexpr (!kData<J>) {
      return std::tuple<>{};
    } else if constexpr (kAgg<J>) {
      ::new (static_cast<void*>(views)) Aggregator<InV<J>>(slot);
      return std::tuple<Aggregator<InV<J>>&>(*views);
    } else if constexpr (pass<J>() == detail::Pass::read) {
      return std::tuple<const InV<J>&>(slot.read());
    } else if constexpr (pass<J>() == detail::Pass::own) {
      return std::tuple<InV<J>&&>(std::move(slot.own()));
    } else {
      return std::tuple<InV<J>&>(slot.own());
    }
  }

  template <std::size_t J>
  struct ViewStorage {
    alignas(Aggregator<InV<J>>) unsigned char buf[kAgg<J> ? sizeof(Aggregator<InV<J>>) : 1];
    Aggregator<InV<J>>* ptr() { return reinterpret_cast<Aggregator<InV<J>>*>(buf); }
  };

  template <std::size_t... J>
  void call(Record& r, std::index_sequence<J...>) {
    std::tuple<ViewStorage<J>...> views;  // aggregator views live for the call (trivially destructible)
    auto key = [&] {
      if constexpr (kHasKey)
        return std::tuple<const KS&>(r.key);
      else
        return std::tuple<>{};
    }();
    auto args = std::tuple_cat(key, arg<J>(r, std::get<J>(views).ptr())...);
    if constexpr (CallInfo::with_out)
      std::apply(body_, std::tuple_cat(std::move(args), std::tuple<out_type&>(out_)));
    else
      std::apply(body_, std::move(args));
  }

  template <std::size_t... J, class Vals>
  void deliver_all(const KS& key, Vals& vals, std::index_sequence<J...>) {
    (
        [&] {
          if constexpr (kData<J>)
            deliver<J>(key, std::move(std::get<data_index<J>()>(vals)));
          else
            deliver<J>(key, detail::Void{});
        }(),
        ...);
  }

  template <class... A>
  void seed(const KS& key, A&&... values) {
    constexpr std::size_t data = data_index<kIn>();
    static_assert(sizeof...(A) == data,
                  "weft::flow: invoke takes the key (none for a void key) and one value per input edge that "
                  "carries data, in order");
    detail::GraphState& g = graph_state();
    g.seed(name_, [this, key, vals = std::tuple<InVData<A>...>(std::forward<A>(values)...)]() mutable {
      deliver_all(key, vals, std::index_sequence_for<In...>{});
    });
  }
  template <class A>
  using InVData = std::decay_t<A>;
  template <std::size_t J, class... A>
  void seed_input(const KS& key, A&&... value) {
    static_assert(J < kIn, "weft::flow: invoke_input<J>: J is not an input of this template task");
    static_assert(sizeof...(A) == (kData<J> ? 1u : 0u),
                  "weft::flow: invoke_input<J> takes the key (none for a void key) and one value for a data "
                  "input, none for a control input");
    detail::GraphState& g = graph_state();
    if constexpr (kData<J>) {
      g.seed(name_, [this, key, v = InV<J>(std::forward<A>(value)...)]() mutable { deliver<J>(key, std::move(v)); });
    } else {
      g.seed(name_, [this, key]() { deliver<J>(key, detail::Void{}); });
    }
  }

  Body body_;
  const char* label_;  ///< name_, interned: the label of its tasks
  out_type out_;
  std::vector<std::shared_ptr<void>> held_;  ///< the edges, alive as long as this task: inputs first, in order
  std::function<std::size_t(const KS&)> count_of_[kIn];
  std::size_t fixed_[kIn] = {};
  std::function<std::int32_t(const KS&)> priomap_;
  std::function<int(const KS&)> keymap_;
  std::unique_ptr<detail::table::TaskTable> table_;
};

}  // namespace weft::flow
