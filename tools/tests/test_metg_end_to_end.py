"""tools/metg driven end to end against fake_taskbench.py (a synthetic cost model, see that file)."""

import csv
import json
import math
import os
import shlex
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
METG = os.path.join(HERE, "..", "metg")
FAKE_MPIRUN = os.path.join(HERE, "fake_mpirun.py")
sys.path.insert(0, HERE)

import fake_taskbench  # noqa: E402
from fake_bin import FakeTaskbenchCase  # noqa: E402

SYSTEMS = ("weft", "serial", "mpi", "omp-task-gcc", "halfpeak", "broken", "hang", "garbled", "oneproc")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def expected_metg_us(system, cores, peak_rate, steps, fraction=0.5):
    """METG of the fake's continuous cost model: solve efficiency(iter) = fraction for a real iter."""
    tasks = steps * cores

    def efficiency(iterations):
        flops = tasks * fake_taskbench.flops_per_task("compute_bound", iterations)
        return flops / fake_taskbench.model_elapsed(system, tasks, iterations, cores) / peak_rate

    lo, hi = 1e-3, 1e6  # efficiency rises with iterations in this model
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if efficiency(mid) < fraction else (lo, mid)
    return fake_taskbench.model_elapsed(system, tasks, hi, cores) * cores / tasks * 1e6


class EndToEnd(FakeTaskbenchCase):
    SYSTEMS = SYSTEMS

    def metg(self, *args, out=None, timeout=120):
        mpirun = shlex.join([sys.executable, "-S", FAKE_MPIRUN])
        argv = [METG, "--bin", self.bin, "--mpirun", mpirun, *args]
        if out is not None:
            argv += ["--out", out]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def out_dir(self, name):
        return os.path.join(self.tmp.name, name)

    def test_sweep_writes_csv_table_json_and_plots(self):
        out = self.out_dir("sweep")
        steps, iters = 50, [1024, 256, 64, 16, 4, 1]
        r = self.metg("--systems", "weft,serial,mpi,omp-task-gcc,halfpeak", "--cores", "1,2", "--steps", str(steps),
                      "--iters", ",".join(map(str, iters)), "--reps", "1", out=out)
        self.assertEqual(r.returncode, 0, r.stderr)

        # Every run is in the CSV: 5 systems on 1 core, 4 on 2 (serial is 1-core only).
        with open(os.path.join(out, "runs.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), (5 + 4) * len(iters))
        self.assertTrue(all(row["status"] == "ok" for row in rows))
        for key in ("system", "cores", "iter", "rep", "elapsed_s", "tasks", "flops", "flop_per_s",
                    "granularity_us", "efficiency"):
            self.assertIn(key, rows[0])
        row = next(x for x in rows if x["system"] == "mpi" and x["cores"] == "2" and x["iter"] == "16")
        self.assertEqual(int(row["tasks"]), steps * 2)
        self.assertEqual(int(row["flops"]), steps * 2 * (128 * 16 + 64))
        elapsed = fake_taskbench.model_elapsed("mpi", steps * 2, 16, 2)
        self.assertAlmostEqual(float(row["granularity_us"]), elapsed * 2 / (steps * 2) * 1e6, delta=1e-4)
        self.assertIn("-np 2 --oversubscribe", row["command"])

        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["failed_runs"], 0)
        for cores in (1, 2):
            res = summary["results"][str(cores)]
            peak = res["peak"]
            # the fastest system at the largest iteration count defines the peak
            self.assertEqual(res["peak_iterations"], 1024)
            self.assertEqual(res["peak_system"], "serial" if cores == 1 else "mpi")
            for system in ("weft", "mpi", "omp-task-gcc"):
                got = res["systems"][system]["metg_us"]
                want = expected_metg_us(system, cores, peak, steps)
                # log interpolation between iteration counts 4x apart: a few percent off the continuous curve
                self.assertAlmostEqual(got / want, 1.0, delta=0.08, msg=f"{system} on {cores} cores")
                self.assertEqual(res["systems"][system]["metg_bound"], "exact")
            self.assertIsNone(res["systems"]["halfpeak"]["metg_us"])
            self.assertLess(res["systems"]["halfpeak"]["best_efficiency"], 0.5)
            self.assertFalse(res["systems"]["halfpeak"]["reaches_peak"])
            self.assertAlmostEqual(res["systems"]["mpi"]["ratio_to_baseline"], 1.0)
            self.assertGreater(res["systems"]["omp-task-gcc"]["ratio_to_baseline"], 3.0)
        self.assertTrue(summary["results"]["1"]["systems"]["serial"]["reaches_peak"])

        # The table on stdout (and in summary.txt): a section per core count, every system, METG or "-".
        with open(os.path.join(out, "summary.txt")) as f:
            self.assertEqual(f.read(), r.stdout)
        self.assertIn("1 core: peak", r.stdout)
        self.assertIn("2 cores: peak", r.stdout)
        self.assertIn("ratios vs mpi", r.stdout)
        halfpeak_line = next(line for line in r.stdout.splitlines() if line.strip().startswith("halfpeak"))
        self.assertIn("never reaches 50%", halfpeak_line)
        self.assertEqual(halfpeak_line.split()[1], "-")
        weft_line = next(line for line in r.stdout.splitlines() if line.strip().startswith("weft"))
        weft_us = summary["results"]["1"]["systems"]["weft"]["metg_us"]
        self.assertAlmostEqual(float(weft_line.split()[1]), weft_us, delta=weft_us * 0.01)

        with open(os.path.join(out, "points.csv")) as f:
            self.assertEqual(len(list(csv.DictReader(f))), (5 + 4) * len(iters))

        # One valid PNG per core count.
        import matplotlib.image
        for cores in (1, 2):
            path = os.path.join(out, f"metg-{cores}cores.png")
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), PNG_SIGNATURE)
            image = matplotlib.image.imread(path)
            self.assertGreater(image.shape[0], 200)
            self.assertGreater(image.shape[1], 400)
        self.assertIn("100%", r.stderr)  # the progress bar reached its end
        self.assertFalse(os.path.exists(os.path.join(out, "failures.log")))

    def test_failed_runs_are_reported_and_recorded(self):
        out = self.out_dir("failures")
        r = self.metg("--systems", "weft,broken,garbled", "--cores", "1", "--steps", "20", "--iters", "64,8,2,1",
                      "--reps", "1", "--max-failures", "2", out=out)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("FAILED broken on 1 core(s), -iter 2", r.stderr)
        self.assertIn("input 0 expected (2, 0) received (2, 1)", r.stderr)  # the end of its stderr
        self.assertIn("FAILED garbled", r.stderr)
        self.assertIn("bad output: malformed summary line", r.stderr)
        self.assertIn("garbled is not run again on 1 core(s): 2 failed runs", r.stderr)
        with open(os.path.join(out, "runs.csv")) as f:
            rows = list(csv.DictReader(f))
        broken = [x for x in rows if x["system"] == "broken"]
        self.assertEqual([x["status"] for x in broken], ["ok", "ok", "exit status 1", "exit status 1"])
        self.assertEqual(len([x for x in rows if x["system"] == "garbled"]), 2)
        with open(os.path.join(out, "failures.log")) as f:
            self.assertIn("taskbench-broken", f.read())
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["failed_runs"], 4)
        self.assertEqual(summary["results"]["1"]["systems"]["broken"]["failed_runs"], 2)
        self.assertIsNotNone(summary["results"]["1"]["systems"]["weft"]["metg_us"])
        broken_line = next(line for line in r.stdout.splitlines() if line.strip().startswith("broken"))
        self.assertIn("no successful run at -iter 2,1", broken_line)

    def test_ranks_systems_run_under_mpirun_on_two_or_more_ranks(self):
        out = self.out_dir("ranks")
        steps, iters = 50, [1024, 256, 64, 16, 4, 1]
        r = self.metg("--systems", "weft,weft@mpi,weft@mpi:2,mpi", "--cores", "1,2,4", "--steps", str(steps),
                      "--iters", ",".join(map(str, iters)), "--reps", "1", out=out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("weft@mpi runs on 2 or more ranks of 1 worker: not run on 1 core", r.stderr)
        self.assertIn("weft@mpi:2 runs on 2 or more ranks of 2 workers: not run on 1,2 cores", r.stderr)
        with open(os.path.join(out, "runs.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertTrue(all(row["status"] == "ok" for row in rows))
        cores_of = {}
        for row in rows:
            cores_of.setdefault(row["system"], set()).add(int(row["cores"]))
        self.assertEqual(cores_of["weft@mpi"], {2, 4})
        self.assertEqual(cores_of["weft@mpi:2"], {4})
        one = next(x["command"] for x in rows if x["system"] == "weft@mpi" and x["cores"] == "4")
        self.assertIn("WEFT_BIND=none ", one)  # never weft's own pinning: every rank would pin worker 0 to core 0
        self.assertIn("-np 4 --oversubscribe " + os.path.join(self.bin, "taskbench-weft "), one)
        self.assertTrue(one.endswith("-workers 1"))
        two = next(x["command"] for x in rows if x["system"] == "weft@mpi:2")
        self.assertIn("-np 2 --oversubscribe --bind-to none ", two)
        self.assertTrue(two.endswith("-workers 2"))
        # The fake models ranks x workers like as many threads: the same curve, so the same METG as weft's.
        with open(os.path.join(out, "summary.json")) as f:
            results = json.load(f)["results"]
        for cores in ("2", "4"):
            systems = results[cores]["systems"]
            self.assertAlmostEqual(systems["weft@mpi"]["metg_us"] / systems["weft"]["metg_us"], 1.0, places=6)
        self.assertAlmostEqual(results["4"]["systems"]["weft@mpi:2"]["metg_us"],
                               results["4"]["systems"]["weft"]["metg_us"], delta=1e-9)
        self.assertNotIn("weft@mpi", results["1"]["systems"])
        self.assertIn("weft@mpi:2", r.stdout)

    def test_ranks_system_that_runs_on_one_process_only_is_skipped(self):
        out = self.out_dir("oneproc")
        r = self.metg("--systems", "weft,oneproc@mpi", "--cores", "2", "--steps", "5", "--iters", "2,1",
                      "--reps", "1", out=out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("oneproc@mpi skipped: it does not run on several processes (exit status 2: error: "
                      "taskbench-oneproc was built without MPI", r.stderr)
        self.assertNotIn("oneproc", r.stdout)
        for spec, message in (("weft@mpix", "expected NAME@mpi or NAME@mpi:W"), ("weft@mpi:0", "expected NAME@mpi"),
                              ("@mpi", "no program before")):
            r = self.metg("--systems", spec, "--dry-run")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(message, r.stderr)

    def test_timeout_kills_the_run_with_a_clear_error(self):
        out = self.out_dir("timeout")
        # The fake sleeps for an hour: metg returns only if it killed it (no wall-clock assertion here).
        r = self.metg("--systems", "hang,weft", "--cores", "1", "--steps", "10", "--iters", "2,1", "--reps", "1",
                      "--timeout", "1", "--max-failures", "1", out=out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAILED hang on 1 core(s), -iter 2, rep 1: timed out after 1 s (killed)", r.stderr)
        self.assertIn("hang is not run again", r.stderr)

    def test_rejected_command_line_stops_that_system(self):
        out = self.out_dir("rejected")
        r = self.metg("--systems", "weft,mpi", "--cores", "1", "--steps", "4", "--type", "nearest", "--radix", "5",
                      "--iters", "4,2,1", "--reps", "2", out=out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("-radix 5 larger than -width 1", r.stderr)
        self.assertIn("weft is not run again on 1 core(s): its command line was rejected", r.stderr)
        self.assertEqual(r.stderr.count("FAILED weft"), 1)

    def test_dry_run_prints_the_commands_and_runs_nothing(self):
        out = self.out_dir("dry")
        r = self.metg("--systems", "weft,mpi,serial", "--cores", "1,2", "--iters", "8,1", "--reps", "3",
                      "--graphs", "2", "--extra", "-output 32", "--dry-run", out=out)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [x for x in r.stdout.splitlines() if not x.startswith("#")]
        self.assertEqual(len(lines), 2 * 3 + 2 * 2)
        self.assertTrue(r.stdout.startswith("# 10 runs per repetition x 3 repetition(s)"))
        mpi = [x for x in lines if "taskbench-mpi" in x]
        self.assertTrue(all(x.startswith("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") for x in mpi))
        self.assertIn("-np 2 --oversubscribe", mpi[-1])
        weft2 = [x for x in lines if "taskbench-weft" in x and "-workers 2" in x]
        self.assertEqual(len(weft2), 2)
        self.assertIn("-width 2", weft2[0])
        self.assertEqual(weft2[0].count("-and"), 1)
        self.assertEqual(weft2[0].count("-output 32"), 2)
        self.assertFalse(os.path.exists(out))

    def test_unbuilt_system_is_skipped_with_a_message(self):
        out = self.out_dir("unbuilt")
        r = self.metg("--systems", "weft,starpu", "--cores", "1", "--steps", "5", "--iters", "2,1", "--reps", "1",
                      out=out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("skipped: starpu", r.stderr)
        self.assertNotIn("starpu", r.stdout)

    def test_bad_options_exit_2_with_a_message(self):
        cases = [
            (["--percent", "0"], "--percent"),
            (["--percent", "150"], "at most 100"),
            (["--cores", "0"], "not positive"),
            (["--cores", "1,x"], "not an integer"),
            (["--iters", "8,-1"], "not positive"),
            (["--kernel", "empty"], "counts no work"),
            (["--systems", "weft", "--baseline", "mpi"], "--baseline mpi is not among"),
            (["--reps", "0"], "--reps"),
            (["--extra", "'unclosed"], "--extra"),
            (["--extra=-steps 5"], "--extra sets -steps, which metg sets itself: use --steps"),
            (["--extra=-output 64", "--output", "32"], "--extra sets -output and --output is given too"),
            (["--peak-tolerance", "200"], "--peak-tolerance 200: must be below 100"),
            (["--out", ""], "--out is empty"),
        ]
        for args, message in cases:
            r = self.metg(*args, "--dry-run")
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn(message, r.stderr, args)
        r = self.metg("--systems", "starpu")
        self.assertEqual(r.returncode, 2)
        self.assertIn("none of the requested systems can run here (not built in ", r.stderr)
        r = self.metg("--systems", "weft,nosuch")  # a misspelling is an error, not a system to skip
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown system 'nosuch'", r.stderr)
        r = subprocess.run([METG, "--bin", os.path.join(self.tmp.name, "none")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("is not a directory", r.stderr)

    def test_unusable_out_exits_2_with_one_line(self):
        a_file = os.path.join(self.tmp.name, "a-file")
        open(a_file, "w").close()
        for out in (a_file, os.path.join(a_file, "below-a-file")):
            r = self.metg("--systems", "weft", "--cores", "1", "--steps", "4", "--iters", "2,1", "--reps", "1",
                          out=out)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--out", r.stderr)
            self.assertNotIn("Traceback", r.stderr)

    def test_runs_without_counted_work_give_no_efficiency(self):
        out = self.out_dir("nowork")
        r = self.metg("--systems", "weft", "--cores", "1", "--steps", "5", "--iters", "2,1", "--reps", "1",
                      "--kernel", "empty", "--metric", "flops", out=out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("every run reports zero flops", r.stderr)
        self.assertIn("no peak", r.stdout)
        with open(os.path.join(out, "summary.json")) as f:
            self.assertIsNone(json.load(f)["results"]["1"]["systems"]["weft"]["metg_us"])

    def test_quick_preset(self):
        r = self.metg("--quick", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [x for x in r.stdout.splitlines() if "taskbench-weft " in x]
        self.assertEqual(len(lines), 2 * 8)  # cores 1,2 x -iter 16384, 4096, ..., 4, 1
        self.assertIn("-steps 1000 -width 2 -type stencil_1d -kernel compute_bound -iter 16384", lines[8])
        self.assertTrue(r.stdout.startswith("# "))
        self.assertIn("3 repetition(s)", r.stdout.splitlines()[0])

    def test_runs_whatever_python3_comes_first_on_path(self):
        # The launcher finds an interpreter with numpy and matplotlib past a python3 that fails or lacks them.
        for name, body in (("failing", "exit 1"), ("bare", f'exec {shlex.quote(sys.executable)} -S "$@"')):
            d = os.path.join(self.tmp.name, "python3-" + name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "python3"), "w") as f:
                f.write(f"#!/bin/sh\n{body}\n")
            os.chmod(os.path.join(d, "python3"), 0o755)
            env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
            env.pop("WEFT_PYTHON", None)
            r = subprocess.run([METG, "--help"], capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(r.returncode, 0, f"{name} python3 first on PATH: {r.stderr}")
            self.assertIn("usage: metg", r.stdout)

    def test_help_documents_the_quick_preset(self):
        r = subprocess.run([METG, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0)
        text = " ".join(r.stdout.split())
        self.assertIn("--quick", text)
        self.assertIn("-steps 1000, -iter from 16384 down to 1", text)
        # Every peer built by bench/taskbench is in the preset (the README's main job compares them all).
        self.assertIn("tbb,starpu (those built", text)


if __name__ == "__main__":
    unittest.main()
