// The engine's instrumentation points. Each is one predictable branch on the worker's `trace` pointer, null
// unless profiling or tracing is on (ProfileOptions::active()); the recording work is out of line.
//
// Front ends call these too:
//  * set_tag(w, tag): tasks created by w from now on carry `tag` (trace "tag" arg); e.g. the iteration a
//    persistent graph is recording. A front end that re-arms a task (replay) or keys it (flow graphs) may
//    set `t->trace_tag` itself, guarded by `w.trace`.
//  * now(w) + record_phase(w, name, begin, end, tag): a front-end phase, e.g. taskiter's "record" and
//    "replay" of iteration `tag`: it appears in Profile::phases and, when tracing, as an async span. Phases
//    may overlap and may end on another worker than the one that stamped their start.
//  * now(w) + record_operation(w, name, task, begin, peer, bytes): an asynchronous operation bound to a task
//    (an MPI request), from its start to its completion as seen by the thread that completed it: a span in the
//    trace only (the profile counts such operations in a counter section of the front end's).
#pragma once

#include "engine/engine.hpp"
#include "trace/clock.hpp"

namespace weft::detail::trace {

// Out of line (recorder.cpp): the recording itself.
void init(Log& l, Task* t);
void spawn_begin(Log& l, Task* t);
void runtime(Log& l);
void spawn_end(Log& l);
void body_begin(Log& l, const Task* t);
void body_end(Log& l, const Task* t);
void wait_begin(Log& l);
void wait_end(Log& l);
void idle(Log& l);
void stolen(Log& l);
void edge(Log& l, const Task* pred, const Task* succ);
bool enter_run(Log& l, const std::atomic<bool>& running);
void leave_run(Log& l);
Ticks now(const Log& l);
void phase(Log& l, const char* name, std::uint64_t tag, Ticks begin, Ticks end);
void tag(Log& l, std::uint64_t tag);
void operation(Log& l, const char* name, std::uint32_t task, Ticks begin, std::int32_t peer, std::uint64_t bytes);
void foreign_operation(Recorder& r, const char* name, std::uint32_t task, Ticks begin, std::int32_t peer,
                       std::uint64_t bytes);

/// A join node or a root was initialised: give it an id (tasks get theirs in on_spawn_begin).
inline void on_node(Worker& w, Task* t) {
  if (w.trace) [[unlikely]]
    init(*w.trace, t);
}
/// Spawning: t is allocated and initialised, not yet visible to other threads (gets its id and tag) /
/// t is registered and, if ready, queued. The time from the first to the second is spawn overhead; the
/// rarer runtime work before the first (throttling, recycling finished children) calls on_runtime.
inline void on_spawn_begin(Worker& w, Task* t) {
  if (w.trace) [[unlikely]]
    spawn_begin(*w.trace, t);
}
inline void on_runtime(Worker& w) {
  if (w.trace) [[unlikely]]
    runtime(*w.trace);
}
inline void on_spawn_end(Worker& w) {
  if (w.trace) [[unlikely]]
    spawn_end(*w.trace);
}
/// A body starts / has returned (or thrown).
inline void on_body_begin(Worker& w, const Task* t) {
  if (w.trace) [[unlikely]]
    body_begin(*w.trace, t);
}
inline void on_body_end(Worker& w, const Task* t) {
  if (w.trace) [[unlikely]]
    body_end(*w.trace, t);
}
/// A body waits (taskwait, taskwait_on) / resumes.
inline void on_wait_begin(Worker& w) {
  if (w.trace) [[unlikely]]
    wait_begin(*w.trace);
}
inline void on_wait_end(Worker& w) {
  if (w.trace) [[unlikely]]
    wait_end(*w.trace);
}
/// A search for work failed (idle backoff) / a steal succeeded.
inline void on_idle(Worker& w) {
  if (w.trace) [[unlikely]]
    idle(*w.trace);
}
inline void on_steal(Worker& w) {
  if (w.trace) [[unlikely]]
    stolen(*w.trace);
}
/// A dependency edge pred -> succ was linked.
inline void on_edge(Worker& w, const Task* pred, const Task* succ) {
  if (w.trace) [[unlikely]]
    edge(*w.trace, pred, succ);
}

// --- for front ends (see the top of this file) ---
inline void set_tag(Worker& w, std::uint64_t t) {
  if (w.trace) [[unlikely]]
    tag(*w.trace, t);
}
inline Ticks now(Worker& w) { return w.trace ? now(*w.trace) : 0; }
inline void record_phase(Worker& w, const char* name, Ticks begin, Ticks end, std::uint64_t t) {
  if (w.trace) [[unlikely]]
    phase(*w.trace, name, t, begin, end);
}
/// `begin` from now() on the worker that started it (0 when that one was not recording: nothing is recorded);
/// `task` the trace id of the task it is bound to; `peer` the other rank (-1 for a collective).
/// A thread of the engine's that keeps no log (the communication thread) records it in the recorder's list
/// of such spans, under a lock (rare: a completed request).
inline void record_operation(Worker& w, const char* name, std::uint32_t task, Ticks begin, std::int32_t peer,
                             std::uint64_t bytes) {
  if (begin == 0) [[likely]]
    return;
  if (w.trace)
    operation(*w.trace, name, task, begin, peer, bytes);
  else if (Recorder* r = w.engine->recorder.get())
    foreign_operation(*r, name, task, begin, peer, bytes);
}

}  // namespace weft::detail::trace
