// weft — MPI inside tasks: a task hands weft its non-blocking MPI requests and completes only once they have
// completed, without blocking a worker (OpenMP's `detach`, TAMPI's non-blocking mode).
//
//   #include <weft/mpi.hpp>            // needs MPI: link the program with MPI::MPI_CXX too
//
//   rt.run([&](weft::Context& cx) {
//     for (int it = 0; it < steps; ++it) {
//       cx.spawn([&](weft::Context& cx) {        // posts the halo receive; completes when it has arrived
//         weft::mpi::irecv(cx, std::span(ghost), left, 0, comm);
//       }, weft::out(ghost));
//       cx.spawn([&](weft::Context& cx) {        // sends the boundary; completes when the send has
//         weft::mpi::isend(cx, std::span(std::as_const(edge)), right, 0, comm);
//       }, weft::in(edge));
//       cx.spawn([&] { interior(u); }, weft::inout(u));                     // overlaps the messages
//       cx.spawn([&] { boundary(u, ghost, edge); }, weft::inout(u), weft::in(ghost), weft::out(edge));
//     }
//   });
//
// Semantics
// ---------
// * bind(cx, request) makes the calling task wait for `request`: its successors are released, and its
//   parent's taskwait returns, only once its body has returned, its children have finished AND the request has
//   completed (each bound request is a completion event of the task: see Event in weft/tasks.hpp). The
//   wrappers below post the operation and bind it. weft owns a bound request: it tests it until it completes
//   (never wait, cancel or free it yourself). An MPI_Status* given with it is filled in before the successors
//   run.
// * Progress: weft tests the outstanding requests on the workers, in batches of at most 64 per poll: when a
//   worker finds no work, and between tasks at most every 20 microseconds on a busy worker (or, with
//   WEFT_COMM_THREAD=on, on the communication thread without pause). While requests are outstanding, idle
//   workers never sleep (MPI makes no progress by itself: a message moves only inside an MPI call).
// * A request that completes with an error (MPI_ERRORS_RETURN on its communicator) fails the task with
//   weft::mpi::error (its dependents are cancelled, the exception reaches the parent's taskwait or
//   Runtime::run). A wrapper whose MPI call returns an error throws weft::mpi::error from the body. (weft
//   tests requests with MPI_Testsome, for which MPICH raises such an error on MPI_COMM_WORLD's handler, Open
//   MPI on the request's communicator's: under MPICH, MPI_COMM_WORLD needs MPI_ERRORS_RETURN too, or the
//   default handler ends the job.)
// * Thread levels: MPI must run at MPI_THREAD_MULTIPLE or MPI_THREAD_SERIALIZED (weft initialises it at
//   MPI_THREAD_MULTIPLE if the program has not). A lower level is refused by the first call with
//   weft::mpi::error naming the level. Under MPI_THREAD_SERIALIZED weft makes its own MPI calls under one
//   process-wide lock; MPI calls of the program itself made while weft may be progressing (inside tasks, or
//   from other threads during a run) must then go through weft::mpi::serialized(f). Under
//   MPI_THREAD_MULTIPLE no lock is taken.
// * Traffic: weft never touches the program's communicators beyond the operations it is asked to post; its own
//   distributed front ends (weft::flow) use private duplicates of MPI_COMM_WORLD, so the two never mix. These
//   calls are local: nothing collective happens behind them, so one rank may post through weft::mpi while the
//   others use plain MPI (initialise MPI in the program then: MPI_Init is made by every rank).
// * Where: dependency tasks (Context::spawn), tasks recorded by a taskiter (they post fresh requests every
//   iteration: the time loop of a halo exchange is discovered once), and the root function of Runtime::run;
//   not a taskiter body itself (weft::taskiter_error, as for Event).
// * Collectives: MPI requires the collectives of one communicator to be posted in the same order on every
//   rank. Tasks run in any order their dependencies allow, so order the tasks that post collectives on one
//   communicator through a common access: a variable of the program's standing for that order (e.g. `char
//   collectives;` and weft::inout(collectives) on each of them; not the MPI_Comm variable itself, which is a
//   pointer under Open MPI, and accesses refuse pointers).
// * Failures: an exception reaches Runtime::run on its own rank only; the other ranks' operations that wait
//   for that rank never complete. Catch it and end the job (MPI_Abort). Destroy every Runtime before
//   MPI_Finalize.
// * Do not call blocking MPI (MPI_Recv, MPI_Wait, MPI_Barrier, blocking collectives) inside a task: it blocks
//   the worker, and with one worker per rank a receive posted before its matching send on another rank can
//   then deadlock the job. Everything here is non-blocking.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "weft/tasks.hpp"

namespace weft::mpi {

/// An MPI error met by weft on the program's behalf (an operation that failed, a thread level weft cannot work
/// with). One line, starting with "weft: ".
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Makes the calling task wait for `request` (see the top of this file). `status`, if not MPI_STATUS_IGNORE,
/// receives the request's status before the task completes. MPI_REQUEST_NULL is accepted (nothing to wait for).
void bind(Context& cx, MPI_Request request, MPI_Status* status = MPI_STATUS_IGNORE);
/// Binds every request of `requests` (statuses: empty, or one per request).
void bind(Context& cx, std::span<const MPI_Request> requests, std::span<MPI_Status> statuses = {});

/// MPI_Isend / MPI_Irecv / MPI_Iallreduce / MPI_Ibcast / MPI_Ibarrier, bound to the calling task.
void isend(Context& cx, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);
void irecv(Context& cx, void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
           MPI_Status* status = MPI_STATUS_IGNORE);
void iallreduce(Context& cx, const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                MPI_Comm comm);
void ibcast(Context& cx, void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
void ibarrier(Context& cx, MPI_Comm comm);

/// The MPI datatype of an arithmetic type (double -> MPI_DOUBLE, ...).
template <class T>
MPI_Datatype datatype() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, char>) return MPI_CHAR;
  else if constexpr (std::is_same_v<U, signed char>) return MPI_SIGNED_CHAR;
  else if constexpr (std::is_same_v<U, unsigned char>) return MPI_UNSIGNED_CHAR;
  else if constexpr (std::is_same_v<U, short>) return MPI_SHORT;
  else if constexpr (std::is_same_v<U, unsigned short>) return MPI_UNSIGNED_SHORT;
  else if constexpr (std::is_same_v<U, int>) return MPI_INT;
  else if constexpr (std::is_same_v<U, unsigned>) return MPI_UNSIGNED;
  else if constexpr (std::is_same_v<U, long>) return MPI_LONG;
  else if constexpr (std::is_same_v<U, unsigned long>) return MPI_UNSIGNED_LONG;
  else if constexpr (std::is_same_v<U, long long>) return MPI_LONG_LONG;
  else if constexpr (std::is_same_v<U, unsigned long long>) return MPI_UNSIGNED_LONG_LONG;
  else if constexpr (std::is_same_v<U, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<U, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<U, long double>) return MPI_LONG_DOUBLE;
  else if constexpr (std::is_same_v<U, bool>) return MPI_CXX_BOOL;
  else static_assert(sizeof(U) == 0, "weft::mpi::datatype: not an arithmetic type");
}

namespace detail {
int checked_count(std::size_t n);  // n as an MPI count; throws weft::mpi::error beyond INT_MAX
bool lock_serialized();            // takes weft's MPI lock under MPI_THREAD_SERIALIZED; true if it took it
void unlock_serialized(bool took) noexcept;

// Arithmetic elements travel as their MPI type; other trivially copyable ones as bytes.
template <class T>
std::pair<int, MPI_Datatype> elements(std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>,
                "weft::mpi: only trivially copyable elements travel as they are (serialise others first)");
  if constexpr (std::is_arithmetic_v<T>)
    return {checked_count(n), datatype<T>()};
  else
    return {checked_count(n * sizeof(T)), MPI_BYTE};
}
}  // namespace detail

/// Typed forms: the elements of a span (arithmetic types as themselves, other trivially copyable ones as bytes).
/// A send takes a span of const or mutable elements (std::span(vector) works as it is).
template <class T, std::size_t Extent>
void isend(Context& cx, std::span<T, Extent> data, int dest, int tag, MPI_Comm comm) {
  const auto [n, type] = detail::elements<std::remove_const_t<T>>(data.size());
  isend(cx, data.data(), n, type, dest, tag, comm);
}
template <class T, std::size_t Extent>
void irecv(Context& cx, std::span<T, Extent> data, int source, int tag, MPI_Comm comm,
           MPI_Status* status = MPI_STATUS_IGNORE) {
  static_assert(!std::is_const_v<T>, "weft::mpi::irecv: the span must be writable");
  const auto [n, type] = detail::elements<T>(data.size());
  irecv(cx, data.data(), n, type, source, tag, comm, status);
}
/// Reduces `in` over the ranks of comm into `out` (arithmetic T; op: MPI_SUM, MPI_MAX, ...).
template <class T>
void iallreduce(Context& cx, const T* in, T* out, int count, MPI_Op op, MPI_Comm comm) {
  iallreduce(cx, in, out, count, datatype<T>(), op, comm);
}

/// Runs f() so that it never overlaps an MPI call of weft's: under MPI_THREAD_SERIALIZED it holds weft's MPI
/// lock meanwhile (for the program's own MPI calls while weft may progress); under MPI_THREAD_MULTIPLE it
/// just calls f. f must not call weft::mpi functions (the lock is not re-entrant across them) nor block.
template <class F>
decltype(auto) serialized(F&& f);

/// Counters of this process (all runtimes), since it started. Also in the profile (WEFT_PROFILE), section
/// "mpi_requests", per run, under the names of these fields without "_seconds" ("mpi_s", "outstanding_s",
/// "worker_s", "idle_s"), with mpi_s also per thread ("mpi_s.worker<i>", "mpi_s.comm_thread").
/// The trace (WEFT_TRACE) shows each request as an async span, category "mpi", from
/// its post to its completion, with args "task" (the id of its task's span), "peer" and "bytes", on the track of
/// the thread that completed it.
struct Stats {
  std::uint64_t requests_bound = 0;      ///< requests handed to weft (bind and the wrappers)
  std::uint64_t requests_completed = 0;  ///< of which completed
  std::uint64_t polls = 0;               ///< polls that tested requests
  double mpi_seconds = 0;                ///< inside weft's MPI calls (posts and tests), summed over threads
  double outstanding_seconds = 0;        ///< wall time with at least one request outstanding (communication time)
  /// Worker time available while requests were outstanding (workers x outstanding_seconds), and of it the time
  /// workers were idle, polling for want of work. Both 0 with a communication thread (the workers never poll).
  double worker_seconds = 0;
  double idle_seconds = 0;
  /// The overlap ratio: the share of the communication time during which the workers ran tasks rather than
  /// waiting for the messages, 1 - idle_seconds / worker_seconds (a worker spinning in a task that waits
  /// counts as running). Negative when unknown (no communication, or a communication thread).
  double overlap() const {
    if (worker_seconds <= 0) return -1.0;
    const double r = 1.0 - idle_seconds / worker_seconds;
    return r < 0 ? 0.0 : r;  // the two are sampled at polls: idle may exceed by a poll's stretch
  }
};
Stats stats() noexcept;

template <class F>
decltype(auto) serialized(F&& f) {
  struct Guard {
    bool took = detail::lock_serialized();
    ~Guard() { detail::unlock_serialized(took); }
  } guard;
  return std::forward<F>(f)();
}

}  // namespace weft::mpi
