"""tools/metg --vary (METG vs a graph parameter) end to end against fake_taskbench.py, whose cost model makes the
overhead of a task grow with its dependencies (nearest radix), its output bytes and the load imbalance, and
shrink with concurrent graphs (see that file)."""

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

SYSTEMS = ("weft", "mpi", "omp-task-gcc", "serial", "smallout", "weft-flow")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEPS = 50
ITERS = (16384, 4096, 1024, 256, 64, 16, 4, 1)


def expected_metg_us(system, cores, peak_rate, width_per_core=1, graphs=1, kind="stencil_1d", radix=3, output=16,
                     imbalance=0.0, kernel="compute_bound"):
    """METG of the fake's continuous cost model: solve efficiency(iter) = 50% for a real iter."""
    width = cores * width_per_core
    tasks = graphs * STEPS * width
    deps = fake_taskbench.dependencies_per_task(kind, radix, width)

    def elapsed(iterations):
        return fake_taskbench.model_elapsed(system, tasks, iterations, cores, deps, output, imbalance, graphs)

    def efficiency(iterations):
        return tasks * fake_taskbench.flops_per_task(kernel, iterations) / elapsed(iterations) / peak_rate

    lo, hi = 1e-3, 1e6  # efficiency rises with iterations in this model
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if efficiency(mid) < 0.5 else (lo, mid)
    return elapsed(hi) * cores / tasks * 1e6


class Vary(FakeTaskbenchCase):
    SYSTEMS = SYSTEMS

    def metg(self, *args, out=None):
        mpirun = shlex.join([sys.executable, "-S", FAKE_MPIRUN])
        argv = [METG, "--bin", self.bin, "--mpirun", mpirun, *args]
        if out is not None:
            argv += ["--out", out]
        return subprocess.run(argv, capture_output=True, text=True, timeout=240)

    def sweep(self, name, *args):
        out = os.path.join(self.tmp.name, name)
        r = self.metg("--steps", str(STEPS), "--iters", ",".join(map(str, ITERS)), "--reps", "1", *args, out=out)
        return r, out

    @staticmethod
    def load(out, param):
        with open(os.path.join(out, f"vary-{param}.json")) as f:
            summary = json.load(f)
        with open(os.path.join(out, f"vary-{param}.csv")) as f:
            rows = list(csv.DictReader(f))
        return summary, rows

    def check_model(self, summary, cores, systems, **fixed):
        """Every METG of the JSON against the cost model at the peak the JSON reports."""
        res = summary["results"][str(cores)]
        param = summary["param"]
        for system in systems:
            cells = res["systems"][system]
            self.assertEqual([c["value"] for c in cells], summary["values"])
            for c in cells:
                want = expected_metg_us(system, cores, res["peak"], **fixed, **{param: c["value"]})
                self.assertEqual(c["metg_bound"], "exact", (system, c))
                # log interpolation between iteration counts 4x apart: a few percent off the continuous curve
                self.assertAlmostEqual(c["metg_us"] / want, 1.0, delta=0.08, msg=f"{system}, {param} {c['value']}")

    def test_radix_table_csv_json_and_plots(self):
        r, out = self.sweep("radix", "--systems", "weft,mpi,omp-task-gcc", "--cores", "2", "--type", "nearest",
                            "--width-per-core", "3", "--vary", "radix=5,0,1,3")
        self.assertEqual(r.returncode, 0, r.stderr)
        summary, rows = self.load(out, "radix")
        self.assertEqual(summary["param"], "radix")
        self.assertEqual(summary["values"], [0, 1, 3, 5])
        self.assertEqual(summary["failed_runs"], 0)
        res = summary["results"]["2"]
        # One peak for all values: the fastest system (mpi) without dependencies, at the largest -iter.
        self.assertEqual((res["peak_system"], res["peak_iterations"], res["peak_from"]), ("mpi", 16384, "radix 0"))
        self.check_model(summary, 2, ("weft", "mpi", "omp-task-gcc"), width_per_core=3, kind="nearest")
        for system in ("weft", "mpi", "omp-task-gcc"):
            metgs = [c["metg_us"] for c in res["systems"][system]]
            self.assertEqual(metgs, sorted(metgs), system)  # more dependencies, coarser METG
            self.assertGreater(metgs[-1], 1.5 * metgs[0], system)
        self.assertEqual(res["baseline"], "mpi")  # the default baseline, as in the summary table
        for c in res["systems"]["mpi"]:
            self.assertAlmostEqual(c["ratio_to_baseline"], 1.0)
        weft0 = res["systems"]["weft"][0]
        self.assertAlmostEqual(weft0["ratio_to_baseline"], weft0["metg_us"] / res["systems"]["mpi"][0]["metg_us"])

        # Every value's sweep has its own folder, with the shared peak.
        for value in (0, 1, 3, 5):
            with open(os.path.join(out, f"radix-{value}", "summary.json")) as f:
                one = json.load(f)
            self.assertEqual(one["config"]["pattern"]["radix"], value)
            self.assertAlmostEqual(one["results"]["2"]["peak"], res["peak"])
            self.assertAlmostEqual(one["results"]["2"]["systems"]["weft"]["metg_us"],
                                   res["systems"]["weft"][[0, 1, 3, 5].index(value)]["metg_us"])
            with open(os.path.join(out, f"radix-{value}", "runs.csv")) as f:
                commands = [row["command"] for row in csv.DictReader(f)]
            self.assertEqual(len(commands), 3 * len(ITERS))
            self.assertTrue(all(f"-type nearest -radix {value} " in c for c in commands))

        # The CSV: a row per value and system, the same numbers as the JSON.
        self.assertEqual(len(rows), 4 * 3)
        self.assertEqual(list(rows[0])[:4], ["radix", "cores", "system", "metg_us"])
        row = next(x for x in rows if x["radix"] == "3" and x["system"] == "omp-task-gcc")
        self.assertAlmostEqual(float(row["metg_us"]), res["systems"]["omp-task-gcc"][2]["metg_us"], delta=1e-4)
        self.assertEqual((row["baseline"], row["note"], row["dir"]), ("mpi", "", "radix-3"))

        # The table (stdout and vary-radix.txt): rows = values, columns = systems, then the ratios.
        with open(os.path.join(out, "vary-radix.txt")) as f:
            self.assertEqual(f.read(), r.stdout)
        lines = r.stdout.splitlines()
        head = next(k for k, x in enumerate(lines) if x.split()[:1] == ["radix"])
        self.assertEqual(lines[head].split(), ["radix", "weft", "mpi", "omp-task-gcc"])
        for k, value in enumerate((0, 1, 3, 5)):
            cells = lines[head + 1 + k].split()
            self.assertEqual(cells[0], str(value))
            for column, system in enumerate(("weft", "mpi", "omp-task-gcc"), start=1):
                us = res["systems"][system][k]["metg_us"]
                self.assertAlmostEqual(float(cells[column]), us, delta=us * 0.01)
        self.assertIn("METG / METG of mpi:", r.stdout)
        ratio_row = lines[lines.index("  METG / METG of mpi:") + 2].split()
        self.assertEqual(ratio_row[0], "0")
        self.assertEqual(ratio_row[1], f"{weft0['ratio_to_baseline']:.2f}x")
        self.assertNotIn("notes:", r.stdout)

        for name in ("vary-radix.png", "vary-radix-efficiency-2cores.png", "radix-3/metg-2cores.png"):
            with open(os.path.join(out, name), "rb") as f:
                self.assertEqual(f.read(8), PNG_SIGNATURE, name)
        self.assertFalse(os.path.exists(os.path.join(out, "radix-0", "failures.log")))

    def test_graphs_output_and_imbalance_change_the_runs_and_the_metg(self):
        r, out = self.sweep("graphs", "--systems", "weft,mpi", "--cores", "2", "--vary", "graphs=1,4")
        self.assertEqual(r.returncode, 0, r.stderr)
        summary, _ = self.load(out, "graphs")
        self.check_model(summary, 2, ("weft", "mpi"))
        weft = [c["metg_us"] for c in summary["results"]["2"]["systems"]["weft"]]
        self.assertLess(weft[1], 0.8 * weft[0])  # the fake overlaps concurrent graphs (but not for mpi)
        with open(os.path.join(out, "graphs-4", "runs.csv")) as f:
            self.assertTrue(all(row["command"].count(" -and ") == 3 for row in csv.DictReader(f)))

        r, out = self.sweep("output", "--systems", "weft,mpi", "--cores", "1,2", "--vary", "output=16,4096,65536")
        self.assertEqual(r.returncode, 0, r.stderr)
        summary, rows = self.load(out, "output")
        for cores in (1, 2):
            self.check_model(summary, cores, ("weft", "mpi"))
        self.assertEqual(len(rows), 3 * 2 * 2)
        self.assertIn("1 core: peak", r.stdout)
        self.assertIn("2 cores: peak", r.stdout)
        with open(os.path.join(out, "output-65536", "runs.csv")) as f:
            self.assertTrue(all("-output 65536" in row["command"] for row in csv.DictReader(f)))

        # Curves that level off below 100% (mpi's) need a finer sweep for the interpolation to match the model.
        fine = ",".join(str(2 ** k) for k in range(14, -1, -1))
        r, out = self.sweep("imbalance", "--systems", "weft,mpi", "--cores", "2", "--vary", "imbalance=0,0.5,1",
                            "--iters", fine)
        self.assertEqual(r.returncode, 0, r.stderr)
        summary, _ = self.load(out, "imbalance")
        self.assertEqual(summary["config"]["pattern"]["kernel"], "load_imbalance")  # the kernel -imbalance needs
        self.check_model(summary, 2, ("weft", "mpi"), kernel="load_imbalance")
        systems = summary["results"]["2"]["systems"]
        mpi = [c["metg_us"] for c in systems["mpi"]]
        weft = [c["metg_us"] for c in systems["weft"]]
        self.assertGreater(mpi[-1] / mpi[0], weft[-1] / weft[0])  # the ranks wait for each other
        self.assertEqual(summary["values"], [0.0, 0.5, 1.0])
        with open(os.path.join(out, "imbalance-0.5", "runs.csv")) as f:
            self.assertTrue(all("-kernel load_imbalance -iter" in row["command"] and "-imbalance 0.5" in row["command"]
                                for row in csv.DictReader(f)))

    def test_a_value_a_system_cannot_run_is_a_dash_with_a_note(self):
        # smallout refuses -output above 4096 (taskbench-weft-flow on several ranks does).
        r, out = self.sweep("failing", "--systems", "weft,smallout", "--cores", "2", "--vary", "output=16,4096,65536")
        self.assertEqual(r.returncode, 1, r.stderr)  # failed runs: as without --vary
        self.assertNotIn("Traceback", r.stderr)
        self.assertIn("FAILED smallout on 2 core(s), output 65536, -iter 16384", r.stderr)
        self.assertIn("smallout is not run again on 2 core(s), output 65536: its command line was rejected", r.stderr)
        self.assertIn("see output-65536/failures.log", r.stderr)
        summary, rows = self.load(out, "output")
        self.assertEqual(summary["failed_runs"], 1)
        cells = summary["results"]["2"]["systems"]["smallout"]
        self.assertIsNotNone(cells[1]["metg_us"])
        self.assertIsNone(cells[2]["metg_us"])
        self.assertEqual(cells[2]["note"], "no successful run (1 failed: exit status 2: error: -output is at most "
                                           "4096 bytes on several ranks; see output-65536/failures.log)")
        self.assertIsNotNone(summary["results"]["2"]["systems"]["weft"][2]["metg_us"])
        row = next(x for x in rows if x["output"] == "65536" and x["system"] == "smallout")
        self.assertEqual((row["metg_us"], row["ratio_to_baseline"]), ("", ""))
        self.assertIn("no successful run", row["note"])
        line = next(x for x in r.stdout.splitlines() if x.split()[:1] == ["65536"])
        self.assertEqual(line.split()[2], "-")
        self.assertIn("output 65536, smallout: no successful run (1 failed: exit status 2", r.stdout)
        with open(os.path.join(out, "output-65536", "failures.log")) as f:
            self.assertIn("-output is at most 4096 bytes", f.read())
        self.assertFalse(os.path.exists(os.path.join(out, "output-16", "failures.log")))
        with open(os.path.join(out, "vary-output.png"), "rb") as f:
            self.assertEqual(f.read(8), PNG_SIGNATURE)

        # Every system fails at one value: a row of "-", the others are measured.
        r, out = self.sweep("all-fail", "--systems", "weft,mpi", "--cores", "2", "--type", "nearest",
                            "--vary", "radix=1,2,3")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        line = next(x for x in r.stdout.splitlines() if x.split()[:1] == ["3"])
        self.assertEqual(line.split()[1:3], ["-", "-"])
        summary, _ = self.load(out, "radix")
        self.assertIsNotNone(summary["results"]["2"]["systems"]["weft"][1]["metg_us"])
        self.assertIsNone(summary["results"]["2"]["systems"]["weft"][2]["metg_us"])
        self.assertIn("--vary radix: on 2 core(s) the graph is narrower than radix 3", r.stderr)

    def test_a_documented_limit_is_not_run_and_not_a_failure(self):
        # weft-flow@mpi carries outputs inline, up to 4096 bytes: larger values are not run, with the reason, and
        # the sweep succeeds (bench-report.sh's metg-vary section failed on it).
        r, out = self.sweep("limit", "--systems", "weft,weft-flow@mpi", "--cores", "2",
                            "--vary", "output=16,65536")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("FAILED", r.stderr)
        summary, rows = self.load(out, "output")
        cells = summary["results"]["2"]["systems"]["weft-flow@mpi"]
        self.assertIsNotNone(cells[0]["metg_us"])
        self.assertIsNone(cells[1]["metg_us"])
        self.assertIn("not run: on several processes taskbench-weft-flow carries outputs inline, up to 4096 bytes",
                      cells[1]["note"])
        self.assertIsNotNone(summary["results"]["2"]["systems"]["weft"][1]["metg_us"])
        line = next(x for x in r.stdout.splitlines() if x.split()[:1] == ["65536"])
        self.assertEqual(line.split()[2], "-")
        # The same without --vary: a note, and the others measured.
        r, out = self.sweep("limit-one", "--systems", "weft,weft-flow@mpi", "--cores", "2", "--output", "65536")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("weft-flow@mpi not run: on several processes taskbench-weft-flow carries outputs inline",
                      r.stdout + r.stderr)
        self.assertNotIn("FAILED", r.stderr)

    def test_dry_run_prints_the_commands_of_every_value(self):
        out = os.path.join(self.tmp.name, "dry")
        r = self.metg("--systems", "weft,mpi", "--cores", "2", "--iters", "8,1", "--reps", "3",
                      "--vary", "output=16,4096", "--dry-run", out=out)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("# --vary output: 2 value(s), one sweep each"))
        self.assertIn("# output 16: 4 runs per repetition x 3 repetition(s); outputs would go to " +
                      os.path.join(out, "output-16"), lines)
        self.assertIn("# output 4096: 4 runs per repetition x 3 repetition(s); outputs would go to " +
                      os.path.join(out, "output-4096"), lines)
        commands = [x for x in lines if not x.startswith("#")]
        self.assertEqual(len(commands), 2 * 4)
        self.assertEqual(sum("-output 16 " in x or x.endswith("-output 16") for x in commands), 4)
        self.assertEqual(sum("-output 4096" in x for x in commands), 4)
        self.assertFalse(os.path.exists(out))

    def test_quick_vary_runs_one_core_count(self):
        r = self.metg("--quick", "--type", "nearest", "--vary", "radix=0,3,5", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        heads = [x for x in r.stdout.splitlines() if x.startswith("# radix")]
        self.assertEqual(len(heads), 3)
        weft = [x for x in r.stdout.splitlines() if "taskbench-weft " in x]
        # 8 iteration counts per value, on the largest core count of --quick only
        self.assertEqual(len(weft), 3 * 8)
        self.assertTrue(all(x.endswith("-workers 2") for x in weft))
        self.assertTrue(all("3 repetition(s)" in x for x in heads))

    def test_bad_vary_options_exit_2_with_one_line(self):
        cases = [
            (["--vary", "depth=1,2"], "unknown parameter 'depth'"),
            (["--vary", "radix"], "expected PARAM=V1,V2"),
            (["--vary", "radix="], "empty value"),
            (["--vary", "radix=1,,3", "--type", "nearest"], "empty value"),
            (["--vary", "radix=1,x", "--type", "nearest"], "'x' is not an integer"),
            (["--vary", "radix=-1", "--type", "nearest"], "out of range"),
            (["--vary", "radix=1,1", "--type", "nearest"], "given twice"),
            (["--vary", "output=8,16"], "output 8 is out of range"),
            (["--vary", "imbalance=0,3"], "imbalance 3 is out of range (0..2)"),
            (["--vary", "graphs=0,1"], "graphs 0 is out of range"),
            (["--vary", "graphs=1,4", "--graphs", "2"], "--vary graphs sets --graphs for every sweep"),
            (["--vary", "radix=1,3", "--type", "nearest", "--radix", "3"], "--vary radix sets --radix"),
            (["--vary", "radix=1,3"], "-type stencil_1d ignores -radix"),
            (["--vary", "output=16,32", "--extra", "-output 64"], "--extra sets -output"),
            (["--vary", "graphs=1,2", "--extra", "-and -steps 4"], "--extra sets -and"),
            (["--vary", "imbalance=0,1", "--kernel", "compute_bound"], "load_imbalance only"),
            (["--imbalance", "0.5", "--kernel", "compute_bound"], "load_imbalance only"),
        ]
        for args, message in cases:
            r = self.metg("--systems", "weft", *args, "--dry-run")
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn(message, r.stderr, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertEqual(r.stdout, "", args)


if __name__ == "__main__":
    unittest.main()
