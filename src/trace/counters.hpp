// Counters of components outside the engine (the MPI transport, the termination detector) in the profile, without
// the profiler knowing them: a component registers a named section with a function that reports its counters,
// and unregisters it before it goes away.
//
//   id = add_counter_source("transport", [this](std::vector<weft::Counter>& out) { ...append... });
//   ...
//   remove_counter_source(id);   // in the destructor, while what the function reads is still alive
//
// Values are totals since the component's construction (counts, and seconds accumulated), never decreasing.
// The recorder samples every section at the start and at the end of a run and reports the difference
// (Profile::counters). A component may be destroyed at any time, during a run too: remove_counter_source() calls
// its function one last time and keeps those values in the section's retired totals, so that the section's sum
// never goes down and the run still counts what it did. Several sources of one section are summed by counter
// name (two transports). The registry is process-wide and lives as long as the process.
//
// Thread safety: any thread; the functions run under the registry's lock (they must not call back into it), and
// never after remove_counter_source() has returned. The cost is paid only when a source is added or removed and
// when a profiled run begins or ends.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weft/profile.hpp"

namespace weft::detail::trace {

/// Appends the component's counters (name, and count or seconds) to `out`; the same names every call.
using CounterSource = std::function<void(std::vector<Counter>& out)>;

/// Registers `source` under section `section`; returns its id (never 0).
std::uint64_t add_counter_source(std::string section, CounterSource source);
/// Takes the source's last values into its section's retired totals and removes it. An unknown id (or 0) is
/// ignored.
void remove_counter_source(std::uint64_t id);

/// Every section known (registered now or before), with the sum of its live sources and its retired totals.
std::vector<CounterSection> sample_counters();
/// `after` - `before`, counter by counter (a counter or section missing from `before` counts from 0; a
/// difference below 0, which totals never show, is 0).
std::vector<CounterSection> counter_delta(const std::vector<CounterSection>& before,
                                          const std::vector<CounterSection>& after);

}  // namespace weft::detail::trace
