"""Gantt chart of weft traces (Chrome trace-event JSON written with WEFT_TRACE=FILE.json).

    tools/weft-gantt trace.json -o trace.png                      # rows = workers, colour = task label
    tools/weft-gantt trace.json -o trace.png --color-by iteration # colour = the tasks' tag (iteration)
    tools/weft-gantt trace.json -o trace.png --discovery          # also the producers' discovery spans
    tools/weft-gantt trace.r*.json -o job.png                     # the ranks of an MPI job, one group each
    tools/weft-gantt trace.r*.json --merge job.json               # also one trace of every rank (Perfetto)

One row per worker, one bar per task body (events with "ph": "X" and "cat": "task"); a task that ran
inline while another waited (taskwait, throttling) is drawn thinner, on top of the one it interrupted.
Time is in milliseconds from the first span.

Several processes (the per-rank files of an MPI job, WEFT_TRACE=trace.json -> trace.r0.json, trace.r1.json,
..., or one file holding several processes): one group of worker rows per process, labelled with its
process name ("rank 1 / worker 0") and ordered by rank. Each weft file records the wall-clock time of its
time origin (otherData.origin_unix_ns); the files are put on that common time base (exact for ranks on one
host, as good as the hosts' clock synchronisation across hosts). --merge writes the processes into one
trace-event file on that time base (flow and async ids renumbered per file, pids made distinct), which
Perfetto or chrome://tracing shows with a process track per rank.

Exit status 2 (with a one-line message naming the file) for a file that is missing, is not JSON or is not
a trace-event file, or when no file holds a task span.
"""

import argparse
import json
import os
import re
import sys
from collections import Counter, defaultdict

MAX_LEGEND = 20  # colours named in the legend; the rest are drawn grey and listed as "other"


class TraceError(Exception):
    """The input is not a usable weft trace; `path` names the file when the problem is one file's."""

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


def load_trace(path):
    """Returns (events, otherData) of `path` (object form {"traceEvents": [...]} or a bare array)."""
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
    other = data.get("otherData") if isinstance(data, dict) else None
    return events, other if isinstance(other, dict) else {}


def number(event, key, index):
    v = event.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TraceError(f'event {index}: "{key}" is missing or not a number: {event!r:.200}')
    return float(v)


def integer(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Trace:
    """One loaded file: its events, the pid -> process name and (pid, tid) -> thread name maps, its rank
    (otherData.rank) and the wall-clock time of its origin (otherData.origin_unix_ns), when it says."""

    def __init__(self, path, events, other):
        self.path = path
        self.events = events
        self.other = other
        self.rank = integer(other.get("rank"))
        self.ranks = integer(other.get("ranks"))
        self.origin_ns = integer(other.get("origin_unix_ns"))
        self.process_names = {}
        self.process_sort = {}
        self.thread_names = {}
        for e in events:
            if not isinstance(e, dict) or e.get("ph") != "M":
                continue
            args = e.get("args") or {}
            if not isinstance(args, dict):
                continue
            pid = e.get("pid")
            if e.get("name") == "process_name" and "name" in args:
                self.process_names[pid] = str(args["name"])
            elif e.get("name") == "process_sort_index" and integer(args.get("sort_index")) is not None:
                self.process_sort[pid] = args["sort_index"]
            elif e.get("name") == "thread_name" and "name" in args:
                self.thread_names[(pid, e.get("tid"))] = str(args["name"])


def load(paths):
    traces = []
    for path in paths:
        try:
            traces.append(Trace(path, *load_trace(path)))
        except TraceError as e:
            raise TraceError(str(e), path) from None
    return traces


def suspicious(traces):
    """Warnings about files that do not look like one job's: a file given twice, two files of one rank, ranks
    of jobs of different sizes. They are still drawn (side by side traces of separate runs are legitimate)."""
    warnings, seen = [], {}
    for t in traces:
        real = os.path.realpath(t.path)
        if real in seen:
            warnings.append(f"{t.path} is given twice (as {seen[real]} too)")
        seen.setdefault(real, t.path)
    ranked = [t for t in traces if t.ranks is not None and t.ranks > 1 and t.rank is not None]
    by_rank = defaultdict(list)
    for t in ranked:
        by_rank[t.rank].append(t.path)
    for rank, paths in sorted(by_rank.items()):
        if len(paths) > 1 and len({os.path.realpath(p) for p in paths}) > 1:
            warnings.append(f"{' and '.join(paths)} are all rank {rank}: traces of different jobs?")
    sizes = sorted({t.ranks for t in ranked})
    if len(sizes) > 1:
        warnings.append("the files come from jobs of " + " and ".join(str(n) for n in sizes) + " ranks")
    return warnings


def offsets_us(traces):
    """Per file, what to add to its timestamps to put every file on one time base: the difference of their
    wall-clock origins when every file records one (weft traces do), else 0 (each file from its own zero)."""
    origins = [t.origin_ns for t in traces]
    if len(traces) < 2 or any(o is None for o in origins):
        return [0.0] * len(traces)
    first = min(origins)
    return [(o - first) / 1000.0 for o in origins]


def collect(traces, color_by, discovery):
    """Spans as (row key, start us, duration us, colour key), the rows in display order with their labels,
    and the number of processes. A row key is (file index, pid, tid)."""
    spans = []
    offsets = offsets_us(traces)
    for fi, (t, off) in enumerate(zip(traces, offsets)):
        for i, e in enumerate(t.events):
            try:
                if not isinstance(e, dict):
                    raise TraceError(f"event {i} is not an object")
                ph, cat = e.get("ph"), e.get("cat")
                if ph != "X" or not (cat == "task" or (discovery and cat == "discovery")):
                    continue
                tid = e.get("tid")
                if integer(tid) is None:
                    raise TraceError(f'event {i}: "tid" is missing or not an integer')
                ts, dur = number(e, "ts", i), number(e, "dur", i)
                if dur < 0:
                    raise TraceError(f"event {i}: negative duration")
            except TraceError as err:
                raise TraceError(str(err), t.path) from None
            if cat == "discovery":
                key = "discovery"
            elif color_by == "iteration":
                args = e.get("args") or {}
                key = str(args.get("iteration", args.get("tag", 0)))
            else:
                key = str(e.get("name", "task"))
            spans.append(((fi, e.get("pid"), tid), ts + off, dur, key))
    if not spans:
        if len(traces) == 1:
            raise TraceError('no task spans ("ph": "X", "cat": "task") in the file', traces[0].path)
        raise TraceError('no task spans ("ph": "X", "cat": "task") in any of the files')

    processes = sorted({(k[0], k[1]) for k, _, _, _ in spans}, key=lambda fp: process_order(traces, *fp))
    several = len(processes) > 1
    order = {fp: i for i, fp in enumerate(processes)}
    rows = sorted({s[0] for s in spans}, key=lambda k: (order[(k[0], k[1])], k[2]))
    labels = {}
    for k in rows:
        fi, pid, tid = k
        t = traces[fi]
        name = t.thread_names.get((pid, tid), f"worker {tid}")
        if several:
            name = f"{process_label(traces, fi, pid)} / {name}"
        labels[k] = name
    return spans, rows, labels, len(processes)


def process_order(traces, fi, pid):
    """Processes by rank (process_sort_index, which weft sets to the rank), then by file and pid."""
    rank = traces[fi].process_sort.get(pid)
    return (rank is None, rank or 0, fi, pid if integer(pid) is not None else 0)


def process_label(traces, fi, pid):
    """The process's name ("rank 1"); a single-process weft trace ("weft") is named by its file."""
    t = traces[fi]
    name = t.process_names.get(pid)
    if name and name != "weft":
        return name
    return os.path.basename(t.path) if len(traces) > 1 else f"process {pid}"


def depths(spans):
    """Nesting depth of each span on its row (0 = outermost)."""
    out = [0] * len(spans)
    by_row = defaultdict(list)
    for k, (row, _, _, _) in enumerate(spans):
        by_row[row].append(k)
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


def render(spans, rows, labels, out, color_by, title, width, dpi):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = min(s[1] for s in spans)
    row_of = {k: i for i, k in enumerate(rows)}
    keys, has_other = colour_keys(spans, color_by)
    cmap = plt.get_cmap("tab20" if len(keys) > 10 else "tab10")
    colour = {k: cmap(i % cmap.N) for i, k in enumerate(keys)}
    other = (0.6, 0.6, 0.6, 1.0)

    depth = depths(spans)
    # Group bars by (colour, depth) so that each group is one broken_barh call; deeper groups on top.
    groups = defaultdict(list)
    for (row, ts, dur, key), d in zip(spans, depth):
        groups[(d, colour.get(key, other), row_of[row])].append(((ts - t0) / 1000.0, dur / 1000.0))

    height = max(2.5, 0.45 * len(rows) + 1.5)
    fig, ax = plt.subplots(figsize=(width, height))
    for (d, c, row), bars in sorted(groups.items(), key=lambda g: g[0][0]):
        h = 0.8 * (0.7 ** d)
        ax.broken_barh(bars, (row - h / 2, h), facecolors=c, edgecolor="none", linewidth=0)
    # A line between the groups of two processes (ranks).
    for i in range(1, len(rows)):
        if rows[i][:2] != rows[i - 1][:2]:
            ax.axhline(i - 0.5, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([labels[k] for k in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # worker 0 (of rank 0) on top
    ax.set_xlabel("time (ms)")
    end = max((s[1] + s[2] - t0) / 1000.0 for s in spans)
    ax.set_xlim(0, end * 1.01 if end > 0 else 1)
    ax.set_title(title)
    handles = [Patch(facecolor=colour[k], label=k) for k in keys]
    if has_other:
        handles.append(Patch(facecolor=other, label="other"))
    legend_title = "iteration" if color_by == "iteration" else "label"
    # As many columns as the figure's height needs (about four entries per inch): a legend taller than the
    # figure was cut off, and left no room for the axis label.
    per_column = max(4, int(height * 4) - 2)
    ax.legend(handles=handles, title=legend_title, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              ncol=-(-len(handles) // per_column))
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


ID_PHASES = {"b", "e", "n", "s", "t", "f", "S", "T", "F", "p"}  # events whose "id" links them to others


def merge(traces):
    """One trace-event object holding every file's events on the common time base (offsets_us): each file's
    processes keep their pid unless another file already used it (then the next free one), and the ids of
    async and flow events are shifted per file so that no two files share one."""
    offsets = offsets_us(traces)
    used, out_events, files = set(), [], []
    id_base = 0
    for t, off in zip(traces, offsets):
        pid_map, max_id = {}, 0
        for e in t.events:
            if isinstance(e, dict) and "pid" in e and e["pid"] not in pid_map:
                pid = e["pid"]
                if pid in used or integer(pid) is None:
                    pid = max([p for p in used if integer(p) is not None] + [0]) + 1
                pid_map[e["pid"]] = pid
                used.add(pid)
        for e in t.events:
            if not isinstance(e, dict):
                continue
            e = dict(e)
            if "pid" in e:
                e["pid"] = pid_map[e["pid"]]
            if isinstance(e.get("ts"), (int, float)) and not isinstance(e.get("ts"), bool) and e.get("ph") != "M":
                e["ts"] = round(e["ts"] + off, 3)
            if e.get("ph") in ID_PHASES and integer(e.get("id")) is not None:
                max_id = max(max_id, e["id"])
                e["id"] = e["id"] + id_base
            out_events.append(e)
        id_base += max_id
        files.append({"file": os.path.basename(t.path), "rank": t.rank, "pids": sorted(
            {p for p in pid_map.values() if integer(p) is not None}), "offset_us": off,
            "workers": t.other.get("workers"), "truncated": t.other.get("truncated")})
    origins = [t.origin_ns for t in traces if t.origin_ns is not None]
    other = {"weft_trace": 1, "merged": files}
    if len(origins) == len(traces):
        other["origin_unix_ns"] = min(origins)
    return {"displayTimeUnit": "ms", "otherData": other, "traceEvents": out_events}


class OneLineErrors(argparse.ArgumentParser):
    """Bad input is answered with one line (not the usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv):
    p = OneLineErrors(
        prog="weft-gantt", description="Draw weft traces (WEFT_TRACE=FILE.json) as a Gantt chart (PNG).")
    p.add_argument("trace", nargs="+",
                   help="trace file(s) written by weft (WEFT_TRACE=FILE.json; an MPI job's ranks: FILE.r*.json)")
    p.add_argument("-o", "--output", help="output image, in a format matplotlib writes (.png, .svg, .pdf, ...; "
                   ".png is added to a name without extension; default: the (first) trace's name with .png, "
                   "without its rank suffix when several are given)")
    p.add_argument("--merge", metavar="FILE.json",
                   help="also write the traces as one trace-event file, a process track per rank")
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


def default_output(paths):
    stem = os.path.splitext(paths[0])[0]
    if len(paths) > 1:
        stem = re.sub(r"\.r\d+$", "", stem)  # trace.r0.json, trace.r1.json -> trace.png
    return stem + ".png"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = args.output or default_output(args.trace)
    if not os.path.splitext(out)[1]:
        out += ".png"  # (matplotlib would add it anyway: say the name that is written)
    try:
        traces = load(args.trace)
        spans, rows, labels, processes = collect(traces, args.color_by, args.discovery)
    except TraceError as e:
        print(f"weft-gantt: {e.path + ': ' if e.path else ''}{e}", file=sys.stderr)
        return 2
    for w in suspicious(traces):
        print(f"weft-gantt: warning: {w}", file=sys.stderr)
    if args.merge:
        try:
            with open(args.merge, "w", encoding="utf-8") as f:
                json.dump(merge(traces), f, separators=(",", ":"))
                f.write("\n")
        except OSError as e:
            print(f"weft-gantt: cannot write {args.merge}: {e}", file=sys.stderr)
            return 2
    title = args.title or ", ".join(os.path.basename(p) for p in args.trace[:4]) + (
        ", ..." if len(args.trace) > 4 else "")
    try:
        render(spans, rows, labels, out, args.color_by, title, args.width, args.dpi)
    except ImportError as e:
        print(f"weft-gantt: {e.name or 'matplotlib'} is missing for {sys.executable} "
              "(Debian: apt-get install python3-matplotlib; else: pip install matplotlib)", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"weft-gantt: cannot write {out}: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # a format matplotlib does not write, an image too large for it
        print(f"weft-gantt: cannot draw {out}: {e}", file=sys.stderr)
        return 2
    groups = f" in {processes} processes" if processes > 1 else ""
    merged = f", merged trace -> {args.merge}" if args.merge else ""
    print(f"weft-gantt: {len(spans)} spans on {len(rows)} rows{groups} -> {out}{merged}")
    return 0
