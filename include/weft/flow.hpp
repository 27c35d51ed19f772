// weft — flow graphs: template task graphs (TTG style) on the weft engine.
//
//   weft::flow::Edge<int, double> e("e");                              // key type, value type; name (messages)
//   auto tt = weft::flow::make_tt<int>(                                 // key type
//       [](const int& k, double x, auto& out) { if (k < 10) weft::flow::send<0>(k + 1, x * 2, out); },
//       weft::flow::edges(e), weft::flow::edges(e), "step");            // input edges, output edges, name
//   auto g = weft::flow::graph(tt);     // tt and every template task connected to it
//   g.invoke(0, 1.0);                   // seeds the task of key 0
//   g.wait();                           // runs until no task is left
//
// Model
// -----
// * A program declares *template tasks* (make_tt) connected by typed *edges* (Edge<Key, Value>). At run time a
//   template task has one task per key; the task of key k runs once every input edge has delivered its value for
//   k (a template task with a single non-aggregator input makes a task of every value it receives: a key sent
//   twice runs twice). A running task sends values along its output edges to the tasks of any keys it chooses (send<i>,
//   broadcast<i>, broadcast<i, j, ...> for several edges at once): the graph unfolds dynamically and may contain
//   cycles (a template task feeding itself).
// * Keys: any copyable type with operator== and a hash (std::hash<Key>, a std::tuple or std::pair of hashable
//   types, or a specialisation of weft::flow::Hash<Key>); `void` for a template task with a single task.
//   Values: any movable type; `void` makes a control-only edge (sendk: the task just learns that it may run).
// * The body is called as body(key, inputs..., out):
//     - `const Key&` first (omitted for a void key);
//     - one parameter per input edge that carries data, in edge order: `const V&` reads the value without a copy,
//       `V` (by value), `V&` or `V&&` gives the task a value of its own (a copy only when the value is shared,
//       see below), `const weft::flow::Aggregator<V>&` for an aggregator input; nothing for a control edge;
//     - `auto& out` last: the output terminals, used by send<i>(key, value, out) and friends (optional when the
//       template task has no output edge).
//   Write the data parameters' types out (as above): for a lambda whose data parameters are themselves `auto`,
//   every input is passed as an rvalue of a value of the task's own. A lambda whose only `auto` parameter is
//   `out` has its data parameters' types read from it; `[](const Key& k, auto v)` (no out, no output edge) takes
//   v as a value of its own.
// * Data ownership: a value sent to exactly one task is moved to it if sent as an rvalue (std::move), copied
//   once if sent as an lvalue. A value sent to several tasks (an edge with several consuming template tasks, or
//   broadcast to several keys, or to the keys of several edges of one value type) is stored once, read-only and
//   reference counted; a task taking it by value (or `V&`) gets a copy unless it is the last holder, which
//   takes the shared copy itself. Small trivially copyable values (at most 16 bytes) are simply copied to each
//   task.
// * Aggregators: make_aggregator(edge, n) or make_aggregator(edge, [](const Key& k) { return n(k); }) as an
//   input makes the task of k wait for n (resp. n(k) >= 1) values on that edge; the body receives them as an
//   Aggregator<V> (iterable, in arrival order: sort them for a reproducible floating-point reduction),
//   without copies. A count of 0 is an error. Once the task has its count it runs and its key is forgotten: a
//   value beyond the count starts a new task of that key, which wait() reports as missing inputs unless it
//   too gets its count (a surplus of exactly n values runs the task twice, undetected).
// * Every output edge a body sends on needs a consumer: a value sent on an edge that no template task takes as
//   input throws weft::flow::error from the body (it would be lost; a broadcast to no key sends nothing). A template task whose last
//   std::shared_ptr is dropped leaves its input edges: keep them until graph() has taken them (the graph then
//   keeps every template task connected to the ones it was given). One edge named twice among a template
//   task's inputs feeds both inputs with each value sent on it.
// * Priorities and placement: tt->set_priomap(f) gives the task of key k priority f(k) (larger runs earlier among
//   ready tasks, as weft::priority); tt->set_keymap(f) names the process (MPI rank) that owns key k, from 0 to
//   num_processes() - 1 (else an error). See "Template task members" below.
// * Several processes (weft built with MPI, the program launched by mpirun -np N with N > 1; README "Running on
//   several processes"). The same program runs on every rank; each key's task runs on its owner: the keymap's
//   answer, by default Hash<Key>(k) % N (num_processes() / process_id() tell a keymap the job's shape).
//     - Every rank builds the same graphs in the same order: graph() is collective and refuses ranks whose graphs
//       differ. fence() and wait() are collective: they return on every rank once the graph has terminated on
//       all of them (one termination epoch per fence; no barrier between fences). A rank that makes a graph the
//       others never make, while they wait in a fence of another graph, waits forever, as they do: only
//       WEFT_WATCHDOG ends such a job (with every rank's view). Each rank may invoke() any key (the seed travels
//       to the owner); invoke a given key on one rank only: seeding it on every rank seeds it N times (N trees,
//       an aggregator given N times its values). A result computed by a task stays
//       on the rank that ran it: to give it to every rank's program, use MPI after wait() (e.g. MPI_Bcast from
//       the owner, whose keymap you know; with one process weft never initialises MPI, so such a program
//       initialises it itself or tests MPI_Initialized).
//     - A value sent to (or invoked on) a key of another rank travels there in one message with the key, and is
//       delivered there as a local send would be: the receiving task gets a copy of its own (or, for several
//       keys of that rank, one shared copy). A value for several keys of one rank travels once, in one
//       message: a broadcast, broadcast<i, j, ...> to several terminals of one value type, and a send on an
//       edge that several template tasks take as input all send one message per owner rank, whichever
//       terminals and template tasks its keys belong to. Exception: broadcast<i, j, ...> over terminals of
//       different value types, or of a small trivially copyable one (16 bytes or less, copied rather than
//       shared), sends one message per terminal and owner rank.
//     - What can cross: trivially copyable types as bytes; std::pair / std::tuple of them; a std::vector of a
//       trivially copyable type (not bool) as its elements' bytes (without cereal too); any other type that
//       cereal can serialize: std::string, std::vector, std::array, std::map, std::set, std::unordered_map,
//       std::pair, std::tuple, std::optional, std::variant, std::complex (weft includes cereal's support for
//       these), user types with a `serialize(Archive&)` member or cereal's other conventions, and other
//       standard types once the program includes cereal/types/<type>.hpp. graph() refuses a template task
//       with the default keymap whose key or input value type cannot cross (it would receive from every
//       rank); with a keymap of the program's own, a send that would cross throws weft::flow::error in the
//       sender (which ends the job: see Failures).
//     - Large values (above 8 KiB) move by a non-blocking transfer straight into the storage the receiving tasks
//       read (trivially copyable values and such vectors; serialized ones are decoded from a buffer), and are
//       sent without a copy from a value shared by several tasks; a value the body still holds (sent as an
//       lvalue) is copied once.
//       A broadcast makes its shared copy on the sending rank only if some of its keys are there (an rvalue
//       is moved into it): to keys all on other ranks, the value is encoded (or, large and trivially
//       copyable, copied once) straight from the caller's value, which stays untouched even when given as
//       an rvalue; so does a send to one key of another rank. Exception: an rvalue std::vector of trivially
//       copyable elements above 8 KiB is moved into a shared copy that MPI sends from (no copy of its
//       bytes; the caller's vector is left empty).
//       The byte buffers of such messages (a value's encoding, or its copy, and a received payload that is
//       decoded) are kept for the next ones: up to 4 of 64 KiB to 16 MiB per graph, freed with the graph. A
//       buffer of a megabyte allocated and freed per message would cost more than the copy: glibc hands it
//       back to the system, and the next one is faulted in again page by page.
//     - Priorities: the priomap runs on the owner, so a task's priority travels with its key.
//     - Failures: a task that throws on a rank of a graph of several processes ends the whole job (MPI_Abort)
//       with one line naming the rank, the template task, the key and the exception (the other ranks would wait
//       for it forever); so does an invoke() queued for a fence that throws there (a keymap out of range, a
//       duplicate input), and a message that cannot be delivered, and a task that calls exit() (with status
//       0 too: the rank leaves with status 1, without MPI_Finalize, when weft initialised MPI). A rank whose
//       program ends (return from main, exit(0)) before a fence that the others enter makes their fence end
//       the job with a line naming it (notices when a rank destroys a graph across ranks and at exit, when
//       weft initialised MPI). graph() is collective too: a rank that makes a graph which another rank, now
//       destroying its graphs or gone, never made ends the job the same way.
//       Options::watchdog_seconds (WEFT_WATCHDOG) ends a fence that sees no progress, printing every rank's view
//       first (and naming the ranks that could not answer).
//   With one process (or weft built without MPI) a graph is exactly the single-process one, at the same cost.
// * Pending tasks (some inputs arrived, not all) wait in a per-template-task concurrent hash table (bucket locks,
//   growth by chained tables, a reader-biased resize lock); a template task with a single non-aggregator input
//   never uses it: each value sent to it makes a ready task at once. Each pending task holds its entry and the
//   inputs that arrived; throttling does not bound them (they are not ready). What they took is freed once they
//   have run, back to malloc; glibc keeps much of it in the process (resident) until malloc_trim(0) is called,
//   which a program that made many pending tasks may do after its graph is gone.
// * Throttling (bounded memory, as for dependency tasks): a send that makes a task ready while the graph already
//   has Options::max_tasks (WEFT_MAX_TASKS) ready or running tasks first runs queued tasks of the graph, until
//   half as many remain or none is queued; so a task sending many ready tasks and then its own continuation
//   cannot run ahead of them without bound. A send may therefore run other task bodies before it returns, on
//   the same thread (as a task construct may in OpenMP): do not hold a lock across send() that another task of
//   the graph takes, and do not rely on per-thread state (a thread_local scratch buffer, say) staying as it was
//   across a send: a body run inside it may use the same state.
//
// Template task members
// ---------------------
// make_tt returns a std::shared_ptr to a weft::flow::TT (declared in weft/detail/flow_tt.hpp), whose public
// members are:
//   * tt->invoke(key, v0, v1, ...) seeds the task of `key`: one value per data input, in input order (nothing for
//     a control input); tt->invoke(v0, ...) for a void key. Every data input is given at once. It seeds this
//     template task only, not the other consumers of its input edges (a send on the edge feeds them all).
//   * tt->template invoke_input<J>(key, v) seeds input J of the task of `key` only (TTG's in<J>()->send; no v
//     for a control input; invoke_input<J>(v) for a void key): the task runs once its other inputs have come,
//     from tasks or other calls. A value given twice to one input of a task is an error, as for sends.
//     The template task must belong to a graph already (graph(...) made), else weft::flow::error ("not part of
//     a graph"); graph.invoke(...) is the same call on the graph's first template task. Both queue their seed
//     as described under "Graph and runtime" and run it in the next fence(); across ranks it goes to the
//     key's owner.
//   * tt->set_priomap(f), f: std::int32_t(const Key&): the priority of the task of each key (default 0).
//   * tt->set_keymap(f), f: int(const Key&): the process that owns each key (see Model). For a void key (a
//     single task), pass a lambda taking `const auto&`; without a keymap that task runs on process 0.
//   * tt->name(): the name given to make_tt (used in every message about the template task).
// Configure a template task before its graph first executes.
//
// A key is not remembered after its task has run: a value sent to it again starts a new task of that key. For
// a template task with several inputs, a value sent twice to a key whose task already ran therefore shows up in
// wait() as a task of that key missing its other inputs.
//
// Graph and runtime
// -----------------
// graph(tt, ...) collects the given template tasks and every template task connected to them through edges, and
// owns a weft::Runtime configured from the WEFT_* environment variables; graph(rt, tt, ...) executes on `rt`
// instead (rt must outlive the graph). Execution happens inside fence() and wait(), each of which is one
// rt.run(): the calling thread becomes worker 0 and the runtime's workers run the tasks; they return when no
// task of the graph is ready or running. So:
//   * invoke() before fence()/wait() queues the seed (it runs at the start of the next fence()/wait(), in call
//     order); invoke() from a task body of the running graph delivers at once; invoke() from any other thread
//     while the graph executes is an error.
//   * fence(): runs the graph until it is quiet; tasks still missing inputs stay pending (a later invoke may
//     complete them).
//   * wait(): fence(), then it is an error (weft::flow::error) if any task is still missing inputs: the message
//     names the template task, the key and the missing inputs; those tasks are discarded. On several processes
//     every rank throws when any rank has such tasks, each describing its own.
//   * fence()/wait() must not be called from inside a task (they would need Runtime::run: std::logic_error).
//   * A template task belongs to at most one live graph; configure it before the first fence()/wait(). (A
//     priomap set later applies to the tasks made after it; the keymap must not change once a fence has run:
//     every rank routes each key by it.)
//
// Errors
// ------
// * Compile time (static_assert with a message): an input edge whose key type is not the template task's key
//   type, a body that cannot be called with the edges' types, a key type without hash or ==, send<i> with an
//   out-of-range i, a key or value not convertible to the edge's, send on a control edge (use sendk) and so on.
// * Run time, as weft::flow::error: the same input of one task sent twice (a task with several inputs, or with an
//   aggregator input; a single input is not tracked, see Model), an aggregator receiving more values
//   than its count, a keymap naming another process, pending tasks at wait(). Raised in the sending task's body
//   (or by invoke), they propagate like an exception thrown by the body.
// * An exception escaping a body is rethrown by fence()/wait() (the first one; later ones are dropped). Once a
//   body has thrown, the bodies of the remaining tasks are skipped, and fence()/wait() discards the pending
//   tasks before rethrowing. The graph remains usable.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/detail/flow_core.hpp"
#include "weft/detail/flow_tt.hpp"
#include "weft/runtime.hpp"

namespace weft::flow {

/// The input or output edges of a template task, in terminal order: edges(e0, e1, ...). Inputs may also be
/// aggregators (make_aggregator).
template <class... E>
std::tuple<E...> edges(const E&... e) {
  static_assert((detail::edge_traits<E>::is_edge && ...),
                "weft::flow::edges: every argument must be a weft::flow::Edge or a weft::flow::make_aggregator(...)");
  return std::tuple<E...>(e...);
}

/// An input terminal on `edge` that collects `count` values for each task before it runs.
template <class K, class V>
AggregatorEdge<K, V> make_aggregator(const Edge<K, V>& edge, std::size_t count) {
  static_assert(!std::is_void_v<V>, "weft::flow::make_aggregator: a control edge (void value) carries nothing to aggregate");
  if (count == 0) throw error("weft::flow::make_aggregator: the count must be at least 1");
  return AggregatorEdge<K, V>{edge, count, {}};
}
/// An input terminal on `edge` that collects count_of(key) values (at least 1) for the task of each key.
template <class K, class V, class F>
  requires std::is_invocable_r_v<std::size_t, F&, const detail::key_t<K>&>
AggregatorEdge<K, V> make_aggregator(const Edge<K, V>& edge, F count_of) {
  static_assert(!std::is_void_v<V>, "weft::flow::make_aggregator: a control edge (void value) carries nothing to aggregate");
  return AggregatorEdge<K, V>{edge, 0, std::move(count_of)};
}

/// A template task of key type Key (void for a single task) running `body` (see the top of this file for its
/// signature), with input edges `inputs` and output edges `outputs` (both from edges(...); edges() for none).
/// `name` appears in error messages and profiles.
template <class Key, class Body, class... In, class... Out>
auto make_tt(Body&& body, const std::tuple<In...>& inputs, const std::tuple<Out...>& outputs,
             std::string name = "tt") {
  // Each condition is asserted, and the template task is instantiated only if all hold: a failed assertion is
  // then the only error.
  constexpr bool has_input = sizeof...(In) >= 1;
  constexpr bool keys_match = (std::is_same_v<typename detail::edge_traits<In>::key, Key> && ...);
  constexpr bool plain_outputs = (!detail::edge_traits<Out>::aggregator && ...);
  using KS = detail::key_t<Key>;
  constexpr bool key_ok = std::is_copy_constructible_v<KS> && std::equality_comparable<KS>;
  constexpr bool hash_ok = detail::has_hash<KS>;
  static_assert(has_input, "weft::flow::make_tt: a template task needs at least one input edge (a control "
                           "edge, Edge<Key, void>, for one that is only invoked)");
  static_assert(keys_match,
                "weft::flow::make_tt: every input edge must have the template task's key type (Edge<Key, V>)");
  static_assert(plain_outputs,
                "weft::flow::make_tt: aggregators are input terminals; list the plain Edge among the outputs");
  static_assert(key_ok, "weft::flow::make_tt: a key type must be copyable and have operator==");
  static_assert(hash_ok,
                "weft::flow::make_tt: no hash for the key type: specialise std::hash<Key> or weft::flow::Hash<Key>, "
                "or use a std::tuple/std::pair of hashable types");
  if constexpr (has_input && keys_match && plain_outputs && key_ok && hash_ok) {
    using T = TT<Key, std::decay_t<Body>, std::tuple<In...>, std::tuple<Out...>>;
    auto tt = std::make_shared<T>(std::forward<Body>(body), inputs, outputs, std::move(name));
    tt->link_edges();
    return tt;
  } else {
    return std::shared_ptr<void>();
  }
}

namespace detail {
// The send functions below instantiate the sending itself only when their static_asserts hold: a failed one is
// then the only error, not followed by the standard library's or the edge's.
template <std::size_t I, class... O>
constexpr bool check_terminal() {
  static_assert(I < sizeof...(O), "weft::flow::send<i>: i is not an output terminal of this template task");
  return I < sizeof...(O);
}
// (An index out of range names terminal 0: the braced-list overloads of broadcast name the type in their
// signature, where an out-of-range index would fail in the standard library before check_terminal speaks.)
template <std::size_t I, class... O>
using terminal_t = std::tuple_element_t<(I < sizeof...(O) ? I : 0), std::tuple<O...>>;
}  // namespace detail

/// Sends `value` along output terminal i to the task of `key`.
template <std::size_t I, class K, class V, class... O>
void send(const K& key, V&& value, std::tuple<O...>& out) {
  if constexpr (detail::check_terminal<I, O...>()) {
    using T = detail::terminal_t<I, O...>;
    constexpr bool keyed = !std::is_void_v<typename T::key_type>, valued = !std::is_void_v<typename T::value_type>;
    static_assert(keyed, "weft::flow::send: the edge has a void key: use sendv<i>(value, out)");
    static_assert(valued, "weft::flow::send: a control edge carries no value: use sendk<i>(key, out)");
    if constexpr (keyed && valued) {
      constexpr bool key_ok = std::is_convertible_v<const K&, typename T::key_type>;
      constexpr bool value_ok = std::is_convertible_v<V&&, typename T::value_type>;
      static_assert(key_ok, "weft::flow::send: the key does not convert to the edge's key type");
      static_assert(value_ok, "weft::flow::send: the value does not convert to the edge's value type");
      if constexpr (key_ok && value_ok) std::get<I>(out).put(key, std::forward<V>(value));
    }
  }
}

/// Control only: tells the task of `key` that input i (a control edge, Edge<K, void>) is satisfied.
template <std::size_t I, class K, class... O>
void sendk(const K& key, std::tuple<O...>& out) {
  if constexpr (detail::check_terminal<I, O...>()) {
    using T = detail::terminal_t<I, O...>;
    constexpr bool control = std::is_void_v<typename T::value_type>, keyed = !std::is_void_v<typename T::key_type>;
    static_assert(control, "weft::flow::sendk: the edge carries values: use send<i>(key, value, out)");
    static_assert(keyed, "weft::flow::sendk: the edge has a void key: use send<i>(out)");
    if constexpr (control && keyed) {
      constexpr bool key_ok = std::is_convertible_v<const K&, typename T::key_type>;
      static_assert(key_ok, "weft::flow::sendk: the key does not convert to the edge's key type");
      if constexpr (key_ok) std::get<I>(out).put(key, detail::Void{});
    }
  }
}

/// Sends `value` along output terminal i, an edge with a void key.
template <std::size_t I, class V, class... O>
void sendv(V&& value, std::tuple<O...>& out) {
  if constexpr (detail::check_terminal<I, O...>()) {
    using T = detail::terminal_t<I, O...>;
    constexpr bool keyless = std::is_void_v<typename T::key_type>, valued = !std::is_void_v<typename T::value_type>;
    static_assert(keyless, "weft::flow::sendv: the edge has a key: use send<i>(key, value, out)");
    static_assert(valued, "weft::flow::sendv: a control edge carries no value: use send<i>(out)");
    if constexpr (keyless && valued) {
      constexpr bool value_ok = std::is_convertible_v<V&&, typename T::value_type>;
      static_assert(value_ok, "weft::flow::sendv: the value does not convert to the edge's value type");
      if constexpr (value_ok) std::get<I>(out).put(detail::VoidKey{}, std::forward<V>(value));
    }
  }
}

/// Control only, void key: satisfies input i of the single task behind the edge.
template <std::size_t I, class... O>
void send(std::tuple<O...>& out) {
  if constexpr (detail::check_terminal<I, O...>()) {
    using T = detail::terminal_t<I, O...>;
    constexpr bool ok = std::is_void_v<typename T::key_type> && std::is_void_v<typename T::value_type>;
    static_assert(ok, "weft::flow::send<i>(out) is for an edge with a void key and a void value");
    if constexpr (ok) std::get<I>(out).put(detail::VoidKey{}, detail::Void{});
  }
}

/// Sends one `value` along output terminal i to the task of every key in `keys`: a range of keys (any range
/// whose elements convert to the key type; not a string, unless the keys are strings) or one key. One shared
/// copy for all of them (small trivially copyable values are copied). No key: nothing is sent.
template <std::size_t I, class Keys, class V, class... O>
void broadcast(const Keys& keys, V&& value, std::tuple<O...>& out) {
  if constexpr (detail::check_terminal<I, O...>()) {
    using T = detail::terminal_t<I, O...>;
    constexpr bool valued = !std::is_void_v<typename T::value_type>;
    static_assert(valued, "weft::flow::broadcast: a control edge carries no value: use broadcastk<i>(keys, out)");
    if constexpr (valued) {
      constexpr bool value_ok = std::is_convertible_v<V&&, typename T::value_type>;
      static_assert(value_ok, "weft::flow::broadcast: the value does not convert to the edge's value type");
      if constexpr (value_ok)
        std::get<I>(out).put_many(detail::key_list<typename T::KS>(keys), std::forward<V>(value));
    }
  }
}

/// Control only: sendk<i> to every key in `keys` (a range of keys or one key, as for broadcast<i>).
template <std::size_t I, class Keys, class... O>
void broadcastk(const Keys& keys, std::tuple<O...>& out) {
  if constexpr (detail::check_terminal<I, O...>()) {
    using T = detail::terminal_t<I, O...>;
    constexpr bool control = std::is_void_v<typename T::value_type>;
    static_assert(control, "weft::flow::broadcastk: the edge carries values: use broadcast<i>(keys, value, out)");
    if constexpr (control) std::get<I>(out).put_many(detail::key_list<typename T::KS>(keys), detail::Void{});
  }
}

/// broadcast<i>({k1, k2, ...}, value, out): a braced list of keys.
template <std::size_t I, class V, class... O>
void broadcast(std::initializer_list<typename detail::terminal_t<I, O...>::KS> keys, V&& value,
               std::tuple<O...>& out) {
  broadcast<I>(std::span(keys.begin(), keys.size()), std::forward<V>(value), out);
}
/// broadcastk<i>({k1, k2, ...}, out): a braced list of keys.
template <std::size_t I, class... O>
void broadcastk(std::initializer_list<typename detail::terminal_t<I, O...>::KS> keys, std::tuple<O...>& out) {
  broadcastk<I>(std::span(keys.begin(), keys.size()), out);
}

/// Sends one `value` along several output terminals I, J, ... (TTG's broadcast<I, J, ...>): `keylists` is a
/// std::tuple (std::make_tuple or std::tie) with one entry per terminal, in the same order, each a range of that
/// terminal's keys or a single key, as for broadcast<i>: `broadcast<0, 1>(std::make_tuple(keys_a, key_b), value,
/// out)`. Terminals of one value type share one copy (small trivially copyable values are copied), and a
/// move-only value can go to them; for terminals of different value types the value is copied and converted
/// for each. If a terminal with keys has no consumer, it throws weft::flow::error before sending anything. An
/// exception from a key range's iteration or from a value's conversion or copy may leave the broadcast partly
/// delivered (as one send after another would). Across processes, terminals that share one copy send one
/// message per owner rank for all their keys; the others, one message per terminal and owner rank.
template <std::size_t I, std::size_t J, std::size_t... Is, class... Lists, class V, class... O>
void broadcast(const std::tuple<Lists...>& keylists, V&& value, std::tuple<O...>& out) {
  constexpr bool lists_ok = sizeof...(Lists) == 2 + sizeof...(Is);
  constexpr bool terminals_ok = (((I < sizeof...(O)) && (J < sizeof...(O))) && ... && (Is < sizeof...(O)));
  constexpr bool valued = ((!std::is_void_v<typename detail::terminal_t<I, O...>::value_type> &&
                            !std::is_void_v<typename detail::terminal_t<J, O...>::value_type>) && ... &&
                           !std::is_void_v<typename detail::terminal_t<Is, O...>::value_type>);
  constexpr bool converts = ((std::is_convertible_v<V&&, typename detail::terminal_t<I, O...>::value_type> &&
                              std::is_convertible_v<V&&, typename detail::terminal_t<J, O...>::value_type>) && ... &&
                             std::is_convertible_v<V&&, typename detail::terminal_t<Is, O...>::value_type>);
  static_assert(lists_ok,
                "weft::flow::broadcast<i, j, ...>: give one key list (a range or a key) per terminal, in a std::tuple");
  static_assert(terminals_ok,
                "weft::flow::broadcast<i, j, ...>: an index is not an output terminal of this template task");
  static_assert(!terminals_ok || valued,
                "weft::flow::broadcast<i, j, ...>: a control edge carries no value: use broadcastk<i, j, ...>");
  static_assert(!terminals_ok || !valued || converts,
                "weft::flow::broadcast<i, j, ...>: the value does not convert to every terminal's value type");
  if constexpr (lists_ok && terminals_ok && valued && converts)
    detail::Broadcast<I, J, Is...>::run(keylists, std::forward<V>(value), out);
}

/// Control only: broadcastk<i> on several terminals, one key list (a range or a key) per terminal, as
/// broadcast<i, j, ...>. Checks every terminal with keys for a consumer before it sends anything.
template <std::size_t I, std::size_t J, std::size_t... Is, class... Lists, class... O>
void broadcastk(const std::tuple<Lists...>& keylists, std::tuple<O...>& out) {
  constexpr bool lists_ok = sizeof...(Lists) == 2 + sizeof...(Is);
  constexpr bool terminals_ok = (((I < sizeof...(O)) && (J < sizeof...(O))) && ... && (Is < sizeof...(O)));
  constexpr bool control = ((std::is_void_v<typename detail::terminal_t<I, O...>::value_type> &&
                             std::is_void_v<typename detail::terminal_t<J, O...>::value_type>) && ... &&
                            std::is_void_v<typename detail::terminal_t<Is, O...>::value_type>);
  static_assert(lists_ok,
                "weft::flow::broadcastk<i, j, ...>: give one key list (a range or a key) per terminal, in a std::tuple");
  static_assert(terminals_ok,
                "weft::flow::broadcastk<i, j, ...>: an index is not an output terminal of this template task");
  static_assert(!terminals_ok || control,
                "weft::flow::broadcastk<i, j, ...>: an edge carries values: use broadcast<i, j, ...>");
  if constexpr (lists_ok && terminals_ok && control) detail::Broadcast<I, J, Is...>::run(keylists, detail::Void{}, out);
}

/// The processes a graph built now runs on: the MPI job's size when weft is built with MPI and the program was
/// launched on several ranks (mpirun -np N), else 1. May initialise MPI (as graph() would). For keymaps:
/// `tt->set_keymap([n = weft::flow::num_processes()](const Key& k) { ... % n; })`.
int num_processes();
/// This process's rank among num_processes() (0 on one process).
int process_id();

/// Executes a set of connected template tasks (see "Graph and runtime" at the top of this file). Made by
/// graph(...); movable, not copyable.
class GraphBase {
 public:
  GraphBase(GraphBase&&) noexcept = default;
  GraphBase& operator=(GraphBase&&) = delete;
  ~GraphBase();

  /// Runs the graph until no task is ready or running; queued invoke() calls run first. Rethrows the first
  /// exception of a body (after discarding the pending tasks).
  void fence();
  /// fence(), then throws weft::flow::error if some task never received all its inputs (they are discarded).
  void wait();
  /// Tasks currently waiting for inputs (between executions).
  std::size_t pending() const;
  /// The runtime that executes the graph.
  weft::Runtime& runtime() const { return *state_->rt; }
  /// Number of template tasks in the graph (those given and those connected to them).
  std::size_t size() const { return state_->tts.size(); }

 protected:
  GraphBase(weft::Runtime* rt, std::unique_ptr<weft::Runtime> owned,
            std::vector<std::shared_ptr<detail::TTBase>> roots);
  void discard_pending(std::ostream* report);
  std::unique_ptr<detail::GraphState> state_;
};

/// A graph whose invoke() seeds its first template task.
template <class Entry>
class Graph : public GraphBase {
 public:
  /// Seeds the first template task given to graph(): entry->invoke(key, values...).
  template <class... A>
  void invoke(A&&... a) {
    entry_->invoke(std::forward<A>(a)...);
  }

  Graph(weft::Runtime* rt, std::unique_ptr<weft::Runtime> owned, std::shared_ptr<Entry> entry,
        std::vector<std::shared_ptr<detail::TTBase>> roots)
      : GraphBase(rt, std::move(owned), std::move(roots)), entry_(std::move(entry)) {}

 private:
  std::shared_ptr<Entry> entry_;
};

/// A graph of `first`, `rest...` and every template task connected to them, executed by its own weft::Runtime
/// (configured from the WEFT_* environment variables). Throws weft::flow::error if a template task already
/// belongs to another graph.
template <class First, class... Rest>
Graph<First> graph(const std::shared_ptr<First>& first, const std::shared_ptr<Rest>&... rest) {
  auto rt = std::make_unique<weft::Runtime>();
  weft::Runtime* p = rt.get();
  return Graph<First>(p, std::move(rt), first, {first, rest...});
}
/// The same, executed by `rt` (which must outlive the graph).
template <class First, class... Rest>
Graph<First> graph(weft::Runtime& rt, const std::shared_ptr<First>& first, const std::shared_ptr<Rest>&... rest) {
  return Graph<First>(&rt, nullptr, first, {first, rest...});
}

}  // namespace weft::flow
