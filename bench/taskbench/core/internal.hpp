// taskbench core internals shared by core.cpp, graph.cpp and kernels.cpp (not used by implementations).
#pragma once

#include <cstdint>
#include <cstdio>

#include "core/core.hpp"

namespace taskbench {

/// The 64-bit word scratch buffers are filled with.
inline constexpr std::uint64_t kScratchMagic = 0x5C4A7C8B;

/// Runs the kernel of task (t, point) (spec section 4); scratch is the task's scratch buffer (may be null when
/// the graph has no scratch).
void run_kernel(const TaskGraph& g, long t, long point, char* scratch);
/// Iterations of the load_imbalance kernel for task (t, point).
long imbalanced_iterations(const TaskGraph& g, long t, long point);
/// Matrix order of the BLAS kernels: floor(sqrt(scratch / 24)).
long matrix_order(std::size_t scratch_bytes);
/// Whether this build has the BLAS kernels (compute_dgemm, memory_daxpy): OpenBLAS found at configure time.
bool blas_available();
/// Makes OpenBLAS run each call on the calling thread (once per process; nothing without BLAS).
void use_single_threaded_blas();

/// Prints graph g in the --dump-graph format (spec section 6).
void dump_graph(const TaskGraph& g, std::FILE* f);

/// Live dependency points of a graph, and (with nodes > 0) how many of them connect points placed on the same
/// node by a block distribution of the points over the nodes.
struct DependenceCounts {
  long long total = 0;
  long long local = 0;
};
DependenceCounts count_dependencies(const TaskGraph& g, long nodes);

}  // namespace taskbench
