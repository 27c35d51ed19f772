// Flow graphs across processes (MPI): the graph's side of the communication layer. See remote.cpp.
#pragma once

#include <memory>
#include <utility>

#include "weft/flow.hpp"

namespace weft::flow::detail {

/// {number of processes, this process's rank} of the graphs built now: {1, 0} unless several_processes().
std::pair<int, int> processes();

/// The distributed side of graph g, or null when the program runs as one process (weft built without MPI, or
/// not launched on several ranks): then the graph is exactly the single-process one. Collective over the ranks
/// (every rank builds the same graphs in the same order); checks that every rank built the same graph.
std::unique_ptr<RemoteBase> make_remote(GraphState& g);

/// The body of one fence()/wait() of a distributed graph, on worker 0 inside the run (cx: the run's root):
/// begins the next termination epoch, runs the seeds (`seeds(arg)`), then runs tasks and drives the transport
/// until the epoch has terminated on every rank. Rethrows what the seeds threw, after the epoch has ended.
void execute_distributed(RemoteBase& r, weft::Context& cx, void (*seeds)(void*), void* arg);

}  // namespace weft::flow::detail
