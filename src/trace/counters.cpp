// The registry of counter sections (see counters.hpp).
#include "trace/counters.hpp"

#include <algorithm>
#include <mutex>
#include <utility>

namespace weft::detail::trace {
namespace {

struct Registry {
  struct Section {
    std::string name;
    std::vector<Counter> retired;  // the last values of its removed sources, summed
  };
  struct Source {
    std::uint64_t id;
    std::size_t section;
    CounterSource fn;
  };
  std::mutex mu;
  std::vector<Section> sections;  // in order of first registration; never removed
  std::vector<Source> sources;
  std::uint64_t next_id = 1;
};

// Never destroyed: a component held by a static may unregister after this file's statics would be gone.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

template <class V>  // std::vector<Counter>, const or not
auto find(V& v, const std::string& name) -> decltype(&v[0]) {
  for (auto& c : v)
    if (c.name == name) return &c;
  return nullptr;
}

// Adds `from` into `into`, by name; new names go to the end, in their order.
void accumulate(std::vector<Counter>& into, const std::vector<Counter>& from) {
  for (const Counter& c : from) {
    if (Counter* t = find(into, c.name)) {
      t->count += c.count;
      t->seconds += c.seconds;
    } else {
      into.push_back(c);
    }
  }
}

}  // namespace

std::uint64_t add_counter_source(std::string section, CounterSource source) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  std::size_t s = 0;
  while (s < r.sections.size() && r.sections[s].name != section) ++s;
  if (s == r.sections.size()) r.sections.push_back({std::move(section), {}});
  const std::uint64_t id = r.next_id++;
  r.sources.push_back({id, s, std::move(source)});
  return id;
}

void remove_counter_source(std::uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = std::find_if(r.sources.begin(), r.sources.end(), [&](const Registry::Source& s) { return s.id == id; });
  if (it == r.sources.end()) return;
  try {
    std::vector<Counter> last;
    it->fn(last);
    accumulate(r.sections[it->section].retired, last);
  } catch (...) {  // called from destructors: without memory for them, the source's last values are lost
  }
  r.sources.erase(it);
}

std::vector<CounterSection> sample_counters() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  std::vector<CounterSection> out;
  out.reserve(r.sections.size());
  for (const Registry::Section& s : r.sections) out.push_back({s.name, s.retired});
  std::vector<Counter> tmp;
  for (const Registry::Source& s : r.sources) {
    tmp.clear();
    s.fn(tmp);
    accumulate(out[s.section].counters, tmp);
  }
  return out;
}

std::vector<CounterSection> counter_delta(const std::vector<CounterSection>& before,
                                          const std::vector<CounterSection>& after) {
  std::vector<CounterSection> out = after;
  for (CounterSection& s : out) {
    auto b = std::find_if(before.begin(), before.end(), [&](const CounterSection& x) { return x.name == s.name; });
    if (b == before.end()) continue;
    for (Counter& c : s.counters) {
      const Counter* o = find(b->counters, c.name);
      if (!o) continue;
      c.count = c.count > o->count ? c.count - o->count : 0;
      c.seconds = c.seconds > o->seconds ? c.seconds - o->seconds : 0;
    }
  }
  return out;
}

}  // namespace weft::detail::trace
