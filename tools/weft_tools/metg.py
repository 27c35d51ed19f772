"""METG: minimum effective task granularity (Task Bench, paper 001 section IV; spec section 7).

For one machine and core count, the same task graph runs with kernel iterations swept from large (kernel-bound)
down to 1. Per run:
  rate        = work / elapsed                    (FLOP/s, or B/s for memory kernels)
  granularity = elapsed x cores / total tasks     (the average task duration, per core)
and per core count:
  peak        = the highest rate any system reached at any iteration count (medians of the repetitions)
  efficiency  = rate / peak
METG(p%) of a system is the task granularity at which its efficiency falls below p%, interpolated linearly in
log(granularity) between the two neighbouring measured points.

Noisy, non-monotonic curves: on a machine shared with other work, timing noise is one-sided: interference only
ever slows a run down, so a point can fall below the true curve but never rise above it. A dip below p% at a
coarse grain is therefore noise, while a point at or above p% is proof that the system can run that fine a grain
that efficiently. The default rule ("finest") follows the paper's definition, "the smallest task granularity that
keeps at least p% efficiency": with the points ordered from the coarsest grain to the finest, METG is the crossing
from the finest point at or above p% to its finer neighbour. The conservative rule ("coarsest", --crossing) takes
instead the first crossing below p% when scanning from the coarse side. Either way the points on the wrong side of
p% for a monotonically falling curve are counted and reported as outliers. A curve whose finest point is still at
or above p% has METG at most that granularity (reported as an upper bound "<="); a curve that never reaches p% has
no METG (reported as "-" with its best efficiency).

This module holds the computation (pure functions, unit-tested), the sweep, the outputs (CSV, JSON, table, PNG)
and the command line of tools/metg.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import math
import os
import shlex
import shutil
import statistics
import sys

from . import runner, taskbench
from .progress import Progress

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BIN = os.path.join("build", "release", "bench", "taskbench")

# Kernels whose counted work is bytes moved rather than FLOPs (spec section 4); empty and busy_wait count nothing.
BYTE_KERNELS = ("memory_bound", "memory_daxpy")
FLOP_KERNELS = ("compute_bound", "compute_bound2", "load_imbalance", "compute_dgemm")


# --- the computation -------------------------------------------------------------------------------------------

def granularity(elapsed: float, cores: int, tasks: int) -> float:
    """Average task granularity in seconds: wall time x cores / tasks."""
    if tasks <= 0 or cores <= 0:
        raise ValueError("granularity needs tasks > 0 and cores > 0")
    return elapsed * cores / tasks


def find_peak(curves) -> tuple[float, str | None, int | None]:
    """The highest finite rate among the points of `curves` (a dict system -> Curve), with the system and the
    iteration count that reached it; (0.0, None, None) when no point has a positive rate."""
    best = (0.0, None, None)
    for system, curve in curves.items():
        for p in curve.points:
            if math.isfinite(p.rate) and p.rate > best[0]:
                best = (p.rate, system, p.iterations)
    return best


def efficiencies(rates, peak_rate: float) -> list[float]:
    if not peak_rate > 0:
        raise ValueError("efficiency needs a positive peak rate")
    return [r / peak_rate for r in rates]


CROSSINGS = ("finest", "coarsest")


@dataclasses.dataclass(frozen=True)
class Metg:
    """METG(p%) of one curve.

    value: seconds, or None when the curve never reaches p%.
    bound: "exact" (an interpolated crossing), "upper" (the crossing would start at the finest point measured:
           METG <= value, that point's granularity) or None (no METG).
    best_efficiency: the highest efficiency of the curve (0..1+), NaN for an empty curve.
    outliers: points on the wrong side of p% for a curve that falls monotonically: coarser than the crossing
              but below p%, or finer than it but at or above p% (noise, or a curve that is not monotonic).
    """
    value: float | None
    bound: str | None
    best_efficiency: float
    outliers: int = 0

    def format_us(self) -> str:
        if self.value is None:
            return "-"
        text = format_us(self.value)
        return "<=" + text if self.bound == "upper" else text


def compute_metg(granularities, effs, fraction: float, crossing: str = "finest") -> Metg:
    """METG at efficiency `fraction` (0 < fraction <= 1) of the curve given as parallel sequences.

    With the points ordered from the coarsest grain to the finest, the crossing starts at point k and ends at
    point k+1 (the next finer one, below `fraction`); METG interpolates between them in log(granularity). k is
      "finest":   the finest point at or above `fraction` (the default; see the module documentation), or
      "coarsest": the last point of the run at or above `fraction` that starts at the first such point.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"the efficiency threshold must be in (0, 1], got {fraction}")
    if crossing not in CROSSINGS:
        raise ValueError(f"unknown crossing rule '{crossing}' (one of {', '.join(CROSSINGS)})")
    if len(granularities) != len(effs):
        raise ValueError("granularities and efficiencies differ in length")
    points = [(g, e) for g, e in zip(granularities, effs) if math.isfinite(g) and g > 0 and math.isfinite(e)]
    if not points:
        return Metg(None, None, math.nan)
    points.sort(key=lambda p: -p[0])  # from the coarsest grain to the finest
    best = max(e for _, e in points)
    above = [k for k, (_, e) in enumerate(points) if e >= fraction]
    if not above:
        return Metg(None, None, best)
    if crossing == "finest":
        k = above[-1]
    else:
        k = above[0]
        while k + 1 < len(points) and points[k + 1][1] >= fraction:
            k += 1
    outliers = (sum(1 for _, e in points[:k] if e < fraction)
                + sum(1 for _, e in points[k + 1:] if e >= fraction))
    if k == len(points) - 1:
        return Metg(points[k][0], "upper", best, outliers)
    (g0, e0), (g1, e1) = points[k], points[k + 1]
    t = (e0 - fraction) / (e0 - e1)  # e0 >= fraction > e1, so 0 <= t < 1
    value = math.exp(math.log(g0) + t * (math.log(g1) - math.log(g0)))
    return Metg(value, "exact", best, outliers)


def format_us(seconds: float) -> str:
    """Microseconds with three significant digits (0.0123, 0.456, 7.89, 123, 4560)."""
    us = seconds * 1e6
    if us == 0:
        return "0"
    digits = max(0, 2 - int(math.floor(math.log10(abs(us)))))
    return f"{us:.{digits}f}"


# --- runs and their aggregation --------------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    system: str
    cores: int
    iterations: int
    rep: int
    command: str
    status: str = "ok"  # "ok" or why it failed ("exit status 1", "timed out ...", "bad output: ...")
    summary: taskbench.Summary | None = None

    @property
    def ok(self) -> bool:
        return self.summary is not None


@dataclasses.dataclass
class Point:
    """The median of the successful repetitions of one (system, cores, iterations)."""
    iterations: int
    elapsed: float
    tasks: int
    work: int
    rate: float
    granularity: float
    reps: int
    efficiency: float = math.nan


@dataclasses.dataclass
class Curve:
    system: str
    cores: int
    points: list[Point]  # by decreasing iterations
    failed: int = 0
    metg: Metg | None = None
    reaches_peak: bool | None = None  # within the tolerance at its largest iteration count


@dataclasses.dataclass
class CoreResult:
    cores: int
    peak: float
    peak_system: str | None
    peak_iterations: int | None
    curves: dict[str, Curve]


def aggregate(runs: list[Run], metric: str) -> dict[int, dict[str, Curve]]:
    """Groups runs by core count and system and takes, per iteration count, the median elapsed time of the
    successful repetitions (the rate and granularity of a point both derive from that one time)."""
    by_key: dict[tuple[int, str], dict[int, list[Run]]] = {}
    failed: dict[tuple[int, str], int] = {}
    for r in runs:
        key = (r.cores, r.system)
        by_key.setdefault(key, {})
        failed.setdefault(key, 0)
        if r.ok:
            by_key[key].setdefault(r.iterations, []).append(r)
        else:
            failed[key] += 1
    result: dict[int, dict[str, Curve]] = {}
    for (cores, system), by_iter in by_key.items():
        points = []
        for iterations in sorted(by_iter, reverse=True):
            reps = by_iter[iterations]
            elapsed = statistics.median(r.summary.elapsed for r in reps)
            tasks = reps[0].summary.tasks
            work = reps[0].summary.flops if metric == "flops" else reps[0].summary.bytes
            points.append(Point(iterations, elapsed, tasks, work, work / elapsed,
                                granularity(elapsed, cores, tasks), len(reps)))
        result.setdefault(cores, {})[system] = Curve(system, cores, points, failed[(cores, system)])
    return result


def analyze(runs: list[Run], metric: str, percent: float, tolerance: float = 0.05,
            crossing: str = "finest") -> dict[int, CoreResult]:
    """Peak, efficiencies, METG(percent) and the peak check, per core count."""
    results = {}
    for cores, curves in sorted(aggregate(runs, metric).items()):
        best_rate, best_system, best_iter = find_peak(curves)
        for curve in curves.values():
            if best_rate > 0:
                for p, e in zip(curve.points, efficiencies([p.rate for p in curve.points], best_rate)):
                    p.efficiency = e
                curve.metg = compute_metg([p.granularity for p in curve.points],
                                          [p.efficiency for p in curve.points], percent / 100.0, crossing)
                curve.reaches_peak = bool(curve.points) and curve.points[0].efficiency >= 1.0 - tolerance
        results[cores] = CoreResult(cores, best_rate, best_system, best_iter, curves)
    return results


# --- configuration ---------------------------------------------------------------------------------------------

# --quick: what the README's main job runs. Keep this, the help text and the tests in agreement.
QUICK = {
    "steps": 1000,
    "max_iter": 2 ** 14,
    "iter_factor": 4,
    "reps": 3,
    "cores": [1, 2],
    "systems": ["weft", "weft-taskiter", "weft-flow", "serial", "mpi", "weft-flow@mpi", "omp-task-gcc",
                "omp-task-clang", "omp-for-gcc", "tbb", "starpu"],
}
QUICK_HELP = (f"preset for a short run (under 3 minutes on 2 cores): -steps {QUICK['steps']}, -iter from "
              f"{QUICK['max_iter']} down to 1 by factors of {QUICK['iter_factor']}, {QUICK['reps']} repetitions, "
              f"cores {','.join(map(str, QUICK['cores']))}, systems {','.join(QUICK['systems'])} (those built; "
              f"mpi and weft-flow@mpi only if mpirun is found, the latter only if it runs on several processes); "
              f"options given explicitly override it")


@dataclasses.dataclass
class Config:
    bin_dir: str
    systems: list[str]
    cores: list[int]
    iterations: list[int]  # decreasing
    reps: int
    pattern: taskbench.Pattern
    percent: float
    crossing: str  # a CROSSINGS rule
    metric: str  # "flops" or "bytes"
    baseline: str | None
    timeout: float
    max_failures: int
    tolerance: float
    mpirun: tuple[str, ...]
    out_dir: str


class UsageError(Exception):
    """A bad option or combination of options: reported as a usage error (exit status 2)."""


def positive_int_list(text: str, what: str) -> list[int]:
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise UsageError(f"{what}: '{part}' is not an integer") from None
        if v <= 0:
            raise UsageError(f"{what}: {v} is not positive")
        values.append(v)
    return values


def sweep_iterations(max_iter: int, factor: int, min_iter: int = 1) -> list[int]:
    """max_iter, max_iter/factor, ... down to min_iter (always included), decreasing, without repeats."""
    if max_iter < min_iter or min_iter < 1 or factor < 2:
        raise ValueError("need max_iter >= min_iter >= 1 and factor >= 2")
    values = []
    v = max_iter
    while v > min_iter:
        values.append(v)
        v //= factor
    values.append(min_iter)
    return values


class OneLineErrors(argparse.ArgumentParser):
    """Bad input is answered with one line (not the usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    def int_at_least(low):
        def parse(text):
            try:
                v = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
            if v < low:
                raise argparse.ArgumentTypeError(f"{v} is below {low}")
            return v
        return parse

    def positive_float(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"{text} is not a positive number")
        return v

    p = OneLineErrors(
        prog="metg",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Sweeps Task Bench kernel iterations for several systems and core counts, computes the peak\n"
                    "rate, efficiency, task granularity and METG(p%), and writes CSV, JSON, a table and plots.",
        epilog="""\
METG rule: per core count, peak = the highest median FLOP/s (B/s for memory kernels) of any system at any
iteration count; efficiency = rate / peak; granularity = elapsed x cores / total tasks. METG(p%) is the
granularity where efficiency crosses p%, interpolated in log(granularity) between the two neighbouring points.
For a noisy, non-monotonic curve, --crossing finest (default) takes the crossing below the finest point that
reaches p% (timing noise only slows runs down, so such a point is real: "the smallest granularity that keeps p%
efficiency"); --crossing coarsest takes the first fall below p% scanning from the coarse side (conservative).
Points on the wrong side of p% for a monotonic curve are reported as outliers. "<=x": even the finest point
reaches p% (METG at most x); "-": the system never reaches p% (its best efficiency is shown).

Runs are interleaved: each repetition goes through every core count and iteration count, running all systems
back to back (in a rotated order), so that drift on the machine affects all systems alike. A failed run (non-zero
exit, validation failure, timeout, malformed summary) is reported with the end of its stderr, recorded in the CSV
and failures.log (only written when a run fails), and makes metg exit with status 1 after writing its outputs.

Outputs in --out: runs.csv (every run), points.csv (medians), summary.json, summary.txt (the table) and
metg-<N>cores.png (FLOP/s vs iterations and efficiency vs granularity, one line per system).""")
    p.add_argument("--systems", default=None,
                   help="comma-separated systems (executables taskbench-<system> in --bin), or 'all' for every one "
                        "built (default); <system>@mpi runs taskbench-<system> under mpirun, one rank per core and "
                        "one worker per rank (weft-flow@mpi), <system>@mpi:W with W workers per rank")
    p.add_argument("--bin", default=None, help=f"directory of the executables (default: <repo>/{DEFAULT_BIN})")
    p.add_argument("--type", default="stencil_1d", help="dependence type (default stencil_1d)")
    p.add_argument("--radix", type=int_at_least(0), default=None, help="-radix of the graphs (default: theirs)")
    p.add_argument("--graphs", type=int_at_least(1), default=1,
                   help="run N copies of the graph at once (-and), default 1")
    p.add_argument("--steps", type=int_at_least(1), default=None, help="timesteps (default 1000)")
    p.add_argument("--width-per-core", type=int_at_least(1), default=1,
                   help="graph width = cores x this (default 1)")
    p.add_argument("--kernel", default="compute_bound", help="kernel (default compute_bound)")
    p.add_argument("--extra", default="", help="more taskbench flags, added to every graph (shell-quoted)")
    p.add_argument("--cores", default=None,
                   help="comma-separated core counts: threads (-workers) or MPI ranks (default: 1 and all cores)")
    p.add_argument("--iters", default=None, help="comma-separated -iter values (overrides the sweep below)")
    p.add_argument("--max-iter", type=int_at_least(1), default=None,
                   help="largest -iter of the sweep (default 65536)")
    p.add_argument("--iter-factor", type=int_at_least(2), default=None,
                   help="ratio between successive -iter values of the sweep (default 2)")
    p.add_argument("--reps", type=int_at_least(1), default=None, help="repetitions of every run; medians (default 5)")
    p.add_argument("--percent", type=positive_float, default=50.0, help="efficiency threshold of METG (default 50)")
    p.add_argument("--crossing", choices=CROSSINGS, default="finest",
                   help="which crossing of p%% a noisy curve's METG uses (default finest; see below)")
    p.add_argument("--metric", choices=("auto", "flops", "bytes"), default="auto",
                   help="rate that defines efficiency: FLOP/s, B/s, or auto (B/s for memory kernels)")
    p.add_argument("--baseline", default=None,
                   help="system the METG ratios are relative to (default: mpi when measured, else none)")
    p.add_argument("--peak-tolerance", type=positive_float, default=5.0,
                   help="a system 'reaches the peak' when its efficiency at its largest -iter is at least "
                        "100%% minus this (default 5)")
    p.add_argument("--timeout", type=positive_float, default=300.0, help="seconds allowed per run (default 300)")
    p.add_argument("--max-failures", type=int_at_least(1), default=3,
                   help="stop running a system on a core count after this many failed runs (default 3); "
                        "a rejected command line (exit status 2) stops it at once")
    p.add_argument("--mpirun", default="mpirun", help="MPI launcher command (default mpirun)")
    p.add_argument("--out", default=None, help="output directory (default <repo>/results/metg-<date>-<time>)")
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p.add_argument("--dry-run", action="store_true", help="print the commands of one repetition and exit")
    return p


def make_config(args: argparse.Namespace) -> tuple[Config, list[str]]:
    """Config from the parsed options, and notes on requested systems that are skipped."""
    quick = QUICK if args.quick else {}
    bin_dir = os.path.abspath(args.bin) if args.bin else os.path.join(REPO_ROOT, DEFAULT_BIN)

    if args.cores is not None:
        cores = sorted(set(positive_int_list(args.cores, "--cores")))
    elif quick:
        cores = list(quick["cores"])
    else:
        cores = sorted({1, os.cpu_count() or 1})

    if args.iters is not None:
        iterations = sorted(set(positive_int_list(args.iters, "--iters")), reverse=True)
    else:
        max_iter = args.max_iter or quick.get("max_iter", 2 ** 16)
        factor = args.iter_factor or quick.get("iter_factor", 2)
        iterations = sweep_iterations(max_iter, factor)

    steps = args.steps or quick.get("steps", 1000)
    reps = args.reps or quick.get("reps", 5)
    try:
        extra = tuple(shlex.split(args.extra))
    except ValueError as e:
        raise UsageError(f"--extra: {e}") from None
    pattern = taskbench.Pattern(type=args.type, steps=steps, width_per_core=args.width_per_core,
                                kernel=args.kernel, radix=args.radix, graphs=args.graphs, extra=extra)

    metric = args.metric
    if metric == "auto":
        if args.kernel in BYTE_KERNELS:
            metric = "bytes"
        elif args.kernel in FLOP_KERNELS:
            metric = "flops"
        else:
            raise UsageError(f"kernel '{args.kernel}' counts no work, so there is no efficiency to measure; use "
                             f"{', '.join(FLOP_KERNELS)} (FLOP/s) or {', '.join(BYTE_KERNELS)} (B/s), "
                             f"or set --metric")
    if args.percent > 100:
        raise UsageError(f"--percent {args.percent:g}: must be at most 100")

    try:
        mpirun = tuple(shlex.split(args.mpirun))
    except ValueError as e:
        raise UsageError(f"--mpirun: {e}") from None
    if not mpirun:
        raise UsageError("--mpirun is empty")

    notes = []
    if args.systems is None and quick:
        requested, explicit = list(quick["systems"]), False
    elif args.systems in (None, "all"):
        requested, explicit = None, False
    else:
        requested = [s.strip() for s in args.systems.split(",") if s.strip()]
        if not requested:
            raise UsageError("--systems is empty")
        bad = [s for s in requested if "/" in s or s.startswith(".")]
        if bad:
            raise UsageError(f"--systems: '{bad[0]}' is not a system name")
        for s in requested:
            if taskbench.system_kind(s) == "ranks":
                try:
                    taskbench.parse_ranks_system(s)
                except ValueError as e:
                    raise UsageError(f"--systems: {e}") from None
        explicit = True

    if requested is None:
        if not os.path.isdir(bin_dir):
            raise UsageError(f"{bin_dir} is not a directory: build the release preset (cmake --preset release && "
                             f"cmake --build --preset release) or pass --bin")
        systems = taskbench.discover_systems(bin_dir)
        if not systems:
            raise UsageError(f"no taskbench-<system> executable in {bin_dir}")
    else:
        # An explicit list keeps the user's order (and, for --dry-run, its unbuilt systems); the preset's list is
        # in the canonical order.
        systems, unbuilt = [], []
        for s in dict.fromkeys(requested) if explicit else taskbench.order_systems(requested):
            if taskbench.is_runnable(taskbench.executable(bin_dir, s)) or (args.dry_run and explicit):
                systems.append(s)
            else:
                unbuilt.append(s)
        if unbuilt:
            notes.append(f"not built in {bin_dir}, skipped: {', '.join(unbuilt)}")
    if not args.dry_run:
        if any(taskbench.uses_mpirun(s) for s in systems) and shutil.which(mpirun[0]) is None:
            notes.append(f"{mpirun[0]} not found: MPI systems skipped")
            systems = [s for s in systems if not taskbench.uses_mpirun(s)]
        for s in [s for s in systems if taskbench.system_kind(s) == "ranks"]:
            failure = probe_ranks_system(bin_dir, s, mpirun, args.timeout)
            if failure:
                notes.append(f"{s} skipped: it does not run on several processes ({failure})")
                systems.remove(s)
    if not systems:
        raise UsageError("none of the requested systems is built in " + bin_dir +
                         ("" if not notes else " (" + "; ".join(notes) + ")"))

    for s in systems:
        skipped = [c for c in cores if not taskbench.runs_on(s, c)]
        if skipped and s == "serial":
            notes.append("serial runs on one core only: not run on " + ",".join(map(str, skipped)) + " cores")
        elif skipped:
            w = taskbench.workers_per_process(s)
            notes.append(f"{s} runs on 2 or more ranks of {w} worker{'s' if w > 1 else ''}: not run on " +
                         ",".join(map(str, skipped)) + f" core{'s' if skipped != [1] else ''}")
    if not any(taskbench.runs_on(s, c) for s in systems for c in cores):
        raise UsageError("nothing to run: no requested system runs on the --cores given (" +
                         "; ".join(n for n in notes if "not run on" in n) + ")")

    baseline = args.baseline
    if baseline is None:
        baseline = "mpi" if "mpi" in systems else None
    elif baseline not in systems:
        raise UsageError(f"--baseline {baseline} is not among the systems measured ({', '.join(systems)})")

    if args.out:
        out_dir = os.path.abspath(args.out)
        if os.path.exists(out_dir) and not os.path.isdir(out_dir):
            raise UsageError(f"--out {args.out} exists and is not a directory")
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out_dir = os.path.join(REPO_ROOT, "results", f"metg-{stamp}")

    config = Config(bin_dir=bin_dir, systems=systems, cores=cores, iterations=iterations, reps=reps,
                    pattern=pattern, percent=args.percent, crossing=args.crossing, metric=metric, baseline=baseline,
                    timeout=args.timeout, max_failures=args.max_failures, tolerance=args.peak_tolerance / 100.0,
                    mpirun=mpirun, out_dir=out_dir)
    return config, notes


def probe_ranks_system(bin_dir: str, system: str, mpirun: tuple[str, ...], timeout: float) -> str | None:
    """None if `system` (NAME@mpi[:W]) runs on two processes, else why not (the end of its stderr)."""
    argv, env = taskbench.probe_command(bin_dir, system, mpirun)
    result = runner.run(argv, env, timeout)
    if result.ok:
        try:
            taskbench.parse_summary(result.stdout)
            return None
        except taskbench.SummaryError as e:
            return f"bad output: {e}"
    first = next((line for line in result.stderr.splitlines() if line.strip()), "")
    return result.describe_failure(timeout) + (f": {first.strip()}" if first else "")


def planned_runs(config: Config) -> list[tuple[int, int, int, str]]:
    """(rep, cores, iterations, system) in execution order: per repetition, per core count, per iteration count,
    every system back to back; the order of systems rotates with the repetition."""
    plan = []
    for rep in range(config.reps):
        for cores in config.cores:
            systems = [s for s in config.systems if taskbench.runs_on(s, cores)]
            k = rep % len(systems) if systems else 0
            rotated = systems[k:] + systems[:k]
            for iterations in config.iterations:
                plan.extend((rep, cores, iterations, s) for s in rotated)
    return plan


# --- the sweep -------------------------------------------------------------------------------------------------

def execute(config: Config, progress: Progress, log) -> list[Run]:
    """Runs the plan; failed runs are reported through `progress` and recorded, never dropped."""
    plan = planned_runs(config)
    runs: list[Run] = []
    failures: dict[tuple[str, int], int] = {}
    stopped: set[tuple[str, int]] = set()
    for rep, cores, iterations, system in plan:
        key = (system, cores)
        label = f"rep {rep + 1}/{config.reps}, {cores} core{'s' if cores > 1 else ''}, -iter {iterations}, {system}"
        if key in stopped:
            progress.advance(label)
            continue
        argv, env = taskbench.command(config.bin_dir, system, cores, config.pattern, iterations, config.mpirun)
        line = taskbench.format_command(argv, env)
        result = runner.run(argv, env, config.timeout)
        run = Run(system, cores, iterations, rep, line)
        if result.ok:
            try:
                run.summary = taskbench.parse_summary(result.stdout)
            except taskbench.SummaryError as e:
                run.status = f"bad output: {e}"
        else:
            run.status = result.describe_failure(config.timeout)
        runs.append(run)
        if not run.ok:
            failures[key] = failures.get(key, 0) + 1
            fatal = result.returncode == 2 or result.start_error is not None
            stop = fatal or failures[key] >= config.max_failures
            report = [f"metg: FAILED {system} on {cores} core(s), -iter {iterations}, rep {rep + 1}: {run.status}",
                      f"  command: {line}"]
            err = runner.tail(result.stderr)
            if err:
                report.append("  stderr (end):\n" + "\n".join("    " + s for s in err.splitlines()))
            elif not result.ok:
                out = runner.tail(result.stdout, 5)
                if out:
                    report.append("  stdout (end):\n" + "\n".join("    " + s for s in out.splitlines()))
            if stop:
                stopped.add(key)
                why = "its command line was rejected" if result.returncode == 2 else (
                    "it could not start" if result.start_error else f"{failures[key]} failed runs")
                report.append(f"  {system} is not run again on {cores} core(s): {why}")
            text = "\n".join(report)
            progress.message(text)
            log.write(text + "\n\n")
            log.flush()
        progress.advance(label)
    return runs


# --- outputs ---------------------------------------------------------------------------------------------------

RUN_FIELDS = ("system", "cores", "iter", "rep", "status", "elapsed_s", "tasks", "flops", "flop_per_s", "bytes",
              "bytes_per_s", "granularity_us", "efficiency", "command")


def write_runs_csv(path: str, runs: list[Run], results: dict[int, CoreResult], metric: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(RUN_FIELDS)
        for r in runs:
            s = r.summary
            if s is None:
                w.writerow([r.system, r.cores, r.iterations, r.rep + 1, r.status] + [""] * 8 + [r.command])
                continue
            res = results.get(r.cores)
            rate = s.flop_rate if metric == "flops" else s.byte_rate
            eff = rate / res.peak if res and res.peak > 0 else math.nan
            w.writerow([r.system, r.cores, r.iterations, r.rep + 1, r.status, f"{s.elapsed:.6e}", s.tasks, s.flops,
                        f"{s.flop_rate:.6e}", s.bytes, f"{s.byte_rate:.6e}",
                        f"{granularity(s.elapsed, r.cores, s.tasks) * 1e6:.6g}", f"{eff:.6f}", r.command])


def write_points_csv(path: str, results: dict[int, CoreResult], metric: str) -> None:
    rate_name = "flop_per_s" if metric == "flops" else "bytes_per_s"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("system", "cores", "iter", "reps", "median_elapsed_s", "tasks", "work", rate_name,
                    "granularity_us", "efficiency"))
        for cores, res in sorted(results.items()):
            for system, curve in res.curves.items():
                for p in curve.points:
                    w.writerow([system, cores, p.iterations, p.reps, f"{p.elapsed:.6e}", p.tasks, p.work,
                                f"{p.rate:.6e}", f"{p.granularity * 1e6:.6g}", f"{p.efficiency:.6f}"])


def _ratio(curve: Curve, base: Curve | None) -> str:
    if base is None or curve.metg is None or base.metg is None or curve.metg.value is None \
            or base.metg.value is None:
        return "-"
    mark = {("exact", "exact"): "", ("upper", "exact"): "<=", ("exact", "upper"): ">=",
            ("upper", "upper"): "~"}[(curve.metg.bound, base.metg.bound)]
    return f"{mark}{curve.metg.value / base.metg.value:.2f}x"


def summary_table(config: Config, results: dict[int, CoreResult]) -> str:
    unit = "FLOP/s" if config.metric == "flops" else "B/s"
    pct = f"{config.percent:g}%"
    lines = [f"METG({pct}) - {config.pattern.describe()}; median of {config.reps} run(s); "
             f"efficiency = {unit} / peak; {config.crossing} crossing" +
             (f"; ratios vs {config.baseline}" if config.baseline else "")]
    for cores, res in sorted(results.items()):
        lines.append("")
        if res.peak > 0:
            lines.append(f"{cores} core{'s' if cores > 1 else ''}: peak {res.peak:.3e} {unit} "
                         f"({res.peak_system}, -iter {res.peak_iterations})")
        else:
            lines.append(f"{cores} core{'s' if cores > 1 else ''}: no successful run with counted work: no peak")
        head = ["system", f"METG({pct}) us", f"vs {config.baseline}" if config.baseline else "ratio",
                "best eff", "eff@max iter", f"peak+-{config.tolerance * 100:g}%", "failed", "note"]
        rows = [head]
        base = res.curves.get(config.baseline) if config.baseline else None
        for system in config.systems:
            curve = res.curves.get(system)
            if curve is None:
                continue
            m = curve.metg
            top = curve.points[0] if curve.points else None
            note = []
            if m is not None and m.outliers:
                note.append(f"{m.outliers} outlier point(s)")
            if m is not None and m.value is None and curve.points:
                note.append(f"never reaches {pct}")
            if not curve.points:
                note.append("no successful run")
            else:
                missing = [i for i in config.iterations if i not in {p.iterations for p in curve.points}]
                if missing:
                    note.append("no successful run at -iter " + ",".join(map(str, missing)))
            rows.append([
                system,
                m.format_us() if m else "-",
                _ratio(curve, base) if config.baseline else "-",
                f"{m.best_efficiency * 100:.1f}%" if m and math.isfinite(m.best_efficiency) else "-",
                f"{top.efficiency * 100:.1f}% @{top.iterations}" if top and math.isfinite(top.efficiency) else "-",
                {True: "yes", False: "NO", None: "-"}[curve.reaches_peak],
                str(curve.failed),
                "; ".join(note),
            ])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        for r in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines) + "\n"


def _finite_or_none(v):
    """JSON has no NaN: an undefined number (no peak, no efficiency) is written as null."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def summary_json(config: Config, results: dict[int, CoreResult], runs: list[Run], notes: list[str]) -> dict:
    def metg_dict(curve: Curve) -> dict:
        m = curve.metg
        return {
            "metg_us": None if m is None or m.value is None else m.value * 1e6,
            "metg_bound": None if m is None else m.bound,
            "best_efficiency": None if m is None or not math.isfinite(m.best_efficiency) else m.best_efficiency,
            "outliers": 0 if m is None else m.outliers,
            "reaches_peak": curve.reaches_peak,
            "failed_runs": curve.failed,
            "points": [{k: _finite_or_none(v) for k, v in dataclasses.asdict(p).items()}
                       | {"granularity_us": p.granularity * 1e6} for p in curve.points],
        }

    per_cores = {}
    for cores, res in sorted(results.items()):
        base = res.curves.get(config.baseline) if config.baseline else None
        systems = {}
        for system, curve in res.curves.items():
            d = metg_dict(curve)
            if base is not None and base.metg and base.metg.value and curve.metg and curve.metg.value:
                d["ratio_to_baseline"] = curve.metg.value / base.metg.value
            systems[system] = d
        per_cores[str(cores)] = {"peak": _finite_or_none(res.peak), "peak_system": res.peak_system,
                                 "peak_iterations": res.peak_iterations, "systems": systems}
    return {
        "config": {
            "bin_dir": config.bin_dir, "systems": config.systems, "cores": config.cores,
            "iterations": config.iterations, "reps": config.reps, "pattern": dataclasses.asdict(config.pattern),
            "percent": config.percent, "crossing": config.crossing, "metric": config.metric,
            "baseline": config.baseline, "peak_tolerance": config.tolerance, "timeout_s": config.timeout,
        },
        "notes": notes,
        "runs": len(runs),
        "failed_runs": sum(1 for r in runs if not r.ok),
        "results": per_cores,
    }


def plot(config: Config, res: CoreResult, path: str) -> None:
    from . import plotting
    plt = plotting.plt

    unit = "FLOP/s" if config.metric == "flops" else "B/s"
    fig, (ax_rate, ax_eff) = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")
    title = f"{config.pattern.describe()}; {res.cores} core{'s' if res.cores > 1 else ''}"
    fig.suptitle(title)
    fraction = config.percent / 100.0
    for index, system in enumerate(config.systems):
        curve = res.curves.get(system)
        if curve is None or not curve.points:
            continue
        st = plotting.style(index)
        positive = [p for p in curve.points if p.rate > 0]
        ax_rate.plot([p.iterations for p in positive], [p.rate for p in positive], label=system, markersize=4,
                     **st)
        label = system
        if curve.metg is not None:
            label += f" (METG {curve.metg.format_us()} us)" if curve.metg.value is not None else " (no METG)"
        ax_eff.plot([p.granularity * 1e6 for p in curve.points], [p.efficiency * 100 for p in curve.points],
                    label=label, markersize=4, **st)
        if curve.metg is not None and curve.metg.value is not None and curve.metg.bound == "exact":
            ax_eff.plot([curve.metg.value * 1e6], [config.percent], marker="x", color=st["color"], markersize=10,
                        linestyle="none")
    if res.peak > 0:
        ax_rate.axhline(res.peak, color="grey", linestyle=":", linewidth=1, label="peak")
    ax_rate.set_xscale("log", base=2)
    ax_rate.set_yscale("log")
    ax_rate.set_xlabel("problem size (kernel iterations per task)")
    ax_rate.set_ylabel(unit)
    ax_rate.set_title(f"{unit} vs problem size (higher is better)")
    ax_rate.grid(True, which="major", alpha=0.3)
    ax_rate.legend(fontsize="small")

    ax_eff.axhline(config.percent, color="red", linestyle="--", linewidth=1, label=f"{config.percent:g}% efficiency")
    ax_eff.set_xscale("log")
    ax_eff.set_ylim(0, max(105.0, fraction * 100 + 5))
    ax_eff.set_xlabel("task granularity (us) = elapsed x cores / tasks")
    ax_eff.set_ylabel(f"efficiency (% of peak {unit})")
    ax_eff.set_title(f"efficiency vs task granularity; x = METG({config.percent:g}%)")
    ax_eff.grid(True, which="major", alpha=0.3)
    ax_eff.legend(fontsize="small")
    plotting.save(fig, path)


def write_outputs(config: Config, runs: list[Run], results: dict[int, CoreResult], notes: list[str]) -> list[str]:
    os.makedirs(config.out_dir, exist_ok=True)
    files = []

    def out(name):
        path = os.path.join(config.out_dir, name)
        files.append(path)
        return path

    write_runs_csv(out("runs.csv"), runs, results, config.metric)
    write_points_csv(out("points.csv"), results, config.metric)
    with open(out("summary.txt"), "w") as f:
        f.write(summary_table(config, results))
    with open(out("summary.json"), "w") as f:
        json.dump(summary_json(config, results, runs, notes), f, indent=2, allow_nan=False)
        f.write("\n")
    for cores, res in sorted(results.items()):
        if res.peak > 0:  # without a peak there is neither a rate worth a log scale nor an efficiency
            plot(config, res, out(f"metg-{cores}cores.png"))
    return files


# --- command line ----------------------------------------------------------------------------------------------

def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config, notes = make_config(args)
    except (UsageError, ValueError) as e:
        parser.error(str(e))  # exits 2
    for note in notes:
        print(f"metg: {note}", file=sys.stderr)

    plan = planned_runs(config)
    if args.dry_run:
        print(f"# {len(plan) // config.reps} runs per repetition x {config.reps} repetition(s); "
              f"outputs would go to {config.out_dir}")
        for rep, cores, iterations, system in plan:
            if rep:
                break
            argv_, env = taskbench.command(config.bin_dir, system, cores, config.pattern, iterations, config.mpirun)
            missing = "" if taskbench.is_runnable(taskbench.executable(config.bin_dir, system)) else "   # not built"
            print(taskbench.format_command(argv_, env) + missing)
        return 0

    load_before = _load_average()
    if load_before is not None and load_before > 0.5 * (os.cpu_count() or 1):
        print(f"metg: warning: load average {load_before:.2f} on {os.cpu_count()} cores: other programs are "
              f"running, so timings will be noisy (slow outliers; see --crossing)", file=sys.stderr)
    log_path = os.path.join(config.out_dir, "failures.log")
    try:
        os.makedirs(config.out_dir, exist_ok=True)
        log = open(log_path, "w")
    except OSError as e:
        print(f"metg: --out {config.out_dir}: cannot write there: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"metg: {len(plan)} runs ({', '.join(config.systems)}; cores {','.join(map(str, config.cores))}; "
          f"-iter {config.iterations[0]}..{config.iterations[-1]}; {config.reps} rep(s)) -> {config.out_dir}",
          file=sys.stderr)
    progress = Progress(len(plan))
    with log:
        try:
            runs = execute(config, progress, log)
        except KeyboardInterrupt:
            progress.finish()
            print("metg: interrupted", file=sys.stderr)
            return 130
    progress.finish()
    if not any(not r.ok for r in runs):
        os.remove(log_path)  # only a run that failed leaves a failures.log

    results = analyze(runs, config.metric, config.percent, config.tolerance, config.crossing)
    no_work = any(r.ok for r in runs) and all(res.peak <= 0 for res in results.values())
    notes.append(f"load average (1 min) before the runs: {load_before}, after: {_load_average()}; "
                 f"{os.cpu_count()} cores")
    try:
        files = write_outputs(config, runs, results, notes)
    except OSError as e:  # e.g. a full disk: the results are lost, say so in one line
        print(f"metg: cannot write the results in {config.out_dir}: {e.filename or ''}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    sys.stdout.write(summary_table(config, results))
    failed = sum(1 for r in runs if not r.ok)
    print(f"\nmetg: wrote {', '.join(os.path.basename(f) for f in files)} in {config.out_dir}", file=sys.stderr)
    if failed:
        skipped = len(plan) - len(runs)
        print(f"metg: {failed} run(s) FAILED" + (f", {skipped} not run after them" if skipped else "") +
              " (see failures.log)", file=sys.stderr)
        return 1
    if no_work:
        print(f"metg: every run reports zero {config.metric}: there is no peak and no efficiency", file=sys.stderr)
        return 1
    return 0
