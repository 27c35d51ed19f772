"""Tests of tools/weft-gantt: it renders a PNG from a sample weft trace and rejects malformed files with
exit status 2 and a one-line message (no traceback); given the traces of several ranks (synthetic ones, as
weft writes them per rank), it groups the rows by rank on one time base and merges them into one trace.

    python3 tests/tools/gantt_test.py [path/to/weft-gantt]
"""
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "tools", "weft-gantt")
SAMPLE = os.path.join(HERE, "sample_trace.json")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(TOOL)), "gantt"))
import weft_gantt  # noqa: E402  (the tool's module: its row grouping is checked directly)


def run(*args, env=None):
    # The tool itself, not `python3 TOOL`: its launcher picks the interpreter.
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=120, env=env)


def broken_python3_dirs(root):
    """Directories holding a `python3` to put first on PATH: one that fails, one without site packages."""
    dirs = []
    for name, body in (("failing", "exit 1"), ("bare", f'exec {shlex.quote(sys.executable)} -S "$@"')):
        d = os.path.join(root, name)
        os.mkdir(d)
        with open(os.path.join(d, "python3"), "w") as f:
            f.write(f"#!/bin/sh\n{body}\n")
        os.chmod(os.path.join(d, "python3"), 0o755)
        dirs.append(d)
    return dirs


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


class Gantt(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_renders_sample(self):
        with open(SAMPLE) as f:
            tasks = sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "task")
        out = self.path("chart.png")
        r = run(SAMPLE, "-o", out, "--width", "10", "--dpi", "50")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{tasks} spans on 2 rows", r.stdout)
        w, h = png_size(out)
        self.assertEqual(w, 500)
        self.assertGreater(h, 100)

    def test_colour_by_iteration_with_discovery(self):
        out = self.path("iter.png")
        r = run(SAMPLE, "-o", out, "--color-by", "iteration", "--discovery")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("on 3 rows", r.stdout)  # two workers and worker 0's discovery track
        png_size(out)

    def test_default_output_name(self):
        trace = self.path("t.json")
        with open(SAMPLE) as src, open(trace, "w") as dst:
            dst.write(src.read())
        r = run(trace)
        self.assertEqual(r.returncode, 0, r.stderr)
        png_size(self.path("t.png"))

    def test_runs_whatever_python3_comes_first_on_path(self):
        for d in broken_python3_dirs(self.dir.name):
            env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
            env.pop("WEFT_PYTHON", None)
            out = self.path("chart.png")
            r = run(SAMPLE, "-o", out, env=env)
            self.assertEqual(r.returncode, 0, f"python3 first on PATH: {d}\n{r.stderr}")
            png_size(out)

    def expect_rejected(self, content, message):
        bad = self.path("bad.json")
        with open(bad, "w") as f:
            f.write(content)
        r = run(bad, "-o", self.path("bad.png"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("weft-gantt: ", r.stderr)
        self.assertIn(message, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(self.path("bad.png")))

    def test_rejects_malformed_files(self):
        self.expect_rejected("{\"traceEvents\": [", "not valid JSON")
        self.expect_rejected("{\"events\": []}", "not a trace-event file")
        self.expect_rejected("{\"traceEvents\": []}", "no task spans")
        self.expect_rejected('{"traceEvents": [{"ph": "X", "cat": "task", "tid": 0, "ts": "x", "dur": 1}]}',
                             '"ts" is missing or not a number')
        self.expect_rejected('{"traceEvents": [{"ph": "X", "cat": "task", "ts": 0, "dur": 1}]}', '"tid"')
        self.expect_rejected('{"traceEvents": [{"ph": "X", "cat": "task", "tid": 0, "ts": 0, "dur": -1}]}',
                             "negative duration")
        self.expect_rejected('{"traceEvents": [7]}', "event 0 is not an object")

    def test_output_names_and_formats(self):
        r = run(SAMPLE, "-o", self.path("noext"))  # .png added, and said
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("-> " + self.path("noext.png"), r.stdout)
        png_size(self.path("noext.png"))
        for args, message in ((["-o", self.path("chart.txt")], "Format 'txt' is not supported"),
                              (["-o", self.path("huge.png"), "--width", "1000", "--dpi", "1000"], "too large")):
            r = run(SAMPLE, *args)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("weft-gantt: cannot draw ", r.stderr)
            self.assertIn(message, r.stderr)
            self.assertNotIn("Traceback", r.stderr)

    def test_missing_file(self):
        r = run(self.path("nope.json"), "-o", self.path("x.png"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no such file", r.stderr)


def rank_trace(rank, ranks, origin_ns, spans, name=None, flows=0):
    """A trace as weft writes it for `rank` of `ranks`: spans (tid, ts us, dur us, label), and `flows`
    dependency arrows (ids 1..flows) between its first span and itself."""
    pid = rank + 1
    pname = name or (f"rank {rank}" if ranks > 1 else "weft")
    events = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": pname}},
              {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": rank}}]
    for tid in sorted({s[0] for s in spans}):
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": f"worker {tid}"}})
    for i, (tid, ts, dur, label) in enumerate(spans):
        events.append({"ph": "X", "cat": "task", "name": label, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                       "args": {"id": i + 1, "priority": 0, "tag": 0}})
    for f in range(1, flows + 1):
        tid, ts = spans[0][0], spans[0][1]
        events.append({"ph": "s", "cat": "dep", "name": "dep", "id": f, "pid": pid, "tid": tid, "ts": ts})
        events.append({"ph": "f", "bp": "e", "cat": "dep", "name": "dep", "id": f, "pid": pid, "tid": tid, "ts": ts})
    other = {"weft_trace": 1, "workers": 2, "rank": rank, "ranks": ranks, "truncated": False}
    if origin_ns is not None:
        other["origin_unix_ns"] = origin_ns
    return {"displayTimeUnit": "ms", "otherData": other, "traceEvents": events}


T0 = 1_700_000_000_000_000_000  # an origin, in ns since the epoch


class Ranks(unittest.TestCase):
    """Several ranks: per-rank files (trace.r0.json, trace.r1.json) or one merged file."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, trace):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump(trace, f)
        return path

    def two_ranks(self, origins=(T0, T0 + 2_000_000)):
        # Rank 1's clock started 2 ms after rank 0's: its span at 1000 us is at 3000 us on rank 0's clock.
        r0 = self.write("trace.r0.json", rank_trace(0, 2, origins[0], [(0, 0.0, 500.0, "a"), (1, 100.0, 50.0, "b")],
                                                    flows=2))
        r1 = self.write("trace.r1.json", rank_trace(1, 2, origins[1], [(0, 1000.0, 400.0, "a")], flows=3))
        return r0, r1

    def test_rows_grouped_by_rank_whatever_the_order_of_the_files(self):
        r0, r1 = self.two_ranks()
        spans, rows, labels, processes = weft_gantt.collect(weft_gantt.load([r1, r0]), "label", False)
        self.assertEqual(processes, 2)
        self.assertEqual([labels[k] for k in rows], ["rank 0 / worker 0", "rank 0 / worker 1", "rank 1 / worker 0"])
        starts = {labels[row]: ts for row, ts, _, _ in spans}
        self.assertEqual(starts["rank 0 / worker 0"], 0.0)
        self.assertEqual(starts["rank 1 / worker 0"], 3000.0)  # on the common time base

    def test_files_without_an_origin_keep_their_own_zero(self):
        r0, r1 = self.two_ranks(origins=(T0, None))
        spans, rows, labels, _ = weft_gantt.collect(weft_gantt.load([r0, r1]), "label", False)
        starts = {labels[row]: ts for row, ts, _, _ in spans}
        self.assertEqual(starts["rank 1 / worker 0"], 1000.0)

    def test_renders_and_merges_the_ranks(self):
        r0, r1 = self.two_ranks()
        merged = os.path.join(self.dir.name, "job.json")
        r = run(r0, r1, "--merge", merged, "--dpi", "50")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("3 spans on 3 rows in 2 processes", r.stdout)
        png_size(os.path.join(self.dir.name, "trace.png"))  # the default name, without the rank suffix
        with open(merged) as f:
            m = json.load(f)
        self.assertEqual(m["otherData"]["origin_unix_ns"], T0)
        self.assertEqual([x["rank"] for x in m["otherData"]["merged"]], [0, 1])
        events = m["traceEvents"]
        names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
        self.assertEqual(names, {1: "rank 0", 2: "rank 1"})
        tasks = sorted((e["pid"], e["ts"]) for e in events if e.get("ph") == "X")
        self.assertEqual(tasks, [(1, 0.0), (1, 100.0), (2, 3000.0)])
        # Flow ids are global in the format: each file's arrows keep ids of their own.
        ids = {}
        for e in events:
            if e.get("ph") in ("s", "f"):
                ids.setdefault(e["id"], set()).add(e["pid"])
        self.assertEqual(sorted(ids), [1, 2, 3, 4, 5])
        self.assertTrue(all(len(p) == 1 for p in ids.values()))
        # The merged file draws the same rows.
        r = run(merged, "-o", os.path.join(self.dir.name, "m.png"), "--dpi", "50")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("3 spans on 3 rows in 2 processes", r.stdout)
        spans, rows, labels, _ = weft_gantt.collect(weft_gantt.load([merged]), "label", False)
        self.assertEqual([labels[k] for k in rows], ["rank 0 / worker 0", "rank 0 / worker 1", "rank 1 / worker 0"])

    def test_single_process_traces_side_by_side(self):
        # Two runs of a program on one process each (pid 1, "weft"): named by their files, pids made distinct.
        a = self.write("a.json", rank_trace(0, 1, T0, [(0, 0.0, 10.0, "x")]))
        b = self.write("b.json", rank_trace(0, 1, T0, [(0, 0.0, 10.0, "x")]))
        spans, rows, labels, processes = weft_gantt.collect(weft_gantt.load([a, b]), "label", False)
        self.assertEqual(processes, 2)
        self.assertEqual([labels[k] for k in rows], ["a.json / worker 0", "b.json / worker 0"])
        m = weft_gantt.merge(weft_gantt.load([a, b]))
        self.assertEqual(sorted({e["pid"] for e in m["traceEvents"]}), [1, 2])

    def test_files_of_different_jobs_are_warned_about(self):
        r0, r1 = self.two_ranks()
        other = self.write("other.r1.json", rank_trace(1, 3, T0, [(0, 0.0, 10.0, "x")]))
        r = run(r0, r1, other, r0, "-o", os.path.join(self.dir.name, "w.png"), "--dpi", "50")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"weft-gantt: warning: {r0} is given twice", r.stderr)
        self.assertIn(f"weft-gantt: warning: {r1} and {other} are all rank 1", r.stderr)
        self.assertIn("weft-gantt: warning: the files come from jobs of 2 and 3 ranks", r.stderr)
        r = run(r0, r1, "-o", os.path.join(self.dir.name, "ok.png"), "--dpi", "50")
        self.assertNotIn("warning", r.stderr)

    def test_one_process_keeps_plain_row_names(self):
        r0 = self.write("t.json", rank_trace(0, 1, T0, [(0, 0.0, 10.0, "x"), (1, 5.0, 1.0, "y")]))
        _, rows, labels, processes = weft_gantt.collect(weft_gantt.load([r0]), "label", False)
        self.assertEqual(processes, 1)
        self.assertEqual([labels[k] for k in rows], ["worker 0", "worker 1"])

    def test_a_bad_file_among_several_is_named(self):
        r0, _ = self.two_ranks()
        bad = os.path.join(self.dir.name, "trace.r1.json")
        with open(bad, "w") as f:
            f.write('{"traceEvents": [{"ph": "X", "cat": "task", "tid": 0, "ts": 0, "dur": -1}]}')
        r = run(r0, bad, "-o", os.path.join(self.dir.name, "x.png"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"weft-gantt: {bad}: event 0: negative duration", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        r = run(r0, os.path.join(self.dir.name, "missing.json"), "-o", os.path.join(self.dir.name, "x.png"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing.json: no such file", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir.name, "x.png")))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
