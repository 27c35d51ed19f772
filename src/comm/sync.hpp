// Small synchronisation pieces of the communication layer: a short spin lock (per destination buffer) and the
// progress token (one thread at a time makes weft's MPI calls).
#pragma once

#include <atomic>
#include <thread>

namespace weft::comm {

/// A spin-wait hint to the processor (x86 `pause`).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Test-and-test-and-set lock for critical sections of a few hundred nanoseconds (appending a message to a
/// destination's buffer). Waiters spin on a plain load, so the line stays shared until the holder releases
/// it, and yield after a while: with more threads than cores (oversubscribed ranks) the holder may be
/// descheduled.
class SpinLock {
 public:
  void lock() noexcept {
    for (unsigned spins = 0;;) {
      // acquire: the critical section's reads see what the previous holder wrote before its release.
      if (!held_.exchange(true, std::memory_order_acquire)) return;
      while (held_.load(std::memory_order_relaxed)) {
        if (++spins < 128) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

/// The right to progress: whoever holds it may make weft's MPI calls and runs message handlers. One per
/// process (MpiEnv::token()), shared by every Transport, so that weft's own MPI calls never overlap: that is
/// what lets weft run on MPI_THREAD_SERIALIZED. Pollers try it and leave at once when it is taken; the few
/// operations that must have it (registering a kind, destroying a transport, a consistency check) wait.
/// Re-entry is detected per thread: a handler, which runs under the token, may call those operations too.
class ProgressToken {
 public:
  /// Takes the token if it is free and nobody waits for it in acquire(). Reads before it writes: idle workers
  /// polling in a loop then share the line instead of bouncing it between cores.
  bool try_acquire() noexcept {
    // relaxed: a hint; the exchange below decides.
    if (held_.load(std::memory_order_relaxed) || waiting_.load(std::memory_order_relaxed)) return false;
    return take();
  }
  /// Waits for the token (spins, then yields). Not for the polling path. Pollers step aside while a thread
  /// waits here: workers that poll back to back would otherwise hand the token to each other and starve it.
  void acquire() noexcept {
    waiting_.fetch_add(1, std::memory_order_relaxed);
    for (unsigned spins = 0; held_.load(std::memory_order_relaxed) || !take();) {
      if (++spins < 128) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  void release() noexcept {
    holder_ = nullptr;
    held_.store(false, std::memory_order_release);
  }
  /// True on the thread that holds the token (inside poll(), so inside a handler).
  bool held_by_this_thread() const noexcept { return holder_ == this; }

 private:
  bool take() noexcept {
    // acquire: pairs with release(), so this holder sees everything the previous holder did (the transport's
    // state is only ever touched under the token).
    if (held_.exchange(true, std::memory_order_acquire)) return false;
    holder_ = this;
    return true;
  }

  alignas(64) std::atomic<bool> held_{false};
  std::atomic<unsigned> waiting_{0};  // threads in acquire(); on held_'s line: pollers read both at once
  static inline thread_local const ProgressToken* holder_ = nullptr;
};

/// Holds the token for a scope: takes it, or finds that this thread already holds it (a handler) and leaves it
/// to the outer holder.
class TokenScope {
 public:
  explicit TokenScope(ProgressToken& t) noexcept : token_(t), outer_(t.held_by_this_thread()) {
    if (!outer_) token_.acquire();
  }
  ~TokenScope() {
    if (!outer_) token_.release();
  }
  TokenScope(const TokenScope&) = delete;
  TokenScope& operator=(const TokenScope&) = delete;

 private:
  ProgressToken& token_;
  bool outer_;
};

}  // namespace weft::comm
