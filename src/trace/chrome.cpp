// Chrome / Perfetto trace-event JSON export of the recorded events (format: see weft/profile.hpp).
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "trace/json.hpp"
#include "trace/recorder.hpp"

namespace weft::detail::trace {

namespace {

// Streams the file through one buffer; throws on a write error.
class Writer {
 public:
  explicit Writer(std::FILE* f) : f_(f) {}
  std::string& buf() { return buf_; }
  // Starts the next element of the traceEvents array.
  std::string& next() {
    if (!first_) buf_ += ",\n";
    first_ = false;
    return buf_;
  }
  void maybe_flush() {
    if (buf_.size() > (1u << 20)) flush();
  }
  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
      throw std::runtime_error(std::strerror(errno));
    buf_.clear();
  }

 private:
  std::FILE* f_;
  std::string buf_;
  bool first_ = true;
};

// Timestamps in whole nanoseconds (rounding a linear map keeps the order: spans never cross after it).
struct Span {
  unsigned tid;
  long long begin_ns;
};

void append_us(std::string& out, long long ns) {
  const bool neg = ns < 0;
  const unsigned long long a = static_cast<unsigned long long>(neg ? -ns : ns);
  appendf(out, "%s%llu.%03llu", neg ? "-" : "", a / 1000, a % 1000);
}

// An operation bound to a task (an MPI request): an async span, as a task's requests overlap one another and
// the tasks that run meanwhile.
void append_operation(std::string& o, const Event& e, int pid, unsigned tid, long long b, long long d,
                      std::uint64_t id) {
  for (int end = 0; end < 2; ++end) {
    if (end) o += ",\n";
    appendf(o, "{\"ph\":\"%s\",\"cat\":\"mpi\",\"id\":%llu,\"name\":", end ? "e" : "b",
            static_cast<unsigned long long>(id));
    append_json_string(o, e.name ? e.name : "operation");
    appendf(o, ",\"pid\":%d,\"tid\":%u,\"ts\":", pid, tid);
    append_us(o, end ? b + d : b);
    appendf(o, ",\"args\":{\"task\":%u,\"peer\":%d,\"bytes\":%llu}}", e.id, e.extra,
            static_cast<unsigned long long>(e.tag));
  }
}

void thread_meta(Writer& w, int pid, unsigned tid, const std::string& name, unsigned sort) {
  std::string& o = w.next();
  appendf(o, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":", pid, tid);
  append_json_string(o, name.c_str());
  o += "}},\n";
  appendf(o, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%u}}", pid,
          tid, sort);
}

}  // namespace

void Recorder::write_trace() {
  const std::size_t nw = logs_.size();
  auto ns = [&](Ticks t) { return std::llround(clock_.to_ns(t)); };
  Writer w(trace_file_);
  std::string& head = w.buf();
  // The process: pid = rank + 1 (1 for a single process; Perfetto reserves pid 0 for the kernel's idle task),
  // named "rank R" in a job of several, so that the ranks' files, merged or side by side, are distinct tracks.
  const int pid = rank_.rank + 1;
  appendf(head,
          "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"weft_trace\":1,\"workers\":%zu,\"rank\":%d,\"ranks\":%d,"
          "\"origin_unix_ns\":%lld,\"truncated\":%s",
          nw, rank_.rank, rank_.size, static_cast<long long>(clock_.origin_unix_ns()), stopped() ? "true" : "false");
  if (stopped()) {
    head += ",\"dropped_after_us\":";
    append_us(head, ns(stopped_at_));
  }
  head += "},\n\"traceEvents\":[\n";
  {
    std::string& o = w.next();
    const std::string pname = rank_.several() ? "rank " + std::to_string(rank_.rank) : "weft";
    appendf(o, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"%s\"}},\n", pid, pname.c_str());
    appendf(o, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}", pid,
            rank_.rank);
  }

  std::unordered_map<std::uint32_t, Span> spans;  // task id -> its span (for edges)
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> out;  // edges by predecessor id
  std::uint64_t async_id = 0;
  for (std::size_t wi = 0; wi < nw; ++wi) {
    const Log& l = *logs_[wi];
    const unsigned tid = static_cast<unsigned>(wi), dtid = static_cast<unsigned>(kMaxThreads + wi);
    bool named = false, dnamed = false;
    for (std::size_t k = 0; k < l.n_events; ++k) {
      const Event& e = l.events[k];
      if (e.kind == Kind::edge) {
        out[static_cast<std::uint32_t>(e.begin)].push_back(static_cast<std::uint32_t>(e.end));
        continue;
      }
      const long long b = ns(e.begin), d = ns(e.end) - b;
      if ((e.kind == Kind::task || e.kind == Kind::root) && !named) {
        thread_meta(w, pid, tid, "worker " + std::to_string(wi), tid);
        named = true;
      } else if (e.kind == Kind::discovery && !dnamed) {
        thread_meta(w, pid, dtid, "worker " + std::to_string(wi) + " discovery", static_cast<unsigned>(nw + wi));
        dnamed = true;
      }
      std::string& o = w.next();
      switch (e.kind) {
        case Kind::task:
        case Kind::root:
          o += "{\"ph\":\"X\",\"cat\":";
          o += e.kind == Kind::task ? "\"task\"" : "\"root\"";
          o += ",\"name\":";
          append_json_string(o, e.name ? e.name : (e.kind == Kind::task ? "task" : "root"));
          appendf(o, ",\"pid\":%d,\"tid\":%u,\"ts\":", pid, tid);
          append_us(o, b);
          o += ",\"dur\":";
          append_us(o, d);
          appendf(o, ",\"args\":{\"id\":%u,\"priority\":%d,\"tag\":%llu}}", e.id, e.extra,
                  static_cast<unsigned long long>(e.tag));
          if (e.kind == Kind::task) spans[e.id] = Span{tid, b};
          break;
        case Kind::discovery:
          o += "{\"ph\":\"X\",\"cat\":\"discovery\",\"name\":";
          append_json_string(o, (std::string("spawn: ") + (e.name ? e.name : "task")).c_str());
          appendf(o, ",\"pid\":%d,\"tid\":%u,\"ts\":", pid, dtid);
          append_us(o, b);
          o += ",\"dur\":";
          append_us(o, d);
          appendf(o, ",\"args\":{\"id\":%u,\"children\":%d}}", e.id, e.extra);
          break;
        case Kind::phase:
        case Kind::run: {
          // Async spans: phases of a front end may overlap (iteration i+1 starts before i ends).
          const bool run = e.kind == Kind::run;
          const std::uint64_t id = ++async_id;
          for (int end = 0; end < 2; ++end) {
            if (end) o += ",\n";
            appendf(o, "{\"ph\":\"%s\",\"cat\":\"%s\",\"id\":%llu,\"name\":", end ? "e" : "b", run ? "run" : "phase",
                    static_cast<unsigned long long>(id));
            append_json_string(o, e.name ? e.name : "phase");
            appendf(o, ",\"pid\":%d,\"tid\":%u,\"ts\":", pid, tid);
            append_us(o, end ? b + d : b);
            if (run)
              appendf(o, ",\"args\":{\"run\":%d}}", e.extra);
            else
              appendf(o, ",\"args\":{\"tag\":%llu}}", static_cast<unsigned long long>(e.tag));
          }
          break;
        }
        case Kind::operation:
          append_operation(o, e, pid, tid, b, d, ++async_id);
          break;
        case Kind::edge:
          break;
      }
      w.maybe_flush();
    }
  }

  // Operations completed by the communication thread, on a track of its own after the workers'.
  if (!foreign_.empty()) {
    const unsigned tid = static_cast<unsigned>(nw);
    thread_meta(w, pid, tid, "communication thread", tid);
    for (const Event& e : foreign_) {
      const long long b = ns(e.begin);
      append_operation(w.next(), e, pid, tid, b, ns(e.end) - b, ++async_id);
      w.maybe_flush();
    }
  }

  // Dependency arrows between task spans. Join nodes have no span: an edge into one continues along the
  // node's own successors, so an arrow links the tasks the node stands between.
  std::uint64_t flow = 0;
  std::vector<std::uint32_t> stack;
  std::unordered_set<std::uint32_t> seen;
  for (const auto& [pred, succs] : out) {
    auto ps = spans.find(pred);
    if (ps == spans.end()) continue;  // a node (reached from its predecessors), or not traced
    stack.assign(succs.begin(), succs.end());
    seen.clear();
    while (!stack.empty()) {
      const std::uint32_t s = stack.back();
      stack.pop_back();
      if (!seen.insert(s).second) continue;
      auto ss = spans.find(s);
      if (ss == spans.end()) {
        auto more = out.find(s);
        if (more != out.end()) stack.insert(stack.end(), more->second.begin(), more->second.end());
        continue;
      }
      ++flow;
      std::string& o = w.next();
      appendf(o, "{\"ph\":\"s\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":%llu,\"pid\":%d,\"tid\":%u,\"ts\":",
              static_cast<unsigned long long>(flow), pid, ps->second.tid);
      append_us(o, ps->second.begin_ns);
      appendf(o, ",\"args\":{\"from\":%u,\"to\":%u}},\n", pred, s);
      appendf(o, "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":%llu,\"pid\":%d,\"tid\":%u,\"ts\":",
              static_cast<unsigned long long>(flow), pid, ss->second.tid);
      append_us(o, ss->second.begin_ns);
      o += "}";
      w.maybe_flush();
    }
  }
  w.buf() += "\n]}\n";
  w.flush();
  if (std::fflush(trace_file_) != 0 || std::ferror(trace_file_)) throw std::runtime_error(std::strerror(errno));
}

}  // namespace weft::detail::trace
