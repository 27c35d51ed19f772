// taskbench core: buffers and the per-thread task runner shared by the implementations.
#include <algorithm>
#include <cstdlib>
#include <new>

#include "core/core.hpp"

namespace taskbench {

namespace {
constexpr std::size_t kAlign = 64;  // a cache line: buffers of different points never share one
}

OutputBuffers::OutputBuffers(const TaskGraph& graph, long generations)
    : generations_(generations), bytes_(graph.output_bytes) {
  stride_ = (bytes_ + kAlign - 1) / kAlign * kAlign;
  const std::size_t total =
      stride_ * static_cast<std::size_t>(generations) * static_cast<std::size_t>(graph.max_width);
  storage_ = std::shared_ptr<char[]>(static_cast<char*>(::operator new[](total, std::align_val_t{kAlign})),
                                     [](char* p) { ::operator delete[](p, std::align_val_t{kAlign}); });
  base_ = storage_.get();
  std::fill(base_, base_ + total, 0);
}

TaskRunner::TaskRunner(std::size_t scratch_bytes) : scratch_(scratch_bytes) {
  TaskGraph::prepare_scratch(scratch_.data(), scratch_.size());
}

void TaskRunner::run(const TaskGraph& g, long t, long point, char* output, const char* const* inputs,
                     std::size_t n) {
  if (sizes_.size() < n) sizes_.resize(std::max(n, 2 * sizes_.size()), g.output_bytes);
  std::fill(sizes_.begin(), sizes_.begin() + static_cast<std::ptrdiff_t>(n), g.output_bytes);
  g.execute_point(t, point, output, g.output_bytes, inputs, sizes_.data(), n,
                  g.scratch_bytes ? scratch_.data() : nullptr, g.scratch_bytes);
}

}  // namespace taskbench
