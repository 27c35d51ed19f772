#!/usr/bin/env python3
"""Runs weft-apps and weft-apps-libomp side by side and prints the ratios of the taskiter targets.

For each repetition and application, both programs run every variant over the block-size sweep (one timed
run per variant; the programs alternate which goes first), and every run is checked against the serial
reference by the programs themselves. Then, per application:

  peak      the best median figure of merit over all variants and block sizes;
  block     the smallest block size at which weft-tasks still reaches 50% of that peak (the taskiter paper's
            point), and the smallest at which it still reaches 30% (the finer point of weft's own target);
  ratios    at those block sizes: weft-taskiter-is over weft-tasks, gomp-tasks, libomp-tasks, weft-replay,
            weft-taskiter (immediate successor off): the median over the repetitions of the ratio of the two
            runs of one repetition (paired: they ran minutes apart at most), with the range of those ratios;
  IS/replay the same paired ratio, weft-taskiter-is over weft-replay, at every block size (median, range).

and the geometric mean of the ratios over multisaxpy, heat, nbody and hpccg (heat-while is shown but not
in the mean), with the targets: at the 50% point >= 3x weft tasks and >= 5x GCC OpenMP tasks (the paper's
figures), at the 30% point >= 2x weft tasks, and taskiter+IS never slower than replay with barrier (at any
block size: the median paired ratio is >= 1; where it is not, the verdict lists the block, its range, and
whether it was slower in every repetition, which tells a real loss from this machine's noise). The targets are judged on that four-application mean; a second mean adds hpcg (the fifth
application of the taskiter paper), for information. When --apps leaves out some of the four, the means are
over those measured and say so; with none of them, no mean target is judged.

usage: bench/apps/compare.py [--build DIR] [--reps R] [--workers N] [--apps LIST] [--quick] [--csv FILE]
                             [-- extra weft-apps options, e.g. --blocks=...]
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile

MEAN_APPS = ["multisaxpy", "heat", "nbody", "hpccg"]  # the targets' mean
MEAN5_APPS = MEAN_APPS + ["hpcg"]                     # printed too, not judged
ALL_APPS = ["multisaxpy", "heat", "heat-while", "nbody", "hpccg", "hpcg"]
GCC_VARIANTS = "weft-tasks,weft-taskiter,weft-taskiter-is,weft-replay,gomp-tasks,gomp-for"
LLVM_VARIANTS = "libomp-tasks,libomp-for"
BEST = "weft-taskiter-is"
VERSUS = ["weft-tasks", "gomp-tasks", "libomp-tasks", "weft-replay", "weft-taskiter"]


def find_build(arg):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    for d in ([arg] if arg else [os.path.join(root, "build", "release"), os.path.join(root, "build")]):
        exe = os.path.join(d, "bench", "apps", "weft-apps")
        if os.access(exe, os.X_OK):
            return os.path.join(d, "bench", "apps")
    sys.exit("compare.py: weft-apps not found (build it, or pass --build DIR with DIR/bench/apps/weft-apps)")


def run(exe, app, variants, args, extra, out_rows, rep):
    with tempfile.NamedTemporaryFile(suffix=".csv", delete=False) as f:
        path = f.name
    try:
        cmd = [exe, f"--app={app}", f"--variant={variants}", "--reps=1", f"--csv={path}",
               f"--workers={args.workers}"] + (["--quick"] if args.quick else []) + extra
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            sys.stdout.write(p.stdout)
            sys.exit(f"compare.py: {' '.join(cmd)} failed (exit status {p.returncode})")
        with open(path) as f:
            out_rows.extend(dict(r, rep=rep) for r in csv.DictReader(f))
    finally:
        os.unlink(path)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="build directory (default build/release)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--apps", default=",".join(ALL_APPS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv", help="write every run to this CSV file")
    ap.add_argument("extra", nargs="*", help="more weft-apps options (after --)")
    args = ap.parse_args()
    apps = args.apps.split(",")
    for a in apps:
        if a not in ALL_APPS:
            sys.exit(f"compare.py: unknown app '{a}' ({', '.join(ALL_APPS)})")
    if args.reps < 1 or args.workers < 1:
        sys.exit("compare.py: --reps and --workers must be at least 1")
    bindir = find_build(args.build)
    programs = [(os.path.join(bindir, "weft-apps"), GCC_VARIANTS)]
    llvm = os.path.join(bindir, "weft-apps-libomp")
    if os.access(llvm, os.X_OK):
        programs.append((llvm, LLVM_VARIANTS))
    else:
        print("compare.py: weft-apps-libomp not built: no LLVM OpenMP column")

    rows = []
    for rep in range(args.reps):
        for app in apps:
            order = programs if rep % 2 == 0 else list(reversed(programs))
            for exe, variants in order:
                run(exe, app, variants, args, args.extra, rows, rep)
        print(f"compare.py: repetition {rep + 1}/{args.reps} done", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)

    fom = {}  # (app, variant, block) -> [fom]
    by_rep = {}  # (app, variant, block, rep) -> fom
    task_us = {}
    for r in rows:
        key = (r["app"], r["variant"], int(r["block"]))
        fom.setdefault(key, []).append(float(r["fom"]))
        by_rep[key + (r["rep"],)] = float(r["fom"])
        task_us.setdefault((r["app"], int(r["block"])), []).append(float(r["task_us"]))
    med = {k: statistics.median(v) for k, v in fom.items()}
    variants = [v for v in ["weft-tasks", "weft-taskiter", "weft-taskiter-is", "weft-replay", "gomp-tasks",
                            "gomp-for", "libomp-tasks", "libomp-for"] if any(k[1] == v for k in med)]

    def paired(app, a, b, block):
        """a over b per repetition (both measured in the same repetition, minutes apart at most): the noise
        of this machine moves both alike more often than not, so their ratio is steadier than either."""
        return [by_rep[(app, a, block, r)] / by_rep[(app, b, block, r)] for r in range(args.reps)
                if (app, a, block, r) in by_rep and (app, b, block, r) in by_rep]

    def spread(xs):
        return f"{min(xs):.2f}-{max(xs):.2f}" if len(xs) > 1 else "-"

    ratios = {50: {}, 30: {}}  # efficiency point (% of peak) -> app -> {versus: median of the paired ratios}
    slower = []     # (app, block, median ratio, spread): taskiter+IS's median ratio to replay below 1
    print(f"\nmedians of {args.reps} interleaved runs, {args.workers} workers; task_us = serial time per task")
    for app in apps:
        blocks = sorted({k[2] for k in med if k[0] == app})
        peak = max(v for k, v in med.items() if k[0] == app)
        print(f"\n{app} (peak {peak:.4g})")
        print(f"{'block':>8} {'task_us':>8} " + " ".join(f"{v:>16}" for v in variants) + f" {'IS/replay':>16}")
        chosen = {50: None, 30: None}  # the smallest block where weft-tasks still reaches that % of the peak
        for b in blocks:
            cells = [med.get((app, v, b)) for v in variants]
            vs_replay = paired(app, BEST, "weft-replay", b)
            print(f"{b:>8} {statistics.median(task_us[(app, b)]):>8.3f} " +
                  " ".join(f"{c:>16.4g}" if c is not None else f"{'-':>16}" for c in cells) +
                  (f" {statistics.median(vs_replay):>5.2f} ({spread(vs_replay):>9})" if vs_replay else ""))
            wt = med.get((app, "weft-tasks", b))
            for pct in chosen:
                if chosen[pct] is None and wt is not None and wt >= pct / 100 * peak:
                    chosen[pct] = b
            if vs_replay and statistics.median(vs_replay) < 1:
                slower.append((app, b, statistics.median(vs_replay), vs_replay))
        for pct, b in chosen.items():
            if b is None:
                print(f"  weft-tasks never reaches {pct}% of the peak: no ratio there")
                continue
            pairs = {v: paired(app, BEST, v, b) for v in VERSUS}
            ratios[pct][app] = {v: statistics.median(x) for v, x in pairs.items() if x}
            print(f"  smallest block where weft-tasks >= {pct}% of peak: {b}; {BEST} over: " +
                  ", ".join(f"{v} {r:.2f}x ({spread(pairs[v])})" for v, r in ratios[pct][app].items()))

    def means(pct, mean_apps):
        r = ratios[pct]
        return {v: geomean([r[a][v] for a in mean_apps if a in r and v in r[a]]) for v in VERSUS}

    gm = {}
    for pct in (50, 30):
        r = ratios[pct]
        print(f"\n{BEST} speed-up at the {pct}% block size (geometric mean over {', '.join(MEAN_APPS)}):")
        print(f"{'':>12} " + " ".join(f"{v:>14}" for v in VERSUS))
        for app in apps:
            if app in r:
                print(f"{app:>12} " + " ".join(f"{r[app].get(v, float('nan')):>13.2f}x" for v in VERSUS))
        gm[pct] = means(pct, MEAN_APPS)
        print(f"{'geomean':>12} " + " ".join(f"{gm[pct][v]:>13.2f}x" for v in VERSUS))
        gm5 = means(pct, MEAN5_APPS)
        print(f"{'geomean+hpcg':>12} " + " ".join(f"{gm5[v]:>13.2f}x" for v in VERSUS) +
              ("" if all(a in r for a in MEAN5_APPS) else "  (not all five apps measured)"))

    def verdict(value, goal, pct):
        measured = [a for a in MEAN_APPS if a in ratios[pct]]
        if not measured or math.isnan(value):
            return "not measured (none of the four apps)"
        scope = "" if len(measured) == len(MEAN_APPS) else f" (only {', '.join(measured)})"
        return f"{value:.2f}x  {'met' if value >= goal else 'NOT met'}{scope}"

    print("\ntargets (geometric means over the four apps):")
    print(f"  taskiter+IS >= 3x weft tasks, 50% point:        {verdict(gm[50]['weft-tasks'], 3, 50)}")
    print(f"  taskiter+IS >= 5x GCC OpenMP tasks, 50% point:  {verdict(gm[50]['gomp-tasks'], 5, 50)}")
    print(f"  taskiter+IS >= 2x weft tasks, 30% point:        {verdict(gm[30]['weft-tasks'], 2, 30)}")
    print(f"  taskiter+IS never slower than replay with barrier: {'met' if not slower else 'NOT met'}")
    for app, b, r, xs in slower:
        every = " (slower in every repetition)" if len(xs) > 1 and max(xs) < 1 else ""
        print(f"    {app} block {b}: {r:.2f}x replay, repetitions {spread(xs)}{every}")

if __name__ == "__main__":
    main()
