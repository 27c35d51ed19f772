"""Gantt chart of a weft trace (Chrome trace-event JSON written with WEFT_TRACE=FILE.json).

    tools/weft-gantt trace.json -o trace.png                      # rows = workers, colour = task label
    tools/weft-gantt trace.json -o trace.png --color-by iteration # colour = the tasks' tag (iteration)
    tools/weft-gantt trace.json -o trace.png --discovery          # also the producers' discovery spans

One row per worker, one bar per task body (events with "ph": "X" and "cat": "task"); a task that ran
inline while another waited (taskwait, throttling) is drawn thinner, on top of the one it interrupted.
Time is in milliseconds from the first span. Exit status 2 (with a one-line message) for a file that is
missing, is not JSON or is not a trace-event file, or holds no task span.
"""

import argparse
import json
import os
import sys
from collections import Counter, defaultdict

MAX_LEGEND = 20  # colours named in the legend; the rest are drawn grey and listed as "other"


class TraceError(Exception):
    """The input is not a usable weft trace."""


def load_trace(path):
    """Returns the list of trace events of `path` (object form {"traceEvents": [...]} or a bare array)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise TraceError("no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"not valid JSON: {e}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError('not a trace-event file (expected an object with a "traceEvents" array)')
    return events


def number(event, key, index):
    v = event.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TraceError(f'event {index}: "{key}" is missing or not a number: {event!r:.200}')
    return float(v)


def collect(events, color_by, discovery):
    """Spans as (row key, start us, duration us, colour key), and row names."""
    names = {}
    spans = []
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise TraceError(f"event {i} is not an object")
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "M" and e.get("name") == "thread_name":
            names[e.get("tid")] = str((e.get("args") or {}).get("name", e.get("tid")))
            continue
        if ph != "X" or not (cat == "task" or (discovery and cat == "discovery")):
            continue
        tid = e.get("tid")
        if isinstance(tid, bool) or not isinstance(tid, int):
            raise TraceError(f'event {i}: "tid" is missing or not an integer')
        ts, dur = number(e, "ts", i), number(e, "dur", i)
        if dur < 0:
            raise TraceError(f"event {i}: negative duration")
        if cat == "discovery":
            key = "discovery"
        elif color_by == "iteration":
            args = e.get("args") or {}
            key = str(args.get("iteration", args.get("tag", 0)))
        else:
            key = str(e.get("name", "task"))
        spans.append((tid, ts, dur, key))
    if not spans:
        raise TraceError('no task spans ("ph": "X", "cat": "task") in the file')
    return spans, names


def depths(spans):
    """Nesting depth of each span on its row (0 = outermost)."""
    out = [0] * len(spans)
    by_row = defaultdict(list)
    for k, (tid, ts, dur, _) in enumerate(spans):
        by_row[tid].append(k)
    for ks in by_row.values():
        ks.sort(key=lambda k: (spans[k][1], -spans[k][2]))
        open_ends = []
        for k in ks:
            ts, dur = spans[k][1], spans[k][2]
            while open_ends and open_ends[-1] <= ts:
                open_ends.pop()
            out[k] = len(open_ends)
            open_ends.append(ts + dur)
    return out


def colour_keys(spans, color_by):
    """Colour keys to name in the legend, most frequent first (iterations: in numeric order)."""
    counts = Counter(s[3] for s in spans)
    keys = [k for k, _ in counts.most_common(MAX_LEGEND)]
    if color_by == "iteration":
        keys.sort(key=lambda k: (0, int(k)) if k.lstrip("-").isdigit() else (1, k))
    return keys, len(counts) > len(keys)


def render(spans, names, out, color_by, title, width, dpi):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = min(s[1] for s in spans)
    rows = sorted({s[0] for s in spans})
    row_of = {tid: i for i, tid in enumerate(rows)}
    keys, has_other = colour_keys(spans, color_by)
    cmap = plt.get_cmap("tab20" if len(keys) > 10 else "tab10")
    colour = {k: cmap(i % cmap.N) for i, k in enumerate(keys)}
    other = (0.6, 0.6, 0.6, 1.0)

    depth = depths(spans)
    # Group bars by (colour, depth) so that each group is one broken_barh call; deeper groups on top.
    groups = defaultdict(list)
    for (tid, ts, dur, key), d in zip(spans, depth):
        groups[(d, colour.get(key, other), row_of[tid])].append(((ts - t0) / 1000.0, dur / 1000.0))

    height = max(2.5, 0.45 * len(rows) + 1.5)
    fig, ax = plt.subplots(figsize=(width, height))
    for (d, c, row), bars in sorted(groups.items(), key=lambda g: g[0][0]):
        h = 0.8 * (0.7 ** d)
        ax.broken_barh(bars, (row - h / 2, h), facecolors=c, edgecolor="none", linewidth=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([names.get(t, f"worker {t}") for t in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # worker 0 on top
    ax.set_xlabel("time (ms)")
    end = max((s[1] + s[2] - t0) / 1000.0 for s in spans)
    ax.set_xlim(0, end * 1.01 if end > 0 else 1)
    ax.set_title(title)
    handles = [Patch(facecolor=colour[k], label=k) for k in keys]
    if has_other:
        handles.append(Patch(facecolor=other, label="other"))
    legend_title = "iteration" if color_by == "iteration" else "label"
    ax.legend(handles=handles, title=legend_title, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


class OneLineErrors(argparse.ArgumentParser):
    """Bad input is answered with one line (not the usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv):
    p = OneLineErrors(
        prog="weft-gantt", description="Draw a weft trace (WEFT_TRACE=FILE.json) as a Gantt chart (PNG).")
    p.add_argument("trace", help="trace file written by weft (WEFT_TRACE=FILE.json)")
    p.add_argument("-o", "--output", help="output image (default: the trace's name with .png)")
    p.add_argument("--color-by", choices=("label", "iteration"), default="label",
                   help="bar colour: the task's label (default) or its iteration (the trace's tag)")
    p.add_argument("--discovery", action="store_true", help="also draw the producers' discovery spans")
    p.add_argument("--title", help="chart title (default: the trace file's name)")
    p.add_argument("--width", type=float, default=12.0, help="figure width in inches (default 12)")
    p.add_argument("--dpi", type=int, default=120, help="resolution (default 120)")
    args = p.parse_args(argv)
    if args.width <= 0 or args.dpi <= 0:
        p.error("--width and --dpi must be positive")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = args.output or os.path.splitext(args.trace)[0] + ".png"
    try:
        spans, names = collect(load_trace(args.trace), args.color_by, args.discovery)
    except TraceError as e:
        print(f"weft-gantt: {args.trace}: {e}", file=sys.stderr)
        return 2
    try:
        render(spans, names, out, args.color_by, args.title or os.path.basename(args.trace), args.width, args.dpi)
    except ImportError as e:
        print(f"weft-gantt: {e.name or 'matplotlib'} is missing for {sys.executable} "
              "(Debian: apt-get install python3-matplotlib; else: pip install matplotlib)", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"weft-gantt: cannot write {out}: {e}", file=sys.stderr)
        return 2
    print(f"weft-gantt: {len(spans)} spans on {len({s[0] for s in spans})} rows -> {out}")
    return 0
