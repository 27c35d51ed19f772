"""Task Bench output parsing, command lines, discovery of systems, the progress bar and the runner."""

import io
import os
import stat
import sys
import tempfile
import unittest
import unittest.mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from weft_tools import progress, runner, taskbench  # noqa: E402

# The configuration and summary blocks as Task Bench prints them (spec section 5).
REAL_OUTPUT = """\
Running Task Benchmark
  Configuration:
    Task Graph 1:
      Time Steps: 1000
      Max Width: 2
      Dependence Type: stencil_1d
      Radix: 3
      Period: 0
      Fraction Connected: 0.25
      Kernel:
        Type: compute_bound
        Iterations: 64
        Samples: 16
        Imbalance: 0
      Output Bytes: 16
      Scratch Bytes: 0
Total Tasks 2000
Total Dependencies 5996
  Unable to estimate local/nonlocal dependencies
Total FLOPs 16512000
Total Bytes 0
Elapsed Time 1.234560e-03 seconds
FLOP/s 1.337484e+10
B/s 0.000000e+00
Transfer (estimated):
  Unable to estimate local/nonlocal transfer
"""


def replace_line(text, start, new):
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(start))
    if new is None:
        del lines[index]
    else:
        lines[index] = new
    return "\n".join(lines) + "\n"


class ParseSummary(unittest.TestCase):
    def test_real_format(self):
        s = taskbench.parse_summary(REAL_OUTPUT)
        self.assertEqual(s.tasks, 2000)
        self.assertEqual(s.dependencies, 5996)
        self.assertEqual(s.flops, 16512000)
        self.assertEqual(s.bytes, 0)
        self.assertAlmostEqual(s.elapsed, 1.23456e-3)
        self.assertAlmostEqual(s.flop_rate, 1.337484e10)
        self.assertEqual(s.byte_rate, 0.0)

    def test_nodes_variant_and_three_digit_exponent(self):
        text = REAL_OUTPUT.replace(
            "  Unable to estimate local/nonlocal dependencies\n",
            "  Local Dependencies 3000 (estimated)\n  Nonlocal Dependencies 2996 (estimated)\n"
            "  Number of Nodes (used for estimate) 2\n")
        text = replace_line(text, "Elapsed Time", "Elapsed Time 1.000000e+100 seconds")
        text = replace_line(text, "FLOP/s", "FLOP/s 1.651200e-93")
        s = taskbench.parse_summary(text)
        self.assertEqual(s.elapsed, 1e100)

    def assertRejected(self, text, *fragments):
        with self.assertRaises(taskbench.SummaryError) as cm:
            taskbench.parse_summary(text)
        for f in fragments:
            self.assertIn(f, str(cm.exception))

    def test_missing_lines_are_named(self):
        self.assertRejected(replace_line(REAL_OUTPUT, "Total Tasks", None), "'Total Tasks'")
        self.assertRejected(replace_line(REAL_OUTPUT, "Elapsed Time", None), "'Elapsed Time'")
        self.assertRejected("", "'Total Tasks'", "'FLOP/s'")

    def test_malformed_lines(self):
        self.assertRejected(replace_line(REAL_OUTPUT, "Elapsed Time", "Elapsed Time 0.00123 seconds"),
                            "malformed", "Elapsed Time 0.00123 seconds")
        self.assertRejected(replace_line(REAL_OUTPUT, "Elapsed Time", "Elapsed Time 1.234560e-03 s"), "malformed")
        self.assertRejected(replace_line(REAL_OUTPUT, "Total Tasks", "Total Tasks 2e3"), "malformed")
        self.assertRejected(replace_line(REAL_OUTPUT, "FLOP/s", "FLOP/s  1.337484e+10"), "malformed")
        self.assertRejected(replace_line(REAL_OUTPUT, "Total FLOPs", "Total FLOPs 12 "), "malformed")

    def test_duplicate_lines(self):
        self.assertRejected(REAL_OUTPUT + "Total Tasks 2000\n", "more than once")

    def test_inconsistent_or_impossible_values(self):
        self.assertRejected(replace_line(REAL_OUTPUT, "FLOP/s", "FLOP/s 2.000000e+10"), "disagrees")
        self.assertRejected(replace_line(REAL_OUTPUT, "Total Tasks", "Total Tasks 0"), "no task")
        zero = replace_line(REAL_OUTPUT, "Elapsed Time", "Elapsed Time 0.000000e+00 seconds")
        self.assertRejected(replace_line(zero, "FLOP/s", "FLOP/s inf"), "Elapsed Time")

    def test_similar_labels_are_not_confused(self):
        # A configuration line that merely starts like a summary label is not one.
        s = taskbench.parse_summary("Total Tasksets: 3\n" + REAL_OUTPUT)
        self.assertEqual(s.tasks, 2000)


class Commands(unittest.TestCase):
    def test_thread_system(self):
        p = taskbench.Pattern(type="stencil_1d", steps=10, width_per_core=2, kernel="compute_bound")
        argv, _ = taskbench.command("/b", "weft", 2, p, 64)
        self.assertEqual(argv, ["/b/taskbench-weft", "-steps", "10", "-width", "4", "-type", "stencil_1d",
                                "-kernel", "compute_bound", "-iter", "64", "-workers", "2"])
        # Threads pinned like mpirun's ranks, unless the environment already says otherwise.
        with unittest.mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("WEFT_BIND", None)
            self.assertEqual(taskbench.command("/b", "weft", 2, p, 64)[1], {"WEFT_BIND": "cores"})
            os.environ["WEFT_BIND"] = "none"
            self.assertEqual(taskbench.command("/b", "weft", 2, p, 64)[1], {})
            os.environ.pop("OMP_PROC_BIND", None)
            os.environ.pop("OMP_PLACES", None)
            self.assertEqual(taskbench.command("/b", "omp-task-gcc", 2, p, 64)[1],
                             {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"})
            self.assertEqual(taskbench.command("/b", "tbb", 2, p, 64)[1], {})
            # StarPU pins its own workers; -workers sets its CPU worker count.
            argv, env = taskbench.command("/b", "starpu", 2, p, 64)
            self.assertEqual(env, {})
            self.assertEqual(argv[0], "/b/taskbench-starpu")
            self.assertEqual(argv[-2:], ["-workers", "2"])

    def test_mpi_system(self):
        argv, env = taskbench.command("/b", "mpi", 2, taskbench.Pattern(steps=5), 1, ("mpirun", "--bind-to", "none"))
        self.assertEqual(argv[:6], ["mpirun", "--bind-to", "none", "-np", "2", "--oversubscribe"])
        self.assertEqual(argv[6], "/b/taskbench-mpi")
        self.assertNotIn("-workers", argv)
        self.assertEqual(env, {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
        self.assertIn("OMPI_ALLOW_RUN_AS_ROOT=1 ", taskbench.format_command(argv, env))

    def test_ranks_system(self):
        p = taskbench.Pattern(steps=5)
        argv, env = taskbench.command("/b", "weft-flow@mpi", 2, p, 1)
        self.assertEqual(argv[:5], ["mpirun", "-np", "2", "--oversubscribe", "/b/taskbench-weft-flow"])
        self.assertEqual(argv[-2:], ["-workers", "1"])
        self.assertEqual(env, {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                               "WEFT_BIND": "none"})
        argv, _ = taskbench.command("/b", "weft-flow@mpi:2", 4, p, 1)
        self.assertEqual(argv[:7], ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none",
                                    "/b/taskbench-weft-flow"])
        self.assertEqual(argv[-2:], ["-workers", "2"])
        with self.assertRaises(ValueError):
            taskbench.command("/b", "weft-flow@mpi:2", 3, p, 1)
        argv, _ = taskbench.probe_command("/b", "weft-flow@mpi:3")
        self.assertEqual(argv[:7], ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none",
                                    "/b/taskbench-weft-flow"])
        self.assertEqual(argv[7:], ["-steps", "1", "-width", "2", "-type", "trivial", "-workers", "3"])

    def test_mpi_program_of_workers(self):
        # taskbench-weft-mpi: NAME@mpi is one rank per core as for any such program; the bare name is one rank of
        # one worker per core, under mpirun too, pinned by weft as the thread-based systems are.
        p = taskbench.Pattern(steps=5)
        argv, env = taskbench.command("/b", "weft-mpi@mpi", 2, p, 1)
        self.assertEqual(argv[:5], ["mpirun", "-np", "2", "--oversubscribe", "/b/taskbench-weft-mpi"])
        self.assertEqual(argv[-2:], ["-workers", "1"])
        self.assertEqual(env["WEFT_BIND"], "none")
        argv, env = taskbench.command("/b", "weft-mpi", 2, p, 1)
        self.assertEqual(argv[:7], ["mpirun", "-np", "1", "--oversubscribe", "--bind-to", "none",
                                    "/b/taskbench-weft-mpi"])
        self.assertEqual(argv[-2:], ["-workers", "2"])
        self.assertEqual(env["OMPI_ALLOW_RUN_AS_ROOT"], "1")
        self.assertEqual(taskbench.system_kind("weft-mpi"), "rank")
        self.assertTrue(taskbench.uses_mpirun("weft-mpi"))
        self.assertEqual([c for c in range(1, 4) if taskbench.runs_on("weft-mpi", c)], [1, 2, 3])
        self.assertEqual(taskbench.order_systems(["weft-mpi", "mpi", "weft-mpi@mpi", "weft-flow@mpi"]),
                         ["mpi", "weft-flow@mpi", "weft-mpi@mpi", "weft-mpi"])

    def test_ranks_names(self):
        self.assertEqual(taskbench.parse_ranks_system("weft-flow@mpi"), ("weft-flow", 1))
        self.assertEqual(taskbench.parse_ranks_system("weft-flow@mpi:4"), ("weft-flow", 4))
        for bad in ("weft-flow@mpi4", "weft-flow@mpi:", "weft-flow@mpi:0", "weft-flow@mpi:x", "@mpi"):
            with self.assertRaises(ValueError, msg=bad):
                taskbench.parse_ranks_system(bad)
        self.assertEqual(taskbench.executable("/b", "weft-flow@mpi:2"), "/b/taskbench-weft-flow")
        self.assertTrue(taskbench.uses_mpirun("weft-flow@mpi") and taskbench.uses_mpirun("mpi"))
        self.assertFalse(taskbench.uses_mpirun("weft-flow"))
        # Two ranks at least (one would be the single-process program); whole ranks of W workers.
        self.assertEqual([c for c in range(1, 9) if taskbench.runs_on("weft-flow@mpi", c)], [2, 3, 4, 5, 6, 7, 8])
        self.assertEqual([c for c in range(1, 9) if taskbench.runs_on("weft-flow@mpi:2", c)], [4, 6, 8])
        self.assertEqual([c for c in range(1, 3) if taskbench.runs_on("serial", c)], [1])
        self.assertEqual(taskbench.order_systems(["weft-flow@mpi", "weft-flow", "mpi", "weft"]),
                         ["weft", "weft-flow", "mpi", "weft-flow@mpi"])

    def test_serial_only_on_one_core(self):
        argv, _ = taskbench.command("/b", "serial", 1, taskbench.Pattern(), 1)
        self.assertEqual(argv[-2:], ["-workers", "1"])
        with self.assertRaises(ValueError):
            taskbench.command("/b", "serial", 2, taskbench.Pattern(), 1)

    def test_several_graphs_radix_and_extra_flags(self):
        p = taskbench.Pattern(type="nearest", radix=5, steps=3, graphs=3, extra=("-output", "32"))
        flags = p.graph_flags(2, 8)
        one = ["-steps", "3", "-width", "2", "-type", "nearest", "-radix", "5", "-kernel", "compute_bound",
               "-iter", "8", "-output", "32"]
        self.assertEqual(flags, one + ["-and"] + one + ["-and"] + one)
        self.assertIn("3 graphs", p.describe())

    def test_output_and_imbalance_in_every_graph(self):
        p = taskbench.Pattern(steps=3, graphs=2, kernel="load_imbalance", output=4096, imbalance=0.5)
        one = ["-steps", "3", "-width", "4", "-type", "stencil_1d", "-kernel", "load_imbalance", "-iter", "16",
               "-output", "4096", "-imbalance", "0.5"]
        self.assertEqual(p.graph_flags(4, 16), one + ["-and"] + one)
        self.assertIn("imbalance 0.5", p.describe())
        self.assertIn("output 4096 B", p.describe())
        self.assertNotIn("-output", taskbench.Pattern().graph_flags(1, 1))
        self.assertNotIn("-imbalance", taskbench.Pattern().graph_flags(1, 1))

    def test_kinds(self):
        self.assertEqual(taskbench.system_kind("mpi"), "mpi")
        self.assertEqual(taskbench.system_kind("mpi-openmp"), "mpi")
        self.assertEqual(taskbench.system_kind("serial"), "serial")
        self.assertEqual(taskbench.system_kind("omp-task-gcc"), "threads")
        self.assertEqual(taskbench.system_kind("starpu"), "threads")
        self.assertEqual(taskbench.system_kind("weft-flow@mpi"), "ranks")
        self.assertEqual(taskbench.system_kind("weft-flow@mpi:2"), "ranks")


class Discovery(unittest.TestCase):
    def test_finds_executables_in_canonical_order(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("taskbench-zeta", "taskbench-mpi", "taskbench-weft", "taskbench-serial", "other"):
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    f.write("#!/bin/sh\n")
                os.chmod(path, stat.S_IRWXU)
            with open(os.path.join(d, "taskbench-notexec"), "w") as f:
                f.write("")
            self.assertEqual(taskbench.discover_systems(d), ["weft", "serial", "mpi", "zeta"])
            # A program that can run on several processes brings its NAME@mpi system along.
            path = os.path.join(d, "taskbench-weft-flow")
            with open(path, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(path, stat.S_IRWXU)
            self.assertEqual(taskbench.discover_systems(d), ["weft", "weft-flow", "serial", "mpi", "weft-flow@mpi",
                                                             "zeta"])
            path = os.path.join(d, "taskbench-weft-mpi")
            with open(path, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(path, stat.S_IRWXU)
            self.assertEqual(taskbench.discover_systems(d), ["weft", "weft-flow", "serial", "mpi", "weft-flow@mpi",
                                                             "weft-mpi@mpi", "weft-mpi", "zeta"])
        self.assertEqual(taskbench.discover_systems("/nonexistent/dir"), [])

    def test_peers_come_in_known_order(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("taskbench-starpu", "taskbench-aaa", "taskbench-tbb", "taskbench-omp-task-gcc",
                         "taskbench-weft"):
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    f.write("#!/bin/sh\n")
                os.chmod(path, stat.S_IRWXU)
            self.assertEqual(taskbench.discover_systems(d), ["weft", "omp-task-gcc", "tbb", "starpu", "aaa"])


class ProgressBar(unittest.TestCase):
    def test_plain_text_without_a_terminal(self):
        out = io.StringIO()
        t = [0.0]
        bar = progress.Progress(20, stream=out, tty=False, every=25, interval=1e9, clock=lambda: t[0])
        for i in range(20):
            t[0] += 1.0
            bar.advance(f"run {i}")
        bar.message("a failure")
        bar.finish()
        text = out.getvalue()
        self.assertNotIn("\r", text)
        lines = text.splitlines()
        # the first run, then every 25%, then the message
        self.assertEqual([line.split()[1] for line in lines[:-1]], ["1/20", "6/20", "11/20", "16/20", "20/20"])
        self.assertIn("20/20 100%", lines[-2])
        self.assertEqual(lines[-1], "a failure")
        self.assertTrue(lines[2].startswith("[" + "#" * 16 + "." * 14 + "]"), lines[2])

    def test_eta(self):
        t = [0.0]
        bar = progress.Progress(4, stream=io.StringIO(), tty=False, clock=lambda: t[0])
        t[0] = 30.0
        bar.done = 1
        self.assertIn("eta 1:30", bar.line())


class Runner(unittest.TestCase):
    def test_success_failure_timeout_and_missing_program(self):
        ok = runner.run([sys.executable, "-c", "print('hi')"], timeout=30)
        self.assertTrue(ok.ok)
        self.assertEqual(ok.stdout, "hi\n")
        bad = runner.run([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"],
                         timeout=30)
        self.assertFalse(bad.ok)
        self.assertEqual(bad.describe_failure(30), "exit status 3")
        self.assertEqual(runner.tail(bad.stderr), "boom")
        # It would sleep for an hour: run() returns only if it killed it (no wall-clock assertion here).
        slow = runner.run([sys.executable, "-c", "import time; time.sleep(3600)"], timeout=0.5)
        self.assertTrue(slow.timed_out)
        self.assertIn("timed out after 0.5 s", slow.describe_failure(0.5))
        missing = runner.run(["/nonexistent/program"], timeout=1)
        self.assertIn("could not start", missing.describe_failure(1))

    def test_environment_is_passed(self):
        r = runner.run([sys.executable, "-c", "import os; print(os.environ['WEFT_TEST_VAR'])"],
                       {"WEFT_TEST_VAR": "x1"}, timeout=30)
        self.assertEqual(r.stdout, "x1\n")


if __name__ == "__main__":
    unittest.main()
