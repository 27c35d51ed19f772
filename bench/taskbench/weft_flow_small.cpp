// taskbench-weft-flow on one process with outputs of at most 16 bytes (the default -output): the graph with
// Packet<16> outputs, each consumer getting its own 24-byte copy (see weft_flow.hpp). Compiled apart from
// weft_flow.cpp for the reason weft_flow_ranks.cpp is: a second instantiation there changes how GCC inlines
// the first.
#include "weft_flow.hpp"

namespace taskbench::weft_flow {

int run_small_outputs(taskbench::App& app, const Job& job, const Fault& fault) {
  return run<Packet<Output::kInline>>(app, job, fault);
}

}  // namespace taskbench::weft_flow
