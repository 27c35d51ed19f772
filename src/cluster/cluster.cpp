// A cluster (weft/cluster.hpp): the dependency tasks of one program, run on the processes of an MPI job, over the
// one transport of src/comm.
//
// The graph. Every task is registered, as on one process, in its parent's domain on the parent's rank: that rank
// (the task's creator) orders it after its siblings. A task of a cluster (kind kClusterTask) decides where it
// runs when it is ready (paper 004: "once tasks become ready, they are allocated to a cluster node"). Run here, it
// is an ordinary task, but first its data comes. Offloaded, its descriptor here stands for it (role offloaded): it
// sends the task to its executor, takes a completion unit (as weft::Event does) and completes when the executor
// reports the task done, releasing its successors here. On the executor the task (role received) is a child of
// that rank's run root (the paper's namespace task): its children are registered in its own domain there, so
// task creation itself spreads over the ranks.
//
// Where data is. Each parent keeps, per datum its children access, a cell of Holders: the ranks holding the
// latest version. A child's access points at its parent's cell (ClusterAccess::where): when the child is ready
// (its predecessors done) the cell names where the version it needs is; when it completes it updates the cell
// (a write: only where it ran; a read: one more holder). A parent's own access is the cell its children use (so
// data location flows down to children and back up to the parent's parent when the parent completes). The
// offloaded descriptor's cell is updated from the executor's report before its successors are released.
// Holders may include a rank to which a transfer is in flight: that rank's Incoming table makes its tasks wait
// for the arrival. A cell also numbers the version (Version: the writes the datum has seen, the same on every
// rank since writers are ordered), and each rank knows which version its own bytes are (local_version_): a
// task whose view does not list its rank (views are partial: each parent knows what its children did) uses
// the copy there all the same, and a fetch of a version a rank has is served at once, even while another copy
// is on its way to it (two ranks that each fetched a copy of what the other had would otherwise wait for each
// other forever).
//
// Sent at spawn, and links (the paper's namespace). A task whose rank is known when it is spawned (weft::node, or
// the locality policy) is sent by the spawning thread then (executor_at_spawn), not by a worker when it is
// ready. If it still has unfinished predecessors, and each is a task already sent to another rank, the task
// message names them (links, by the creator's number for their task messages). A predecessor sent to the same
// rank: the executor links the task after it there, as siblings in its namespace, so that the predecessor's
// end starts the task with no message on the way (the done message to the creator and a task message back cost
// about 7 MPI latencies). A linked access's holders are the predecessors' when they end; one that ended before
// the task arrived left the data on that rank, unless it failed or a child wrote the datum elsewhere
// (ended_tasks_). A predecessor on a third rank (remote link, paper 004's Fig. 4): the creator sends that rank a
// connect message, and when the predecessor ends there, its rank sends the task's rank a link satisfy message
// (where the datum is, whether the predecessor failed) followed by the bytes when eager, with no message through
// the creator. If the predecessor had ended when the connect message came, its done message does not name the
// successor, and the creator sends the link satisfy message itself (on_done): either way exactly one. A link
// satisfy message that comes before its task message waits for it (early_links_). The creator still registers
// the task, after the same predecessors: it completes there when the done message comes and its predecessors
// there have completed. A done message's locations reach the parent's cells only then (complete), so the cells
// see the tasks in their order even when a successor's done message overtakes its predecessor's (from two
// ranks).
//
// Weak accesses. A task with weak accesses is ready at once and offloaded early. Its weak node here completes
// when the datum's predecessors have finished (weak_ready): the current holders then go to the executor in a
// Satisfy message (or with the task itself if the node was done first), which releases the weak node standing
// for the access there, and with it the children waiting on it. With eager transfers, a creator that holds the
// datum sends its bytes right after (paper 004, 4.4): the node there then waits for them too, so that the
// children find the datum there and the task does not report done with a transfer to it still in flight. When
// the task's body has returned, no child touches the datum and the satisfy message has not come, the executor
// says so (a no-eager message, paper 004's "no eager send"): the satisfy message then comes without the bytes.
//
// Release of a weak access (paper 004's release message). In the creator's domain a weak access of a task of a
// cluster is named by a release node of its own (kAccessRelease), not by the task, so later accesses to the
// datum wait on that node. Where the task runs, once its body has returned, a node per weak access follows the
// children on the datum (watch_releases); when they have ended, the access's location goes back to the creator
// (a release message; a local task fires the node itself), which updates the parent's cell and fires the
// release node. What is not released so goes with the done message. A Cholesky panel's parent thus frees each
// tile for the step's updates as its trsm ends, not after the whole panel.
//
// Messages (per pair of ranks, the transport keeps their order): task (creator -> executor: the accesses, their
// holders where known, links, the body's bytes and code address), done (executor -> creator: final holders of
// each access, the remote successors told directly, the error), connect (creator -> a predecessor's executor:
// tell a successor's rank when it ends), link satisfy (that rank, or the creator -> the successor's rank: where
// the datum is; its bytes may follow), release (executor -> creator: one weak access's final holders, before
// its task ends), no-eager (executor -> creator: no child needs a weak access's bytes), satisfy (creator ->
// executor: a weak access's holders), fetch (a rank that needs a datum -> a holder), data (the bytes: the reply
// to a fetch, or sent eagerly after a task, satisfy or link satisfy message by a rank that holds them; placed
// straight at the datum's address), lfree (a rank -> rank 0: it freed a block of its lmalloc range; see
// local_freed), region (rank 0 -> all: a dmalloc region made or freed, an lmalloc block freed; at the start of a
// run), begin (rank 0 -> all, after the run's changes to the common address space), end (rank 0 -> all: the run
// is over). Every message carries its run's number (the transport's epoch field): a
// rank that has not begun that run yet keeps it until it does, and one from a rank other than 0 until rank 0's
// begin has come (so that memory freed and allocated anew is dropped first everywhere).
//
// Runs. Rank 0 calls the program's function; the others wait, serving tasks, until rank 0's end message. A run on
// rank 0 ends only after every offloaded task reported done, and every transfer a task waited for arrived before
// that task ran, so when rank 0 sends end, no message of the run is in flight but the ends themselves, and
// connect messages from creators other than rank 0 whose predecessor had ended: dropped where they come late.
#include "cluster/cluster.hpp"

#include <pthread.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>

#include "cluster/address_space.hpp"
#include "cluster/code_address.hpp"
#include "deps/deps.hpp"
#include "trace/counters.hpp"
#include "trace/hooks.hpp"
#include "weft/profile.hpp"

#ifdef WEFT_HAVE_MPI
#include <mpi.h>

#include <deque>
#include <random>

#include "comm/mpi_env.hpp"
#include "comm/transport.hpp"
#include "comm/watchdog.hpp"
#endif

namespace weft::detail {

#ifdef WEFT_HAVE_MPI
namespace {

constexpr std::uint8_t kSatisfied = 1, kSent = 2, kEager = 4, kLinked = 8;
// ClusterAccess::weak_state: the access was released on its own (Cluster::access_released), before its task
// ended; (creator) no child of the task reads the datum: its satisfy message brings no bytes (on_no_eager).
constexpr std::uint8_t kReleased = 16, kNoEager = 32;

bool writes(AccessMode m) {
  return m == AccessMode::out || m == AccessMode::inout || m == AccessMode::weak_out || m == AccessMode::weak_inout;
}
bool is_weak_mode(AccessMode m) {
  return m == AccessMode::weak_in || m == AccessMode::weak_out || m == AccessMode::weak_inout;
}
// Holder sets. Ranks below holder_bits (63) have a bit each; a set may instead hold one rank of any number
// (kOneHolder set, the rank in the low 32 bits), for jobs of more than 63 processes. A set may name fewer ranks
// than hold the datum, never more: the versions make that safe. A rank left out fetches a copy it may have (a
// duplicate lands in a scratch buffer), one left out as a sender sends nothing eagerly, and a fetch goes to a
// holder that is named. Where a union cannot be written (one of the two is a rank beyond the bits), the set
// already there is kept, not the rank added: the protocol adds ranks that will have the datum (a transfer on its
// way), and the ranks named already have it or know it is coming (fetch_to_here relies on the creator's view
// naming the creator if it holds the datum). With every rank below holder_bits (jobs of at most 63 processes)
// the sets are plain bit masks.
// WEFT_CLUSTER_HOLDER_BITS (1..63) lowers holder_bits, so that jobs of a few processes take the paths of large
// ones (a testing aid).
constexpr Holders kOneHolder = Holders{1} << 63;
int holder_bits = 63;          // process-wide, set by the Cluster constructor
bool every_rank_has_a_bit = true;
Holders only(int r) {
  return r < holder_bits ? Holders{1} << r : kOneHolder | static_cast<std::uint32_t>(r);
}
bool holds(Holders h, int r) {
  if (h & kOneHolder) return static_cast<int>(static_cast<std::uint32_t>(h)) == r;
  return r < holder_bits && ((h >> r) & 1);
}
/// a and b, or a where that cannot be written (a: the set already there, b: the ranks added).
Holders merged(Holders a, Holders b) {
  if (!((a | b) & kOneHolder)) return a | b;
  return a ? a : b;
}
Holders without(Holders h, int r) {
  if (!holds(h, r)) return h;
  return (h & kOneHolder) ? 0 : h & ~(Holders{1} << r);
}
/// The lowest-numbered rank named, or -1.
int first_holder(Holders h) {
  if (h & kOneHolder) return static_cast<int>(static_cast<std::uint32_t>(h));
  return h ? std::countr_zero(h) : -1;
}
/// Calls f(rank) for each rank named in h, in increasing order.
template <class F>
void for_each_holder(Holders h, F&& f) {
  if (h & kOneHolder) return f(static_cast<int>(static_cast<std::uint32_t>(h)));
  for (; h; h &= h - 1) f(std::countr_zero(h));
}
/// `at` becomes merged(at, x), atomically (mo: the order of the update).
void add_holders(std::atomic<Holders>& at, Holders x, std::memory_order mo) {
  if (every_rank_has_a_bit) {
    at.fetch_or(x, mo);
    return;
  }
  Holders cur = at.load(std::memory_order_relaxed);
  while (!at.compare_exchange_weak(cur, merged(cur, x), mo, std::memory_order_relaxed)) {
  }
}

/// A Location's value. Read holders first (acquire): a writer stores the version before them (release).
struct Seen {
  Holders holders;
  Version version;
};
Seen load(const Location& l) {
  const Holders h = l.holders.load(std::memory_order_acquire);
  return {h, l.version.load(std::memory_order_relaxed)};
}
void store(Location& l, Seen s) {
  l.version.store(s.version, std::memory_order_relaxed);
  l.holders.store(s.holders, std::memory_order_release);
}

/// Where a task leaves `address` (its accesses' locations once it has ended): several accesses to the datum are
/// readers of one version (their holders add up), or the last one's version counts.
Seen final_location(const ClusterTask& c, const void* address) {
  Seen v{0, 0};
  for (std::uint32_t i = 0; i < c.n_acc; ++i)
    if (c.acc[i].address == address) {
      const Seen x = load(c.acc[i].loc);
      v = {merged(v.holders, x.holders), x.version};
    }
  return v;
}

/// The stack of the calling thread, [lo, hi): an offloaded closure must not point into it.
std::pair<std::uintptr_t, std::uintptr_t> this_stack() {
  thread_local std::pair<std::uintptr_t, std::uintptr_t> range{0, 0};
  if (range.second == 0) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      std::size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0)
        range = {reinterpret_cast<std::uintptr_t>(addr), reinterpret_cast<std::uintptr_t>(addr) + size};
      pthread_attr_destroy(&attr);
    }
  }
  return range;
}

/// Throws if a word of the closure holds an address in the live part of the spawning thread's stack: a capture
/// by reference (or a pointer to a local), which would mean nothing on another process. The closure's padding
/// is zero (OffloadBody::clear_padding; closures whose padding cannot be cleared are not checked): a stale stack
/// address there made this check fail at random. Only the live part, from this frame up: two 4-byte captures
/// sharing a word may form any value, rarely one in the whole stack mapping, far more rarely in the part in use.
[[gnu::noinline]] void check_closure(const void* closure, std::size_t size) {
  const auto [base, hi] = this_stack();
  if (hi == 0) return;
  const auto lo = std::max(base, reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)));
  const auto* b = static_cast<const unsigned char*>(closure);
  for (std::size_t i = 0; i + sizeof(std::uintptr_t) <= size; i += alignof(std::uintptr_t)) {
    std::uintptr_t v;
    std::memcpy(&v, b + i, sizeof v);
    if (v >= lo && v < hi)
      throw std::invalid_argument(
          "weft::offload / weft::node: the task's body holds a pointer into the spawning thread's stack (a capture "
          "by reference, or the address of a local variable); an offloaded body may run on another process: "
          "capture values, and pointers into weft::dmalloc / weft::lmalloc memory");
  }
}

}  // namespace
#endif

std::string node_error(int node, int size) {
  return "weft::node(" + (node == kBadNode ? std::string("a negative rank") : std::to_string(node)) +
         "): the job has " + std::to_string(size) + " process" + (size == 1 ? "" : "es") + " (ranks 0 .. " +
         std::to_string(size - 1) + ")";
}

/// The offload clause of the spawn being registered on this thread (finish_spawn_offload -> divert_spawn).
thread_local const OffloadSpec* tls_offload_spec = nullptr;

// ---------------------------------------------------------------------------------------------------------
// One process (no MPI, or a job of one process): dmalloc and lmalloc are allocations in a local reservation.
// ---------------------------------------------------------------------------------------------------------

namespace {
std::mutex g_local_m;

/// The reservation for a process that has no cluster of several processes: made by a cluster Runtime of one
/// process (of its Options::cluster_memory), else on first use (of WEFT_CLUSTER_MEMORY, or the default).
AddressSpace& local_space(const std::size_t* runtime_bytes = nullptr) {
  AddressSpace& s = AddressSpace::get();
  if (!s.reserved() || runtime_bytes) {
    std::lock_guard<std::mutex> g(g_local_m);
    if (runtime_bytes) {
      s.reserve(*runtime_bytes, 1, 0, nullptr, nullptr);  // (throws if a reservation of another size exists)
    } else if (!s.reserved()) {
      std::size_t bytes = Options{}.cluster_memory;
      if (std::getenv("WEFT_CLUSTER_MEMORY"))  // parsed (and a bad value refused) as a Runtime would
        bytes = Options::from_environment().cluster_memory;
      s.reserve(bytes, 1, 0, nullptr, nullptr);
    }
  }
  return s;
}
}  // namespace

#ifdef WEFT_HAVE_MPI

namespace {

namespace comm = weft::comm;

// --- wire formats (plain structs copied with memcpy; every rank runs the same build) ---
struct WireTask {
  std::uint64_t id;   // the creator's descriptor (named by the done message)
  std::uint64_t seq;  // the creator's number for this message (names the task in satisfy messages and links)
  CodeAddress code;
  CodeAddress label;
  std::int32_t priority;
  std::uint32_t n_acc;
  std::uint32_t n_links;
  std::uint32_t closure_size;
  std::uint32_t closure_align;
};
// The payload of a task message: n_acc WireAccess, n_links WireLink, the closure's bytes.
struct WireAccess {
  std::uint64_t address;
  std::uint64_t bytes;
  Holders holders;
  std::uint8_t mode;
  // kSatisfied: `holders` and `version` are known (always for strong accesses but linked ones); kEager: the
  // bytes follow; kLinked: the access waits for tasks the creator offloaded to this executor before (its
  // WireLinks), and its location is theirs when they end.
  std::uint8_t flags;
  Version version;
};
struct WireLocation {  // per access, in a done message's payload
  Holders holders;
  Version version;
  std::uint32_t unused = 0;
};
struct WireLink {
  std::uint64_t pred_seq;  // a task the same creator sent earlier, to this executor or (remote) to another
  std::uint32_t access;    // the access of this task that waits for it
  std::uint32_t remote;    // 1: it runs on another rank, which says when it ends (a link satisfy message)
};
struct WireServed {  // in a done message: a successor on another rank told directly of the task's end (on_done)
  std::uint64_t succ_seq;
  std::uint32_t succ_access;
  std::uint32_t unused = 0;
};
struct WireDone {  // payload: n_acc WireLocation, n_served WireServed, the error's text
  std::uint64_t id;
  std::uint32_t n_acc;
  std::uint32_t error_size;
  std::uint32_t n_served;
  std::uint32_t unused = 0;
};
struct WireConnect {  // creator -> a predecessor's executor: tell `dest` when it ends (see executor_at_spawn)
  std::uint64_t pred_seq;
  std::uint64_t succ_seq;
  std::uint64_t address;
  std::uint64_t bytes;
  std::int32_t dest;
  std::uint32_t succ_access;
  Version dest_version;   // with dest_holds: dest holds this version (the creator's view; see RemoteSuccessor)
  std::uint8_t mode;      // the successor's access (eager data for what it reads)
  std::uint8_t dest_holds;
};
struct WireLinkSatisfy {  // a predecessor's executor (or the creator) -> a successor's: its access may go on
  std::uint64_t succ_seq;
  std::uint64_t address;
  std::int32_t creator;  // names the successor with succ_seq
  std::uint32_t succ_access;
  Holders holders;       // with the successor's rank named already when the bytes follow (eager)
  Version version;
  std::uint8_t eager;
  std::uint8_t failed;   // the predecessor failed or was cancelled: so is the successor
};
struct WireSatisfy {
  std::uint64_t seq;
  std::uint32_t index;
  Version version;
  Holders holders;  // with the executor named already when the bytes follow (eager)
  std::uint32_t eager;
  std::uint32_t unused = 0;
};
struct WireNoEager {  // no child of the task touches this weak access's datum: send no bytes (executor -> creator)
  std::uint64_t id;  // the creator's descriptor, as in WireDone
  std::uint32_t index;
  std::uint32_t unused = 0;
};
struct WireRelease {  // a weak access released before its task ends (executor -> creator)
  std::uint64_t id;  // the creator's descriptor, as in WireDone
  std::uint32_t index;
  Version version;
  Holders holders;
};
struct WireData {  // a fetch (which version it asks for), or the bytes of that version
  std::uint64_t address;
  std::uint64_t bytes;
  Version version;
};
struct WireRegion {
  std::uint64_t start;
  std::uint64_t bytes;
  std::uint64_t block;
  CodeAddress rank_of;
  std::uint8_t kind;
  std::uint8_t remove;
};

template <class T>
std::span<const std::byte> as_bytes_of(const T& v) {
  return {reinterpret_cast<const std::byte*>(&v), sizeof v};
}
template <class T>
T read_header(const comm::Message& m) {
  T v;
  if (m.header().size() < sizeof v) comm::abort_job("weft::cluster: a malformed message from rank " +
                                                    std::to_string(m.source()));
  std::memcpy(&v, m.header().data(), sizeof v);
  return v;
}

/// The body of a received task: the closure's bytes (aligned storage of its own) and the code that runs it.
/// What the body throws is kept for the creator, not thrown here (the rank's root must not fail for it).
struct ReceivedBody {
  void (*invoke)(void*, Context&);
  void* closure;
  std::size_t align;
  ClusterTask* state;
  ReceivedBody(void (*f)(void*, Context&), void* c, std::size_t a, ClusterTask* s) noexcept
      : invoke(f), closure(c), align(a), state(s) {}
  ReceivedBody(ReceivedBody&& o) noexcept : invoke(o.invoke), closure(o.closure), align(o.align), state(o.state) {
    o.closure = nullptr;
  }
  ReceivedBody(const ReceivedBody&) = delete;
  ~ReceivedBody() {
    if (closure) ::operator delete(closure, std::align_val_t(align));
  }
  void operator()(Context& cx) {
    try {
      invoke(closure, cx);
    } catch (const std::exception& e) {
      state->error = e.what();
      if (state->error.empty()) state->error = typeid(e).name();
    } catch (...) {
      state->error = "an exception that is not a std::exception";
    }
  }
};

std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

class Cluster final : public Engine::Service {
 public:
  explicit Cluster(Engine& e);
  ~Cluster() override;

  Engine& engine;
  /// The watchdog's exchange of views (set up with the other kinds). Before the transport, whose handlers use
  /// it: destroyed after it.
  std::unique_ptr<comm::WatchdogViews> watchdog_views_;
  comm::Transport transport;
  int rank = 0, size = 1;
  CodeMap code;

  // --- spawning and running tasks (any worker) ---
  void divert_spawn(Worker& w, Task* p, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs);
  void run(Worker& w, Task* t);
  bool complete(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo);
  void weak_ready(Worker& w, Task* t, Task* node);
  void after_wait(Worker& w, Task* t, const void* address, bool flush);
  /// t's body has returned (t runs here, received or local): each weak access gets a node that follows t's
  /// children on the datum, whose end releases the access (access_released).
  void watch_releases(Worker& w, Task* t);
  /// t's weak access i is done here (its body has returned, its children on the datum have ended): reported to
  /// the creator (a received task), or its cell updated and its release node fired (a local one).
  void access_released(Worker& w, Task* t, std::uint32_t i, Task*& best, std::vector<Task*>& todo);
  void run_root(void (*call)(void*, Context&), void* arg);
  void publish_region(const WireRegion& r);
  /// Rank 0: the datums of [start, start + bytes) are gone (dfree): their cells go too (the addresses may be
  /// allocated again). From rank 0's program, outside tasks.
  void forget(std::uintptr_t start, std::size_t bytes);
  /// The versions of this rank's bytes in [start, start + bytes) are forgotten (the region was freed).
  void forget_versions(std::uintptr_t start, std::size_t bytes);
  /// weft::lfree on this rank, of a block of its lmalloc range (retired: not allocated again yet). Every rank
  /// must drop what it knows of the block before its addresses come back (a datum allocated anew there must not
  /// meet an old copy, or rank 0's cell of the old one): rank 0 does it as for dfree, at the start of its next
  /// run (forget, then a region removal to every rank, before the run's begin message); the owner allocates the
  /// addresses again when it handles that removal. Another rank tells rank 0 with an lfree message (at once in
  /// a run; else at the start of its next run). What is left at the Runtime's destruction goes then
  /// (settle_address_space).
  void local_freed(std::uintptr_t start, std::size_t bytes);
  void on_lfree(const comm::Message& m);
  /// Another rank: sends rank 0 the blocks it freed between runs (see local_freed), at a run's start or at the
  /// Runtime's destruction.
  void tell_lfrees();
  /// Rank 0, at the start of a run (and at the Runtime's destruction): the blocks freed since (see local_freed).
  void publish_lfrees();
  void send_regions();
  void send_regions_locked();

  ClusterTask root_state;  // the directory of the runs' roots (data locations outlive a run)

  // Counters (ClusterStats; messages by kind: the transport's).
  std::atomic<std::uint64_t> offloaded{0}, offloaded_at_spawn{0}, linked{0}, linked_remotely{0}, received{0},
      bytes_eager{0}, bytes_lazy{0}, flushes{0};
  std::atomic<std::uint64_t> data_wait_ns{0}, flush_wait_ns{0};
  ClusterStats stats() const;
  std::uint64_t counters_id = 0;  // the profile's "cluster" section

 private:
  struct Incoming {  // transfers of a datum to this rank in flight
    int expected = 0;  // announced and not arrived; -k: k arrived before their announcement
    std::vector<Task*> tasks;                 // waiting to run
    std::vector<std::atomic<int>*> counters;  // waiting flushes
    std::vector<Task*> weak_nodes;            // received weak accesses whose bytes came eagerly (on_satisfy)
    struct Forward {
      int dest;
      std::size_t bytes;
      bool eager;
    };
    std::vector<Forward> forwards;  // sends of the datum that wait for it (a fetch served, an eager send)
    int asked = -1;                 // the rank a fetch went to (-1: announced by its sender); for the watchdog
    Version version = 0;            // the version on its way
  };
  struct Kept {  // a message of a run this rank has not begun
    comm::Kind kind;
    int source;
    std::uint32_t epoch;
    std::vector<std::byte> header, payload;
  };

  int choose_executor(ClusterTask& c);
  /// A link of a task sent at spawn: its access `access` waits for the task the creator numbered `pred_seq`,
  /// which runs on `executor`.
  struct SpawnLink {
    std::uint32_t access;
    std::uint64_t pred_seq;
    int executor;
  };
  /// The locality policy's rank for c; with `links`, their accesses' data counted where their predecessors run
  /// (and leave it).
  int locality_choice(const ClusterTask& c, const std::vector<SpawnLink>* links);
  /// The executor of a task being spawned, if it can be offloaded now: it has no unfinished predecessor and
  /// goes to another rank; or each unfinished predecessor is a task already sent to another rank (with strong
  /// accesses to the datum), and the task goes to a rank other than this one (its node clause, or the locality
  /// policy counting the predecessors' data where they run). A predecessor on that same rank orders the task
  /// there (the paper's namespace: no message on the path from one to the other); one on a third rank is told
  /// to report its end straight to the task's rank (a connect message, then a link satisfy message: paper
  /// 004's satisfiability from the predecessor's node to the successor's; Options::direct_satisfy), which it
  /// does unless it has ended when the connect message comes: then this rank, on its done message (on_done).
  /// -1 otherwise. Fills `links`; with remote ones, numbers the task (c.seq) and notes them in in_flight_.
  int executor_at_spawn(Task* p, ClusterTask& c, std::vector<SpawnLink>& links);
  /// After the registration of a task sent at spawn: the connect messages of its remote links.
  void send_connects(const ClusterTask& c, const std::vector<SpawnLink>& links);
  /// Its registration failed: its remote links are forgotten (one that on_done served already told its rank of
  /// a task that never comes: kept there until the run ends, harmless).
  void forget_links(std::uint64_t succ_seq, const std::vector<SpawnLink>& links);
  /// Tells `dest` that access `access` of the task `creator` numbered `succ_seq` may go on: the datum is version
  /// v at v.holders, with its bytes from here when sends_eagerly (mode: that access's) and not `failed`.
  void send_link_satisfy(int dest, int creator, std::uint64_t succ_seq, std::uint32_t access, AccessMode mode,
                         const void* address, std::size_t bytes, Seen v, bool failed);
  /// Applies a link satisfy message to the received task t and, with `count`, takes it off t's count of
  /// predecessors: true if t is ready now. Under received_m_.
  bool apply_link_satisfy_locked(Task* t, const WireLinkSatisfy& s, bool count);
  /// Sends t to c.executor: the task message, then what must follow it (satisfy messages of weak accesses
  /// satisfied meanwhile, eager data). Destroys the body (its bytes travel).
  void send_task(Task* t, ClusterTask& c, const std::vector<SpawnLink>& links);
  /// Eager transfers (Options::eager_transfers): whether the message that tells `dest` where an access's datum
  /// is (a task or satisfy message) brings its bytes too: dest reads them (not an out access), lacks them, and
  /// this rank holds them.
  bool sends_eagerly(AccessMode mode, Holders holders, int dest) const {
    return engine.options.eager_transfers && mode != AccessMode::out && mode != AccessMode::weak_out &&
           !holds(holders, dest) && holds(holders, rank);
  }
  /// Tells the executor of task `seq` where weak access i's datum is (its predecessors have finished), with the
  /// bytes when sends_eagerly: the paper's satisfiability message and its eager data.
  void send_satisfy(int dest, std::uint64_t seq, std::uint32_t i, const ClusterAccess& a);
  void offload(Worker& w, Task* t, ClusterTask& c);
  bool gather_data(Worker& w, Task* t, ClusterTask& c);
  /// A cancelled received task: it moves no data, but bytes announced to it (eager, with its task message) may
  /// still be on their way; it ends only after they have arrived, so that no message of a run comes after the
  /// run's end (see Runs). False if it waits for them (their arrival makes it ready again).
  bool await_announced(Task* t, ClusterTask& c);
  void send(int dest, comm::Kind k, std::span<const std::byte> header, std::span<const std::byte> payload = {});
  void send_data(int dest, const void* address, std::size_t bytes, bool eager, Version version);
  /// Registers that version `version` of `address` will arrive here (a fetch sent, or eager data announced).
  /// Under in_m_.
  void expect_locked(const void* address, Version version);
  /// Whether a transfer of `address` to this rank is in flight; if so `t` (or `counter`) waits for it. Under in_m_.
  bool wait_locked(const void* address, Task* t, std::atomic<int>* counter);
  /// A transfer of `address` arrived (its bytes `landed` in place: they are now that version here).
  void arrived(const void* address, bool landed, Version version);
  /// Asks a holder of version s for the datum (the creator `prefer`, if it is one and not -1: see the definition).
  void fetch_to_here(const void* address, std::size_t bytes, Seen s, Task* t, std::atomic<int>* counter,
                     int prefer);
  /// Sends version `version` of the datum to `dest`: now if this rank's bytes are that version or no transfer
  /// of it is on its way here; else once it has arrived (this rank is named a holder from the moment it asked
  /// for it). Under in_m_.
  void send_when_here_locked(int dest, const void* address, std::size_t bytes, bool eager, Version version);
  /// This rank's bytes of `address` are version v. Under in_m_. (Unlisted data of this rank's lmalloc range is
  /// at version 0 here: the bytes the program put there, which no task wrote nor transfer replaced.)
  bool valid_here_locked(const void* address, Version v) const {
    auto it = local_version_.find(address);
    if (it != local_version_.end()) return it->second == v;
    return v == 0 && AddressSpace::get().local_owner(address) == rank;
  }
  /// The transfers of `address` to this rank in flight, or null if none. Under in_m_.
  Incoming* in_flight_locked(const void* address) {
    auto it = incoming_.find(address);
    return it != incoming_.end() && it->second.expected > 0 ? &it->second : nullptr;
  }
  void make_ready(Task* t);

  // Handlers.
  bool keep_if_early(const comm::Message& m);
  void on_task(const comm::Message& m);
  void on_done(const comm::Message& m);
  void on_satisfy(const comm::Message& m);
  void on_release(const comm::Message& m);
  void on_no_eager(const comm::Message& m);
  void on_connect(const comm::Message& m);
  void on_link_satisfy(const comm::Message& m);
  /// Access `index` of the task this rank offloaded as descriptor `id`, named by a message m from its executor.
  ClusterAccess& named_access(const comm::Message& m, std::uint64_t id, std::uint32_t index);
  /// One of a received weak access's node's two events (its satisfy message, the arrival of its eager bytes).
  void release_weak_node(Task* node);
  void on_fetch(const comm::Message& m);
  void on_data(const comm::Message& m);
  std::span<std::byte> place_data(const comm::Message& m);
  void on_end(const comm::Message& m);
  void on_begin(const comm::Message& m);
  // Release: after the handlers of its sender's earlier messages (each pair's order), whose effects the thread
  // waiting for it (settle_address_space) then sees.
  void on_leave(const comm::Message&) { leaves_.fetch_add(1, std::memory_order_release); }
  /// The last changes to the common address space, applied on every rank at the Runtime's destruction (a
  /// collective step; see the definition).
  void settle_address_space();
  /// Whether m belongs to a run this rank has not begun (see running_ and begun_): kept until it has.
  bool early(const comm::Message& m) const {
    return m.epoch() != run_.load(std::memory_order_relaxed) || !running_.load(std::memory_order_relaxed) ||
           (m.source() != 0 && !begun_.load(std::memory_order_relaxed));
  }
  /// Dispatches the kept messages of the current run that are no longer early, in their order. Under the token.
  void dispatch_kept();
  void on_region(const comm::Message& m);
  void dispatch(comm::Kind k, const comm::Message& m);
  using Handler = void (Cluster::*)(const comm::Message&);
  std::vector<Handler> handlers_;  // by kind (dispatch)

  static std::size_t poll_source(void* self) noexcept;
  static ProgressDemand source_demand(void* self) noexcept;

  comm::Kind k_task_ = 0, k_done_ = 0, k_satisfy_ = 0, k_fetch_ = 0, k_data_ = 0, k_end_ = 0, k_region_ = 0,
             k_begin_ = 0, k_release_ = 0, k_no_eager_ = 0, k_connect_ = 0, k_link_satisfy_ = 0,
             k_lfree_ = 0, k_leave_ = 0;
  // The watchdog (Options::watchdog_seconds): progress is any message sent or handled, any task of the
  // cluster completed here; a run that sees none for that long prints every rank's view and ends the job.
  double watchdog_ = 0;
  /// The current run's RunAcrossRanks::index (for MpiEnv::check_departures).
  std::atomic<std::uint64_t> across_run_{0};
  std::atomic<std::uint64_t> progress_{0};
  std::atomic<std::uint64_t> done_received_{0}, received_completed_{0};
  std::atomic<std::int64_t> transfers_awaited_{0};  // announced minus arrived (a hint for source_demand)
  std::mutex watch_m_;
  std::uint64_t watch_seen_ = ~std::uint64_t{0};
  std::chrono::steady_clock::time_point watch_since_{};
  std::atomic<bool> watch_fired_{false};
  void watch();
  std::string view();
  /// Polls the transport (yielding when a poll finds nothing) until done() holds.
  template <class Done>
  void poll_until(Done done) {
    while (!done())
      if (transport.poll() == 0) std::this_thread::yield();
  }
  /// Polls until this rank owes no operation to the transport (its sends delivered, its receives dispatched).
  void drain_transport();
  ProgressSource source_{};
  std::atomic<std::uint32_t> run_{0};        // the run this rank is in (written under the token)
  std::atomic<bool> running_{false};
  // Rank 0's begin message of the current run has been handled (always true on rank 0). Until then a message of
  // the run from another rank is kept: rank 0 sends the changes to the common address space (dfree, dmalloc)
  // at the start of a run, before its begin message, and another rank's task may touch the memory they concern.
  std::atomic<bool> begun_{false};
  std::atomic<std::uint32_t> ended_{0};      // the last run whose end message arrived
  std::atomic<Task*> root_{nullptr};         // this run's root
  std::deque<Kept> kept_;                    // under the token
  std::unordered_map<const std::byte*, std::unique_ptr<std::byte[]>> early_buffers_;  // under the token
  std::mutex in_m_;
  std::unordered_map<const void*, Incoming> incoming_;
  // Tasks here that have the datum and read it (strong `in` accesses, from the moment their data is here to
  // their end, children included). While there are any, a transfer of that datum arriving is a copy of what they
  // read (another rank sent the same version: a newer one cannot be written before they and their children,
  // readers only, have ended), and lands in a scratch buffer instead. (Not inout: its children may write the
  // datum, and a newer version may then come back while it runs.)
  std::unordered_map<const void*, int> readers_;
  // The version of this rank's bytes of a datum, where known: what the last transfer that landed here brought,
  // or what the last task here that wrote it produced (from its start: nothing may read the old version
  // meanwhile). It lets a task whose view of a datum does not list this rank use the copy here all the same,
  // and a fetch be served here at once while a transfer of the same version is still on its way (two ranks
  // that each fetch a copy of what the other holds would otherwise wait for each other). A datum of the program
  // (never transferred nor written by a task) is listed at version 0 on the rank whose task first names it. A
  // rank named a holder whose bytes are not listed at that version does not have them (yet). Under in_m_;
  // entries of a dfree'd region are dropped.
  std::unordered_map<const void*, Version> local_version_;
  /// Whether a copy of version v of `a` arriving now goes to a scratch buffer: tasks here read the datum, or this
  /// rank has v or a later version. The later case is a duplicate that comes late: two ranks each sent a copy of
  /// v (one eagerly with a task, one for a fetch, say), the task that needed v ran on the first, and a task that
  /// writes the whole datum (out: it waits for no copy) made v + 1 here; the second must not land over that.
  /// Versions grow along the datum's writers, and a rank never needs an older one than it has (a reader of v is
  /// ordered before the writer of v + 1). Wrap-around safe.
  bool duplicate_locked(const void* a, Version v) const {
    auto it = readers_.find(a);
    if (it != readers_.end() && it->second > 0) return true;
    auto lv = local_version_.find(a);
    return lv != local_version_.end() && static_cast<std::int32_t>(lv->second - v) >= 0;
  }
  std::mutex received_m_;
  // Tasks received here and not ended: received_key(creator, seq) -> the task and its state (which its
  // completion takes from Task::cluster before it leaves this table).
  std::unordered_map<std::uint64_t, std::pair<Task*, ClusterTask*>> received_;
  // Tasks received here that ended and that a task linked to them could not take for granted: they failed, or
  // data they wrote is not here (a child wrote it elsewhere); forgotten at the end of the run. A task linked to a
  // task that ended and is not listed takes its data as here. Under received_m_.
  struct Ended {
    bool failed = false;
    struct Moved {
      const void* address;
      Seen where;
    };
    std::vector<Moved> moved;  // written, and held elsewhere only
  };
  std::unordered_map<std::uint64_t, Ended> ended_tasks_;
  // Link satisfy messages for tasks whose task message has not come yet (they come from another rank than the
  // creator, or from the creator before the task message, see divert_spawn): received_key -> the messages.
  // Taken by on_task. Under received_m_; emptied at the end of a run.
  std::unordered_map<std::uint64_t, std::vector<WireLinkSatisfy>> early_links_;
  static std::uint64_t received_key(int creator, std::uint64_t seq) {
    return (static_cast<std::uint64_t>(creator) << 56) ^ seq;
  }
  // Tasks sent from here whose done message has not been handled: their executor and number, for tasks spawned
  // meanwhile that may link to them (executor_at_spawn). `sent`: the message is out (a link to a task whose
  // message is not may not overtake it).
  struct InFlight {
    int executor;
    std::uint64_t seq;
    bool sent;
    /// Tasks sent at spawn to another rank with a remote link to this one (executor_at_spawn): told of its end
    /// by its executor, or by on_done if that rank had no connect message for them when it ended.
    struct RemoteLink {
      int dest;
      std::uint64_t succ_seq;
      std::uint32_t access;
      AccessMode mode;
      const void* address;
      std::size_t bytes;
    };
    std::vector<RemoteLink> remote;
  };
  std::mutex flight_m_;
  std::unordered_map<const Task*, InFlight> in_flight_;
  std::atomic<std::uint64_t> next_seq_{1};
  std::mutex regions_m_;
  std::vector<WireRegion> regions_;  // rank 0: dmalloc regions not yet published
  // lmalloc blocks freed (start, bytes): rank 0, to publish at its next run's start; another rank, to tell rank 0
  // at its next run's start (freed between runs). Under regions_m_.
  std::vector<std::pair<std::uintptr_t, std::size_t>> lfreed_;
  // The Runtime's destruction (settle_address_space): the leave messages received, and whether this rank has
  // begun it (address-space messages are then handled whatever their run).
  std::atomic<int> leaves_{0};
  std::atomic<bool> closing_{false};
  std::atomic<std::uint32_t> round_robin_{0};
  std::atomic<std::uint32_t> received_seq_{0};
};

namespace {

std::atomic<Cluster*> g_cluster{nullptr};

/// What a cluster knows of the data outlives its Runtime, as the common address space does: rank 0's view of
/// where each datum's latest version is (and which data a flushing taskwait brings back), and every rank's
/// versions of its own bytes. A later cluster Runtime of the process starts from it; without it, a datum that a
/// run left on another rank (taskwait_noflush) would be taken for rank 0's stale bytes. Kept in the form of the
/// holder sets of `holder_bits` (0: no cluster Runtime yet).
struct KeptDirectory {
  std::unordered_map<const void*, std::unique_ptr<ClusterTask::Cell>> cells;
  std::vector<ClusterTask::Touched> touched;  // (pointers into `cells`' entries, which a move keeps)
  std::unordered_map<const void*, Version> local_version;
  int holder_bits = 0;
};
KeptDirectory& kept_directory() {
  static KeptDirectory d;
  return d;
}

Cluster& the_cluster() { return *g_cluster.load(std::memory_order_acquire); }

void cluster_spawn(Worker& w, Task* p, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs) {
  the_cluster().divert_spawn(w, p, t, acc, n, attrs);
}
void cluster_run_task(Worker& w, Task* t) { the_cluster().run(w, t); }
bool cluster_complete(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  return the_cluster().complete(w, t, best, todo);
}
void cluster_after_wait(Worker& w, Task* t, const void* address, bool flush) {
  the_cluster().after_wait(w, t, address, flush);
}
void cluster_weak_ready(Worker& w, Task* t, Task* node) { the_cluster().weak_ready(w, t, node); }

// The node that follows a task's children on the datum of one of its weak accesses, made when its body has
// returned (Cluster::watch_releases; the access's index in its body storage). Owned by the task (freed when it
// completes), which it holds back like a weak node (kWeakUnit).
/// The release node of t's weak access to `address` (kAccessRelease; null for a received task's).
Task* release_node(const Task* t, const void* address) {
  for (std::uint8_t k = 0; k < t->n_weak; ++k)
    if (t->weak[k].address == address) return t->weak[k].release;
  return nullptr;
}

bool complete_release_watch(Worker& w, Task* n, Task*& best, std::vector<Task*>& todo) {
  Task* const owner = n->parent;
  const bool failed = n->cancelled.load(std::memory_order_relaxed);  // a child on the datum failed
  std::uint32_t index;
  std::memcpy(&index, n->body, sizeof index);
  release_successors(w, n, false, best, todo);  // none: this only closes it
  // A failed child on the datum: the access ends with its task (which fails). So does it when this node is
  // the task's last unit (its body has returned, nothing else is left): the task completes now, and its done
  // message reports the access (no release message for it).
  if (!failed && owner->alive.load(std::memory_order_acquire) != kWeakUnit)
    the_cluster().access_released(w, owner, index, best, todo);
  if (owner->alive.fetch_sub(kWeakUnit, std::memory_order_acq_rel) == kWeakUnit) todo.push_back(owner);
  return false;
}
const TaskKind kReleaseWatch{"release watch", true, false, nullptr, &complete_release_watch, nullptr, nullptr,
                             nullptr, nullptr};
bool complete_cluster_root(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  t->cluster = nullptr;  // the root's state outlives the run (Cluster::root_state)
  return complete_dependency(w, t, best, todo);
}

// (Not run_dependency, which inlines complete_dependency: the root completes through its own step.)
const TaskKind kClusterRoot{"cluster root", false, false, &run_plain, &complete_cluster_root, &cluster_spawn,
                            nullptr, &cluster_after_wait, nullptr};

}  // namespace

const TaskKind kClusterTask{"cluster", false, false, &cluster_run_task, &cluster_complete, &cluster_spawn,
                            nullptr, &cluster_after_wait, &cluster_weak_ready};

namespace {
bool is_cluster_parent(const Task* p) { return p->kind == &kClusterTask || p->kind == &kClusterRoot; }
}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Construction: transport, address space, consistency
// ---------------------------------------------------------------------------------------------------------

Cluster::Cluster(Engine& e) : engine(e) {
  rank = transport.rank();
  size = transport.size();
  holder_bits = static_cast<int>(e.options.cluster_holder_bits);
  every_rank_has_a_bit = size <= holder_bits;
  // Each kind's handler, called at once or, for a message of a run this rank has not begun, when it begins
  // (keep_if_early, dispatch_kept): one table for both.
  auto reg = [this](const char* name, Handler f, bool places = false) {
    comm::Handler h{.deliver = [this, f](const comm::Message& m) {
      if (!keep_if_early(m)) (this->*f)(m);
    }};
    if (places) h.place = [this](const comm::Message& m) { return place_data(m); };
    const comm::Kind k = transport.register_kind(name, std::move(h));
    if (handlers_.size() <= k) handlers_.resize(k + 1, nullptr);
    handlers_[k] = f;
    return k;
  };
  k_task_ = reg("weft.cluster.task", &Cluster::on_task);
  k_done_ = reg("weft.cluster.done", &Cluster::on_done);
  k_satisfy_ = reg("weft.cluster.satisfy", &Cluster::on_satisfy);
  k_release_ = reg("weft.cluster.release", &Cluster::on_release);
  k_no_eager_ = reg("weft.cluster.no_eager", &Cluster::on_no_eager);
  k_connect_ = reg("weft.cluster.connect", &Cluster::on_connect);
  k_link_satisfy_ = reg("weft.cluster.link_satisfy", &Cluster::on_link_satisfy);
  k_fetch_ = reg("weft.cluster.fetch", &Cluster::on_fetch);
  k_data_ = reg("weft.cluster.data", &Cluster::on_data, true);
  k_end_ = reg("weft.cluster.end", &Cluster::on_end);
  k_begin_ = reg("weft.cluster.begin", &Cluster::on_begin);
  k_region_ = reg("weft.cluster.region", &Cluster::on_region);
  k_lfree_ = reg("weft.cluster.lfree", &Cluster::on_lfree);
  k_leave_ = reg("weft.cluster.leave", &Cluster::on_leave);
  // The watchdog's request for this rank's view (any run: the asking rank is about to end the job).
  watchdog_views_ =
      std::make_unique<comm::WatchdogViews>(transport, "weft.cluster.watchdog", [this] { return view(); });
  watchdog_ = e.options.watchdog_seconds;
  // Same executable and libraries everywhere: the kinds' names carry the loaded objects' signature, which
  // check_consistency compares.
  char sig[64];
  std::snprintf(sig, sizeof sig, "weft.cluster.objects/%016llx", static_cast<unsigned long long>(code.signature()));
  transport.register_kind(sig, {.deliver = [](const comm::Message&) {}});
  try {
    transport.check_consistency();
  } catch (const comm::comm_error& x) {
    throw std::runtime_error(std::string("weft: the processes of the cluster differ (do they all run the same "
                                         "executable with the same libraries and Options?): ") +
                             x.what());
  }
  // The common address space: rank 0 proposes, everybody checks (see address_space.hpp). Its size sets where each
  // rank's lmalloc range lies: every rank must reserve the same (else one writes where another's data is not).
  struct Ctx {
    MPI_Comm comm;
  } ctx{comm::MpiEnv::get().comm()};
  {
    const std::uint64_t mine = e.options.cluster_memory, bits = e.options.cluster_holder_bits;
    std::uint64_t in[4] = {mine, ~mine, bits, ~bits}, out[4] = {0, 0, 0, 0};
    MPI_Allreduce(in, out, 4, MPI_UINT64_T, MPI_MAX, ctx.comm);
    // Each value and its complement reduced by max: the largest and the smallest value over the ranks.
    auto same_everywhere = [&](const char* what, std::uint64_t v, const std::uint64_t* max_pair, const char* unit) {
      if (max_pair[0] != v || ~max_pair[1] != v)
        throw std::runtime_error("weft: rank " + std::to_string(rank) + ": " + what + " is " + std::to_string(v) +
                                 unit + " here, but the processes of the cluster differ (from " +
                                 std::to_string(~max_pair[1]) + " to " + std::to_string(max_pair[0]) + unit +
                                 "): give every process the same value");
    };
    same_everywhere("Options::cluster_memory (WEFT_CLUSTER_MEMORY)", mine, out, " bytes");
    same_everywhere("Options::cluster_holder_bits (WEFT_CLUSTER_HOLDER_BITS)", bits, out + 2, "");
  }
  // The data directory of the process's earlier cluster Runtime, if any (the same on every process: they all
  // made the same Runtimes, so they all refuse or all accept).
  KeptDirectory& kept = kept_directory();
  if (kept.holder_bits != 0 && kept.holder_bits != holder_bits)
    throw std::runtime_error("weft: rank " + std::to_string(rank) + ": Options::cluster_holder_bits " +
                             "(WEFT_CLUSTER_HOLDER_BITS) is " + std::to_string(holder_bits) +
                             " here, but an earlier cluster Runtime of this process used " +
                             std::to_string(kept.holder_bits) +
                             ", and what it knew of the data is kept in that form: give every cluster Runtime of "
                             "the process the same value");
  AddressSpace::get().reserve(
      e.options.cluster_memory, size, rank,
      [](void* c, std::uintptr_t mine, bool ok) -> std::uintptr_t {
        MPI_Comm comm = static_cast<Ctx*>(c)->comm;
        std::uint64_t v = mine;
        MPI_Bcast(&v, 1, MPI_UINT64_T, 0, comm);
        int all = ok ? 1 : 0, agreed = 0;
        MPI_Allreduce(&all, &agreed, 1, MPI_INT, MPI_MIN, comm);
        return agreed ? static_cast<std::uintptr_t>(v) : 0;
      },
      &ctx);
  source_ = {&poll_source, &source_demand, this};
  counters_id = trace::add_counter_source("cluster", [this](std::vector<weft::Counter>& out) {
    const ClusterStats s = stats();
    auto count = [&](const char* name, std::uint64_t v) { out.push_back(weft::Counter{name, false, v, 0}); };
    count("tasks_offloaded", s.tasks_offloaded);
    count("tasks_offloaded_at_spawn", s.tasks_offloaded_at_spawn);
    count("tasks_linked", s.tasks_linked);
    count("tasks_linked_remotely", s.tasks_linked_remotely);
    count("tasks_received", s.tasks_received);
    count("control_messages", s.control_messages);
    count("task_messages", s.task_messages);
    count("done_messages", s.done_messages);
    count("satisfy_messages", s.satisfy_messages);
    count("release_messages", s.release_messages);
    count("no_eager_messages", s.no_eager_messages);
    count("connect_messages", s.connect_messages);
    count("link_satisfy_messages", s.link_satisfy_messages);
    count("fetch_messages", s.fetch_messages);
    count("end_messages", s.end_messages);
    count("data_messages", s.data_messages);
    count("bytes_eager", s.bytes_eager);
    count("bytes_lazy", s.bytes_lazy);
    count("flushes", s.flushes);
    out.push_back(weft::Counter{"data_wait_s", true, 0, s.data_wait_seconds});
    out.push_back(weft::Counter{"flush_wait_s", true, 0, s.flush_wait_seconds});
  });
  // Last, once nothing can throw: a refused Runtime leaves the directory to the next one.
  root_state.cells = std::move(kept.cells);
  root_state.touched = std::move(kept.touched);
  local_version_ = std::move(kept.local_version);
  kept = KeptDirectory{};
}

Cluster::~Cluster() {
  comm::MpiEnv::get().announce_teardown(comm::MpiEnv::Teardown::cluster_runtime);  // before the collective steps
                                                                                   // (see check_departures)
  if (comm::MpiEnv::mpi_live()) settle_address_space();
  KeptDirectory& kept = kept_directory();  // for the next cluster Runtime of the process (see KeptDirectory)
  kept.cells = std::move(root_state.cells);
  kept.touched = std::move(root_state.touched);
  kept.local_version = std::move(local_version_);
  kept.holder_bits = holder_bits;
  trace::remove_counter_source(counters_id);
  Cluster* self = this;
  g_cluster.compare_exchange_strong(self, nullptr);
}

ClusterStats Cluster::stats() const {
  ClusterStats st;
  st.tasks_offloaded = offloaded.load(std::memory_order_relaxed);
  st.tasks_offloaded_at_spawn = offloaded_at_spawn.load(std::memory_order_relaxed);
  st.tasks_linked = linked.load(std::memory_order_relaxed);
  st.tasks_linked_remotely = linked_remotely.load(std::memory_order_relaxed);
  st.tasks_received = received.load(std::memory_order_relaxed);
  const comm::TransportStats t = transport.stats();
  auto sent = [&](comm::Kind k) { return k < t.kinds.size() ? t.kinds[k].messages_sent : 0; };
  st.task_messages = sent(k_task_);
  st.done_messages = sent(k_done_);
  st.satisfy_messages = sent(k_satisfy_);
  st.release_messages = sent(k_release_);
  st.no_eager_messages = sent(k_no_eager_);
  st.fetch_messages = sent(k_fetch_);
  st.connect_messages = sent(k_connect_);
  st.link_satisfy_messages = sent(k_link_satisfy_);
  st.end_messages = sent(k_end_) + sent(k_begin_);
  st.control_messages = st.task_messages + st.done_messages + st.satisfy_messages + st.release_messages +
                        st.no_eager_messages + st.connect_messages + st.link_satisfy_messages + st.fetch_messages +
                        st.end_messages;
  st.data_messages = sent(k_data_);
  st.bytes_eager = bytes_eager.load(std::memory_order_relaxed);
  st.bytes_lazy = bytes_lazy.load(std::memory_order_relaxed);
  st.flushes = flushes.load(std::memory_order_relaxed);
  st.data_wait_seconds = 1e-9 * static_cast<double>(data_wait_ns.load(std::memory_order_relaxed));
  st.flush_wait_seconds = 1e-9 * static_cast<double>(flush_wait_ns.load(std::memory_order_relaxed));
  return st;
}

// ---------------------------------------------------------------------------------------------------------
// Spawning: the cluster state of a new task, then the usual registration
// ---------------------------------------------------------------------------------------------------------

void Cluster::divert_spawn(Worker& w, Task* p, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs) {
  const OffloadSpec* spec = tls_offload_spec;
  tls_offload_spec = nullptr;
  std::unique_ptr<ClusterTask> c;
  try {
    for (std::size_t i = 0; i < n; ++i) {
      const AccessMode m = acc[i].mode;
      if (m == AccessMode::inoutset || m == AccessMode::commutative || m == AccessMode::reduction ||
          m == AccessMode::weak_reduction)
        throw std::invalid_argument(std::string("weft: ") + to_string(m) +
                                    " accesses are not supported in a job of several processes yet (a cluster "
                                    "Runtime; see weft/cluster.hpp)");
    }
    c = std::make_unique<ClusterTask>();
    if (spec) {
      if (spec->node < -1 || spec->node >= size)
        throw std::invalid_argument(node_error(spec->node, size));
      c->node = spec->node;
      c->ops = spec->ops;
      // Data moves to another process at the same address: only the common address space means the same there.
      const AddressSpace& as = AddressSpace::get();
      for (std::size_t i = 0; i < n; ++i) {
        const auto* a = static_cast<const char*>(acc[i].address);
        if (acc[i].bytes && (!as.contains(a) || !as.contains(a + acc[i].bytes - 1)))
          throw std::invalid_argument(
              std::string("weft::offload / weft::node: the task's ") + to_string(acc[i].mode) +
              " access names memory outside weft::dmalloc / weft::lmalloc; a task that may run on another process "
              "accesses only that memory (its data moves there at the same address)");
      }
      if (spec->ops->no_padding)  // else a padding byte may hold anything, a stale stack address too
        check_closure(spec->ops->inline_stored ? static_cast<const void*>(t->body) : *reinterpret_cast<void**>(t->body),
                      spec->ops->size);
    }
    // Each access points at its parent's cell for the datum: the parent's own access, else a cell of its own.
    ClusterTask& pc = *p->cluster;
    // A datum moves between processes as a whole, as its accesses name it: always the same size (see
    // weft/cluster.hpp). Checked before anything changes (a refused spawn leaves no trace).
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t before = 0;
      for (std::uint32_t k = 0; k < pc.n_acc && !before; ++k)
        if (pc.acc[k].address == acc[i].address) before = pc.acc[k].bytes;
      if (!before)
        if (auto it = pc.cells.find(acc[i].address); it != pc.cells.end()) before = it->second->bytes;
      if (before && acc[i].bytes && before != acc[i].bytes) {
        char at[32];
        std::snprintf(at, sizeof at, "%p", acc[i].address);
        throw std::invalid_argument("weft: rank " + std::to_string(rank) + ": a task's " + to_string(acc[i].mode) +
                                    " access names the datum at " + at + " with " + std::to_string(acc[i].bytes) +
                                    " bytes, but an access made before (its parent's, or an earlier task's) named "
                                    "it with " + std::to_string(before) + ": in a job of several processes a datum "
                                    "is named always with the same start address and size (its bytes move between "
                                    "processes as a whole)");
      }
    }
    c->n_acc = static_cast<std::uint32_t>(n);
    c->acc = std::make_unique<ClusterAccess[]>(n);
    for (std::size_t i = 0; i < n; ++i) {
      ClusterAccess& a = c->acc[i];
      a.address = acc[i].address;
      a.bytes = acc[i].bytes;
      a.mode = acc[i].mode;
      Location* cell = nullptr;
      for (std::uint32_t k = 0; k < pc.n_acc && !cell; ++k)
        if (pc.acc[k].address == a.address) {
          cell = &pc.acc[k].loc;
          FlushMark& f = pc.acc[k].touched;
          if (!f.listed) pc.touched.push_back({a.address, cell, &pc.acc[k].bytes, &f});
          f.listed = f.since_wait = true;
        }
      if (!cell) {
        auto& slot = pc.cells[a.address];
        if (!slot) {
          // Never accessed by a task yet: here, or on the rank whose lmalloc range holds it (that rank's own data,
          // whose address came here in a datum).
          slot = std::make_unique<ClusterTask::Cell>();
          const int owner = AddressSpace::get().local_owner(a.address);
          const int at = owner >= 0 ? owner : rank;
          slot->loc.holders.store(only(at), std::memory_order_relaxed);
          if (at == rank) {
            std::lock_guard<std::mutex> g(in_m_);
            local_version_.try_emplace(a.address, 0);  // (version 0, the program's bytes)
          }
        }
        slot->bytes = std::max(slot->bytes, a.bytes);
        cell = &slot->loc;
        if (!slot->touched.listed) pc.touched.push_back({a.address, cell, &slot->bytes, &slot->touched});
        slot->touched.listed = slot->touched.since_wait = true;
      }
      a.where = cell;
      if (is_weak_mode(a.mode)) store(a.loc, load(*cell));
    }
  } catch (...) {
    t->body_ops->destroy(t);
    free_dependency_task(w, t);
    trace::on_spawn_end(w);
    throw;
  }
  // Offloaded now, by this thread, where possible (see executor_at_spawn): the task here completes when its
  // executor reports it done, as an offloaded task does (a completion unit, taken before registration: once
  // linked, a predecessor's end may run it, which here only ends its body).
  std::vector<SpawnLink> links;
  int at_spawn = -1;
  if (c->node != -2 && (c->node >= 0 || engine.options.offload_policy == OffloadPolicy::locality))
    at_spawn = executor_at_spawn(p, *c, links);
  if (at_spawn >= 0) {
    c->sent_at_spawn = true;
    c->role = ClusterTask::Role::offloaded;
    c->executor = at_spawn;
    c->data_ready = true;
    t->alive.fetch_add(kEventUnit, std::memory_order_relaxed);
    held_events(p).fetch_add(1, std::memory_order_relaxed);
  }
  t->cluster = c.get();
  t->kind = &kClusterTask;  // before registration: once linked, a predecessor may run it
  const std::uint64_t seq = c->seq;
  try {
    register_and_schedule(w, p, t, acc, n, attrs);  // on failure t is gone, and c with it
  } catch (...) {
    if (at_spawn >= 0) {
      held_events(p).fetch_sub(1, std::memory_order_relaxed);
      if (seq) forget_links(seq, links);
    }
    throw;
  }
  ClusterTask& cs = *c.release();
  // Sent after registration (which sets its priority and label); until then nothing here waits for it (its
  // completion needs the done message).
  if (at_spawn >= 0) {
    // The connect messages first: t may end as soon as its message is out (and cs go with it). A link satisfy
    // message that overtakes the task message waits for it on its rank (early_links_).
    if (seq) {
      send_connects(cs, links);
      linked_remotely.fetch_add(1, std::memory_order_relaxed);
    }
    send_task(t, cs, links);
    offloaded_at_spawn.fetch_add(1, std::memory_order_relaxed);
    if (!links.empty()) linked.fetch_add(1, std::memory_order_relaxed);
    // A ready task leaves now, as a worker that offloads a task polls right after it: a spawning body does not
    // poll, and ready tasks would otherwise leave in bursts of a full buffer, the executor idle meanwhile. A
    // linked one cannot start before its predecessors there anyway: it leaves with the next poll, often with
    // the rest of its chain, which the executor then runs back to back (immediate successors: its data in
    // cache).
    if (links.empty() && !engine.progress_worker) transport.poll();
  }
}

int Cluster::executor_at_spawn(Task* p, ClusterTask& c, std::vector<SpawnLink>& links) {
  thread_local std::vector<Task*> preds, linked_preds;  // linked_preds[k]: the predecessor of links[k]
  linked_preds.clear();
  std::lock_guard<std::mutex> g(flight_m_);
  for (std::uint32_t i = 0; i < c.n_acc; ++i) {
    const ClusterAccess& a = c.acc[i];
    if (is_weak_mode(a.mode)) return -1;  // a weak access is offloaded at once anyway, with satisfy messages
    preds.clear();
    if (!pending_predecessors(p, a.address, a.mode, preds)) return -1;
    for (Task* pred : preds) {
      // A predecessor that is not an offloaded task whose message is out (a local one, one still waiting to
      // be offloaded, or one whose done message was handled meanwhile): the usual way.
      auto it = in_flight_.find(pred);
      if (it == in_flight_.end() || !it->second.sent) return -1;
      // A predecessor whose access to the datum is weak brings no data to its rank (its children may run
      // anywhere): the task message could not name where the datum is when it ends.
      const ClusterTask& pc = *pred->cluster;  // (alive: in flight, under flight_m_)
      for (std::uint32_t k = 0; k < pc.n_acc; ++k)
        if (pc.acc[k].address == a.address && is_weak_mode(pc.acc[k].mode)) return -1;
      links.push_back({i, it->second.seq, it->second.executor});
      linked_preds.push_back(pred);
    }
  }
  if (links.empty()) {
    // Nothing to wait for: ready now. Where the policy sends it is known: sent from here at once, rather than
    // by the worker that would take it from the queue (a task spawned next may then link to it).
    const int r = c.node >= 0 ? c.node : locality_choice(c, nullptr);
    if (r == rank) c.executor = rank;  // runs here (its run need not ask the policy again)
    return r == rank ? -1 : r;
  }
  // Its node clause, or the policy counting the linked data where the predecessors run. Here: the usual way (the
  // predecessors' done messages come here anyway).
  const int exec = c.node >= 0 ? c.node : locality_choice(c, &links);
  if (exec == rank) return -1;
  const bool remote = std::any_of(links.begin(), links.end(), [&](const SpawnLink& l) { return l.executor != exec; });
  if (remote) {
    if (!engine.options.direct_satisfy) return -1;
    // Numbered now: the predecessor's done message may come before the task message leaves (on_done then
    // tells exec itself).
    c.seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t k = 0; k < links.size(); ++k)
      if (links[k].executor != exec) {
        const ClusterAccess& a = c.acc[links[k].access];
        in_flight_[linked_preds[k]].remote.push_back({exec, c.seq, links[k].access, a.mode, a.address, a.bytes});
      }
  }
  return exec;
}

void Cluster::send_connects(const ClusterTask& c, const std::vector<SpawnLink>& links) {
  for (const SpawnLink& l : links) {
    if (l.executor == c.executor) continue;
    const ClusterAccess& a = c.acc[l.access];
    const Seen v = load(*a.where);  // (a predecessor that only reads the datum leaves this version)
    const WireConnect m{l.pred_seq,
                        c.seq,
                        reinterpret_cast<std::uint64_t>(a.address),
                        a.bytes,
                        c.executor,
                        l.access,
                        v.version,
                        static_cast<std::uint8_t>(a.mode),
                        static_cast<std::uint8_t>(holds(v.holders, c.executor))};
    send(l.executor, k_connect_, as_bytes_of(m));
  }
}

void Cluster::forget_links(std::uint64_t succ_seq, const std::vector<SpawnLink>& links) {
  std::lock_guard<std::mutex> g(flight_m_);
  for (const SpawnLink& l : links)
    for (auto& [pred, f] : in_flight_)
      if (f.seq == l.pred_seq)
        std::erase_if(f.remote, [&](const InFlight::RemoteLink& r) { return r.succ_seq == succ_seq; });
}

// ---------------------------------------------------------------------------------------------------------
// Running: offload, or bring the data here and run the body
// ---------------------------------------------------------------------------------------------------------

int Cluster::choose_executor(ClusterTask& c) {
  if (c.node >= 0) return c.node;
  if (c.node == -2 || c.role == ClusterTask::Role::received) return rank;
  switch (engine.options.offload_policy) {
    case OffloadPolicy::round_robin:
      return static_cast<int>(round_robin_.fetch_add(1, std::memory_order_relaxed) % static_cast<unsigned>(size));
    case OffloadPolicy::random: {
      thread_local std::minstd_rand rng(static_cast<unsigned>(rank * 7919 + 17));
      return static_cast<int>(rng() % static_cast<unsigned>(size));
    }
    case OffloadPolicy::locality:
      return locality_choice(c, nullptr);
  }
  return rank;
}

int Cluster::locality_choice(const ClusterTask& c, const std::vector<SpawnLink>* links) {
  // Bytes each rank already holds of what the task reads; for data not written yet (out, or weak access not
  // satisfied), the affinity of its dmalloc distribution; for an access linked to predecessors, the ranks they
  // run on (they leave the datum's latest version there).
  thread_local std::vector<std::uint64_t> score, written;  // per rank (no allocation per task once sized)
  score.assign(static_cast<std::size_t>(size), 0);
  written.assign(static_cast<std::size_t>(size), 0);
  bool any = false;
  AddressSpace& as = AddressSpace::get();
  for (std::uint32_t i = 0; i < c.n_acc; ++i) {
    const ClusterAccess& a = c.acc[i];
    // What the task writes counts twice (read and written where it is, its result stays there: owner
    // computes), so that a tie between an input and the datum updated goes to the datum's rank.
    const std::uint64_t weight = a.bytes * (writes(a.mode) && a.mode != AccessMode::out ? 2 : 1);
    const bool known = !is_weak_mode(a.mode) || (a.weak_state.load(std::memory_order_acquire) & kSatisfied);
    Holders predicted = 0;
    if (links)
      for (const SpawnLink& l : *links)
        if (l.access == i) predicted = merged(predicted, only(l.executor));
    if (a.mode != AccessMode::out && known) {
      const Holders h = predicted ? predicted
                        : is_weak_mode(a.mode) ? a.loc.holders.load(std::memory_order_acquire)
                                               : a.where->holders.load(std::memory_order_acquire);
      for_each_holder(h, [&](int r) {
        if (r >= size) return;
        score[r] += weight, any = true;
        if (weight > a.bytes) written[r] += a.bytes;
      });
    } else if (int r = as.affinity(a.address); r >= 0) {
      score[r] += weight;
      any = true;
    }
  }
  if (!any)
    return static_cast<int>(round_robin_.fetch_add(1, std::memory_order_relaxed) % static_cast<unsigned>(size));
  // A tie goes to the rank holding more of what the task updates (the update of a tile whose two inputs are on
  // another rank: the tile stays put, and so does the next update of it), then stays here.
  int best = rank;
  for (int r = 0; r < size; ++r)
    if (score[r] > score[best] || (score[r] == score[best] && written[r] > written[best])) best = r;
  return best;
}

void Cluster::run(Worker& w, Task* t) {
  ClusterTask& c = *t->cluster;
  if (c.sent_at_spawn) {  // its predecessors here have ended; its executor runs it (sent when it was spawned)
    end_body(w, t);
    return;
  }
  if (!c.data_ready) {
    if (t->cancelled.load(std::memory_order_relaxed)) {
      c.data_ready = true;  // a cancelled task moves no data and runs nowhere else
      if (c.role == ClusterTask::Role::received && !await_announced(t, c)) return;  // parked
    } else {
      if (c.executor < 0) c.executor = choose_executor(c);
      if (c.executor != rank) {
        offload(w, t, c);
        return;
      }
      if (!gather_data(w, t, c)) return;  // parked: the last transfer to arrive makes it ready again
    }
  }
  run_body(w, t);
  if (std::any_of(c.acc.get(), c.acc.get() + c.n_acc, [](const ClusterAccess& a) { return is_weak_mode(a.mode); }) &&
      !t->cancelled.load(std::memory_order_relaxed) && c.error.empty())
    watch_releases(w, t);
  end_body(w, t);
}

void Cluster::watch_releases(Worker& w, Task* t) {
  ClusterTask& c = *t->cluster;
  for (std::uint32_t i = 0; i < c.n_acc; ++i) {
    const ClusterAccess& a = c.acc[i];
    if (!is_weak_mode(a.mode)) continue;
    // Paper 004's "no eager send": the body has returned (every child is spawned), no child touches the datum,
    // and its satisfy message has not come: the creator need not send its bytes with it. (If they are on their
    // way already, the creator ignores this.)
    if (c.role == ClusterTask::Role::received && engine.options.eager_transfers && a.mode != AccessMode::weak_out &&
        a.weak_node && !(a.weak_state.load(std::memory_order_acquire) & kSatisfied) &&
        !children_accessed(t, a.address)) {
      const WireNoEager ne{c.creator_id, i};
      send(c.creator, k_no_eager_, as_bytes_of(ne));
    }
    // t completes after the node: counted before it is linked (a child's end may complete it at once).
    t->alive.fetch_add(kWeakUnit, std::memory_order_relaxed);
    bool ready;
    Task* n = follow_accessors(w, t, a.address, &kReleaseWatch, i, ready);  // (this thread owns t's domain)
    c.watchers.push_back(n);
    ++w.counters.internal_nodes;
    if (ready) weft::detail::complete(w, n);
  }
}

void Cluster::access_released(Worker& w, Task* t, std::uint32_t i, Task*& best, std::vector<Task*>& todo) {
  ClusterTask& c = *t->cluster;
  ClusterAccess& a = c.acc[i];
  if (a.weak_state.fetch_or(kReleased, std::memory_order_acq_rel) & kReleased) return;
  const Seen v = load(a.loc);
  if (c.role == ClusterTask::Role::received) {
    // Before the done message, on the same ordered channel: the creator applies it while the task is alive.
    const WireRelease r{c.creator_id, i, v.version, v.holders};
    send(c.creator, k_release_, as_bytes_of(r));
    return;
  }
  if (writes(a.mode))
    store(*a.where, v);
  else
    add_holders(a.where->holders, v.holders, std::memory_order_acq_rel);
  if (Task* r = release_node(t, a.address)) release_access(w, r, false, best, todo);
}

void Cluster::offload(Worker& w, Task* t, ClusterTask& c) {
  c.role = ClusterTask::Role::offloaded;
  // The task completes when its executor reports it done: a completion unit, as weft::Event takes.
  t->alive.fetch_add(kEventUnit, std::memory_order_relaxed);
  if (Task* p = t->parent) held_events(p).fetch_add(1, std::memory_order_relaxed);
  send_task(t, c, {});
  c.data_ready = true;
  end_body(w, t);
}

void Cluster::send_task(Task* t, ClusterTask& c, const std::vector<SpawnLink>& links) {
  const int dest = c.executor;
  const OffloadOps& ops = *c.ops;
  const void* closure = ops.inline_stored ? static_cast<const void*>(t->body) : *reinterpret_cast<void**>(t->body);
  if (c.seq == 0) c.seq = next_seq_.fetch_add(1, std::memory_order_relaxed);  // (numbered already: remote links)
  WireTask head{reinterpret_cast<std::uint64_t>(t),
                c.seq,
                code.encode(reinterpret_cast<const void*>(ops.invoke)),
                CodeAddress{},
                t->priority,
                c.n_acc,
                static_cast<std::uint32_t>(links.size()),
                static_cast<std::uint32_t>(ops.size),
                static_cast<std::uint32_t>(ops.align)};
  if (t->label) {
    try {
      head.label = code.encode(t->label);
    } catch (const std::invalid_argument&) {  // a label that is no literal: the executor's trace goes without
    }
  }
  const std::size_t links_at = c.n_acc * sizeof(WireAccess), closure_at = links_at + links.size() * sizeof(WireLink);
  std::vector<std::byte> payload(closure_at + ops.size);
  struct Eager {
    const void* address;
    std::size_t bytes;
    Version version;
    Location* reader_cell;  // an `in` access: the creator's cell names dest a holder once the task is sent
  };
  std::vector<Eager> eager_sends;
  for (std::uint32_t i = 0; i < c.n_acc; ++i) {
    ClusterAccess& a = c.acc[i];
    WireAccess wa{reinterpret_cast<std::uint64_t>(a.address), a.bytes, 0, static_cast<std::uint8_t>(a.mode), 0, 0};
    const Location* known = nullptr;  // where the datum is, if the task message can say
    if (is_weak_mode(a.mode)) {
      // Satisfied already (weak_ready ran): its holders go with the task. Otherwise they follow in a satisfy
      // message, which must not overtake the task's: kSent is set once the task message is queued (below).
      if (a.weak_state.load(std::memory_order_acquire) & kSatisfied) known = &a.loc;
    } else if (std::any_of(links.begin(), links.end(), [&](const SpawnLink& l) { return l.access == i; })) {
      wa.flags = kLinked;  // its holders are its predecessors' there, when they end
    } else {
      known = a.where;
    }
    if (known) {
      const Seen v = load(*known);
      Holders h = v.holders;
      wa.flags = kSatisfied;
      wa.version = v.version;
      if (sends_eagerly(a.mode, h, dest)) {
        const bool reads_only = a.mode == AccessMode::in || a.mode == AccessMode::weak_in;
        eager_sends.push_back({a.address, a.bytes, v.version, reads_only ? a.where : nullptr});
        h = merged(h, only(dest));  // it will have it: the executor waits for the data announced here
        wa.flags |= kEager;
      }
      wa.holders = h;
    }
    std::memcpy(payload.data() + i * sizeof(WireAccess), &wa, sizeof wa);
  }
  for (std::size_t k = 0; k < links.size(); ++k) {
    const WireLink l{links[k].pred_seq, links[k].access, links[k].executor != dest ? 1u : 0u};
    std::memcpy(payload.data() + links_at + k * sizeof(WireLink), &l, sizeof l);
  }
  std::memcpy(payload.data() + closure_at, closure, ops.size);
  // The executor runs its copy. Destroyed before the message leaves: a task sent at spawn (divert_spawn) may end,
  // and its descriptor be recycled, as soon as it has; nothing below reads t but the weak accesses of a task
  // offloaded when it ran, which cannot end before its body does.
  t->body_ops->destroy(t);
  const std::uint64_t seq = c.seq;
  const bool at_spawn = c.sent_at_spawn;
  {
    std::lock_guard<std::mutex> g(flight_m_);
    in_flight_[t] = {dest, seq, false, {}};
  }
  send(dest, k_task_, as_bytes_of(head), payload);
  // Only now may the creator's cells name dest a holder of the data sent eagerly: a task another thread sends
  // to dest on the strength of it then follows this message, whose arrival makes dest's tasks wait for the
  // bytes. (Named before the send, such a task could overtake this message and read dest's bytes before they
  // came.) Meanwhile a task for dest sees no copy there and is sent its own, an expected duplicate.
  for (const Eager& e : eager_sends)
    if (e.reader_cell) add_holders(e.reader_cell->holders, only(dest), std::memory_order_acq_rel);
  {
    // Out: tasks spawned from now on may be linked to it (their messages follow). The number tells it from a
    // task that reused its descriptor, had it ended meanwhile.
    std::lock_guard<std::mutex> g(flight_m_);
    if (auto it = in_flight_.find(t); it != in_flight_.end() && it->second.seq == seq) it->second.sent = true;
  }
  if (!at_spawn) {
    // Each weak access: from now on weak_ready sends its satisfy message itself; if it ran since the access
    // was written into the task message (not satisfied there), this thread sends it, after the task message.
    for (std::uint32_t i = 0; i < c.n_acc; ++i) {
      ClusterAccess& a = c.acc[i];
      if (!is_weak_mode(a.mode)) continue;
      WireAccess wa;
      std::memcpy(&wa, payload.data() + i * sizeof(WireAccess), sizeof wa);
      if ((a.weak_state.fetch_or(kSent, std::memory_order_acq_rel) & kSatisfied) && !(wa.flags & kSatisfied))
        send_satisfy(dest, seq, i, a);
    }
  }
  if (!eager_sends.empty()) {
    std::lock_guard<std::mutex> g(in_m_);
    for (const Eager& e : eager_sends) send_when_here_locked(dest, e.address, e.bytes, true, e.version);
  }
  offloaded.fetch_add(1, std::memory_order_relaxed);
}

void Cluster::send_satisfy(int dest, std::uint64_t seq, std::uint32_t i, const ClusterAccess& a) {
  const Seen v = load(a.loc);
  const bool eager =
      sends_eagerly(a.mode, v.holders, dest) && !(a.weak_state.load(std::memory_order_acquire) & kNoEager);
  const WireSatisfy sat{seq, i, v.version, eager ? merged(v.holders, only(dest)) : v.holders, eager};
  send(dest, k_satisfy_, as_bytes_of(sat));
  if (eager) {  // after the message that announces them, as with a task message
    {
      std::lock_guard<std::mutex> g(in_m_);
      send_when_here_locked(dest, a.address, a.bytes, true, v.version);
    }
    // A reader's copy: dest holds this version from now on for the parent's later children too (no second copy
    // for a sibling sent there), as send_task names it for an `in` access.
    if (a.mode == AccessMode::weak_in && a.where) add_holders(a.where->holders, only(dest), std::memory_order_acq_rel);
  }
}

void Cluster::send(int dest, comm::Kind k, std::span<const std::byte> header, std::span<const std::byte> payload) {
  transport.send(dest, k, header, payload, run_.load(std::memory_order_relaxed));
  progress_.fetch_add(1, std::memory_order_relaxed);
  // Out at this worker's next poll, right after its task, rather than after its next tasks (see flow/remote.cpp).
  if (Worker* w = tls_worker; w && !w->engine->progress_worker) {
    w->last_busy_poll = {};
    w->progress_countdown.store(1, std::memory_order_relaxed);
  }
}

void Cluster::send_data(int dest, const void* address, std::size_t bytes, bool eager, Version version) {
  const WireData d{reinterpret_cast<std::uint64_t>(address), bytes, version};
  // Borrowed: the bytes stay as they are until every task that needs this version has run, which includes the
  // one the transfer is for.
  transport.send(dest, k_data_, as_bytes_of(d), {static_cast<const std::byte*>(address), bytes}, [] {},
                 run_.load(std::memory_order_relaxed));
  (eager ? bytes_eager : bytes_lazy).fetch_add(bytes, std::memory_order_relaxed);
  if (Worker* w = tls_worker; w && !w->engine->progress_worker) {
    w->last_busy_poll = {};
    w->progress_countdown.store(1, std::memory_order_relaxed);
  }
}

// Several transfers of one datum may be in flight to a rank at once (two creators each sent it eagerly, say):
// all carry the same version, and the tasks waiting for the datum run only once every one has arrived, so that
// no transfer writes the bytes while a task reads them.
void Cluster::expect_locked(const void* address, Version version) {
  auto [it, fresh] = incoming_.try_emplace(address);
  it->second.version = version;
  transfers_awaited_.fetch_add(1, std::memory_order_relaxed);
  if (++it->second.expected == 0) {  // it had arrived before its announcement
    incoming_.erase(it);
    local_version_[address] = version;
  }
}

bool Cluster::wait_locked(const void* address, Task* t, std::atomic<int>* counter) {
  Incoming* in = in_flight_locked(address);
  if (!in) return false;
  if (t) in->tasks.push_back(t);
  if (counter) in->counters.push_back(counter);
  return true;
}

void Cluster::send_when_here_locked(int dest, const void* address, std::size_t bytes, bool eager, Version version) {
  if (Incoming* in = in_flight_locked(address); in && !valid_here_locked(address, version))
    in->forwards.push_back({dest, bytes, eager});
  else
    send_data(dest, address, bytes, eager, version);
}

void Cluster::fetch_to_here(const void* address, std::size_t bytes, Seen s, Task* t, std::atomic<int>* counter,
                            int prefer) {
  // Under in_m_: a transfer already on its way serves this too; else ask a holder. The creator of the task
  // whose view this is, if it is a holder: it has the bytes, or knows they are coming (it named itself only
  // after registering its own fetch, or got them announced by its own creator's task message), whereas a rank
  // the creator named when it sent it a copy may not have seen that message yet (messages from two ranks are
  // not ordered). Else the lowest-numbered holder.
  if (wait_locked(address, t, counter)) return;
  expect_locked(address, s.version);
  wait_locked(address, t, counter);
  const int from = prefer >= 0 && prefer < size && holds(s.holders, prefer) ? prefer : first_holder(s.holders);
  if (from < 0 || from >= size) comm::abort_job("weft::cluster: a datum has no holder (internal error)");
  incoming_[address].asked = from;
  const WireData d{reinterpret_cast<std::uint64_t>(address), bytes, s.version};
  send(from, k_fetch_, as_bytes_of(d));
}

bool Cluster::await_announced(Task* t, ClusterTask& c) {
  c.missing.store(1, std::memory_order_relaxed);  // one unit for this pass, as in gather_data
  {
    std::lock_guard<std::mutex> g(in_m_);
    for (std::uint32_t i = 0; i < c.n_acc; ++i) {
      const ClusterAccess& a = c.acc[i];
      if (is_weak_mode(a.mode)) continue;  // its node waits for its bytes
      if (wait_locked(a.address, t, nullptr))
        c.missing.fetch_add(1, std::memory_order_relaxed);  // an `in` access counted by the arrival
      else if (a.mode == AccessMode::in)
        ++readers_[a.address];  // as gather_data counts it (complete() uncounts every `in` access)
    }
  }
  c.reading = true;
  return c.missing.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

bool Cluster::gather_data(Worker& w, Task* t, ClusterTask& c) {
  (void)w;
  // One unit for this pass: the task cannot be made ready by an arrival before the pass has registered all.
  c.missing.store(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> g(in_m_);
    for (std::uint32_t i = 0; i < c.n_acc; ++i) {
      ClusterAccess& a = c.acc[i];
      if (is_weak_mode(a.mode)) continue;  // its children fetch what they use
      const bool received = c.role == ClusterTask::Role::received;
      const Seen v = received ? load(a.loc) : load(*a.where);
      const Holders h = v.holders;
      bool here = true;  // the bytes are that version here when the task runs (not on their way)
      if (writes(a.mode) && wait_locked(a.address, t, nullptr)) {
        // A task that writes the datum waits for every transfer of it on its way here, even of a version it
        // has or does not need (out): a copy whose announcement came before this rank had that version was
        // placed at the datum's address (its receive posted there), and would land over what the task writes.
        // (Several copies of one version come when several predecessors' ranks each send it with their link
        // satisfy message, or two creators each send it with a task.)
        here = false;
        c.missing.fetch_add(1, std::memory_order_relaxed);
      } else if (a.mode == AccessMode::out) {
        // Nothing to bring.
      } else if (valid_here_locked(a.address, v.version)) {
        // This rank has that version (its view may not say so: another task brought it): a transfer of it
        // still on its way lands in a scratch buffer, or in place with the same bytes (a reader's view).
        if (a.mode == AccessMode::in) ++readers_[a.address];
      } else if (!holds(h, rank)) {
        here = false;
        c.missing.fetch_add(1, std::memory_order_relaxed);
        fetch_to_here(a.address, a.bytes, v, t, nullptr, received ? c.creator : -1);  // a reader on arrival
        if (!received && a.mode == AccessMode::in) add_holders(a.where->holders, only(rank), std::memory_order_acq_rel);
      } else if (wait_locked(a.address, t, nullptr)) {
        here = false;
        c.missing.fetch_add(1, std::memory_order_relaxed);
      } else if (without(h, rank)) {
        // Named a holder, yet its bytes are not that version and no copy is on its way: the copy was announced
        // by a message still to come (a third rank passed the view on: A sends B a copy with a task and names B
        // a holder; A's view reaches C, whose task for B overtakes A's message). From another holder; the
        // announced copy, when it comes, is a duplicate.
        here = false;
        c.missing.fetch_add(1, std::memory_order_relaxed);
        fetch_to_here(a.address, a.bytes, {without(h, rank), v.version}, t, nullptr, received ? c.creator : -1);
      } else if (a.mode == AccessMode::in) {
        ++readers_[a.address];
      }
      if (writes(a.mode)) {
        store(a.loc, {only(rank), v.version + 1});
        // The task makes the next version here. Said now when the bytes are here (nothing reads the old version
        // from now on); when they are on their way, their arrival says their version, and the task's write makes
        // that stale: a shortcut lost, nothing more (nobody asks for the old version any more).
        if (here) local_version_[a.address] = v.version + 1;
      } else {
        store(a.loc, {merged(h, only(rank)), v.version});
      }
    }
  }
  c.data_ready = true;
  c.reading = true;
  if (c.missing.load(std::memory_order_relaxed) > 1) c.parked_at = std::chrono::steady_clock::now();
  return c.missing.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

void Cluster::make_ready(Task* t) {
  const auto waited = std::chrono::steady_clock::now() - t->cluster->parked_at;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count();
  data_wait_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
  Worker& w = *tls_worker;
  schedule(w, t);
}

void Cluster::arrived(const void* address, bool landed, Version version) {
  Incoming in;
  {
    std::lock_guard<std::mutex> g(in_m_);
    if (landed) local_version_[address] = version;
    transfers_awaited_.fetch_sub(1, std::memory_order_relaxed);
    Incoming& e = incoming_[address];
    if (--e.expected > 0) return;  // more of the same on the way
    if (e.expected < 0) return;    // announced later (its task's message is still to come)
    in = std::move(e);
    incoming_.erase(address);
    for (const Incoming::Forward& f : in.forwards) send_data(f.dest, address, f.bytes, f.eager, version);
    for (Task* t : in.tasks)
      for (std::uint32_t i = 0; i < t->cluster->n_acc; ++i) {
        const ClusterAccess& a = t->cluster->acc[i];
        if (a.address != address) continue;
        if (a.mode == AccessMode::in)
          ++readers_[address];
        else if (writes(a.mode))  // it runs next and writes the version its view names (gather_data)
          local_version_[address] = a.loc.version.load(std::memory_order_relaxed);
      }
  }
  // acq_rel: the bytes written by the transfer (on this thread) happen before the waiting task's run.
  for (Task* t : in.tasks)
    if (t->cluster->missing.fetch_sub(1, std::memory_order_acq_rel) == 1) make_ready(t);
  for (std::atomic<int>* c : in.counters) c->fetch_sub(1, std::memory_order_acq_rel);
  for (Task* node : in.weak_nodes) release_weak_node(node);
}

// ---------------------------------------------------------------------------------------------------------
// Completion: where the data is now
// ---------------------------------------------------------------------------------------------------------

bool Cluster::complete(Worker& w, Task* t, Task*& best, std::vector<Task*>& todo) {
  std::unique_ptr<ClusterTask> c(t->cluster);
  t->cluster = nullptr;
  const bool cancelled = t->cancelled.load(std::memory_order_relaxed);
  progress_.fetch_add(1, std::memory_order_relaxed);
  if (c->role == ClusterTask::Role::received) received_completed_.fetch_add(1, std::memory_order_relaxed);
  if (c->reading) {
    std::lock_guard<std::mutex> g(in_m_);
    for (std::uint32_t i = 0; i < c->n_acc; ++i) {
      if (c->acc[i].mode != AccessMode::in) continue;
      auto it = readers_.find(c->acc[i].address);
      if (it != readers_.end() && --it->second == 0) readers_.erase(it);
    }
  }
  for (Task* n : c->watchers) free_dependency_task(w, n);  // each has ended (t's alive waited for them)
  // Where its data is now (an offloaded task: as its done message said, even if it was cancelled here).
  if ((c->role == ClusterTask::Role::local && !cancelled) || c->role == ClusterTask::Role::offloaded) {
    for (std::uint32_t i = 0; i < c->n_acc; ++i) {
      const ClusterAccess& a = c->acc[i];
      if (a.weak_state.load(std::memory_order_relaxed) & kReleased) continue;  // applied by access_released
      if (writes(a.mode))
        store(*a.where, load(a.loc));
      else
        add_holders(a.where->holders, a.loc.holders.load(std::memory_order_acquire), std::memory_order_acq_rel);
    }
  }
  if (c->role != ClusterTask::Role::received) {
    // The release nodes of the accesses not released yet (a failed or cancelled task's: cancelled too).
    for (std::uint32_t i = 0; i < c->n_acc; ++i) {
      ClusterAccess& a = c->acc[i];
      if (!is_weak_mode(a.mode)) continue;
      Task* r = release_node(t, a.address);
      if (r && !(a.weak_state.fetch_or(kReleased, std::memory_order_acq_rel) & kReleased))
        release_access(w, r, cancelled, best, todo);
    }
    return complete_dependency(w, t, best, todo);
  }

  // A received task: report to its creator (the error of its body, else of a child its body did not rethrow),
  // then free it: it is named by no record here.
  if (std::exception_ptr e = take_child_error(w, t); e && c->error.empty()) c->error = describe(e);
  const bool failed = cancelled || !c->error.empty();
  std::vector<RemoteSuccessor> served;  // told of its end from here (the done message names them)
  {
    // Under received_m_ with the erasure: a task received from now on that links to this one finds it ended
    // (ended_tasks_); one received before is in local_successors and waits on an edge (released below).
    std::lock_guard<std::mutex> g(received_m_);
    const std::uint64_t key = received_key(c->creator, c->seq);
    received_.erase(key);
    served = std::move(c->remote_successors);  // a connect message from now on finds it ended
    for (const LocalSuccessor& s : c->local_successors) {
      // Read by the successor once its edge is released (the release orders it). Several predecessors of one
      // access are readers of one version: their holders add up.
      Location& to = s.succ->cluster->acc[s.succ_access].loc;
      for (std::uint32_t i = 0; i < c->n_acc; ++i)
        if (c->acc[i].address == s.address) {
          const Seen v = load(c->acc[i].loc);
          to.version.store(v.version, std::memory_order_relaxed);
          add_holders(to.holders, v.holders, std::memory_order_relaxed);
        }
      if (failed) s.succ->cancelled.store(true, std::memory_order_relaxed);  // as a failed predecessor does
    }
    Ended e;
    e.failed = failed;
    for (std::uint32_t i = 0; i < c->n_acc; ++i) {
      const Seen v = load(c->acc[i].loc);
      if (writes(c->acc[i].mode) && !holds(v.holders, rank)) e.moved.push_back({c->acc[i].address, v});
    }
    if (e.failed || !e.moved.empty()) ended_tasks_[key] = std::move(e);
  }
  const std::size_t served_at = c->n_acc * sizeof(WireLocation), error_at = served_at + served.size() * sizeof(WireServed);
  std::vector<std::byte> payload(error_at + c->error.size());
  for (std::uint32_t i = 0; i < c->n_acc; ++i) {
    const Seen v = load(c->acc[i].loc);
    const WireLocation l{v.holders, v.version};
    std::memcpy(payload.data() + i * sizeof(WireLocation), &l, sizeof l);
  }
  for (std::size_t k = 0; k < served.size(); ++k) {
    const WireServed x{served[k].succ_seq, served[k].succ_access};
    std::memcpy(payload.data() + served_at + k * sizeof x, &x, sizeof x);
  }
  if (!c->error.empty())  // (an empty payload has no storage: memcpy would be handed a null pointer)
    std::memcpy(payload.data() + error_at, c->error.data(), c->error.size());
  const WireDone d{c->creator_id, c->n_acc, static_cast<std::uint32_t>(c->error.size()),
                   static_cast<std::uint32_t>(served.size())};
  // Before the successors linked here are released: the creator must see this task end before them.
  send(c->creator, k_done_, as_bytes_of(d), payload);
  // The successors on other ranks: straight to their rank (paper 004's satisfiability message), with the bytes
  // when this rank holds them. Several accesses of this task to the datum: readers of one version, or the
  // last one's version (as for the local successors above).
  for (const RemoteSuccessor& s : served) {
    Seen v = final_location(*c, s.address);
    if (s.dest_holds && s.dest_version == v.version) v.holders = merged(v.holders, only(s.dest));  // no copy: it has one
    send_link_satisfy(s.dest, c->creator, s.succ_seq, s.succ_access, s.mode, s.address, s.bytes, v, failed);
  }
  const bool counted = complete_dependency(w, t, best, todo);
  free_dependency_task(w, t);
  return counted;
}

void Cluster::weak_ready(Worker& w, Task* t, Task* node) {
  (void)w;
  ClusterTask& c = *t->cluster;
  // A received task's holders come with on_satisfy, before it releases the node. (Its accesses have no parent's
  // cell: fixed at creation, unlike `role`, which the task's run may change meanwhile.)
  if (c.n_acc && !c.acc[0].where) return;
  // The node's link was written before the node was linked (so before this call), like every link before it;
  // the registration may still be adding later ones (and counting them in n_weak): scan up to ours only.
  std::uint8_t k = 0;
  while (t->weak[k].node != node) ++k;
  {
    for (std::uint32_t i = 0; i < c.n_acc; ++i) {
      ClusterAccess& a = c.acc[i];
      if (a.address != t->weak[k].address || !is_weak_mode(a.mode)) continue;
      // The datum's predecessors have finished: the parent's cell names its latest version.
      const Seen v = load(*a.where);
      store(a.loc, v);
      if (a.weak_state.fetch_or(kSatisfied, std::memory_order_acq_rel) & kSent) send_satisfy(c.executor, c.seq, i, a);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Waits: the flush
// ---------------------------------------------------------------------------------------------------------

void Cluster::after_wait(Worker& w, Task* t, const void* address, bool flush) {
  ClusterTask& c = *t->cluster;
  std::atomic<int> pending{1};
  auto bring = [&](const void* a, Location* cell, std::size_t bytes) {  // under in_m_
    const Seen v = load(*cell);
    if (valid_here_locked(a, v.version)) {  // here already (whatever the view says)
      add_holders(cell->holders, only(rank), std::memory_order_acq_rel);
    } else if (!holds(v.holders, rank)) {
      pending.fetch_add(1, std::memory_order_relaxed);
      fetch_to_here(a, bytes, v, nullptr, &pending, c.role == ClusterTask::Role::received ? c.creator : -1);
      add_holders(cell->holders, only(rank), std::memory_order_acq_rel);
      flushes.fetch_add(1, std::memory_order_relaxed);
    } else if (wait_locked(a, nullptr, &pending)) {
      pending.fetch_add(1, std::memory_order_relaxed);
    } else if (without(v.holders, rank)) {  // named a holder too early (see gather_data)
      pending.fetch_add(1, std::memory_order_relaxed);
      fetch_to_here(a, bytes, {without(v.holders, rank), v.version}, nullptr, &pending,
                    c.role == ClusterTask::Role::received ? c.creator : -1);
      flushes.fetch_add(1, std::memory_order_relaxed);
    }
  };
  // The task's own strong writes (out, inout) of the data this wait brings: its body may write them from now
  // on, after its children, so once they are here it makes their next version, here only (as gather_data says
  // when a writer starts). Without it the children's ranks would keep counting as holders of the latest
  // version, and a later reader there would read the bytes from before that write.
  std::vector<ClusterAccess*> written;
  auto writable = [](const ClusterAccess& a) { return writes(a.mode) && !is_weak_mode(a.mode); };
  {
    std::lock_guard<std::mutex> g(in_m_);
    if (address) {  // taskwait_on(x): x, whether or not a child touched it since the last wait
      for (std::uint32_t i = 0; i < c.n_acc; ++i)
        if (c.acc[i].address == address) {
          bring(address, &c.acc[i].loc, c.acc[i].bytes);
          if (writable(c.acc[i])) written.push_back(&c.acc[i]);
        }
      if (auto it = c.cells.find(address); it != c.cells.end()) bring(address, &it->second->loc, it->second->bytes);
    } else {
      if (flush)  // what a child accessed since the last flushing wait (the loop below brings exactly those)
        for (std::uint32_t i = 0; i < c.n_acc; ++i)
          if (c.acc[i].touched.listed && writable(c.acc[i])) written.push_back(&c.acc[i]);
      // taskwait: what the children accessed since the last taskwait (a taskwait_noflush in between moves
      // nothing); the end of rank 0's run: since the last wait of either kind (a body that ends with
      // taskwait_noflush leaves its data where it is), and the next run starts afresh. taskwait_noflush: the
      // cells stay listed (once each) for the next taskwait.
      for (const ClusterTask::Touched& x : c.touched) {
        if (flush && (!c.ending_run || x.mark->since_wait)) bring(x.address, x.cell, *x.bytes);
        x.mark->since_wait = false;
        if (flush) x.mark->listed = false;
      }
      if (flush) c.touched.clear();
    }
  }
  if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    const auto start = std::chrono::steady_clock::now();
    wait_until(w, [&] { return pending.load(std::memory_order_acquire) == 0; });
    flush_wait_ns.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - start).count()),
                            std::memory_order_relaxed);
  }
  if (written.empty()) return;
  std::lock_guard<std::mutex> g(in_m_);
  for (ClusterAccess* a : written) {  // every transfer of them here has arrived (the wait above)
    const Version next = load(a->loc).version + 1;
    store(a->loc, {only(rank), next});
    local_version_[a->address] = next;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Handlers (on the polling thread, under the progress token)
// ---------------------------------------------------------------------------------------------------------

bool Cluster::keep_if_early(const comm::Message& m) {
  // Every message of a run reaches its rank before the run ends there (see Runs): one of a run this rank has
  // left is a protocol error, not something to keep (it would never be dispatched).
  // The messages of a Runtime's destruction (settle_address_space), whatever run this rank is in: a leave
  // message may come while this rank ends its last run.
  if (m.kind() == k_leave_) return false;
  if (closing_.load(std::memory_order_acquire) && (m.kind() == k_region_ || m.kind() == k_lfree_)) return false;
  const std::uint32_t run = run_.load(std::memory_order_relaxed);
  const auto age = static_cast<std::int32_t>(run - m.epoch());
  const bool ended_here = age > 0 || (age == 0 && run != 0 && !running_.load(std::memory_order_relaxed));
  // But a connect message (from a creator other than rank 0, whose channel to this rank is not ordered with rank
  // 0's end message): its predecessor has ended, and its creator told the successor itself (on_done).
  if (ended_here && m.kind() == k_connect_) return true;
  // And an lfree message sent late in a run (or between runs) that rank 0 had ended: noted for its next run.
  if (ended_here && m.kind() == k_lfree_) {
    on_lfree(m);
    return true;
  }
  if (ended_here)
    comm::abort_job("weft::cluster: rank " + std::to_string(rank) + " got a message (" +
                    transport.kind_name(m.kind()) + ") of run " + std::to_string(m.epoch()) + " from rank " +
                    std::to_string(m.source()) + " after that run ended here (a protocol error)");
  if (!early(m)) return false;
  Kept k{m.kind(), m.source(), m.epoch(), {m.header().begin(), m.header().end()},
         {m.payload().begin(), m.payload().end()}};
  kept_.push_back(std::move(k));
  if (!m.payload().empty()) early_buffers_.erase(m.payload().data());  // copied: its placed buffer, if any
  return true;
}

std::span<std::byte> Cluster::place_data(const comm::Message& m) {
  const WireData d = read_header<WireData>(m);
  if (early(m)) {
    // A run this rank has not begun: into a buffer of ours, kept with the message (keep_if_early).
    auto buf = std::make_unique<std::byte[]>(m.payload_size());
    std::span<std::byte> out{buf.get(), m.payload_size()};
    early_buffers_.emplace(buf.get(), std::move(buf));
    return out;
  }
  bool duplicate;
  {
    std::lock_guard<std::mutex> g(in_m_);
    duplicate = duplicate_locked(reinterpret_cast<const void*>(d.address), d.version);
  }
  if (duplicate) {  // tasks here read the datum, or the bytes are that version: to a scratch buffer
    auto buf = std::make_unique<std::byte[]>(m.payload_size());
    std::span<std::byte> out{buf.get(), m.payload_size()};
    early_buffers_.emplace(buf.get(), std::move(buf));
    return out;
  }
  return {reinterpret_cast<std::byte*>(d.address), m.payload_size()};
}

void Cluster::on_data(const comm::Message& m) {
  const WireData d = read_header<WireData>(m);
  auto* dst = reinterpret_cast<std::byte*>(d.address);
  bool landed = true;  // placed at its address (place_data)
  if (m.payload().data() != dst) {
    {
      std::lock_guard<std::mutex> g(in_m_);
      landed = !duplicate_locked(dst, d.version);
    }
    if (landed) std::memcpy(dst, m.payload().data(), m.payload().size());
    if (!early_buffers_.empty()) early_buffers_.erase(m.payload().data());
  }
  arrived(dst, landed, d.version);
}

void Cluster::on_fetch(const comm::Message& m) {
  const WireData d = read_header<WireData>(m);
  std::lock_guard<std::mutex> g(in_m_);
  send_when_here_locked(m.source(), reinterpret_cast<const void*>(d.address), d.bytes, false, d.version);
}

void Cluster::on_task(const comm::Message& m) {
  Worker& w = *tls_worker;
  const WireTask head = read_header<WireTask>(m);
  Task* root = root_.load(std::memory_order_acquire);
  auto c = std::make_unique<ClusterTask>();
  c->role = ClusterTask::Role::received;
  c->creator = m.source();
  c->creator_id = head.id;
  c->seq = head.seq;
  c->executor = rank;
  c->n_acc = head.n_acc;
  c->acc = std::make_unique<ClusterAccess[]>(head.n_acc);
  const std::byte* p = m.payload().data();
  const std::size_t links_at = head.n_acc * sizeof(WireAccess), closure_at = links_at + head.n_links * sizeof(WireLink);
  if (m.payload().size() < closure_at + head.closure_size)
    comm::abort_job("weft::cluster: a malformed task message from rank " + std::to_string(m.source()));
  std::uint32_t n_weak = 0;
  {
    std::lock_guard<std::mutex> g(in_m_);
    for (std::uint32_t i = 0; i < head.n_acc; ++i) {
      WireAccess wa;
      std::memcpy(&wa, p + i * sizeof wa, sizeof wa);
      ClusterAccess& a = c->acc[i];
      a.address = reinterpret_cast<const void*>(wa.address);
      a.bytes = wa.bytes;
      a.mode = static_cast<AccessMode>(wa.mode);
      store(a.loc, {wa.holders, wa.version});
      if (is_weak_mode(a.mode) && (wa.flags & (kSatisfied | kEager)) != kSatisfied) ++n_weak;
      if (wa.flags & kSatisfied) a.weak_state.store(kSatisfied, std::memory_order_relaxed);  // (watch_releases)
      // Eager: the creator held the datum, named this rank a holder and sends the bytes right after this
      // message; the task (and any other here that needs the datum) waits for them.
      if (wa.flags & kEager) expect_locked(a.address, wa.version);
    }
  }
  // The body: the closure's bytes in storage of their own, run by the code the creator named.
  void* closure = ::operator new(std::max<std::size_t>(head.closure_size, 1), std::align_val_t(head.closure_align));
  std::memcpy(closure, p + closure_at, head.closure_size);
  auto invoke = reinterpret_cast<void (*)(void*, Context&)>(const_cast<void*>(code.decode(head.code)));
  ReceivedBody body(invoke, closure, head.closure_align, c.get());
  Task* t = w.allocate();
  init_task(w, t, root, &kClusterTask);
  install_body(t, std::move(body));
  t->priority = head.priority;
  t->label = static_cast<const char*>(code.decode(head.label));
  t->pending.store(0, std::memory_order_relaxed);
  // Weak accesses not satisfied yet: a node each, which the satisfy message releases; the task's children
  // accessing the datum wait on it (new_record), and the task completes only after it. A satisfied one whose
  // bytes come eagerly and have not arrived: a node that their arrival releases (a child that writes the datum,
  // which waits for no transfer, must not write it before the older bytes land).
  if (n_weak) {
    t->weak = new WeakLink[n_weak];
    for (std::uint32_t i = 0; i < c->n_acc; ++i) {
      ClusterAccess& a = c->acc[i];
      WireAccess wa;
      std::memcpy(&wa, p + i * sizeof wa, sizeof wa);
      if (!is_weak_mode(a.mode) || (wa.flags & (kSatisfied | kEager)) == kSatisfied) continue;
      std::unique_lock<std::mutex> g(in_m_, std::defer_lock);
      Incoming* bytes = nullptr;
      if (wa.flags & kSatisfied) {
        g.lock();  // held until the node waits: the arrival (another thread's poll) then releases it
        bytes = in_flight_locked(a.address);
        if (!bytes) continue;  // here already
      }
      Task* node = w.allocate();
      init_task(w, node, t, &kWeakNode);
      node->pending.store(1, std::memory_order_relaxed);
      node->n_edges = 2;  // released with the atomic decrement (never the single-predecessor shortcut)
      a.weak_node = node;
      t->weak[t->n_weak++] = WeakLink{a.address, node};
      t->alive.fetch_add(kWeakUnit, std::memory_order_relaxed);
      ++w.counters.internal_nodes;
      if (bytes) bytes->weak_nodes.push_back(node);
    }
  }
  t->cluster = c.get();
  // Links (a task sent at spawn, see divert_spawn): each of its accesses that waits for tasks its creator sent here
  // before. One still here gets an edge to it (its end releases this task, here, with no message), and a
  // LocalSuccessor entry (its end gives this access its holders). One that has ended left its data here,
  // unless ended_tasks_ says otherwise.
  std::uint32_t edges = 0, remote = 0;  // remote: link satisfy messages still to come
  {
    std::lock_guard<std::mutex> g(received_m_);
    const std::uint64_t self_key = received_key(m.source(), head.seq);
    received_[self_key] = {t, c.get()};
    if (head.n_links > kInlineEdges) t->extra_edges = alloc_edges(w, head.n_links);
    EdgeNode* nodes = head.n_links > kInlineEdges ? t->extra_edges : t->edges;
    for (std::uint32_t k = 0; k < head.n_links; ++k) {
      WireLink l;
      std::memcpy(&l, p + links_at + k * sizeof l, sizeof l);
      if (l.access >= head.n_acc) comm::abort_job("weft::cluster: a malformed link from rank " + std::to_string(m.source()));
      if (l.remote) {  // its rank tells this one when it ends
        ++remote;
        continue;
      }
      ClusterAccess& a = c->acc[l.access];
      const std::uint64_t key = received_key(m.source(), l.pred_seq);
      if (auto it = received_.find(key); it != received_.end()) {
        auto [pred, pred_state] = it->second;
        pred_state->local_successors.push_back({t, l.access, a.address});
        EdgeNode* e = &nodes[edges++];
        e->succ = t;
        // Never closed here: pred closes its successor list only after leaving received_ (under this lock).
        // Release: pred's completion acquires the node with its exchange.
        std::uintptr_t h = pred->succ_head.load(std::memory_order_relaxed);
        do {
          WEFT_ASSERT(h != kClosed);
          e->next = reinterpret_cast<EdgeNode*>(h);
        } while (!pred->succ_head.compare_exchange_weak(h, reinterpret_cast<std::uintptr_t>(e),
                                                        std::memory_order_release, std::memory_order_relaxed));
        ++w.counters.edges_created;
      } else {
        // Here: its version is what this rank's bytes are (a datum of rank 0's program, never moved: 0).
        Seen v{only(rank), 0};
        {
          std::lock_guard<std::mutex> gi(in_m_);  // (in_m_ is never held while received_m_ is taken)
          if (auto lv = local_version_.find(a.address); lv != local_version_.end()) v.version = lv->second;
        }
        if (auto e = ended_tasks_.find(key); e != ended_tasks_.end()) {
          if (e->second.failed) t->cancelled.store(true, std::memory_order_relaxed);
          for (const Ended::Moved& x : e->second.moved)
            if (x.address == a.address) v = x.where;
        }
        a.loc.version.store(v.version, std::memory_order_relaxed);
        add_holders(a.loc.holders, v.holders, std::memory_order_relaxed);
      }
    }
    if (remote)
      if (auto it = early_links_.find(self_key); it != early_links_.end()) {
        for (const WireLinkSatisfy& s : it->second) {
          if (remote == 0) comm::abort_job("weft::cluster: a link satisfy message for a task without that link");
          apply_link_satisfy_locked(t, s, false);
          --remote;
        }
        early_links_.erase(it);
      }
    // Counted before the lock is left: a predecessor may end right after. More than one: released with the
    // atomic decrement (the single-predecessor shortcut only for one edge here).
    t->pending.store(static_cast<std::int32_t>(edges + remote), std::memory_order_relaxed);
    t->n_edges = edges + remote;
  }
  c.release();
  received.fetch_add(1, std::memory_order_relaxed);
  count_new_child(w, root);
  ++w.counters.tasks_created;
  if (edges + remote == 0) schedule(w, t);
}

void Cluster::on_satisfy(const comm::Message& m) {
  const WireSatisfy s = read_header<WireSatisfy>(m);
  Task* t;
  {
    std::lock_guard<std::mutex> g(received_m_);
    auto it = received_.find(received_key(m.source(), s.seq));
    if (it == received_.end()) comm::abort_job("weft::cluster: a satisfy message for an unknown task");
    t = it->second.first;
  }
  ClusterAccess& a = t->cluster->acc[s.index];
  a.weak_state.fetch_or(kSatisfied, std::memory_order_acq_rel);  // (watch_releases: too late for no eager send)
  Task* node = a.weak_node;
  if (s.eager) {
    // The bytes follow. The node waits for them too, so that the task, which completes after its nodes, has
    // nothing of the run in flight to it when it reports done, even if none of its children read the datum.
    std::lock_guard<std::mutex> g(in_m_);
    expect_locked(a.address, s.version);
    if (Incoming* in = in_flight_locked(a.address)) {
      node->pending.fetch_add(1, std::memory_order_relaxed);  // ours is still to come: no decrement yet
      in->weak_nodes.push_back(node);
    }
  }
  store(a.loc, {s.holders, s.version});
  release_weak_node(node);
}

ClusterAccess& Cluster::named_access(const comm::Message& m, std::uint64_t id, std::uint32_t index) {
  Task* t = reinterpret_cast<Task*>(id);  // alive: its done message comes after this one
  ClusterTask& c = *t->cluster;
  if (index >= c.n_acc)
    comm::abort_job("weft::cluster: a malformed message (" + transport.kind_name(m.kind()) + ") from rank " +
                    std::to_string(m.source()));
  return c.acc[index];
}

void Cluster::on_no_eager(const comm::Message& m) {
  const WireNoEager ne = read_header<WireNoEager>(m);
  named_access(m, ne.id, ne.index).weak_state.fetch_or(kNoEager, std::memory_order_acq_rel);  // see send_satisfy
}

void Cluster::on_connect(const comm::Message& m) {
  const WireConnect x = read_header<WireConnect>(m);
  if (x.dest < 0 || x.dest >= size || x.dest == rank)
    comm::abort_job("weft::cluster: a malformed message (" + transport.kind_name(m.kind()) + ") from rank " +
                    std::to_string(m.source()));
  std::lock_guard<std::mutex> g(received_m_);
  // The predecessor's task message came before this one (same channel). Not here any more: it has ended, and
  // its done message did not name this successor, which its creator therefore tells itself (on_done).
  auto it = received_.find(received_key(m.source(), x.pred_seq));
  if (it == received_.end()) return;
  it->second.second->remote_successors.push_back({x.dest, x.succ_seq, x.succ_access, static_cast<AccessMode>(x.mode),
                                                  reinterpret_cast<const void*>(x.address), x.bytes,
                                                  x.dest_holds != 0, x.dest_version});
}

void Cluster::send_link_satisfy(int dest, int creator, std::uint64_t succ_seq, std::uint32_t access, AccessMode mode,
                                const void* address, std::size_t bytes, Seen v, bool failed) {
  // Eager only from bytes that are that version here now (a rank named a holder may still wait for them).
  std::lock_guard<std::mutex> g(in_m_);
  const bool eager = !failed && sends_eagerly(mode, v.holders, dest) && valid_here_locked(address, v.version);
  const WireLinkSatisfy s{succ_seq,  reinterpret_cast<std::uint64_t>(address),
                          creator,   access,
                          eager ? merged(v.holders, only(dest)) : v.holders,
                          v.version, static_cast<std::uint8_t>(eager),
                          static_cast<std::uint8_t>(failed)};
  send(dest, k_link_satisfy_, as_bytes_of(s));
  if (eager) send_data(dest, address, bytes, true, v.version);  // after the message that announces them
}

bool Cluster::apply_link_satisfy_locked(Task* t, const WireLinkSatisfy& s, bool count) {
  ClusterTask& c = *t->cluster;
  if (s.succ_access >= c.n_acc || c.acc[s.succ_access].address != reinterpret_cast<const void*>(s.address))
    comm::abort_job("weft::cluster: a malformed link satisfy message (the task's access differs)");
  // Read by the task once its count reaches zero (the decrement orders it). Several predecessors of one access
  // are readers of one version: their holders add up.
  Location& to = c.acc[s.succ_access].loc;
  to.version.store(s.version, std::memory_order_relaxed);
  add_holders(to.holders, s.holders, std::memory_order_relaxed);
  if (s.failed) t->cancelled.store(true, std::memory_order_relaxed);  // as a failed predecessor does
  return count && t->pending.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

void Cluster::on_link_satisfy(const comm::Message& m) {
  const WireLinkSatisfy s = read_header<WireLinkSatisfy>(m);
  if (s.creator < 0 || s.creator >= size)
    comm::abort_job("weft::cluster: a malformed message (" + transport.kind_name(m.kind()) + ") from rank " +
                    std::to_string(m.source()));
  if (s.eager) {  // the bytes follow this message: whatever needs the datum here waits for them
    std::lock_guard<std::mutex> g(in_m_);
    expect_locked(reinterpret_cast<const void*>(s.address), s.version);
  }
  Task* ready = nullptr;
  {
    std::lock_guard<std::mutex> g(received_m_);
    const std::uint64_t key = received_key(s.creator, s.succ_seq);
    if (auto it = received_.find(key); it == received_.end())
      early_links_[key].push_back(s);  // its task message is still to come (from its creator)
    else if (apply_link_satisfy_locked(it->second.first, s, true))
      ready = it->second.first;
  }
  if (ready) schedule(*tls_worker, ready);
}

void Cluster::on_release(const comm::Message& m) {
  const WireRelease r = read_header<WireRelease>(m);
  Task* t = reinterpret_cast<Task*>(r.id);
  ClusterAccess& a = named_access(m, r.id, r.index);
  if (a.weak_state.fetch_or(kReleased, std::memory_order_acq_rel) & kReleased) return;
  if (writes(a.mode))
    store(*a.where, {r.holders, r.version});
  else
    add_holders(a.where->holders, r.holders, std::memory_order_acq_rel);
  if (Task* rn = release_node(t, a.address)) release_weak_node(rn);
}

void Cluster::release_weak_node(Task* node) {
  if (node->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Worker& w = *tls_worker;
  weft::detail::complete(w, node);
  if (Task* n = w.next) {  // queued where any worker can take it: this is a poll, not the end of a task
    w.next = nullptr;
    schedule(w, n);
  }
}

void Cluster::on_done(const comm::Message& m) {
  const WireDone d = read_header<WireDone>(m);
  Task* t = reinterpret_cast<Task*>(d.id);
  ClusterTask& c = *t->cluster;
  const std::size_t served_at = c.n_acc * sizeof(WireLocation), error_at = served_at + d.n_served * sizeof(WireServed);
  if (d.n_acc != c.n_acc || m.payload().size() < error_at + d.error_size)
    comm::abort_job("weft::cluster: a malformed message (" + transport.kind_name(m.kind()) + ") from rank " +
                    std::to_string(m.source()));
  std::vector<InFlight::RemoteLink> remote;
  {
    std::lock_guard<std::mutex> g(flight_m_);
    // Tasks spawned from now on wait for it here (it ends below, or soon).
    if (auto it = in_flight_.find(t); it != in_flight_.end()) {
      remote = std::move(it->second.remote);
      in_flight_.erase(it);
    }
  }
  const std::byte* p = m.payload().data();
  // Where its data is now: applied to the parent's cells when it completes here (complete), after its
  // predecessors here. Its done message may come before theirs: a predecessor on a third rank told its executor
  // directly (a remote link).
  for (std::uint32_t i = 0; i < c.n_acc; ++i) {
    WireLocation l;
    std::memcpy(&l, p + i * sizeof l, sizeof l);
    ClusterAccess& a = c.acc[i];
    if (a.weak_state.load(std::memory_order_relaxed) & kReleased) continue;  // applied by on_release
    store(a.loc, {l.holders, l.version});
  }
  // Its successors on other ranks whose connect message came after it had ended there: told from here.
  for (const InFlight::RemoteLink& r : remote) {
    bool told = false;
    for (std::uint32_t k = 0; k < d.n_served && !told; ++k) {
      WireServed x;
      std::memcpy(&x, p + served_at + k * sizeof x, sizeof x);
      told = x.succ_seq == r.succ_seq && x.succ_access == r.access;  // (a task may link to it for two data)
    }
    if (told) continue;
    const Seen v = final_location(c, r.address);
    send_link_satisfy(r.dest, rank, r.succ_seq, r.access, r.mode, r.address, r.bytes, v,
                      d.error_size != 0 || t->cancelled.load(std::memory_order_relaxed));
  }
  std::exception_ptr error;
  if (d.error_size)
    error = std::make_exception_ptr(
        remote_error(m.source(), std::string(reinterpret_cast<const char*>(p + error_at), d.error_size)));
  done_received_.fetch_add(1, std::memory_order_relaxed);
  fulfill_event(engine, t, error);
}

void Cluster::on_end(const comm::Message& m) { ended_.store(m.epoch(), std::memory_order_release); }

void Cluster::on_begin(const comm::Message&) {
  begun_.store(true, std::memory_order_relaxed);
  dispatch_kept();
}

void Cluster::dispatch_kept() {
  std::deque<Kept> kept = std::move(kept_);
  kept_.clear();
  for (Kept& k : kept) {
    const comm::Message m(k.source, k.kind, k.epoch, k.header, k.payload, k.payload.size());
    if (early(m)) {
      kept_.push_back(std::move(k));  // a later run's, or another rank's before rank 0's begin
      continue;
    }
    dispatch(k.kind, m);  // (a begin among them dispatches the ones kept before it, in their order)
  }
}

void Cluster::on_region(const comm::Message& m) {
  const WireRegion r = read_header<WireRegion>(m);
  AddressSpace& as = AddressSpace::get();
  if (r.remove) {
    as.remove_region(r.start);
    as.release_pages(reinterpret_cast<void*>(r.start), r.bytes);
    forget_versions(r.start, r.bytes);
    // A block this rank lfree'd: every rank handles this removal before any message of this run from a third
    // rank (see publish_lfrees), and this rank's messages naming the addresses anew are of this run or later.
    if (as.local_owner(reinterpret_cast<const void*>(r.start)) == rank) as.reuse_local(r.start);
    return;
  }
  Distribution dist;
  dist.kind = static_cast<Distribution::Kind>(r.kind);
  dist.block = r.block;
  dist.rank_of = reinterpret_cast<int (*)(std::size_t, std::size_t, int)>(const_cast<void*>(code.decode(r.rank_of)));
  as.add_region({r.start, r.bytes, dist});
}

// Sent with the next run (at its start, before any task of it): a message sent between runs would wait for a
// poll that may never come (the last run is over), and its transport could not be closed.
void Cluster::publish_region(const WireRegion& r) {
  std::lock_guard<std::mutex> g(regions_m_);
  regions_.push_back(r);
  if (running_.load(std::memory_order_acquire) && tls_worker) send_regions_locked();  // inside the run: now
}

void Cluster::send_regions() {
  std::lock_guard<std::mutex> g(regions_m_);
  send_regions_locked();
}

void Cluster::send_regions_locked() {
  for (const WireRegion& r : regions_)
    for (int d = 1; d < size; ++d)
      transport.send(d, k_region_, as_bytes_of(r), {}, run_.load(std::memory_order_relaxed));
  regions_.clear();
}

void Cluster::forget(std::uintptr_t start, std::size_t bytes) {
  auto inside = [&](const void* a) {
    const auto x = reinterpret_cast<std::uintptr_t>(a);
    return x >= start && x < start + bytes;
  };
  std::erase_if(root_state.touched, [&](const ClusterTask::Touched& t) { return inside(t.address); });
  std::erase_if(root_state.cells, [&](const auto& c) { return inside(c.first); });
  forget_versions(start, bytes);
}

void Cluster::local_freed(std::uintptr_t start, std::size_t bytes) {
  std::lock_guard<std::mutex> g(regions_m_);
  if (rank != 0 && running_.load(std::memory_order_acquire)) {
    const WireRegion r{start, bytes, 0, {}, 0, 1};
    send(0, k_lfree_, as_bytes_of(r));
  } else {
    lfreed_.emplace_back(start, bytes);
  }
}

// Changes to the common address space travel at the start of a run, so the last ones would wait for a run that
// never comes: the lmalloc blocks another rank freed between runs (told at its last run's start, which may
// reach rank 0 after rank 0 ended that run) or after its last run, and rank 0's dmalloc, dfree and lfree since
// its last run's start. Without this step their addresses would never be allocated again (the address space
// outlives the Runtime) and the other ranks would keep their pages. Every rank sends rank 0 what it freed, then
// a leave message; rank 0, once it has every leave message (each pair's messages keep their order), publishes
// the changes as at a run's start and answers with its own leave message, after which every rank has applied
// them.
void Cluster::settle_address_space() {
  // Release / acquire: the handlers run in transport.poll, on this thread or on a communication thread.
  closing_.store(true, std::memory_order_release);
  // A rank that ended its program without destroying its cluster Runtime never sends its leave: the check ends
  // the job with a line naming it (comm::MpiEnv::check_during_teardown).
  auto wait_for_leaves = [&](int n) {
    poll_until([&] {
      if (leaves_.load(std::memory_order_acquire) >= n) return true;
      comm::MpiEnv::get().check_during_teardown();
      return false;
    });
  };
  if (rank != 0) {
    tell_lfrees();
    send(0, k_leave_, {});
    wait_for_leaves(1);
  } else {
    wait_for_leaves(size - 1);
    publish_lfrees();
    AddressSpace::get().reuse_freed();
    send_regions();
    for (int d = 1; d < size; ++d) send(d, k_leave_, {});
  }
  drain_transport();
}

void Cluster::drain_transport() {
  poll_until([&] { return transport.outstanding() == 0; });
}

void Cluster::tell_lfrees() {
  std::lock_guard<std::mutex> g(regions_m_);
  for (const auto& [start, bytes] : lfreed_) {
    const WireRegion r{start, bytes, 0, {}, 0, 1};
    send(0, k_lfree_, as_bytes_of(r));
  }
  lfreed_.clear();
}

void Cluster::on_lfree(const comm::Message& m) {
  const WireRegion r = read_header<WireRegion>(m);
  if (AddressSpace::get().local_owner(reinterpret_cast<const void*>(r.start)) != m.source())
    comm::abort_job("weft::cluster: rank " + std::to_string(m.source()) +
                    " freed a block outside its lmalloc range (a protocol error)");
  std::lock_guard<std::mutex> g(regions_m_);
  lfreed_.emplace_back(r.start, r.bytes);
}

void Cluster::publish_lfrees() {
  std::vector<std::pair<std::uintptr_t, std::size_t>> freed;
  {
    std::lock_guard<std::mutex> g(regions_m_);
    freed.swap(lfreed_);
  }
  AddressSpace& as = AddressSpace::get();
  for (const auto& [start, bytes] : freed) {
    forget(start, bytes);
    publish_region(WireRegion{start, bytes, 0, {}, 0, 1});
    if (as.local_owner(reinterpret_cast<const void*>(start)) == 0) as.reuse_local(start);  // (see on_region)
  }
}

void Cluster::forget_versions(std::uintptr_t start, std::size_t bytes) {
  std::lock_guard<std::mutex> g(in_m_);
  std::erase_if(local_version_, [&](const auto& v) {
    const auto x = reinterpret_cast<std::uintptr_t>(v.first);
    return x >= start && x < start + bytes;
  });
}

void Cluster::dispatch(comm::Kind k, const comm::Message& m) {
  if (k >= handlers_.size() || !handlers_[k])
    comm::abort_job("weft::cluster: a kept message of kind " + transport.kind_name(k) + " has no handler");
  (this->*handlers_[k])(m);
}

std::size_t Cluster::poll_source(void* self) noexcept {
  auto* c = static_cast<Cluster*>(self);
  try {
    const std::size_t n = c->transport.poll();
    if (n)
      c->progress_.fetch_add(n, std::memory_order_relaxed);
    else {  // nothing came: has a rank this run needs ended its program?
      thread_local std::uint32_t calls = 0;  // (any worker polls)
      comm::MpiEnv::check_departures_sometimes(calls, c->across_run_.load(std::memory_order_relaxed));
    }
    if (c->watchdog_ > 0) [[unlikely]]
      c->watch();
    return n;
  } catch (const std::exception& x) {
    comm::abort_job(std::string("weft::cluster: progress failed: ") + x.what());
  }
}

std::string Cluster::view() {
  std::size_t awaited = 0;
  std::string data;  // the first few awaited, with what waits for them; the first few tasks waiting
  {
    std::lock_guard<std::mutex> g(in_m_);
    for (const auto& [a, in] : incoming_) {
      if (in.expected <= 0) continue;
      if (++awaited > 8) continue;
      char line[160];
      std::snprintf(line, sizeof line, "\n  datum %p: %d transfer(s) awaited (%s), %zu task(s) and %zu wait(s) wait for it",
                    a, in.expected,
                    in.asked >= 0 ? ("fetched from rank " + std::to_string(in.asked)).c_str() : "sent by its creator",
                    in.tasks.size(), in.counters.size());
      data += line;
      for (const Incoming::Forward& f : in.forwards) data += ", then goes to rank " + std::to_string(f.dest);
    }
  }
  std::size_t waiting = 0, early_links = 0;  // received tasks waiting for predecessors; link satisfies kept
  {
    std::lock_guard<std::mutex> g(received_m_);
    for (const auto& [key, task] : received_)
      if (int n = task.first->pending.load(std::memory_order_relaxed); n > 0 && ++waiting <= 8)
        data += "\n  task " + std::to_string(task.second->seq) + " of rank " + std::to_string(task.second->creator) +
                " waits for " + std::to_string(n) + " predecessor(s)";
    for (const auto& [key, v] : early_links_) early_links += v.size();
  }
  {
    std::lock_guard<std::mutex> g(flight_m_);
    std::size_t shown = 0;
    for (const auto& [task, f] : in_flight_)
      for (const InFlight::RemoteLink& r : f.remote)
        if (++shown <= 8)
          data += "\n  task " + std::to_string(f.seq) + " sent to rank " + std::to_string(f.executor) +
                  " is to tell rank " + std::to_string(r.dest) + " when it ends (for task " +
                  std::to_string(r.succ_seq) + ")";
  }
  const std::uint64_t off = offloaded.load(), done = done_received_.load(), rec = received.load(),
                      fin = received_completed_.load();
  return "weft: rank " + std::to_string(rank) + ": cluster watchdog view: run " + std::to_string(run_.load()) +
         (running_.load() ? " (running)" : " (between runs)") + ", tasks offloaded from here not done " +
         std::to_string(off - done) + ", tasks received here not done " + std::to_string(rec - fin) + " (" +
         std::to_string(waiting) + " waiting for predecessors, " +
         std::to_string(rec - fin >= waiting ? rec - fin - waiting : 0) +
         " waiting for data, ready or running, " + std::to_string(early_links) +
         " link satisfy message(s) kept for tasks still to come)" +
         ", data awaited here " + std::to_string(awaited) + ", transport operations outstanding " +
         std::to_string(transport.outstanding()) + data;
}

void Cluster::watch() {
  if (!running_.load(std::memory_order_acquire) || watch_fired_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> g(watch_m_, std::try_to_lock);
  if (!g.owns_lock()) return;
  const std::uint64_t p = progress_.load(std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (p != watch_seen_) {
    watch_seen_ = p;
    watch_since_ = now;
    return;
  }
  if (std::chrono::duration<double>(now - watch_since_).count() < watchdog_) return;
  if (watch_fired_.exchange(true)) return;
  char what[160];
  std::snprintf(what, sizeof what,
                "weft::cluster: watchdog: no progress on this rank for %g s in a run (WEFT_WATCHDOG)", watchdog_);
  watchdog_views_->fire(what);
}

ProgressDemand Cluster::source_demand(void* self) noexcept {
  auto* c = static_cast<Cluster*>(self);
  if (c->transport.outstanding() != 0) return ProgressDemand::polling;
  // Reports and data this rank waits for come only through polls (MPI moves nothing by itself): an idle worker
  // that slept meanwhile would drain them 200 us at a time, and the sender's sends would pile up.
  if (c->offloaded.load(std::memory_order_relaxed) != c->done_received_.load(std::memory_order_relaxed) ||
      c->transfers_awaited_.load(std::memory_order_relaxed) != 0)
    return ProgressDemand::polling;
  return c->running_.load(std::memory_order_acquire) ? ProgressDemand::timed : ProgressDemand::none;
}

// ---------------------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------------------

void Cluster::run_root(void (*call)(void*, Context&), void* arg) {
  struct Args {
    Cluster* self;
    void (*call)(void*, Context&);
    void* arg;
  } args{this, call, arg};
  engine.run_root(
      &kClusterRoot,
      [](void* a, Context& cx) {
        auto& x = *static_cast<Args*>(a);
        Cluster& self = *x.self;
        Worker& w = *tls_worker;
        Task* root = ContextAccess::task(cx);
        root->cluster = &self.root_state;
        self.root_.store(root, std::memory_order_release);
        std::uint32_t run;
        {
          // Begin the run under the token: the handlers see the new run and the kept messages go first.
          comm::TokenScope hold(comm::MpiEnv::get().token());
          run = self.run_.load(std::memory_order_relaxed) + 1;
          self.run_.store(run, std::memory_order_relaxed);
          self.begun_.store(self.rank == 0, std::memory_order_relaxed);
          self.running_.store(true, std::memory_order_release);
          self.dispatch_kept();
        }
        if (self.rank != 0) self.tell_lfrees();
        if (self.rank == 0) {
          // The changes to the common address space first, then the begin message: another rank handles no
          // message of the run from a third rank before both (the transport keeps each pair's order). Memory
          // freed since the last run's start is reused only from now on (AddressSpace::reuse_freed): every rank
          // has handled its removal before it sees a message of this run.
          self.publish_lfrees();
          AddressSpace::get().reuse_freed();
          self.send_regions();
          for (int d = 1; d < self.size; ++d) self.send(d, self.k_begin_, {});
        }
        const comm::MpiEnv::RunAcrossRanks in_run(comm::MpiEnv::get());  // an exit() meanwhile ends the job
        self.across_run_.store(in_run.index(), std::memory_order_relaxed);
        self.engine.attach_progress(&self.source_);
        struct Detach {
          Cluster& c;
          ~Detach() {
            c.engine.detach_progress(&c.source_);
            c.running_.store(false, std::memory_order_release);
            c.root_.store(nullptr, std::memory_order_release);
          }
        } detach{self};
        std::exception_ptr error;
        if (self.rank == 0) {
          try {
            x.call(x.arg, cx);
            // The end of a run flushes what was accessed since the last wait (see weft/cluster.hpp).
            self.root_state.ending_run = true;
            cx.taskwait();
            self.root_state.ending_run = false;
          } catch (...) {
            self.root_state.ending_run = false;
            error = std::current_exception();
            wait_for_children(w, root);
          }
          // Data locations outlive the run (root_state): copies on other ranks stay valid for the next runs'
          // tasks, since only tasks change the common address space (rank 0's program reads between runs what
          // a run flushed to it).
          for (int d = 1; d < self.size; ++d) self.send(d, self.k_end_, {});
        } else {
          wait_until(
              w,
              [&] {
                return self.ended_.load(std::memory_order_acquire) >= run && unfinished_children(w, root) == 0;
              },
              nullptr, /*keep_polling=*/true);
        }
        {
          // Every task of the run has ended: no task message can link to them any more.
          std::lock_guard<std::mutex> g(self.received_m_);
          self.ended_tasks_.clear();
          self.early_links_.clear();  // (only links of a task whose registration failed can be left)
        }
        // What this rank still owes the others (its last reports, the end messages) leaves before the run ends.
        self.drain_transport();
        if (error) std::rethrow_exception(error);
      },
      &args);
}

#else  // without MPI: always one process, no task of this kind is ever made

const TaskKind kClusterTask{"cluster", false, false, &run_dependency, &complete_dependency, nullptr, nullptr,
                            nullptr, nullptr};
namespace {
bool is_cluster_parent(const Task*) { return false; }
}  // namespace

#endif  // WEFT_HAVE_MPI

// ---------------------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------------------

namespace {
constexpr std::size_t kServiceCluster = 1;  // Engine service slot (kServiceMpiRequests is 0)
static_assert(kServiceCluster < Engine::kServiceSlots);

bool several_processes() { return process_rank().several(); }
}  // namespace

void start_cluster(Engine& e) {
  if (!several_processes()) {
    local_space(&e.options.cluster_memory);  // as on several processes: the Runtime's Options size it
    return;
  }
#ifdef WEFT_HAVE_MPI
  Cluster* existing = g_cluster.load(std::memory_order_acquire);
  if (existing)
    throw std::logic_error("weft: a cluster Runtime already exists in this process; a process runs one at a time");
  Engine::Service& s = e.install_service(kServiceCluster, [](Engine& en) -> std::unique_ptr<Engine::Service> {
    return std::make_unique<Cluster>(en);
  });
  g_cluster.store(static_cast<Cluster*>(&s), std::memory_order_release);
#else
  (void)e;
#endif
}

bool cluster_run(Engine& e, void (*call)(void*, Context&), void* arg) {
#ifdef WEFT_HAVE_MPI
  Engine::Service* s = e.service(kServiceCluster);
  if (!s) return false;
  static_cast<Cluster*>(s)->run_root(call, arg);
  return true;
#else
  (void)e, (void)call, (void)arg;
  return false;
#endif
}

ClusterStats cluster_stats(const Engine& e) {
#ifdef WEFT_HAVE_MPI
  if (Engine::Service* s = e.service(kServiceCluster)) return static_cast<Cluster*>(s)->stats();
#else
  (void)e;
#endif
  return {};
}

void refuse_taskiter_in_cluster(const Context& cx) {
  if (is_cluster_parent(ContextAccess::task(cx)))
    throw taskiter_error("weft: taskiter is not supported in a cluster of several processes (weft/cluster.hpp)");
}

void finish_spawn_offload(Context& cx, Task* t, const Access* acc, std::size_t n, const SpawnAttrs& attrs,
                          const OffloadSpec& spec) {
  Task* p = ContextAccess::task(cx);
  if (is_cluster_parent(p)) {
    tls_offload_spec = &spec;
    struct Reset {
      ~Reset() { tls_offload_spec = nullptr; }
    } reset;
    finish_spawn(cx, t, acc, n, attrs);
    return;
  }
  // One process: the clause changes nothing, but a rank that does not exist is an error here too.
  if (spec.node < -1 || spec.node > 0) {
    t->body_ops->destroy(t);
    discard_spawn(cx, t);
    throw std::invalid_argument(node_error(spec.node, 1));
  }
  finish_spawn(cx, t, acc, n, attrs);
}

}  // namespace weft::detail

// ---------------------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------------------

namespace weft {

int num_nodes() {
#ifdef WEFT_HAVE_MPI
  if (detail::Cluster* c = detail::g_cluster.load(std::memory_order_acquire)) return c->size;
#endif
  return 1;
}

int node_id() {
#ifdef WEFT_HAVE_MPI
  if (detail::Cluster* c = detail::g_cluster.load(std::memory_order_acquire)) return c->rank;
#endif
  return 0;
}

namespace {
detail::AddressSpace& space_for(const char* what) {
#ifdef WEFT_HAVE_MPI
  if (detail::g_cluster.load(std::memory_order_acquire)) return detail::AddressSpace::get();
#endif
  if (detail::several_processes())
    throw std::logic_error(std::string("weft::") + what +
                           ": this job has several processes but no cluster Runtime (Options::cluster, "
                           "WEFT_CLUSTER=1) exists");
  return detail::local_space();
}
}  // namespace

void* dmalloc(std::size_t bytes, const Distribution& distribution) {
  detail::AddressSpace& as = space_for("dmalloc");
  if (node_id() != 0)
    throw std::logic_error("weft::dmalloc: called on rank " + std::to_string(node_id()) +
                           "; dmalloc is called by rank 0 (tasks elsewhere use weft::lmalloc)");
  if (distribution.kind == Distribution::Kind::custom && !distribution.rank_of)
    throw std::invalid_argument("weft::dmalloc: Distribution::custom needs a function");
  if (distribution.kind == Distribution::Kind::cyclic && distribution.block == 0)
    throw std::invalid_argument("weft::dmalloc: Distribution::cyclic needs a block size above 0");
  void* p = as.dmalloc(bytes);
  as.add_region({reinterpret_cast<std::uintptr_t>(p), bytes, distribution});
#ifdef WEFT_HAVE_MPI
  if (detail::Cluster* c = detail::g_cluster.load(std::memory_order_acquire)) {
    detail::WireRegion r{reinterpret_cast<std::uint64_t>(p), bytes, distribution.block,
                         c->code.encode(reinterpret_cast<const void*>(distribution.rank_of)),
                         static_cast<std::uint8_t>(distribution.kind), 0};
    c->publish_region(r);
  }
#endif
  return p;
}

void dfree(void* p) {
  if (!p) return;
  detail::AddressSpace& as = space_for("dfree");
  if (node_id() != 0) throw std::logic_error("weft::dfree: dmalloc memory is freed by rank 0");
#ifdef WEFT_HAVE_MPI
  detail::Cluster* c = detail::g_cluster.load(std::memory_order_acquire);
  // Several processes: the addresses are reused from the next run on, when every process has dropped the block
  // (a message of this run from a third process could otherwise meet the block freed here and allocated anew).
  const std::size_t n = as.dfree(p, /*defer=*/c != nullptr);
#else
  const std::size_t n = as.dfree(p, false);
#endif
  as.remove_region(reinterpret_cast<std::uintptr_t>(p));
#ifdef WEFT_HAVE_MPI
  if (c) {
    c->forget(reinterpret_cast<std::uintptr_t>(p), n);
    detail::WireRegion r{reinterpret_cast<std::uint64_t>(p), n, 0, {}, 0, 1};
    c->publish_region(r);
  }
#else
  (void)n;
#endif
}

void* lmalloc(std::size_t bytes) { return space_for("lmalloc").lmalloc(bytes); }

void lfree(void* p) {
  if (!p) return;
  detail::AddressSpace& as = space_for("lfree");
#ifdef WEFT_HAVE_MPI
  // Several processes: the addresses come back once every process has dropped what it knew of the block (see
  // Cluster::local_freed).
  if (detail::Cluster* c = detail::g_cluster.load(std::memory_order_acquire); c && c->size > 1) {
    c->local_freed(reinterpret_cast<std::uintptr_t>(p), as.lfree(p, /*defer=*/true));
    return;
  }
#endif
  as.lfree(p, false);
}

ClusterStats cluster_stats(const Runtime& rt) { return rt.cluster_stats(); }

}  // namespace weft
