// weft internal: the template task of weft/flow.hpp. Not part of the public API; include weft/flow.hpp.
#pragma once

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
    connect_inputs(ins, std::index_sequence_for<In...>{});
    std::apply([&](const auto&... e) { (keep(e.state(), false), ...); }, outs);
  }
  ~TT() override = default;

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

  /// Priority of the task of each key (larger runs earlier among ready tasks); default 0 for every key.
  void set_priomap(std::function<std::int32_t(const KS&)> f) { priomap_ = std::move(f); }
  /// The process that owns the task of each key. Ready for distribution: on one process every key must map to
  /// process 0, and a key mapped elsewhere is reported as an error when data is sent to it.
  void set_keymap(std::function<int(const KS&)> f) { keymap_ = std::move(f); }

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

  void attach(detail::GraphState* g, unsigned workers) override {
    graph_ = g;
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
    std::uint32_t mask;  ///< inputs that arrived (aggregators: that started collecting)
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
  using Params = detail::body_params<Body, out_type>;
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
    detail::Consumer<KS, V> c{this, &move_in<J>, nullptr, nullptr};
    if constexpr (std::is_copy_constructible_v<V>) c.copy = &copy_in<J>;
    if constexpr (!detail::cheap_v<V>) c.share = &share_in<J>;
    st->consumers.push_back(c);
    keep(st, true);
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
      throw error("weft::flow: template task '" + name_ + "' is not part of a graph (call weft::flow::graph)");
    return *graph_;
  }

  detail::Task* new_task(const KS& key) {
    graph_state();  // throws if this template task is in no graph
    if (keymap_) [[unlikely]] {
      const int owner = keymap_(key);
      if (owner != 0)
        throw error("weft::flow: the keymap of '" + name_ + "' maps key " + detail::key_string(key) +
                    " to process " + std::to_string(owner) + ", but the graph runs on one process (process 0)");
    }
    detail::Task* t = detail::detached_allocate(name_.c_str(), priomap_ ? priomap_(key) : 0);
    void* mem = t->body;
    if constexpr (!kInline) {
      mem = detail::allocate_large_body(sizeof(Record), alignof(Record));
      *reinterpret_cast<void**>(t->body) = mem;
    }
    try {
      ::new (mem) Record{this, 0, key, {}};
    } catch (...) {
      if constexpr (!kInline) detail::free_large_body(mem, sizeof(Record), alignof(Record));
      detail::detached_discard(t);
      throw;
    }
    t->invoke = &run;
    t->destroy = &destroy_record;
    return t;
  }

  template <std::size_t J>
  static constexpr std::uint32_t bit = std::uint32_t{1} << J;

  /// Input J of the task of `key` arrives (src: an rvalue, a const lvalue or a Shared<V>*).
  template <std::size_t J, class Src>
  void deliver(const KS& key, Src&& src) {
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
      detail::detached_submit(t, graph_->anchor);
    } else {
      const std::size_t h = Hash<KS>{}(key);
      detail::Task* ready = nullptr;
      {
        detail::table::TaskTable::Locked bucket(*table_, h);
        detail::Task* t = bucket.find([&](detail::Task* e) { return rec(e)->key == key; });
        if (!t) {
          t = new_task(key);
          t->pending.store(static_cast<std::int32_t>(kIn), std::memory_order_relaxed);
          bucket.insert(t);
        }
        Record* r = rec(t);
        auto& slot = std::get<J>(r->slots);
        if constexpr (kAgg<J>) {
          if (!(r->mask & bit<J>)) {
            const std::size_t n = count_of_[J] ? count_of_[J](key) : fixed_[J];
            if (n == 0)
              throw error("weft::flow: '" + name_ + "', key " + detail::key_string(key) + ": aggregator input " +
                          std::to_string(J) + " expects 0 values but received one");
            slot = detail::AggStore<InV<J>>::make(n);
            r->mask |= bit<J>;
          }
          auto* st = slot;
          if (st->size == st->target)
            throw error("weft::flow: '" + name_ + "', key " + detail::key_string(key) + ": aggregator input " +
                        std::to_string(J) + " received more than the " + std::to_string(st->target) +
                        " values it expects");
          st->add(std::forward<Src>(src));
          if (st->size == st->target) ready = satisfied(bucket, t);
        } else {
          if (r->mask & bit<J>)
            throw error("weft::flow: '" + name_ + "', key " + detail::key_string(key) + ": input " +
                        std::to_string(J) + " received twice");
          slot.set(std::forward<Src>(src));
          r->mask |= bit<J>;
          ready = satisfied(bucket, t);
        }
      }
      if (ready) detail::detached_submit(ready, graph_->anchor);  // the run executing now
    }
  }

  // One more input of t is complete (under its bucket's lock): returns t, removed from the table, if it was the last.
  static detail::Task* satisfied(detail::table::TaskTable::Locked& bucket, detail::Task* t) {
    const std::int32_t left = t->pending.load(std::memory_order_relaxed) - 1;
    if (left != 0) {
      t->pending.store(left, std::memory_order_relaxed);
      return nullptr;
    }
    bucket.erase(t);
    return t;
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
      tt.graph_->failed.store(true, std::memory_order_relaxed);
      throw;
    }
  }

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

  Body body_;
  out_type out_;
  std::vector<std::shared_ptr<void>> held_;  ///< the edges, alive as long as this task
  std::function<std::size_t(const KS&)> count_of_[kIn];
  std::size_t fixed_[kIn] = {};
  std::function<std::int32_t(const KS&)> priomap_;
  std::function<int(const KS&)> keymap_;
  std::unique_ptr<detail::table::TaskTable> table_;
};

}  // namespace weft::flow
