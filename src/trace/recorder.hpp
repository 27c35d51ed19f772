// The recorder behind profiles and traces: one Log per worker, written only by its worker (no atomics on the
// recording path), read by the run's caller once every worker has left the run (see Recorder::end_run).
//
// Time accounting: each Log is a three-state machine (work / overhead / idle, see weft/profile.hpp) driven by
// the hooks in trace/hooks.hpp; a transition adds the time since the previous one to the state being left,
// and work time also to the innermost running body (its Frame), which gives per-label work times that
// exclude tasks run inline while a body waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/engine.hpp"
#include "trace/clock.hpp"
#include "trace/counters.hpp"
#include "weft/profile.hpp"

namespace weft::detail::trace {

enum class State : std::uint8_t { idle = 0, overhead = 1, work = 2 };
enum class Kind : std::uint8_t { task, root, discovery, edge, phase, run, operation };

/// One trace record. Task-like spans: [begin, end] in ticks, `name` the label (may be null), `id`/`tag`
/// the task's, `extra` its priority (discovery: children spawned; run: run number; operation: the peer rank,
/// with `tag` its bytes and `id` its task's). Edges: begin = id of the predecessor, end = id of the successor.
struct Event {
  Ticks begin;
  Ticks end;
  const char* name;
  std::uint64_t tag;
  std::uint32_t id;
  std::int32_t extra;
  Kind kind;
};

class Recorder;

struct Log {
  Log(Recorder& r, unsigned worker, std::size_t capacity);

  Recorder* rec;
  unsigned worker;
  State state = State::idle;
  Ticks since = 0;
  Ticks acc[3] = {0, 0, 0};  ///< time per State this run

  struct Frame {
    const Task* task;
    Ticks begin;
    Ticks work;         ///< the body's own work time so far
    Ticks first_spawn;
    Ticks last_spawn;
    std::uint64_t spawns;
  };
  std::vector<Frame> frames;  ///< bodies running on this worker, innermost last

  struct LabelStat {
    std::uint64_t count = 0;
    Ticks total = 0, max = 0;
  };
  std::unordered_map<const char*, LabelStat> labels;  ///< by label pointer (merged by text at the end)
  const char* last_label = nullptr;                   ///< one-entry cache: runs of equal labels are common
  LabelStat* last_stat = nullptr;

  struct PhaseRec {
    const char* name;
    std::uint64_t tag;
    Ticks begin, end;
  };
  std::vector<PhaseRec> phases;  ///< this run
  std::uint64_t spawning_tasks = 0;  ///< bodies other than the root that spawned, this run
  Ticks nested_discovery = 0;
  Ticks root_discovery = 0;          ///< the root function's first-to-last spawn (worker 0 only)
  std::uint64_t root_children = 0;

  // Task ids, taken from the recorder in blocks (no shared atomic per task); the tag given to new tasks.
  std::uint32_t next_id = 0, id_end = 0;
  std::uint64_t tag = 0;

  std::unique_ptr<Event[]> events;  ///< preallocated, touched only as it fills
  std::size_t n_events = 0, capacity = 0;

  /// Background workers: inside the current run (see Recorder::end_run). Worker 0 does not use it.
  alignas(64) std::atomic<bool> active{false};

  Ticks switch_to(State s);
  Event* slot();  ///< the next free event, or null when tracing is off, stopped or this buffer is full
  void reset_run(Ticks now, State s);
};

class Recorder {
 public:
  /// Opens (truncates) the JSON profile file and checks that the trace file can be written (it is written, and
  /// only then truncated, by finish()): throws config_error if one cannot be created, or if both are one file.
  Recorder(Engine& e, const ProfileOptions& o, unsigned workers);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  Log& log(unsigned i) { return *logs_[i]; }
  bool tracing() const { return tracing_; }
  bool edges() const { return edges_; }
  const Clock& clock() const { return clock_; }

  /// On the run's caller (worker 0) before the workers are released / after the run's last task and after
  /// the engine stopped the run: end_run waits until every background worker has left the run, then builds
  /// the profile and prints / appends it.
  void begin_run(Worker& w0);
  void end_run(Worker& w0);
  /// At engine destruction (workers joined): writes the trace file.
  void finish();

  Profile last_profile() const;
  std::uint32_t take_ids(std::uint32_t n) { return next_id_.fetch_add(n, std::memory_order_relaxed); }
  /// An operation span completed by a thread with no log of its own (the communication thread): kept in a
  /// list under a lock, as long as it has room (one worker buffer's worth), and written on a track of its own.
  void foreign_operation(const Event& e);
  /// The first event that finds a full buffer stops tracing for every worker, with one warning.
  void buffer_full(const Log& l);
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }

  std::size_t num_workers() const { return logs_.size(); }
  Ticks origin() const { return origin_; }

 private:
  Profile build_profile(Ticks begin, Ticks end);
  void append_json(const Profile& p);
  void write_trace();
  void keep_names();

  Engine& engine_;
  Clock clock_;
  Ticks origin_;
  ProcessRank rank_;  ///< this process's place in a job (the trace's pid, the profile's rank)
  bool print_;
  bool edges_;
  std::vector<std::unique_ptr<Log>> logs_;
  std::vector<Counters> at_begin_;
  std::vector<std::size_t> events_at_begin_;
  std::vector<CounterSection> counters_at_begin_;  ///< the registered components' totals (counters.hpp)
  Ticks run_begin_ = 0;
  std::uint64_t runs_ = 0;
  std::atomic<std::uint32_t> next_id_{1};
  std::atomic<bool> stopped_{false};
  Ticks stopped_at_ = 0;  ///< written by the thread that stopped tracing, read after the workers are joined

  std::string json_path_, trace_path_;
  std::FILE* json_file_ = nullptr;
  long json_tail_ = 0;  ///< offset of the closing "]}" that each run overwrites
  bool tracing_ = false;   ///< a trace file was asked for and is not written yet (finish() writes it)
  std::FILE* trace_file_ = nullptr;  ///< open only while finish() writes it

  std::unordered_set<std::string> names_;  ///< copies of the traced names (keep_names)

  std::mutex foreign_mutex_;
  std::vector<Event> foreign_;  ///< see foreign_operation (under foreign_mutex_; read once the threads are joined)
  std::size_t foreign_capacity_ = 0;

  mutable std::mutex profile_mutex_;
  Profile last_;
};

}  // namespace weft::detail::trace
