// Profile formatting: the text table (WEFT_PROFILE=1) and the JSON object (WEFT_PROFILE=json:FILE).
#include <cstdio>
#include <cstring>
#include <string>

#include "trace/json.hpp"
#include "weft/profile.hpp"

namespace weft {

using detail::trace::append_json_string;
using detail::trace::appendf;

namespace {
double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

// A label or phase name as one cell of the table: control characters (a newline would break the row) are
// written as C escapes.
std::string cell(const std::string& s) {
  std::string o;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      o += ch;
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\t') {
      o += "\\t";
    } else {
      appendf(o, "\\x%02x", c);
    }
  }
  return o;
}

void worker_row(std::string& o, const char* name, const WorkerProfile& w, double wall) {
  appendf(o, "  %-7s %11.6f %6.1f%% %11.6f %6.1f%% %11.6f %6.1f%% %10llu %10llu %8llu %9llu %7llu\n", name,
          w.work_seconds, pct(w.work_seconds, wall), w.overhead_seconds, pct(w.overhead_seconds, wall),
          w.idle_seconds, pct(w.idle_seconds, wall), static_cast<unsigned long long>(w.tasks_created),
          static_cast<unsigned long long>(w.tasks_executed), static_cast<unsigned long long>(w.tasks_stolen),
          static_cast<unsigned long long>(w.immediate_successor), static_cast<unsigned long long>(w.throttle_stalls));
}

void worker_json(std::string& o, const WorkerProfile& w) {
  appendf(o,
          "{\"work_s\": %.9f, \"overhead_s\": %.9f, \"idle_s\": %.9f, \"tasks_created\": %llu, "
          "\"tasks_executed\": %llu, \"tasks_stolen\": %llu, \"immediate_successor\": %llu, \"throttle_stalls\": %llu}",
          w.work_seconds, w.overhead_seconds, w.idle_seconds, static_cast<unsigned long long>(w.tasks_created),
          static_cast<unsigned long long>(w.tasks_executed), static_cast<unsigned long long>(w.tasks_stolen),
          static_cast<unsigned long long>(w.immediate_successor), static_cast<unsigned long long>(w.throttle_stalls));
}

using ull = unsigned long long;

// " name value" items, wrapped below 110 columns; continuation lines start at column 8.
class Items {
 public:
  Items(std::string& o, const char* head) : o_(o), col_(std::strlen(head)) { o_ += head; }
  void add(const char* item, int k) {
    if (col_ + static_cast<std::size_t>(k) > 110) {
      o_ += "\n        ";
      col_ = 8;
    }
    o_ += item;
    col_ += static_cast<std::size_t>(k);
  }
  void end() { o_ += "\n"; }

 private:
  std::string& o_;
  std::size_t col_;
};

void counter_text(std::string& o, const CounterSection& s) {
  std::string head = "  " + s.name + ":";
  Items items(o, head.c_str());
  for (const Counter& c : s.counters) {
    char item[160];
    const int k = c.is_time
                      ? std::snprintf(item, sizeof item, " %.60s %.6f", c.name.c_str(), c.seconds)
                      : std::snprintf(item, sizeof item, " %.60s %llu", c.name.c_str(), static_cast<ull>(c.count));
    items.add(item, k);
  }
  items.end();
}
}  // namespace

std::string to_text(const Profile& p) {
  std::string o;
  if (!p.valid) return "weft profile: none (profiling off, or no run has ended)\n";
  const double wall = p.wall_seconds, all = wall * static_cast<double>(p.workers.size());
  o += "weft profile: ";
  if (p.ranks > 1)
    appendf(o, "rank %d of %d, ", p.rank, p.ranks);
  else if (p.ranks == 0)
    appendf(o, "rank %d, ", p.rank);
  appendf(o, "run %llu, %zu worker%s, %.6f s wall\n", static_cast<ull>(p.run), p.workers.size(),
          p.workers.size() == 1 ? "" : "s", wall);
  o += "  worker       work s  work%  overhead s  ovhd%      idle s  idle%    created   executed   stolen  "
       "imm.succ  stalls\n";
  for (std::size_t i = 0; i < p.workers.size(); ++i) worker_row(o, std::to_string(i).c_str(), p.workers[i], wall);
  worker_row(o, "total", p.total, all);
  Items stats(o, "  stats:");
  for (const StatsField& f : kStatsFields) {  // the counters of weft/runtime.hpp's Stats, by name
    char item[96];
    const int k = std::snprintf(item, sizeof item, " %s %llu", f.name, static_cast<ull>(p.stats.*f.member));
    stats.add(item, k);
  }
  stats.end();
  appendf(o, "  discovery: root spawned %llu tasks in %.6f s (first to last spawn, %.1f%% of wall)",
          static_cast<ull>(p.root_children), p.discovery_seconds, pct(p.discovery_seconds, wall));
  if (p.spawning_tasks)
    appendf(o, "; %llu other tasks spawned, %.6f s first to last spawn in total", static_cast<ull>(p.spawning_tasks),
            p.nested_discovery_seconds);
  o += "\n";
  for (const CounterSection& c : p.counters) counter_text(o, c);
  if (!p.labels.empty()) {
    o += "  label (work time per body)              count       mean us        max us      total ms\n";
    for (const LabelProfile& l : p.labels)
      appendf(o, "  %-36.36s %10llu %13.3f %13.3f %13.3f\n", cell(l.label).c_str(), static_cast<ull>(l.count),
              l.mean_seconds * 1e6, l.max_seconds * 1e6, l.total_seconds * 1e3);
  }
  if (!p.phases.empty()) {
    o += "  phase                                   tag      begin ms   duration ms\n";
    for (const PhaseProfile& ph : p.phases)
      appendf(o, "  %-30.30s %12llu %13.3f %13.3f\n", cell(ph.name).c_str(), static_cast<ull>(ph.tag),
              ph.begin_seconds * 1e3, ph.seconds * 1e3);
  }
  if (p.trace_truncated) o += "  trace: buffer full, tracing stopped (raise WEFT_TRACE_BUFFER)\n";
  return o;
}

std::string to_json(const Profile& p) {
  std::string o;
  appendf(o, "{\"valid\": %s, \"run\": %llu, \"wall_s\": %.9f, \"workers\": [", p.valid ? "true" : "false",
          static_cast<ull>(p.run), p.wall_seconds);
  for (std::size_t i = 0; i < p.workers.size(); ++i) {
    if (i) o += ", ";
    worker_json(o, p.workers[i]);
  }
  o += "], \"total\": ";
  worker_json(o, p.total);
  o += ", \"stats\": {";
  for (const StatsField& f : kStatsFields)
    appendf(o, "%s\"%s\": %llu", &f == kStatsFields ? "" : ", ", f.name, static_cast<ull>(p.stats.*f.member));
  o += "}";
  appendf(o,
          ", \"discovery_s\": %.9f, \"root_children\": %llu, \"spawning_tasks\": %llu, "
          "\"nested_discovery_s\": %.9f, \"labels\": [",
          p.discovery_seconds, static_cast<ull>(p.root_children), static_cast<ull>(p.spawning_tasks),
          p.nested_discovery_seconds);
  for (std::size_t i = 0; i < p.labels.size(); ++i) {
    const LabelProfile& l = p.labels[i];
    o += i ? ", {\"label\": " : "{\"label\": ";
    append_json_string(o, l.label.c_str());
    appendf(o, ", \"count\": %llu, \"total_s\": %.9f, \"mean_s\": %.9f, \"max_s\": %.9f}", static_cast<ull>(l.count),
            l.total_seconds, l.mean_seconds, l.max_seconds);
  }
  o += "], \"phases\": [";
  for (std::size_t i = 0; i < p.phases.size(); ++i) {
    const PhaseProfile& ph = p.phases[i];
    o += i ? ", {\"name\": " : "{\"name\": ";
    append_json_string(o, ph.name.c_str());
    appendf(o, ", \"tag\": %llu, \"begin_s\": %.9f, \"seconds\": %.9f}", static_cast<ull>(ph.tag), ph.begin_seconds,
            ph.seconds);
  }
  appendf(o, "], \"trace_events\": %llu, \"trace_truncated\": %s, \"rank\": %d, \"ranks\": %d, \"counters\": {",
          static_cast<ull>(p.trace_events), p.trace_truncated ? "true" : "false", p.rank, p.ranks);
  for (std::size_t i = 0; i < p.counters.size(); ++i) {
    const CounterSection& sec = p.counters[i];
    if (i) o += ", ";
    append_json_string(o, sec.name.c_str());
    o += ": {";
    for (std::size_t k = 0; k < sec.counters.size(); ++k) {
      const Counter& c = sec.counters[k];
      if (k) o += ", ";
      append_json_string(o, c.name.c_str());
      if (c.is_time)
        appendf(o, ": %.9f", c.seconds);
      else
        appendf(o, ": %llu", static_cast<ull>(c.count));
    }
    o += "}";
  }
  o += "}}";
  return o;
}

}  // namespace weft
