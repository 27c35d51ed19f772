// Task reductions (weft::reduction / weft::weak_reduction; see the top of weft/tasks.hpp).
//
// A reduction group is a group of the domain (like inoutset: its members run concurrently after what came
// before) with a ReductionGroup beside it: the datum, the operator and one private copy per worker, created
// when a member running on that worker first asks for it (Context::local). The group ends like any group, at
// the next access to the datum that does not join it; its join node is then a reduce node, which in its
// completion (after every member) combines the copies into the datum and frees the group, before the nodes'
// successors are released. A group still open at a taskwait or at its parent's end is combined there.
//
// Synchronisation: slot i of a group is read and written only by worker i while members run (a worker runs one
// task at a time; members nested in its waits share its copy, which is OpenMP's semantics), and by the
// combining thread once every member has finished: the members' completions (acq_rel on their successor lists
// and the node's pending count, or the parent's acquire of its children count at a taskwait) order every write
// to the copies before the combination. No slot needs an atomic.
//
// Nesting: a task that reduces on x (weakly or not) links its group (Task::reductions); a record its children
// create for x borrows that group (domain.cpp, new_record), so their private copies are the group's: one
// combination, in the domain that owns the group, covers every level.
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "deps/deps.hpp"

namespace weft::detail {

namespace {
void* allocate_copy(const ReducerOps& ops) {
  return ::operator new(ops.size, std::align_val_t(ops.align));
}
void free_copy(const ReducerOps& ops, void* p) noexcept {
  ops.destroy(p);
  ::operator delete(p, std::align_val_t(ops.align));
}
}  // namespace

ReductionGroup* new_reduction_group(Worker& w, const ReductionSpec& spec) {
  const auto n = static_cast<std::uint32_t>(w.engine->workers.size());
  auto* g = new ReductionGroup{const_cast<void*>(spec.address), spec.ops, nullptr, nullptr, n, nullptr};
  try {
    g->slots = new void*[n]();
    g->reducer = spec.ops->clone(spec.reducer);
  } catch (...) {
    delete[] g->slots;
    delete g;
    throw;
  }
  return g;
}

bool finish_reduction_group(Worker& w, ReductionGroup* g, bool discard, Task* error_to) noexcept {
  const ReducerOps& ops = *g->ops;
  bool ok = true;
  // In worker order: deterministic for one placement of the members (the operator is associative and
  // commutative anyway). After a combiner threw, the rest is only freed: the datum holds a partial result.
  for (std::uint32_t i = 0; i < g->n_slots; ++i) {
    void* copy = g->slots[i];
    if (!copy) continue;
    if (!discard && ok) {
      try {
        ops.combine(g->target, copy, g->reducer);
      } catch (...) {
        ok = false;
        if (error_to) record_error(w, error_to, std::current_exception());
      }
    }
    free_copy(ops, copy);
  }
  if (g->reducer) ops.drop(g->reducer);
  delete[] g->slots;
  delete g;
  return ok;
}

void combine_and_reset(ReductionGroup* g) {
  const ReducerOps& ops = *g->ops;
  std::exception_ptr error;
  for (std::uint32_t i = 0; i < g->n_slots; ++i) {
    void* copy = g->slots[i];
    if (!copy) continue;
    if (!error) {
      try {
        ops.combine(g->target, copy, g->reducer);
      } catch (...) {
        error = std::current_exception();
      }
    }
    free_copy(ops, copy);
    g->slots[i] = nullptr;  // the next instances of the members start after this one (see taskiter.cpp)
  }
  if (error) std::rethrow_exception(error);
}

void finish_reduce_node(Worker& w, Task* n) noexcept {
  ReductionGroup* g = *reinterpret_cast<ReductionGroup**>(n->body);
  // Cancelled: a member failed or was cancelled (its failure reached the node through its edge or at link
  // time). Nothing is combined: the datum keeps its value from before the group, and the node passes the
  // failure on to later accessors.
  const bool failed = n->cancelled.load(std::memory_order_relaxed);
  // A combiner that throws fails the reduction like a failed writer: the producer gets the exception (its next
  // taskwait rethrows it) and later accessors are cancelled.
  if (!finish_reduction_group(w, g, failed, n->parent)) n->cancelled.store(true, std::memory_order_relaxed);
}

}  // namespace weft::detail

namespace weft::detail {

void* reduction_local(const Context& cx, const void* address, const void* type) {
  Task* t = ContextAccess::task(cx);
  Worker& w = *ContextAccess::worker(cx);
  if (const ReductionLinks* links = reduction_links(t))
    for (const ReductionLink& l : links->links) {
      if (l.address != address) continue;
      ReductionGroup* g = l.group;
      if (g->ops->type != type)
        throw std::logic_error("weft: Context::local: the task's reduction on this datum is of another type");
      void*& slot = g->slots[w.id];  // this worker's alone until the group is combined (see the top)
      if (!slot) {
        void* p = allocate_copy(*g->ops);
        try {
          g->ops->init(p, g->reducer);
        } catch (...) {
          ::operator delete(p, std::align_val_t(g->ops->align));
          throw;
        }
        slot = p;
      }
      return slot;
    }
  throw std::logic_error("weft: Context::local: the task declares no reduction (weft::reduction or "
                         "weft::weak_reduction) on this datum");
}

}  // namespace weft::detail
