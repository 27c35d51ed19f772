"""Tests of tools/weft-gantt: it renders a PNG from a sample weft trace and rejects malformed files with
exit status 2 and a one-line message (no traceback).

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

    def test_missing_file(self):
        r = run(self.path("nope.json"), "-o", self.path("x.png"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no such file", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
