// taskbench-weft-flow on several processes: the instantiations of the graph with Packet outputs (see
// weft_flow.hpp; kept out of weft_flow.cpp so that they do not change how the single-process graph compiles).
#include <algorithm>
#include <cstddef>

#include "weft_flow.hpp"

namespace taskbench::weft_flow {

namespace {

/// The smallest Packet that holds the largest -output (check_limits, in weft_flow.cpp, bounds it).
template <std::size_t N, std::size_t... More>
int run_packets(taskbench::App& app, const Job& job, const Fault& fault) {
  std::size_t bytes = 0;
  for (const auto& g : app.graphs) bytes = std::max(bytes, g.output_bytes);
  if constexpr (sizeof...(More) > 0) {
    if (bytes > N) return run_packets<More...>(app, job, fault);
  } else {
    static_assert(N == kMaxPacket);
  }
  return run<Packet<N>>(app, job, fault);
}

}  // namespace

int run_on_ranks(taskbench::App& app, const Job& job, const Fault& fault) {
  return run_packets<16, 64, 512, kMaxPacket>(app, job, fault);
}

}  // namespace taskbench::weft_flow
