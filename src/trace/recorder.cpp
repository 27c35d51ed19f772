// Recording (the hooks' out-of-line halves) and the per-run bookkeeping of the recorder.
#include "trace/recorder.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace/hooks.hpp"

namespace weft::detail::trace {

namespace {
constexpr std::uint32_t kIdBlock = 1024;  // ids a worker takes from the shared counter at once

constexpr const char* kProfileFile = "profile file (Options::profile.json_file, WEFT_PROFILE=json:FILE)";
constexpr const char* kTraceFile = "trace file (Options::profile.trace_file, WEFT_TRACE)";

std::FILE* open_for_writing(const std::string& path, const char* what) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    throw config_error(std::string("weft: ") + what + " '" + path + "' cannot be created: " + std::strerror(errno));
  return f;
}

// The trace file is written only when the Runtime goes: here it is only checked, and left as it was (a program
// that ends without destroying its Runtime must not leave an empty file, or wipe an earlier trace). A file
// this check creates is removed again. Refused: a path that cannot be opened for writing, and the profile's
// own file (`profile`, open), which both would write.
void check_trace_path(const std::string& path, std::FILE* profile) {
  struct stat before {};
  const bool existed = ::stat(path.c_str(), &before) == 0;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0)
    throw config_error(std::string("weft: ") + kTraceFile + " '" + path + "' cannot be created: " +
                       std::strerror(errno));
  struct stat st {}, ps {};
  const bool same = profile && ::fstat(fd, &st) == 0 && ::fstat(fileno(profile), &ps) == 0 && S_ISREG(st.st_mode) &&
                    st.st_dev == ps.st_dev && st.st_ino == ps.st_ino;
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  if (same)
    throw config_error(std::string("weft: the ") + kTraceFile + " and the " + kProfileFile + " are the same file '" +
                       path + "': give each its own");
}

// A profile or trace that could not be written is lost output, so the process must not end with status 0:
// it exits with status 2 at its end, once the rest of the program has run. The handler is registered while
// this file's statics are initialised, before main(), so that it runs after the destructors of the statics
// that hold Runtimes; a file that fails after it ran (a Runtime older than it) ends the process there.
std::atomic<bool> output_lost{false}, exit_handler_ran{false};

void exit_2_if_output_lost() {
  exit_handler_ran = true;
  if (output_lost) {
    std::fflush(nullptr);
    std::_Exit(2);
  }
}

[[maybe_unused]] const int exit_handler_registered = std::atexit(exit_2_if_output_lost);

void output_failed(const char* what, const std::string& path, const std::string& why) {
  std::fprintf(stderr, "weft: %s '%s' cannot be written: %s\n", what, path.c_str(), why.c_str());
  output_lost = true;
  if (exit_handler_ran) exit_2_if_output_lost();
}

// Flushes f: 0, or the errno of the failure.
int flush_error(std::FILE* f) {
  errno = 0;
  if (std::fflush(f) == 0 && !std::ferror(f)) return 0;
  return errno ? errno : EIO;
}
}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Log
// ---------------------------------------------------------------------------------------------------------

Log::Log(Recorder& r, unsigned w, std::size_t cap) : rec(&r), worker(w), capacity(cap) {
  frames.reserve(64);
  // new[] of a trivial type leaves the memory untouched: pages are committed only as the buffer fills.
  if (cap) events.reset(new Event[cap]);
}

Ticks Log::switch_to(State s) {
  const Ticks now = rec->clock().now();
  const Ticks d = now - since;
  acc[static_cast<int>(state)] += d;
  if (state == State::work && !frames.empty()) frames.back().work += d;
  state = s;
  since = now;
  return now;
}

Event* Log::slot() {
  if (n_events == capacity || rec->stopped()) [[unlikely]] {
    if (capacity != 0 && n_events == capacity) rec->buffer_full(*this);
    return nullptr;
  }
  return &events[n_events++];
}

void Log::reset_run(Ticks now, State s) {
  state = s;
  since = now;
  acc[0] = acc[1] = acc[2] = 0;
  frames.clear();
  labels.clear();
  last_label = nullptr;
  last_stat = nullptr;
  phases.clear();
  spawning_tasks = 0;
  nested_discovery = root_discovery = 0;
  root_children = 0;
  tag = 0;  // a front end's tag does not outlive its run
}

// ---------------------------------------------------------------------------------------------------------
// Hooks
// ---------------------------------------------------------------------------------------------------------

void init(Log& l, Task* t) {
  if (l.next_id == l.id_end) {
    l.next_id = l.rec->take_ids(kIdBlock);
    l.id_end = l.next_id + kIdBlock;
  }
  t->trace_id = l.next_id++;
  t->trace_tag = l.tag;
}

void runtime(Log& l) {
  if (l.state != State::overhead) l.switch_to(State::overhead);
}

void spawn_begin(Log& l, Task* t) {
  init(l, t);
  const Ticks now = l.switch_to(State::overhead);
  if (l.frames.empty()) return;  // cannot happen: only bodies spawn
  Log::Frame& f = l.frames.back();
  if (f.spawns == 0) f.first_spawn = now;
}

void spawn_end(Log& l) {
  const Ticks now = l.switch_to(State::work);
  if (l.frames.empty()) return;
  Log::Frame& f = l.frames.back();
  f.last_spawn = now;
  ++f.spawns;
}

void body_begin(Log& l, const Task* t) {
  const Ticks now = l.switch_to(State::work);
  l.frames.push_back(Log::Frame{t, now, 0, 0, 0, 0});
}

void body_end(Log& l, const Task* t) {
  const Ticks now = l.switch_to(State::overhead);
  if (l.frames.empty()) return;
  const Log::Frame f = l.frames.back();
  l.frames.pop_back();
  const bool root = t->parent == nullptr;
  const Ticks discovery = f.spawns ? f.last_spawn - f.first_spawn : 0;
  if (root) {
    l.root_discovery = discovery;
    l.root_children = f.spawns;
  } else {
    Log::LabelStat* s = l.last_stat;
    if (t->label != l.last_label || !s) {
      s = &l.labels[t->label];
      l.last_label = t->label;
      l.last_stat = s;
    }
    ++s->count;
    s->total += f.work;
    s->max = std::max(s->max, f.work);
    if (f.spawns) {
      ++l.spawning_tasks;
      l.nested_discovery += discovery;
    }
  }
  if (!l.events) return;
  if (Event* e = l.slot())
    *e = Event{f.begin, now, t->label, t->trace_tag, t->trace_id, t->priority, root ? Kind::root : Kind::task};
  if (f.spawns)
    if (Event* e = l.slot())
      *e = Event{f.first_spawn, f.last_spawn, root ? "root" : t->label, t->trace_tag, t->trace_id,
                 static_cast<std::int32_t>(std::min<std::uint64_t>(f.spawns, INT32_MAX)), Kind::discovery};
}

void wait_begin(Log& l) { l.switch_to(State::overhead); }
void wait_end(Log& l) { l.switch_to(State::work); }

void idle(Log& l) {
  if (l.state != State::idle) l.switch_to(State::idle);
}

void stolen(Log& l) {
  if (l.state == State::idle) l.switch_to(State::overhead);
}

void edge(Log& l, const Task* pred, const Task* succ) {
  if (!l.rec->edges()) return;
  if (Event* e = l.slot()) *e = Event{pred->trace_id, succ->trace_id, nullptr, 0, 0, 0, Kind::edge};
}

// Entering / leaving a run, for background workers. The run's caller, after the engine has cleared
// `running`, waits until no worker is active; a worker sets `active` and then re-checks `running`, both
// behind a full fence, so that either it sees the run has ended or the caller sees it active (and waits).
// Recording state is touched only between a successful enter_run and leave_run.
bool enter_run(Log& l, const std::atomic<bool>& running) {
  if (l.active.load(std::memory_order_relaxed)) return true;
#if WEFT_TSAN  // no fences under ThreadSanitizer (see engine/queues.hpp): seq_cst accesses, as the engine's store
  l.active.store(true, std::memory_order_seq_cst);
  if (!running.load(std::memory_order_seq_cst)) {
#else
  l.active.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!running.load(std::memory_order_acquire)) {
#endif
    l.active.store(false, std::memory_order_release);
    return false;
  }
  l.state = State::idle;
  l.since = l.rec->clock().now();
  return true;
}

void leave_run(Log& l) {
  if (!l.active.load(std::memory_order_relaxed)) return;
  l.switch_to(State::idle);
  l.active.store(false, std::memory_order_release);
}

Ticks now(const Log& l) { return l.rec->clock().now(); }

void phase(Log& l, const char* name, std::uint64_t tag, Ticks begin, Ticks end) {
  l.phases.push_back(Log::PhaseRec{name, tag, begin, end});
  if (l.events)
    if (Event* e = l.slot()) *e = Event{begin, end, name, tag, 0, 0, Kind::phase};
}

void tag(Log& l, std::uint64_t t) { l.tag = t; }

void operation(Log& l, const char* name, std::uint32_t task, Ticks begin, std::int32_t peer, std::uint64_t bytes) {
  if (l.events)
    if (Event* e = l.slot()) *e = Event{begin, l.rec->clock().now(), name, bytes, task, peer, Kind::operation};
}

void foreign_operation(Recorder& r, const char* name, std::uint32_t task, Ticks begin, std::int32_t peer,
                       std::uint64_t bytes) {
  if (r.tracing()) r.foreign_operation(Event{begin, r.clock().now(), name, bytes, task, peer, Kind::operation});
}

void Recorder::foreign_operation(const Event& e) {
  if (stopped()) return;
  std::lock_guard<std::mutex> g(foreign_mutex_);
  if (foreign_.size() < foreign_capacity_) foreign_.push_back(e);
}

// ---------------------------------------------------------------------------------------------------------
// Recorder
// ---------------------------------------------------------------------------------------------------------

Recorder::Recorder(Engine& e, const ProfileOptions& o, unsigned workers)
    : engine_(e), rank_(process_rank()), print_(o.print), edges_(o.trace_edges && !o.trace_file.empty()) {
  origin_ = clock_.now();
  if (!o.json_file.empty()) {
    json_path_ = o.json_file;
    json_file_ = open_for_writing(json_path_, kProfileFile);
    std::fprintf(json_file_, "{\"weft_profile\": 1, \"rank\": %d, \"ranks\": %d, \"runs\": [\n", rank_.rank,
                 rank_.size);
    json_tail_ = std::ftell(json_file_);
    std::fputs("]}\n", json_file_);
    if (const int err = flush_error(json_file_)) {  // e.g. /dev/full: better refused now than lost at the end
      std::fclose(json_file_);
      throw config_error(std::string("weft: ") + kProfileFile + " '" + json_path_ + "' cannot be written: " +
                         std::strerror(err));
    }
  }
  if (!o.trace_file.empty()) {
    trace_path_ = o.trace_file;
    try {
      check_trace_path(trace_path_, json_file_);
    } catch (...) {
      if (json_file_) std::fclose(json_file_);
      throw;
    }
    tracing_ = true;
  }
  const std::size_t cap = tracing_ ? o.trace_buffer : 0;
  for (unsigned i = 0; i < workers; ++i) logs_.push_back(std::make_unique<Log>(*this, i, cap));
  foreign_capacity_ = cap;
  at_begin_.resize(workers);
  events_at_begin_.resize(workers);
}

Recorder::~Recorder() {
  if (json_file_ && std::fclose(json_file_) != 0) output_failed(kProfileFile, json_path_, std::strerror(errno));
}

void Recorder::buffer_full(const Log& l) {
  if (!stopped_.exchange(true, std::memory_order_relaxed)) {
    stopped_at_ = clock_.now();
    std::fprintf(stderr,
                 "weft: trace buffer of worker %u is full (%zu events, WEFT_TRACE_BUFFER / "
                 "ProfileOptions::trace_buffer%s): tracing stopped; '%s' will hold the events before this point\n",
                 l.worker, l.capacity, edges_ ? "; with WEFT_TRACE_EDGES each dependency takes one too" : "",
                 trace_path_.c_str());
  }
}

void Recorder::begin_run(Worker& w0) {
  // Background workers are outside any run here (end_run waited for them), so their logs and counters can
  // be read and reset; the engine's release of `running` publishes the reset to them.
  counters_at_begin_ = sample_counters();  // before the run's clock starts: sources may take a while
  const Ticks now = clock_.now();
  run_begin_ = now;
  for (std::size_t i = 0; i < logs_.size(); ++i) {
    logs_[i]->reset_run(now, i == 0 ? State::overhead : State::idle);
    at_begin_[i] = engine_.workers[i]->counters;
    events_at_begin_[i] = logs_[i]->n_events;
  }
  (void)w0;
}

void Recorder::end_run(Worker& w0) {
  Log& l0 = *w0.trace;
  const Ticks end = l0.switch_to(State::idle);
#if WEFT_TSAN
  constexpr std::memory_order order = std::memory_order_seq_cst;  // see enter_run
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with enter_run's fence
  constexpr std::memory_order order = std::memory_order_acquire;
#endif
  for (std::size_t i = 1; i < logs_.size(); ++i)
    while (logs_[i]->active.load(order)) std::this_thread::yield();
  ++runs_;
  if (tracing() && !stopped())
    if (Event* e = l0.slot())
      *e = Event{run_begin_, end, "run", 0, 0, static_cast<std::int32_t>(std::min<std::uint64_t>(runs_, INT32_MAX)),
                 Kind::run};
  if (tracing()) keep_names();
  clock_.calibrate();
  Profile p = build_profile(run_begin_, end);
  if (print_) {
    const std::string text = to_text(p);
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }
  if (json_file_) append_json(p);
  std::lock_guard<std::mutex> g(profile_mutex_);
  last_ = std::move(p);
}

// The trace is written when the Runtime goes, but a label need only outlive its run (weft/tasks.hpp): the
// run's events get copies of their names, one per distinct name, kept until then.
void Recorder::keep_names() {
  std::unordered_map<const char*, const char*> copied;  // this run's: a pointer may name other bytes later
  for (std::size_t i = 0; i < logs_.size(); ++i) {
    Log& l = *logs_[i];
    for (std::size_t k = events_at_begin_[i]; k < l.n_events; ++k) {
      const char*& name = l.events[k].name;
      if (!name) continue;
      auto [it, fresh] = copied.try_emplace(name, nullptr);
      if (fresh) it->second = names_.insert(name).first->c_str();  // node-based: the copy never moves
      name = it->second;
    }
  }
}

Profile Recorder::last_profile() const {
  std::lock_guard<std::mutex> g(profile_mutex_);
  return last_;
}

Profile Recorder::build_profile(Ticks begin, Ticks end) {
  Profile p;
  p.valid = true;
  p.run = runs_;
  p.wall_seconds = clock_.seconds(end - begin);
  std::vector<Counters> diff(logs_.size());
  std::map<std::string, LabelProfile> labels;
  for (std::size_t i = 0; i < logs_.size(); ++i) {
    const Log& l = *logs_[i];
    diff[i] = engine_.workers[i]->counters - at_begin_[i];
    WorkerProfile w;
    // A background worker leaves the run a little after its end (it notices the end at its next look for
    // work): clip what it counted after the end, so that work + overhead + idle = wall.
    w.work_seconds = std::min(clock_.seconds(l.acc[static_cast<int>(State::work)]), p.wall_seconds);
    w.overhead_seconds =
        std::min(clock_.seconds(l.acc[static_cast<int>(State::overhead)]), p.wall_seconds - w.work_seconds);
    w.idle_seconds = p.wall_seconds - w.work_seconds - w.overhead_seconds;
    w.tasks_created = diff[i].tasks_created;
    w.tasks_executed = diff[i].tasks_executed;
    w.tasks_stolen = diff[i].tasks_stolen;
    w.immediate_successor = diff[i].immediate_successor;
    w.throttle_stalls = diff[i].throttle_stalls;
    p.total.work_seconds += w.work_seconds;
    p.total.overhead_seconds += w.overhead_seconds;
    p.total.idle_seconds += w.idle_seconds;
    p.total.tasks_created += w.tasks_created;
    p.total.tasks_executed += w.tasks_executed;
    p.total.tasks_stolen += w.tasks_stolen;
    p.total.immediate_successor += w.immediate_successor;
    p.total.throttle_stalls += w.throttle_stalls;
    p.workers.push_back(w);

    p.spawning_tasks += l.spawning_tasks;
    p.nested_discovery_seconds += clock_.seconds(l.nested_discovery);
    if (i == 0) {
      p.discovery_seconds = clock_.seconds(l.root_discovery);
      p.root_children = l.root_children;
    }
    for (const auto& [ptr, s] : l.labels) {
      LabelProfile& lp = labels[ptr ? ptr : "(unlabelled)"];
      lp.count += s.count;
      lp.total_seconds += clock_.seconds(s.total);
      lp.max_seconds = std::max(lp.max_seconds, clock_.seconds(s.max));
    }
    for (const Log::PhaseRec& ph : l.phases)
      p.phases.push_back(PhaseProfile{ph.name ? ph.name : "phase", ph.tag,
                                      clock_.seconds(ph.begin > begin ? ph.begin - begin : 0),
                                      clock_.seconds(ph.end > ph.begin ? ph.end - ph.begin : 0)});
    p.trace_events += l.n_events - events_at_begin_[i];
  }
  p.stats = sum_stats(diff.data(), diff.size());
  for (auto& [name, lp] : labels) {
    lp.label = name;
    lp.mean_seconds = lp.count ? lp.total_seconds / static_cast<double>(lp.count) : 0;
    p.labels.push_back(std::move(lp));
  }
  std::stable_sort(p.labels.begin(), p.labels.end(),
                   [](const LabelProfile& a, const LabelProfile& b) { return a.total_seconds > b.total_seconds; });
  std::stable_sort(p.phases.begin(), p.phases.end(),
                   [](const PhaseProfile& a, const PhaseProfile& b) { return a.begin_seconds < b.begin_seconds; });
  p.trace_truncated = stopped();
  p.counters = counter_delta(counters_at_begin_, sample_counters());
  p.rank = rank_.rank;
  p.ranks = rank_.size;
  return p;
}

void Recorder::append_json(const Profile& p) {
  const long tail = json_tail_;
  std::fseek(json_file_, tail, SEEK_SET);
  if (runs_ > 1) std::fputs(",\n", json_file_);
  const std::string j = to_json(p);
  std::fputs(j.c_str(), json_file_);
  std::fputc('\n', json_file_);
  json_tail_ = std::ftell(json_file_);
  std::fputs("]}\n", json_file_);
  if (const int err = flush_error(json_file_)) {
    output_failed(kProfileFile, json_path_, std::strerror(err));
    // Put back the end of the runs written before (bytes the file already had, so a full disk or a size limit
    // does not refuse them), so that the file stays valid JSON without this run.
    std::clearerr(json_file_);
    if (std::fseek(json_file_, tail, SEEK_SET) == 0) {
      std::fputs("]}\n", json_file_);
      if (std::fflush(json_file_) == 0 && ::ftruncate(fileno(json_file_), tail + 3) != 0) {
        // (best effort: the error is reported above)
      }
    }
    std::fclose(json_file_);
    json_file_ = nullptr;
  }
}

void Recorder::finish() {
  if (!tracing_) return;
  tracing_ = false;  // written once (the engine's workers have stopped: nothing records any more)
  clock_.calibrate();
  std::string why;
  trace_file_ = std::fopen(trace_path_.c_str(), "w");
  if (!trace_file_) {
    output_failed(kTraceFile, trace_path_, std::strerror(errno));
    return;
  }
  try {
    write_trace();
  } catch (const std::exception& e) {  // called from a destructor: report, never throw
    why = e.what();
  }
  if (std::fclose(trace_file_) != 0 && why.empty()) why = std::strerror(errno);
  trace_file_ = nullptr;
  if (!why.empty()) output_failed(kTraceFile, trace_path_, why);
}

}  // namespace weft::detail::trace
