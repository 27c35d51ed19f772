#!/usr/bin/env python3
"""A stand-in for a taskbench-<system> executable, for testing tools/metg without building anything.

It accepts the flags tools/metg passes (-steps -width -type -radix -kernel -iter -output -imbalance -and
-workers), prints the configuration and summary blocks in Task Bench's formats, and reports a synthetic elapsed
time from a cost model instead of running anything:

    elapsed = sum over tasks of (kernel + runtime + communication) / workers
    kernel        = iter x ITER_SECONDS x slowdown x (1 + imbalance x IMBALANCE_WAIT)
    runtime       = overhead x (1 + deps / 2) x (1 + 1 / graphs) / 2   (MPI: x 1 whatever the graphs)
    communication = (output - 16) x BYTE_SECONDS x max(deps, 1)

with (overhead, slowdown) chosen by the system name: FAKE_TASKBENCH_SYSTEM if set (the tests' wrapper scripts set
it), else the executable's name after "taskbench-"; deps = min(radix, width) for -type nearest, 0 for the other
types (so that the default stencil_1d costs overhead alone); IMBALANCE_WAIT is per system (MPI, whose ranks wait
for each other every timestep, the highest). load_imbalance counts the FLOPs of its mean iteration count.
model_elapsed() is imported by the tests to compute the expected METG.

Behaviour switches, by system name:
  broken   fails validation (exit 1, message on stderr) when -iter < 4
  hang     sleeps for an hour (to test timeouts)
  garbled  prints a malformed Elapsed Time line
  serial   rejects -workers other than 1 (exit 2), like the real one
  mpi      takes its rank count from FAKE_MPI_RANKS (set by fake_mpirun.py), rejects -workers; checks that the
           OpenMPI root variables are set
  oneproc  refuses to run under (fake) mpirun, as a taskbench-weft-flow built without MPI does
  smallout rejects -output above 4096 (exit 2), as taskbench-weft-flow does on several ranks
  weft-flow (as weft) rejects -output above 4096 when started by fake_mpirun.py, as the real one does
Any other system started by fake_mpirun.py (NAME@mpi) runs FAKE_MPI_RANKS x -workers workers, and fails if its
threads would be pinned by weft (WEFT_BIND=cores: worker 0 of every rank on core 0) or if ranks of several
workers were left bound to one core each (no --bind-to none).
"""

import os
import sys
import time

ITER_SECONDS = 2.5e-9  # one compute_bound iteration (128 FLOPs) at ~51 GFLOP/s per core
# system -> (per-task overhead in seconds, kernel slowdown factor)
MODEL = {
    "serial": (0.02e-6, 1.0),
    "mpi": (0.2e-6, 1.0),
    "weft": (0.3e-6, 1.0),
    "omp-task-gcc": (1.5e-6, 1.0),
    "halfpeak": (0.5e-6, 2.0),  # never gets past half the peak: no METG(50%) when it is strictly below
    "broken": (0.3e-6, 1.0),
    "hang": (0.3e-6, 1.0),
    "garbled": (0.3e-6, 1.0),
    "oneproc": (0.3e-6, 1.0),
    "smallout": (0.3e-6, 1.0),
    "weft-flow": (0.3e-6, 1.0),
}
BYTE_SECONDS = 1e-11  # per output byte and dependency (100 GB/s)
IMBALANCE_WAIT = {"mpi": 0.5, "serial": 0.0}  # others: DEFAULT_IMBALANCE_WAIT
DEFAULT_IMBALANCE_WAIT = 0.1


def flops_per_task(kernel, iterations):
    if kernel in ("compute_bound", "load_imbalance"):
        return 2 * 64 * iterations + 64
    if kernel == "compute_bound2":
        return 2 * 32 * iterations
    return 0


def width_at(kind, width, steps, t):
    if kind == "dom":
        return min(width, t + 1, steps - t)
    if kind == "tree":
        return min(width, 2 ** min(t, 62))
    return width


def dependencies_per_task(kind, radix, width):
    return min(radix, width) if kind == "nearest" else 0


def model_elapsed(system, tasks, iterations, workers, deps=0, output=16, imbalance=0.0, graphs=1):
    """Elapsed seconds of `tasks` tasks of one kind (see the cost model above)."""
    overhead, slowdown = MODEL[system]
    kernel = iterations * ITER_SECONDS * slowdown * (1 + imbalance * IMBALANCE_WAIT.get(system, DEFAULT_IMBALANCE_WAIT))
    runtime = overhead * (1 + deps / 2) * (1 if system == "mpi" else (1 + 1 / graphs) / 2)
    communication = (output - 16) * BYTE_SECONDS * max(deps, 1)
    return tasks * (kernel + runtime + communication) / workers


def fail(message, status=2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


def parse(argv):
    graphs, graph, workers = [], None, None

    def new_graph():
        return {"steps": 4, "width": 4, "type": "trivial", "radix": 3, "kernel": "empty", "iter": 0, "output": 16,
                "imbalance": 0.0}

    graph = new_graph()
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag == "-and":
            graphs.append(graph)
            graph = new_graph()
            i += 1
            continue
        if flag in ("-steps", "-width", "-radix", "-iter", "-workers", "-type", "-kernel", "-output", "-imbalance"):
            if i + 1 >= len(argv):
                fail(f"{flag} needs a value")
            value = argv[i + 1]
            if flag in ("-type", "-kernel"):
                graph[flag[1:]] = value
            elif flag == "-imbalance":
                try:
                    graph["imbalance"] = float(value)
                except ValueError:
                    fail(f"{flag} {value}: not a number")
                if not 0 <= graph["imbalance"] <= 2:
                    fail(f"-imbalance must be in 0..2, got {value}")
            else:
                try:
                    number = int(value)
                except ValueError:
                    fail(f"{flag} {value}: not an integer")
                if number < 0 or (number == 0 and flag in ("-steps", "-width", "-workers")) or (
                        flag == "-output" and number < 16):
                    fail(f"{flag} {value}: out of range")
                if flag == "-workers":
                    workers = number
                else:
                    graph[flag[1:]] = number
            i += 2
            continue
        fail(f"unknown flag '{flag}'")
    graphs.append(graph)
    return graphs, workers


def main():
    system = os.environ.get("FAKE_TASKBENCH_SYSTEM") or os.path.basename(sys.argv[0]).removeprefix("taskbench-")
    if system not in MODEL:
        fail(f"the fake has no model for system '{system}'")
    graphs, workers = parse(sys.argv[1:])
    if system == "mpi":
        if workers not in (None, 1):
            fail("-workers: MPI ranks come from mpirun")
        if os.environ.get("OMPI_ALLOW_RUN_AS_ROOT") != "1" or os.environ.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") != "1":
            fail("OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) not set", 1)
        workers = int(os.environ.get("FAKE_MPI_RANKS", "0"))
        if workers <= 0:
            fail("not started by mpirun (FAKE_MPI_RANKS unset)", 1)
    elif "FAKE_MPI_RANKS" in os.environ:
        ranks = int(os.environ["FAKE_MPI_RANKS"])
        if system in ("oneproc", "serial"):
            fail(f"taskbench-{system} was built without MPI: it runs on one process only, not {ranks}")
        if os.environ.get("OMPI_ALLOW_RUN_AS_ROOT") != "1":
            fail("OMPI_ALLOW_RUN_AS_ROOT not set", 1)
        if os.environ.get("WEFT_BIND") == "cores":
            fail("WEFT_BIND=cores on several ranks: every rank pins its worker 0 to core 0", 1)
        per_rank = workers or 1
        if per_rank > 1 and os.environ.get("FAKE_MPI_UNBOUND") != "1":
            fail(f"{per_rank} workers per rank, each rank bound to one core (no --bind-to none)", 1)
        workers = ranks * per_rank
    elif workers is None:
        workers = os.cpu_count() or 1
    if system == "serial" and workers != 1:
        fail("-workers: serial runs one worker only")

    if system == "smallout" and any(g["output"] > 4096 for g in graphs):
        fail("-output is at most 4096 bytes on several ranks")
    if system == "weft-flow" and "FAKE_MPI_RANKS" in os.environ and any(g["output"] > 4096 for g in graphs):
        fail("taskbench-weft-flow on several processes supports -output up to 4096 bytes")
    tasks = flops = 0
    elapsed = 0.0
    print("Running Task Benchmark")
    for g in graphs:
        if g["radix"] > g["width"] and g["type"] in ("nearest", "spread", "random_nearest"):
            fail(f"-radix {g['radix']} larger than -width {g['width']}")
        print(f"  Time Steps: {g['steps']}")
        print(f"  Max Width: {g['width']}")
        print(f"  Dependence Type: {g['type']}")
        print(f"  Kernel: Type: {g['kernel']}, Iterations: {g['iter']}")
        print(f"  Output Bytes: {g['output']}")
        n = sum(width_at(g["type"], g["width"], g["steps"], t) for t in range(g["steps"]))
        tasks += n
        flops += n * flops_per_task(g["kernel"], g["iter"])
        imbalance = g["imbalance"] if g["kernel"] == "load_imbalance" else 0.0
        elapsed += model_elapsed(system, n, g["iter"], workers,
                                 dependencies_per_task(g["type"], g["radix"], g["width"]), g["output"], imbalance,
                                 len(graphs))
    iterations = graphs[0]["iter"]

    if system == "hang":
        time.sleep(3600)
    if system == "broken" and iterations < 4:
        print("error: graph 0, task (3, 1): input 0 expected (2, 0) received (2, 1)", file=sys.stderr)
        sys.exit(1)

    print(f"Total Tasks {tasks}")
    print(f"Total Dependencies {3 * tasks}")
    print("  Unable to estimate local/nonlocal dependencies")
    print(f"Total FLOPs {flops}")
    print("Total Bytes 0")
    if system == "garbled":
        print(f"Elapsed Time {elapsed} s")
    else:
        print(f"Elapsed Time {elapsed:e} seconds")
    print(f"FLOP/s {flops / elapsed:e}")
    print(f"B/s {0.0:e}")
    print("Transfer (estimated):")
    print("  Unable to estimate local/nonlocal transfer")


if __name__ == "__main__":
    main()
