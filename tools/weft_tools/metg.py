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
# Dependence types whose dependencies per task -radix sets (spec section 2).
RADIX_TYPES = ("nearest", "spread", "random_nearest")


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
    error: str = ""  # a failed run's first line of stderr that says "error", else its first line

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
    peak_from: str | None = None  # where a peak given to analyze() was reached, when not in these runs


@dataclasses.dataclass(frozen=True)
class Peak:
    rate: float
    system: str | None
    iterations: int | None
    where: str | None = None  # the sweep that reached it ("radix 0"), for a peak shared by several sweeps


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
            crossing: str = "finest", peaks: dict[int, Peak] | None = None) -> dict[int, CoreResult]:
    """Peak, efficiencies, METG(percent) and the peak check, per core count. The peak is that of `runs`, or the
    one `peaks` gives for the core count (the highest rate of several sweeps, see shared_peaks)."""
    results = {}
    for cores, curves in sorted(aggregate(runs, metric).items()):
        given = (peaks or {}).get(cores)
        best_rate, best_system, best_iter = ((given.rate, given.system, given.iterations) if given
                                             else find_peak(curves))
        for curve in curves.values():
            if best_rate > 0:
                for p, e in zip(curve.points, efficiencies([p.rate for p in curve.points], best_rate)):
                    p.efficiency = e
                curve.metg = compute_metg([p.granularity for p in curve.points],
                                          [p.efficiency for p in curve.points], percent / 100.0, crossing)
                curve.reaches_peak = bool(curve.points) and curve.points[0].efficiency >= 1.0 - tolerance
        results[cores] = CoreResult(cores, best_rate, best_system, best_iter, curves,
                                    given.where if given else None)
    return results


def shared_peaks(sweeps: list[tuple[str, list[Run]]], metric: str) -> dict[int, Peak]:
    """Per core count, the highest rate of any system at any iteration count in any of the sweeps (given as
    (name, runs)): one peak, and so one efficiency scale, for sweeps that differ in one graph parameter only."""
    best: dict[int, Peak] = {}
    for where, runs in sweeps:
        for cores, curves in aggregate(runs, metric).items():
            rate, system, iterations = find_peak(curves)
            if rate > 0 and (cores not in best or rate > best[cores].rate):
                best[cores] = Peak(rate, system, iterations, where)
    return best


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
              f"with --vary, core count {max(QUICK['cores'])} only; options given explicitly override it")


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
    vary: Vary | None = None  # --vary: this config is the base of one sweep per value (see value_configs)


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


@dataclasses.dataclass(frozen=True)
class VaryParam:
    """A graph parameter --vary sweeps: the Pattern field it sets, its range and how the figures show it."""
    name: str
    flag: str  # the taskbench flag it sets (refused in --extra alongside --vary)
    kind: type  # int or float
    low: float
    high: float | None
    axis: str  # x-axis label
    log_x: bool

    def text(self, value) -> str:
        """A value as written in names and messages (integers in full: 1073741824, not 1.07374e+09)."""
        return f"{value:g}" if self.kind is float else str(value)


# Ranges as taskbench accepts them (bench/taskbench/core/core.cpp), except graphs, which only --graphs bounds.
VARY_PARAMS = {
    "radix": VaryParam("radix", "-radix", int, 0, None, "dependencies per task (-radix)", False),
    "output": VaryParam("output", "-output", int, 16, 2 ** 30, "bytes per dependency (-output)", True),
    "imbalance": VaryParam("imbalance", "-imbalance", float, 0.0, 2.0, "load imbalance (-imbalance)", False),
    "graphs": VaryParam("graphs", "-and", int, 1, None, "concurrent graphs (-and)", False),
}


@dataclasses.dataclass(frozen=True)
class Vary:
    param: VaryParam
    values: tuple  # increasing, no repeats

    def text(self, value) -> str:
        return self.param.text(value)

    def dir_name(self, value) -> str:
        return f"{self.param.name}-{self.text(value)}"


def vary_number(name: str):
    """argparse type: one value of the parameter `name`, in its range."""
    param = VARY_PARAMS[name]

    def parse(text):
        text = text.strip()
        try:
            v = param.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}: '{text}' is not {'an integer' if param.kind is int else 'a number'}") from None
        if param.kind is float and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{name}: '{text}' is not a finite number")
        if v < param.low or (param.high is not None and v > param.high):
            bounds = (f"{param.text(param.low)}..{param.text(param.high)}" if param.high is not None
                      else f"at least {param.text(param.low)}")
            raise argparse.ArgumentTypeError(f"{name} {text} is out of range ({bounds})")
        return v
    return parse


def parse_vary(text: str) -> Vary:
    """argparse type of --vary: PARAM=V1,V2,... with a known PARAM and distinct values in its range."""
    name, eq, values = text.partition("=")
    name = name.strip()
    if not eq:
        raise argparse.ArgumentTypeError(f"'{text}': expected PARAM=V1,V2,... (PARAM one of "
                                          f"{', '.join(VARY_PARAMS)})")
    if name not in VARY_PARAMS:
        raise argparse.ArgumentTypeError(f"unknown parameter '{name}' (one of {', '.join(VARY_PARAMS)})")
    parts = values.split(",")
    if not values.strip() or any(not p.strip() for p in parts):
        raise argparse.ArgumentTypeError(f"{name}: empty value in '{values}' (expected V1,V2,...)")
    parsed = [vary_number(name)(p) for p in parts]
    repeated = sorted({v for v in parsed if parsed.count(v) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{name}: {repeated[0]:g} is given twice")
    return Vary(VARY_PARAMS[name], tuple(sorted(parsed)))


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
metg-<N>cores.png (FLOP/s vs iterations and efficiency vs granularity, one line per system).

--vary PARAM=V1,V2,... runs the sweep above once per value of a graph parameter: radix (dependencies per task;
with --type nearest, spread or random_nearest), output (-output bytes per dependency), imbalance (-imbalance
0..2; the kernel defaults to load_imbalance) or graphs (concurrent copies, -and). Repetitions go through every
value in turn; one peak per core count, the highest of all values, defines efficiency for all of them. Each value
writes the outputs above in --out/PARAM-V; --out gets vary-PARAM.txt (the table on stdout: rows = values,
columns = systems' METG in us, then their ratios to the baseline: --baseline, mpi when measured, else the first
system; "-" where a system has no METG, with a note saying why: failed runs, or never reaching p%),
vary-PARAM.csv (a row per value, core count and system), vary-PARAM.json, vary-PARAM.png (METG vs PARAM, one line
per system, a panel per core count) and vary-PARAM-efficiency-<N>cores.png (efficiency vs granularity, a panel
per system, a line per value). --quick with --vary runs on the largest of its core counts only.""")
    p.add_argument("--systems", default=None,
                   help="comma-separated systems (executables taskbench-<system> in --bin), or 'all' for every one "
                        "built (default); <system>@mpi runs taskbench-<system> under mpirun, one rank per core and "
                        "one worker per rank (weft-flow@mpi), <system>@mpi:W with W workers per rank")
    p.add_argument("--bin", default=None, help=f"directory of the executables (default: <repo>/{DEFAULT_BIN})")
    p.add_argument("--type", default="stencil_1d", help="dependence type (default stencil_1d)")
    p.add_argument("--radix", type=int_at_least(0), default=None,
                   help="-radix of the graphs: dependencies per task of nearest, spread, random_nearest "
                        "(default: theirs, 3)")
    p.add_argument("--graphs", type=int_at_least(1), default=None,
                   help="run N copies of the graph at once (-and), default 1")
    p.add_argument("--output", type=int_at_least(VARY_PARAMS["output"].low), default=None,
                   help="-output: bytes each task outputs, carried by each of its dependencies (default: theirs, 16)")
    p.add_argument("--imbalance", type=vary_number("imbalance"), default=None,
                   help=f"-imbalance {VARY_PARAMS['imbalance'].low:g}..{VARY_PARAMS['imbalance'].high:g} of kernel "
                        f"load_imbalance (the kernel then defaults to it)")
    p.add_argument("--vary", type=parse_vary, default=None, metavar="PARAM=V1,V2,...",
                   help="one METG sweep per value of PARAM (" + ", ".join(VARY_PARAMS) + "), and METG vs PARAM "
                        "for all systems side by side: the paper's METG vs dependencies per task (radix, with "
                        "--type nearest), vs communication (output bytes), vs load imbalance, 1 vs 4 graphs; "
                        "see below")
    p.add_argument("--steps", type=int_at_least(1), default=None, help="timesteps (default 1000)")
    p.add_argument("--width-per-core", type=int_at_least(1), default=1,
                   help="graph width = cores x this (default 1)")
    p.add_argument("--kernel", default=None,
                   help="kernel (default compute_bound; load_imbalance with --imbalance or --vary imbalance)")
    p.add_argument("--extra", default="", help="more taskbench flags, added to every graph (shell-quoted; write "
                   "--extra='-flag value' with '=', else a value that starts with '-' is taken for an option)")
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
    p.add_argument("--dry-run", action="store_true",
                   help="print the commands of one repetition (of every --vary value) and exit")
    return p


def make_config(args: argparse.Namespace) -> tuple[Config, list[str]]:
    """Config from the parsed options, and notes on requested systems that are skipped."""
    quick = QUICK if args.quick else {}
    bin_dir = os.path.abspath(args.bin) if args.bin else os.path.join(REPO_ROOT, DEFAULT_BIN)
    vary = args.vary

    if args.cores is not None:
        cores = sorted(set(positive_int_list(args.cores, "--cores")))
    elif quick and vary:
        cores = [max(quick["cores"])]  # one sweep per value: the figures are at one core count, as the paper's
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

    imbalanced = args.imbalance is not None or (vary is not None and vary.param.name == "imbalance")
    kernel = args.kernel or ("load_imbalance" if imbalanced else "compute_bound")
    if imbalanced and kernel != "load_imbalance":
        raise UsageError(f"-imbalance applies to kernel load_imbalance only, not --kernel {kernel}")
    if vary is not None:
        name = vary.param.name
        if getattr(args, name) is not None:
            raise UsageError(f"--vary {name} sets --{name} for every sweep: give one or the other")
        if vary.param.flag in extra:
            raise UsageError(f"--extra sets {vary.param.flag}, which --vary {name} sets for every sweep")
        if name == "radix" and args.type not in RADIX_TYPES:
            raise UsageError(f"--vary radix: -type {args.type} ignores -radix (it counts for "
                             f"{', '.join(RADIX_TYPES)}: --type nearest for the dependencies per task)")
    # Flags that metg sets itself from its own options: in --extra they would override them unseen (the table's
    # header would still name metg's values).
    own = {"-steps": "--steps", "-width": "--width-per-core", "-type": "--type", "-kernel": "--kernel",
           "-iter": "--iters / --max-iter", "-workers": "--cores", "-and": "--graphs"}
    for flag in extra:
        if flag in own:
            raise UsageError(f"--extra sets {flag}, which metg sets itself: use {own[flag]}")
    for flag, option in (("-radix", "radix"), ("-output", "output"), ("-imbalance", "imbalance")):
        if flag in extra and getattr(args, option) is not None:
            raise UsageError(f"--extra sets {flag} and --{option} is given too: give one of them")
    pattern = taskbench.Pattern(type=args.type, steps=steps, width_per_core=args.width_per_core,
                                kernel=kernel, radix=args.radix, graphs=args.graphs or 1, output=args.output,
                                imbalance=args.imbalance, extra=extra)

    metric = args.metric
    if metric == "auto":
        if kernel in BYTE_KERNELS:
            metric = "bytes"
        elif kernel in FLOP_KERNELS:
            metric = "flops"
        else:
            raise UsageError(f"kernel '{kernel}' counts no work, so there is no efficiency to measure; use "
                             f"{', '.join(FLOP_KERNELS)} (FLOP/s) or {', '.join(BYTE_KERNELS)} (B/s), "
                             f"or set --metric")
    if args.percent > 100:
        raise UsageError(f"--percent {args.percent:g}: must be at most 100")
    if args.peak_tolerance >= 100:
        raise UsageError(f"--peak-tolerance {args.peak_tolerance:g}: must be below 100 (percentage points "
                         "below 100% efficiency)")

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
            # A name neither known nor built is a misspelling, not a system to skip: say so.
            program = taskbench.parse_ranks_system(s)[0] if taskbench.system_kind(s) == "ranks" else s
            if (program not in taskbench.KNOWN_SYSTEMS and program + taskbench.RANKS_SUFFIX not in taskbench.KNOWN_SYSTEMS
                    and not os.path.exists(taskbench.executable(bin_dir, program))):
                raise UsageError(f"--systems: unknown system '{s}' (known: {', '.join(taskbench.KNOWN_SYSTEMS)}; or "
                                 f"any taskbench-NAME in {bin_dir})")
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
        raise UsageError("none of the requested systems can run here (" + "; ".join(notes) + ")" if notes else
                         "none of the requested systems is built in " + bin_dir)

    for s in systems:
        skipped = [c for c in cores if not taskbench.runs_on(s, c)]
        if skipped and s == "serial":
            notes.append("serial runs on one core only: not run on " + ",".join(map(str, skipped)) + " cores")
        elif skipped:
            w = taskbench.workers_per_process(s)
            notes.append(f"{s} runs on 2 or more ranks of {w} worker{'s' if w > 1 else ''}: not run on " +
                         ",".join(map(str, skipped)) + f" core{'s' if skipped != [1] else ''}")
    if vary is None:
        for s in systems:
            if why := taskbench.refusal(s, pattern):
                notes.append(f"{s} not run: {why}")
    if not any(taskbench.runs_on(s, c) for s in systems for c in cores):
        raise UsageError("nothing to run: no requested system runs on the --cores given (" +
                         "; ".join(n for n in notes if "not run on" in n) + ")")

    baseline = args.baseline
    if baseline is None:
        baseline = "mpi" if "mpi" in systems else None
    elif baseline not in systems:
        raise UsageError(f"--baseline {baseline} is not among the systems measured ({', '.join(systems)})")

    if args.out is not None and not args.out.strip():
        raise UsageError("--out is empty: give a directory (or leave --out out for results/metg-<date>)")
    if args.out:
        out_dir = os.path.abspath(args.out)
        if os.path.exists(out_dir) and not os.path.isdir(out_dir):
            raise UsageError(f"--out {args.out} exists and is not a directory")
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out_dir = os.path.join(REPO_ROOT, "results", f"metg-{stamp}")

    if vary is not None and vary.param.name == "radix" and args.type in ("nearest", "random_nearest"):
        narrow = [c for c in cores if max(vary.values) > c * args.width_per_core]
        if narrow:
            notes.append(f"--vary radix: on {','.join(map(str, narrow))} core(s) the graph is narrower than radix "
                         f"{max(vary.values)} (width = cores x --width-per-core): {args.type} clips a task's "
                         f"dependencies to the width, so the largest radixes give the same graph")

    config = Config(bin_dir=bin_dir, systems=systems, cores=cores, iterations=iterations, reps=reps,
                    pattern=pattern, percent=args.percent, crossing=args.crossing, metric=metric, baseline=baseline,
                    timeout=args.timeout, max_failures=args.max_failures, tolerance=args.peak_tolerance / 100.0,
                    mpirun=mpirun, out_dir=out_dir, vary=vary)
    return config, notes


def value_configs(config: Config) -> list[tuple[object, Config]]:
    """(value, config of its sweep) for every --vary value: the base config with the parameter set and the
    outputs in a folder of their own; [(None, config)] without --vary."""
    vary = config.vary
    if vary is None:
        return [(None, config)]
    result = []
    for value in vary.values:
        pattern = dataclasses.replace(config.pattern, **{vary.param.name: value})
        result.append((value, dataclasses.replace(config, pattern=pattern, vary=None,
                                                  out_dir=os.path.join(config.out_dir, vary.dir_name(value)))))
    return result


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
            systems = [s for s in config.systems
                       if taskbench.runs_on(s, cores) and not taskbench.refusal(s, config.pattern)]
            k = rep % len(systems) if systems else 0
            rotated = systems[k:] + systems[:k]
            for iterations in config.iterations:
                plan.extend((rep, cores, iterations, s) for s in rotated)
    return plan


# --- the sweep -------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class SweepState:
    """The runs of one config so far, and its systems' failures, carried from one repetition to the next."""
    runs: list[Run] = dataclasses.field(default_factory=list)
    failures: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    stopped: set[tuple[str, int]] = dataclasses.field(default_factory=set)


def execute(config: Config, progress: Progress, log, only_rep: int | None = None, state: SweepState | None = None,
            context: str = "") -> list[Run]:
    """Runs the plan (or its repetition `only_rep`, continuing `state`); failed runs are reported through
    `progress` and recorded, never dropped. `context` (", radix 3") tells the sweep apart in messages."""
    state = state if state is not None else SweepState()
    runs, failures, stopped = state.runs, state.failures, state.stopped
    for rep, cores, iterations, system in planned_runs(config):
        if only_rep is not None and rep != only_rep:
            continue
        key = (system, cores)
        label = (f"{context.lstrip(', ')}{', ' if context else ''}rep {rep + 1}/{config.reps}, "
                 f"{cores} core{'s' if cores > 1 else ''}, -iter {iterations}, {system}")
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
            lines = [x.strip() for x in result.stderr.splitlines() if x.strip()]
            run.error = next((x for x in lines if "error" in x.lower()), lines[0] if lines else "")
        runs.append(run)
        if not run.ok:
            failures[key] = failures.get(key, 0) + 1
            fatal = result.returncode == 2 or result.start_error is not None
            stop = fatal or failures[key] >= config.max_failures
            report = [f"metg: FAILED {system} on {cores} core(s){context}, -iter {iterations}, rep {rep + 1}: "
                      f"{run.status}",
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
                report.append(f"  {system} is not run again on {cores} core(s){context}: {why}")
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
                         f"({res.peak_system}, -iter {res.peak_iterations}"
                         f"{', ' + res.peak_from if res.peak_from else ''})")
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


def config_json(config: Config) -> dict:
    """What a sweep ran: the part of summary.json and vary-PARAM.json that describes the configuration."""
    return {
        "bin_dir": config.bin_dir, "systems": config.systems, "cores": config.cores,
        "iterations": config.iterations, "reps": config.reps, "pattern": dataclasses.asdict(config.pattern),
        "percent": config.percent, "crossing": config.crossing, "metric": config.metric,
        "baseline": config.baseline, "peak_tolerance": config.tolerance, "timeout_s": config.timeout,
    }


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
                                 "peak_iterations": res.peak_iterations, "peak_from": res.peak_from,
                                 "systems": systems}
    return {
        "config": config_json(config),
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


# --- METG vs a graph parameter (--vary) -------------------------------------------------------------------------

@dataclasses.dataclass
class Sweep:
    """One value of --vary: its config, runs and results."""
    value: object  # None without --vary
    config: Config
    runs: list[Run]
    results: dict[int, CoreResult]


@dataclasses.dataclass
class VaryCell:
    """METG of one system on one core count at one value of the varied parameter."""
    value: object
    metg: Metg | None  # None: no curve (no successful run) or no peak
    ratio: float | None  # METG / the baseline's METG, when both have one
    ratio_text: str  # as in the summary table: "1.23x", "<=0.50x", "-"
    failed: int  # failed runs
    runs: int
    note: str  # why there is no METG, or the failures behind it ("" when none)


@dataclasses.dataclass
class VaryCores:
    cores: int
    peak: CoreResult | None  # a result of this core count (they share the peak), None without a successful run
    baseline: str
    systems: list[str]
    cells: dict[str, list[VaryCell]]  # per system, one per value in order


def vary_cells(config: Config, sweeps: list[Sweep]) -> list[VaryCores]:
    """The METG of every system, core count and value, ratios to the baseline (--baseline, else the first
    system), and a note on every value a system has no METG at."""
    vary = config.vary
    pct = f"{config.percent:g}%"
    table = []
    for cores in config.cores:
        systems = [s for s in config.systems if taskbench.runs_on(s, cores)]
        if not systems:
            continue
        base = config.baseline if config.baseline in systems else systems[0]
        peak = next((sw.results[cores] for sw in sweeps if cores in sw.results), None)
        cells: dict[str, list[VaryCell]] = {s: [] for s in systems}
        for sw in sweeps:
            res = sw.results.get(cores)
            folder = vary.dir_name(sw.value)
            base_curve = res.curves.get(base) if res else None
            for system in systems:
                curve = res.curves.get(system) if res else None
                mine = [r for r in sw.runs if r.system == system and r.cores == cores]
                failed = [r for r in mine if not r.ok]
                metg = curve.metg if curve is not None and curve.points else None
                if not mine:
                    note = "not run: " + (taskbench.refusal(system, sw.config.pattern) or "no run planned")
                elif curve is None or not curve.points:
                    statuses = ", ".join(dict.fromkeys(r.status + (f": {r.error}" if r.error else "")
                                                       for r in failed))
                    note = f"no successful run ({len(failed)} failed: {statuses}; see {folder}/failures.log)"
                elif metg is None:
                    note = "no peak: no run counted any work"
                elif metg.value is None:
                    note = f"never reaches {pct} (best {metg.best_efficiency * 100:.1f}%)"
                elif failed:
                    note = f"{len(failed)} failed run(s) (see {folder}/failures.log)"
                else:
                    note = ""
                ratio = None
                if (metg is not None and metg.value is not None and base_curve is not None
                        and base_curve.metg is not None and base_curve.metg.value is not None):
                    ratio = metg.value / base_curve.metg.value
                ratio_text = _ratio(curve, base_curve) if curve is not None else "-"
                cells[system].append(VaryCell(sw.value, metg, ratio, ratio_text, len(failed), len(mine), note))
        table.append(VaryCores(cores, peak, base, systems, cells))
    return table


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def vary_table(config: Config, table: list[VaryCores]) -> str:
    vary = config.vary
    name = vary.param.name
    unit = "FLOP/s" if config.metric == "flops" else "B/s"
    pct = f"{config.percent:g}%"
    lines = [f"METG({pct}) in us vs {name} ({', '.join(vary.text(v) for v in vary.values)}) - "
             f"{config.pattern.describe()}; median of {config.reps} run(s); efficiency = {unit} / the peak of all "
             f"values; {config.crossing} crossing; '-': no METG (see the notes), '<=x': even the finest point "
             f"reaches {pct}"]
    for vc in table:
        lines.append("")
        plural = "s" if vc.cores > 1 else ""
        if vc.peak is not None and vc.peak.peak > 0:
            lines.append(f"{vc.cores} core{plural}: peak {vc.peak.peak:.3e} {unit} ({vc.peak.peak_system}, -iter "
                         f"{vc.peak.peak_iterations}{', ' + vc.peak.peak_from if vc.peak.peak_from else ''})")
        else:
            lines.append(f"{vc.cores} core{plural}: no successful run with counted work: no peak")
        rows = [[name] + vc.systems]
        for k, value in enumerate(vary.values):
            rows.append([vary.text(value)] +
                        [vc.cells[s][k].metg.format_us() if vc.cells[s][k].metg else "-" for s in vc.systems])
        lines += _columns(rows)
        others = [s for s in vc.systems if s != vc.baseline]
        if others:
            lines.append(f"  METG / METG of {vc.baseline}:")
            rows = [[name] + others]
            for k, value in enumerate(vary.values):
                rows.append([vary.text(value)] + [vc.cells[s][k].ratio_text for s in others])
            lines += ["  " + line for line in _columns(rows)]
        notes = [f"{name} {vary.text(cell.value)}, {s}: {cell.note}"
                 for k in range(len(vary.values)) for s in vc.systems if (cell := vc.cells[s][k]).note]
        if notes:
            lines.append("  notes:")
            lines += ["    " + n for n in notes]
    return "\n".join(lines) + "\n"


VARY_FIELDS = ("cores", "system", "metg_us", "metg_bound", "best_efficiency", "baseline", "ratio_to_baseline",
               "failed_runs", "runs", "note", "dir")


def write_vary_csv(path: str, config: Config, table: list[VaryCores]) -> None:
    vary = config.vary
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow((vary.param.name,) + VARY_FIELDS)
        for vc in table:
            for k, value in enumerate(vary.values):
                for s in vc.systems:
                    c = vc.cells[s][k]
                    m = c.metg
                    w.writerow([vary.text(value), vc.cores, s,
                                "" if m is None or m.value is None else f"{m.value * 1e6:.6g}",
                                "" if m is None or m.bound is None else m.bound,
                                "" if m is None or not math.isfinite(m.best_efficiency) else f"{m.best_efficiency:.6f}",
                                vc.baseline, "" if c.ratio is None else f"{c.ratio:.6g}", c.failed, c.runs, c.note,
                                vary.dir_name(value)])


def vary_json(config: Config, table: list[VaryCores], sweeps: list[Sweep], notes: list[str]) -> dict:
    vary = config.vary
    results = {}
    for vc in table:
        systems = {}
        for s in vc.systems:
            systems[s] = [{
                "value": c.value,
                "metg_us": None if c.metg is None or c.metg.value is None else c.metg.value * 1e6,
                "metg_bound": None if c.metg is None else c.metg.bound,
                "best_efficiency": (None if c.metg is None or not math.isfinite(c.metg.best_efficiency)
                                    else c.metg.best_efficiency),
                "ratio_to_baseline": c.ratio,
                "failed_runs": c.failed,
                "runs": c.runs,
                "note": c.note or None,
            } for c in vc.cells[s]]
        peak = vc.peak
        results[str(vc.cores)] = {
            "peak": _finite_or_none(peak.peak) if peak else None,
            "peak_system": peak.peak_system if peak else None,
            "peak_iterations": peak.peak_iterations if peak else None,
            "peak_from": peak.peak_from if peak else None,
            "baseline": vc.baseline,
            "systems": systems,
        }
    return {
        "param": vary.param.name,
        "flag": vary.param.flag,
        "values": list(vary.values),
        "dirs": {vary.text(v): vary.dir_name(v) for v in vary.values},
        "config": config_json(config),
        "notes": notes,
        "runs": sum(len(sw.runs) for sw in sweeps),
        "failed_runs": sum(1 for sw in sweeps for r in sw.runs if not r.ok),
        "results": results,
    }


def _value_axis(ax, vary: Vary) -> None:
    if vary.param.log_x:
        ax.set_xscale("log", base=2)
    ax.set_xticks(list(vary.values))
    ax.set_xticklabels([vary.text(v) for v in vary.values])
    ax.minorticks_off()


def _plain_log_ticks(axis) -> None:
    """Ticks at 1, 2, 3, 5 x 10^k labelled as plain numbers: a METG axis often spans less than a decade."""
    import matplotlib.ticker as ticker
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def plot_vary(config: Config, table: list[VaryCores], path: str) -> None:
    """METG vs the parameter, one line per system, one panel per core count (the paper's Fig. 10)."""
    from . import plotting
    plt = plotting.plt

    vary = config.vary
    fig, axes = plt.subplots(1, len(table), figsize=(6.5 * len(table), 5), layout="constrained", squeeze=False)
    fig.suptitle(f"METG({config.percent:g}%) vs {vary.param.axis} (lower is better)\n{config.pattern.describe()}")
    for ax, vc in zip(axes[0], table):
        plotted = False
        for system in vc.systems:
            st = plotting.style(config.systems.index(system))
            cells = vc.cells[system]
            xs = list(vary.values)
            ys = [c.metg.value * 1e6 if c.metg is not None and c.metg.value is not None else math.nan
                  for c in cells]
            if all(math.isnan(y) for y in ys):
                ax.plot([], [], label=f"{system} (no METG)", **st)
                continue
            plotted = True
            exact = [k for k, c in enumerate(cells) if c.metg is not None and c.metg.bound == "exact"]
            upper = [k for k, c in enumerate(cells) if c.metg is not None and c.metg.bound == "upper"]
            ax.plot(xs, ys, label=system, markevery=exact, **st)
            if upper:
                ax.plot([xs[k] for k in upper], [ys[k] for k in upper], linestyle="none", marker=st["marker"],
                        markerfacecolor="none", color=st["color"])
        if plotted:
            ax.set_yscale("log")
            _plain_log_ticks(ax.yaxis)
        _value_axis(ax, vary)
        ax.set_xlabel(vary.param.axis)
        ax.set_ylabel(f"METG({config.percent:g}%) (us)")
        ax.set_title(f"{vc.cores} core{'s' if vc.cores > 1 else ''}; hollow: upper bound (<=)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small")
    plotting.save(fig, path)


def plot_vary_efficiency(config: Config, sweeps: list[Sweep], cores: int, path: str) -> None:
    """Efficiency vs task granularity, one panel per system, one line per value (the paper's Figs. 11-12)."""
    from . import plotting
    plt = plotting.plt

    vary = config.vary
    systems = [s for s in config.systems if taskbench.runs_on(s, cores)]
    ncols = min(3, len(systems))
    nrows = (len(systems) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 4 * nrows), layout="constrained", squeeze=False,
                             sharex=True, sharey=True)
    fig.suptitle(f"efficiency vs task granularity for varying {vary.param.axis} (higher is better)\n"
                 f"{config.pattern.describe()}; {cores} core{'s' if cores > 1 else ''}")
    colours = plt.get_cmap("viridis")
    for index, ax in enumerate(axes.flat):
        if index >= len(systems):
            ax.set_visible(False)
            continue
        system = systems[index]
        for k, sw in enumerate(sweeps):
            res = sw.results.get(cores)
            curve = res.curves.get(system) if res else None
            colour = colours(k / max(1, len(sweeps) - 1) * 0.9)
            label = f"{vary.param.name} {vary.text(sw.value)}"
            if curve is None or not curve.points or res.peak <= 0:
                ax.plot([], [], color=colour, label=label + " (no run)")
                continue
            ax.plot([p.granularity * 1e6 for p in curve.points], [p.efficiency * 100 for p in curve.points],
                    color=colour, marker="o", markersize=3, label=label)
        ax.axhline(config.percent, color="red", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
        ax.set_title(system)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="x-small")
    for ax in axes[-1]:
        ax.set_xlabel("task granularity (us)")
    for ax in axes[:, 0]:
        ax.set_ylabel("efficiency (% of peak)")
    plotting.save(fig, path)


def write_vary_outputs(config: Config, sweeps: list[Sweep], notes: list[str]) -> tuple[list[str], str]:
    """vary-<param>.csv, .json, .txt and .png, and an efficiency figure per core count, in the --out folder;
    returns the files and the table."""
    name = config.vary.param.name
    table = vary_cells(config, sweeps)
    text = vary_table(config, table)
    files = []

    def out(file_name):
        path = os.path.join(config.out_dir, file_name)
        files.append(path)
        return path

    write_vary_csv(out(f"vary-{name}.csv"), config, table)
    with open(out(f"vary-{name}.txt"), "w") as f:
        f.write(text)
    with open(out(f"vary-{name}.json"), "w") as f:
        json.dump(vary_json(config, table, sweeps, notes), f, indent=2, allow_nan=False)
        f.write("\n")
    if table:
        plot_vary(config, table, out(f"vary-{name}.png"))
    for vc in table:
        if vc.peak is not None and vc.peak.peak > 0:
            plot_vary_efficiency(config, sweeps, vc.cores, out(f"vary-{name}-efficiency-{vc.cores}cores.png"))
    return files, text


# --- command line ----------------------------------------------------------------------------------------------

def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def print_dry_run(config: Config, heading: str = "") -> None:
    """The commands of the first repetition of `config`, under a line `# <heading>N runs per repetition ...`."""
    plan = planned_runs(config)
    print(f"# {heading}{len(plan) // config.reps} runs per repetition x {config.reps} repetition(s); "
          f"outputs would go to {config.out_dir}")
    for rep, cores, iterations, system in plan:
        if rep:
            break
        argv_, env = taskbench.command(config.bin_dir, system, cores, config.pattern, iterations, config.mpirun)
        missing = "" if taskbench.is_runnable(taskbench.executable(config.bin_dir, system)) else "   # not built"
        print(taskbench.format_command(argv_, env) + missing)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config, notes = make_config(args)
    except (UsageError, ValueError) as e:
        parser.error(str(e))  # exits 2
    for note in notes:
        print(f"metg: {note}", file=sys.stderr)

    vary = config.vary
    values = value_configs(config)

    def context(value) -> str:
        return "" if value is None else f", {vary.param.name} {vary.text(value)}"

    if args.dry_run:
        if vary is not None:
            print(f"# --vary {vary.param.name}: {len(values)} value(s), one sweep each; METG vs {vary.param.name} "
                  f"would go to {config.out_dir}")
        for value, c in values:
            print_dry_run(c, context(value).lstrip(", ") + (": " if value is not None else ""))
        return 0

    load_before = _load_average()
    if load_before is not None and load_before > 0.5 * (os.cpu_count() or 1):
        print(f"metg: warning: load average {load_before:.2f} on {os.cpu_count()} cores: other programs are "
              f"running, so timings will be noisy (slow outliers; see --crossing)", file=sys.stderr)
    logs = []
    try:
        for _, c in values:
            os.makedirs(c.out_dir, exist_ok=True)
            logs.append(open(os.path.join(c.out_dir, "failures.log"), "w"))
    except OSError as e:
        for log in logs:
            log.close()
        print(f"metg: --out {config.out_dir}: cannot write there: {e.strerror or e}", file=sys.stderr)
        return 2
    total = sum(len(planned_runs(c)) for _, c in values)
    print(f"metg: {total} runs ({', '.join(config.systems)}; cores {','.join(map(str, config.cores))}; "
          f"-iter {config.iterations[0]}..{config.iterations[-1]}; {config.reps} rep(s)" +
          (f"; {vary.param.name} {','.join(vary.text(v) for v in vary.values)}" if vary is not None else "") +
          f") -> {config.out_dir}", file=sys.stderr)
    progress = Progress(total)
    states = [SweepState() for _ in values]
    try:
        # Repetition by repetition through every value, so that drift on the machine affects all values alike.
        for rep in range(config.reps):
            for (value, c), state, log in zip(values, states, logs):
                execute(c, progress, log, rep, state, context(value))
    except KeyboardInterrupt:
        progress.finish()
        print("metg: interrupted", file=sys.stderr)
        return 130
    finally:
        for log in logs:
            log.close()
    progress.finish()
    for (_, c), state in zip(values, states):
        if all(r.ok for r in state.runs):
            os.remove(os.path.join(c.out_dir, "failures.log"))  # only a run that failed leaves a failures.log

    peaks = (shared_peaks([(context(v).lstrip(", "), st.runs) for (v, _), st in zip(values, states)], config.metric)
             if vary is not None else None)
    sweeps = [Sweep(value, c, state.runs,
                    analyze(state.runs, c.metric, c.percent, c.tolerance, c.crossing, peaks))
              for (value, c), state in zip(values, states)]
    runs = [r for sw in sweeps for r in sw.runs]
    no_work = any(r.ok for r in runs) and all(res.peak <= 0 for sw in sweeps for res in sw.results.values())
    notes.append(f"load average (1 min) before the runs: {load_before}, after: {_load_average()}; "
                 f"{os.cpu_count()} cores")
    try:
        files = []
        for sw in sweeps:
            files += write_outputs(sw.config, sw.runs, sw.results, notes)
        if vary is not None:
            vary_files, table = write_vary_outputs(config, sweeps, notes)
            files += vary_files
        else:
            table = summary_table(config, sweeps[0].results)
    except OSError as e:  # e.g. a full disk: the results are lost, say so in one line
        print(f"metg: cannot write the results in {config.out_dir}: {e.filename or ''}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    sys.stdout.write(table)
    if vary is None:
        print(f"\nmetg: wrote {', '.join(os.path.basename(f) for f in files)} in {config.out_dir}", file=sys.stderr)
    else:
        print(f"\nmetg: wrote {', '.join(os.path.basename(f) for f in files if os.path.dirname(f) == config.out_dir)}"
              f" in {config.out_dir}, and each value's runs.csv, points.csv, summary.* and plots in "
              f"{', '.join(vary.dir_name(v) for v in vary.values)}", file=sys.stderr)
    failed = sum(1 for r in runs if not r.ok)
    if failed:
        skipped = total - len(runs)
        logs_with_failures = [os.path.relpath(os.path.join(sw.config.out_dir, "failures.log"), config.out_dir)
                              for sw in sweeps if any(not r.ok for r in sw.runs)]
        print(f"metg: {failed} run(s) FAILED" + (f", {skipped} not run after them" if skipped else "") +
              f" (see {', '.join(logs_with_failures)})", file=sys.stderr)
        return 1
    if no_work:
        print(f"metg: every run reports zero {config.metric}: there is no peak and no efficiency", file=sys.stderr)
        return 1
    return 0
