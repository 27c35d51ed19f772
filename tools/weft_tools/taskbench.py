"""Task Bench executables: their summary block, their names and how each kind of system is launched.

The summary formats are those of bench/taskbench (printf "%lld" and "%e"), so a line that does not match them
byte for byte is reported as malformed rather than guessed at.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex

# Systems in the order tables and plots list them; executables found in a build directory but not listed here
# come after these, alphabetically.
KNOWN_SYSTEMS = (
    "weft", "weft-taskiter", "weft-flow", "serial", "mpi", "mpi-nonblock", "weft-flow@mpi", "weft-mpi@mpi",
    "weft-mpi", "omp-for-gcc", "omp-task-gcc", "omp-for-clang", "omp-task-clang", "tbb", "starpu",
)
EXECUTABLE_PREFIX = "taskbench-"

# A thread-based program run on several MPI processes (one that supports it: taskbench-weft-flow): the system
# NAME@mpi is taskbench-NAME under mpirun with one rank per core and one worker per rank, as taskbench-mpi runs;
# NAME@mpi:W gives each rank W workers (cores / W ranks: a multiple of W cores, at least two ranks).
RANKS_SUFFIX = "@mpi"

# Programs that are MPI programs of weft workers whatever their rank count (taskbench-weft-mpi: MPI + tasks): as
# NAME@mpi[:W] they run like any such system; the bare NAME is one rank of one worker per core, under mpirun
# (-np 1 --bind-to none), the same program with every point local.
MPI_PROGRAMS = ("weft-mpi",)

# Environment OpenMPI needs to start as root (containers, CI); harmless otherwise.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

# Threads pinned one per core, as mpirun pins its ranks by default: unpinned, the OS sometimes leaves two threads
# of a short run on one core for milliseconds (weft, stencil_1d on 2 cores: 7.3 ms per run pinned, up to 14 ms
# unpinned). oneTBB has no environment setting for it; StarPU pins its workers by default (STARPU_WORKERS_NOBIND
# unset). A variable already set in the environment wins.
BIND_ENV = {
    "weft": {"WEFT_BIND": "cores"},
    "omp": {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"},
}


def bind_env(system: str) -> dict[str, str]:
    """The environment that pins the threads of a thread-based `system` (empty for others)."""
    family = "weft" if system.startswith("weft") else "omp" if system.startswith("omp") else None
    env = BIND_ENV.get(family, {})
    return {k: v for k, v in env.items() if k not in os.environ}


class SummaryError(ValueError):
    """The output of a run has no well-formed summary block."""


@dataclasses.dataclass(frozen=True)
class Summary:
    tasks: int
    dependencies: int
    flops: int
    bytes: int
    elapsed: float  # seconds
    flop_rate: float  # FLOP/s
    byte_rate: float  # B/s


_INT = r"(-?[0-9]+)"
# printf %e: d.dddddde+XX (at least two exponent digits); inf/nan are what glibc prints for a zero elapsed time.
_FLOAT = r"(-?[0-9]\.[0-9]{6}e[+-][0-9]{2,}|-?inf|nan)"
_FIELDS = (
    # (field, line label, regex of the whole line, conversion of its value)
    ("tasks", "Total Tasks", re.compile(r"Total Tasks " + _INT), int),
    ("dependencies", "Total Dependencies", re.compile(r"Total Dependencies " + _INT), int),
    ("flops", "Total FLOPs", re.compile(r"Total FLOPs " + _INT), int),
    ("bytes", "Total Bytes", re.compile(r"Total Bytes " + _INT), int),
    ("elapsed", "Elapsed Time", re.compile(r"Elapsed Time " + _FLOAT + r" seconds"), float),
    ("flop_rate", "FLOP/s", re.compile(r"FLOP/s " + _FLOAT), float),
    ("byte_rate", "B/s", re.compile(r"B/s " + _FLOAT), float),
)


def parse_summary(text: str) -> Summary:
    """Parses the summary block of a Task Bench run (spec section 5) out of its whole standard output.

    Raises SummaryError naming the line when a summary line is missing, repeated, malformed or inconsistent.
    """
    values = {}
    for line in text.splitlines():
        for field, label, pattern, convert in _FIELDS:
            # A label followed by a space or the end of the line is one of ours ("FLOP/s" is not "FLOP/sec").
            if line != label and not line.startswith(label + " "):
                continue
            m = pattern.fullmatch(line)
            if not m:
                raise SummaryError(f"malformed summary line {line!r} (expected the format of '{label}')")
            if field in values:
                raise SummaryError(f"summary line '{label}' appears more than once")
            values[field] = convert(m.group(1))
    missing = [label for field, label, _, _ in _FIELDS if field not in values]
    if missing:
        raise SummaryError("no summary line " + ", ".join(f"'{m}'" for m in missing) + " in the output")
    s = Summary(**values)
    if s.tasks <= 0:
        raise SummaryError(f"Total Tasks is {s.tasks}: the run executed no task")
    if s.flops < 0 or s.bytes < 0 or s.dependencies < 0:
        raise SummaryError("negative Total FLOPs, Total Bytes or Total Dependencies")
    if not (math.isfinite(s.elapsed) and s.elapsed > 0):
        raise SummaryError(f"Elapsed Time is {s.elapsed}: the timer did not measure the run")
    # The rates are printed from the unrounded elapsed time; %e keeps 7 significant digits, so they agree with
    # the totals to about 1e-6. A larger gap means the implementation reports inconsistent numbers.
    for total, rate, label in ((s.flops, s.flop_rate, "FLOP/s"), (s.bytes, s.byte_rate, "B/s")):
        expected = total / s.elapsed
        if not math.isclose(rate, expected, rel_tol=1e-5, abs_tol=1e-300):
            raise SummaryError(f"{label} {rate:e} disagrees with the totals ({expected:e} = total / elapsed)")
    return s


# --- systems ------------------------------------------------------------------------------------------------

def system_kind(name: str) -> str:
    """'mpi' (ranks started by mpirun), 'ranks' (NAME@mpi: workers on ranks started by mpirun), 'rank' (one rank
    of -workers N started by mpirun: an MPI_PROGRAMS name), 'serial' (one core only) or 'threads' (-workers N)."""
    if RANKS_SUFFIX in name:
        return "ranks"
    if name in MPI_PROGRAMS:
        return "rank"
    if name == "mpi" or name.startswith("mpi-"):
        return "mpi"
    if name == "serial":
        return "serial"
    return "threads"


def uses_mpirun(name: str) -> bool:
    return system_kind(name) in ("mpi", "ranks", "rank")


def parse_ranks_system(name: str) -> tuple[str, int]:
    """(program, workers per rank) of a NAME@mpi or NAME@mpi:W system; ValueError if it is malformed."""
    program, _, spec = name.partition(RANKS_SUFFIX)
    workers = 1
    if spec:
        if not spec.startswith(":") or not spec[1:].isdigit() or int(spec[1:]) < 1:
            raise ValueError(f"'{name}': expected NAME{RANKS_SUFFIX} or NAME{RANKS_SUFFIX}:W, W workers per rank")
        workers = int(spec[1:])
    if not program:
        raise ValueError(f"'{name}': no program before '{RANKS_SUFFIX}'")
    return program, workers


def workers_per_process(name: str) -> int:
    """Cores one process of `name` uses: W for NAME@mpi:W, 1 for every other system (MPI: one rank per core)."""
    return parse_ranks_system(name)[1] if system_kind(name) == "ranks" else 1


def runs_on(name: str, cores: int) -> bool:
    """Whether `name` runs on `cores` cores: serial on one; NAME@mpi:W on 2 or more ranks of W workers (one rank
    would be the single-process program, measured as NAME); the others on any count."""
    kind = system_kind(name)
    if kind == "serial":
        return cores == 1
    if kind == "ranks":
        w = workers_per_process(name)
        return cores % w == 0 and cores // w >= 2
    return True


# taskbench-weft-flow on several processes carries a task's output inline in its message: at most this many
# bytes (kMaxPacket, bench/taskbench/weft_flow.hpp); larger -output values are refused with exit status 2.
FLOW_RANKS_MAX_OUTPUT = 4096


def refusal(name: str, pattern: "Pattern") -> str | None:
    """Why `name` does not run `pattern` by design (a documented limit, not a failure), or None."""
    if system_kind(name) == "ranks" and parse_ranks_system(name)[0] == "weft-flow" and \
            pattern.output is not None and pattern.output > FLOW_RANKS_MAX_OUTPUT:
        return (f"on several processes taskbench-weft-flow carries outputs inline, up to "
                f"{FLOW_RANKS_MAX_OUTPUT} bytes (-output {pattern.output})")
    return None


def executable(bin_dir: str, name: str) -> str:
    program = parse_ranks_system(name)[0] if system_kind(name) == "ranks" else name
    return os.path.join(bin_dir, EXECUTABLE_PREFIX + program)


def is_runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def discover_systems(bin_dir: str) -> list[str]:
    """The systems whose taskbench-<system> executable is in bin_dir, and the NAME@mpi systems of KNOWN_SYSTEMS
    whose program is there, in KNOWN_SYSTEMS order then by name."""
    try:
        entries = os.listdir(bin_dir)
    except OSError:
        return []
    found = [e[len(EXECUTABLE_PREFIX):] for e in entries
             if e.startswith(EXECUTABLE_PREFIX) and len(e) > len(EXECUTABLE_PREFIX)
             and is_runnable(os.path.join(bin_dir, e))]
    found += [s for s in KNOWN_SYSTEMS if system_kind(s) == "ranks" and parse_ranks_system(s)[0] in found]
    return order_systems(found)


def order_systems(names) -> list[str]:
    rank = {n: i for i, n in enumerate(KNOWN_SYSTEMS)}
    return sorted(set(names), key=lambda n: (rank.get(n, len(rank)), n))


@dataclasses.dataclass(frozen=True)
class Pattern:
    """The graph(s) every run executes; only -iter and the width (cores x width_per_core) vary in a sweep."""
    type: str = "stencil_1d"
    steps: int = 1000
    width_per_core: int = 1
    kernel: str = "compute_bound"
    radix: int | None = None
    graphs: int = 1
    output: int | None = None  # -output: bytes each task outputs (and each dependency carries)
    imbalance: float | None = None  # -imbalance (kernel load_imbalance)
    extra: tuple[str, ...] = ()  # further flags, added to every graph

    def graph_flags(self, width: int, iterations: int) -> list[str]:
        one = ["-steps", str(self.steps), "-width", str(width), "-type", self.type]
        if self.radix is not None:
            one += ["-radix", str(self.radix)]
        one += ["-kernel", self.kernel, "-iter", str(iterations)]
        if self.output is not None:
            one += ["-output", str(self.output)]
        if self.imbalance is not None:
            one += ["-imbalance", f"{self.imbalance:g}"]
        one += self.extra
        flags = list(one)
        for _ in range(self.graphs - 1):
            flags += ["-and", *one]
        return flags

    def describe(self) -> str:
        parts = [self.type]
        if self.radix is not None:
            parts.append(f"radix {self.radix}")
        parts += [f"{self.steps} steps", f"width {self.width_per_core}/core", self.kernel]
        if self.imbalance is not None:
            parts.append(f"imbalance {self.imbalance:g}")
        if self.output is not None:
            parts.append(f"output {self.output} B")
        if self.graphs > 1:
            parts.append(f"{self.graphs} graphs")
        if self.extra:
            parts.append(" ".join(self.extra))
        return ", ".join(parts)


def command(bin_dir: str, system: str, cores: int, pattern: Pattern, iterations: int,
            mpirun: tuple[str, ...] = ("mpirun",)) -> tuple[list[str], dict[str, str]]:
    """The command line (argv) and the extra environment of one run of `system` on `cores` cores."""
    exe = executable(bin_dir, system)
    flags = pattern.graph_flags(cores * pattern.width_per_core, iterations)
    kind = system_kind(system)
    if kind == "mpi":
        # One rank per core; --oversubscribe so that asking for more ranks than OpenMPI counts slots still runs.
        return [*mpirun, "-np", str(cores), "--oversubscribe", exe, *flags], dict(MPI_ENV)
    if kind == "ranks":
        return ranks_command(mpirun, exe, system, cores, flags)
    if kind == "rank":
        # One process: weft's own pinning (worker i to core i) applies, as for the thread-based systems.
        argv = [*mpirun, "-np", "1", "--oversubscribe", "--bind-to", "none", exe, *flags, "-workers", str(cores)]
        return argv, dict(MPI_ENV) | bind_env(system)
    if kind == "serial" and cores != 1:
        raise ValueError("serial runs on one core only")
    return [exe, *flags, "-workers", str(cores)], bind_env(system)


def ranks_command(mpirun: tuple[str, ...], exe: str, system: str, cores: int,
                  flags: list[str]) -> tuple[list[str], dict[str, str]]:
    """NAME@mpi[:W] on `cores` cores: cores / W ranks of W workers. One worker per rank: mpirun binds each rank to
    a core, as it does taskbench-mpi's. Several: --bind-to none, the OS places the threads. WEFT_BIND=none in
    both cases: weft's own pinning (worker i to core i) would put worker 0 of every rank on core 0."""
    _, workers = parse_ranks_system(system)
    if cores % workers:
        raise ValueError(f"{system} runs {workers} workers per rank: the core count must be a multiple of {workers}")
    bind = ["--bind-to", "none"] if workers > 1 else []
    argv = [*mpirun, "-np", str(cores // workers), "--oversubscribe", *bind, exe, *flags, "-workers", str(workers)]
    return argv, dict(MPI_ENV) | {"WEFT_BIND": "none"}


def probe_command(bin_dir: str, system: str, mpirun: tuple[str, ...] = ("mpirun",)) -> tuple[list[str], dict[str, str]]:
    """A run of a NAME@mpi[:W] system on two ranks and a trivial graph, which fails unless the program can run on
    several processes (a taskbench-weft-flow built without MPI refuses them)."""
    workers = parse_ranks_system(system)[1]
    return ranks_command(mpirun, executable(bin_dir, system), system, 2 * workers,
                         ["-steps", "1", "-width", "2", "-type", "trivial"])


def format_command(argv: list[str], env: dict[str, str]) -> str:
    """A shell line that reproduces the run."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    line = shlex.join(argv)
    return f"{prefix} {line}" if prefix else line
