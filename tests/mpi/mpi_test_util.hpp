// Helpers of the MPI tests (tests/mpi): every rank runs the same test sequence under mpiexec.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_env.hpp"
#include "comm/transport.hpp"
#include "test_util.hpp"

namespace weft_mpi_test {

using weft::comm::abort_job;

inline int world_rank() { return weft::comm::MpiEnv::get().rank(); }
inline int world_size() { return weft::comm::MpiEnv::get().size(); }

/// Polls `poll` (yielding when it did nothing: ranks may outnumber cores) until `done()` holds. A wait that
/// outlives kLongWait is a hang, not slowness: the job is aborted with a rank-tagged line naming `what`, so the
/// other ranks do not wait for this one until the ctest timeout.
template <class Poll, class Done>
void poll_until(Poll&& poll, Done&& done, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + weft_test::kLongWait;
  while (!done()) {
    if (poll() == 0) {
      if (std::chrono::steady_clock::now() > deadline) abort_job("test hung waiting for " + what);
      std::this_thread::yield();
    }
  }
}

template <class Done>
void poll_until(weft::comm::Transport& t, Done&& done, const std::string& what) {
  poll_until([&] { return t.poll(); }, done, what);
}

/// Barrier of every rank that keeps `poll` going meanwhile (a rank that stopped progressing could leave a
/// peer's send incomplete). The tests' own MPI calls (MPI_COMM_WORLD) are allowed: weft asked for
/// MPI_THREAD_MULTIPLE.
template <class Poll>
void barrier(Poll&& poll) {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  int flag = 0;
  poll_until(
      [&] {
        std::size_t n = poll();
        MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        return n + static_cast<std::size_t>(flag);
      },
      [&] { return flag != 0; }, "a barrier");
}
inline void barrier(weft::comm::Transport& t) {
  barrier([&] { return t.poll(); });
}

/// Sum over every rank (blocking: call only where no protocol is under way).
inline std::uint64_t sum_all(std::uint64_t v) {
  std::uint64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

template <class T>
std::span<const std::byte> bytes_of(const T& v) {
  return std::as_bytes(std::span<const T>(&v, 1));
}

template <class T>
T read_as(std::span<const std::byte> b, std::size_t offset = 0) {
  T v;
  std::memcpy(&v, b.data() + offset, sizeof v);
  return v;
}

/// Deterministic content of a payload: byte i of message (src, dst, seq).
inline std::byte pattern(int src, int dst, std::uint64_t seq, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(src) * 1000003u + static_cast<std::uint64_t>(dst)) * 7919u + seq;
  x ^= i * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xff);
}

inline std::vector<std::byte> make_payload(int src, int dst, std::uint64_t seq, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern(src, dst, seq, i);
  return v;
}

/// Index of the first byte that differs from the pattern, or npos.
inline std::size_t check_payload(std::span<const std::byte> p, int src, int dst, std::uint64_t seq) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != pattern(src, dst, seq, i)) return i;
  return std::string::npos;
}

}  // namespace weft_mpi_test
