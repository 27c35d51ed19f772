"""METG computation on synthetic curves: granularity, peak, efficiency, the crossing rule, aggregation."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from weft_tools import metg, taskbench  # noqa: E402


def summary(elapsed, tasks=1000, flops=None):
    flops = tasks * 1000 if flops is None else flops
    return taskbench.Summary(tasks=tasks, dependencies=3 * tasks, flops=flops, bytes=0, elapsed=elapsed,
                             flop_rate=flops / elapsed, byte_rate=0.0)


class GranularityPeakEfficiency(unittest.TestCase):
    def test_granularity_is_wall_time_times_cores_over_tasks(self):
        self.assertAlmostEqual(metg.granularity(0.5, 2, 1000), 1e-3)
        self.assertAlmostEqual(metg.granularity(2e-3, 1, 2000), 1e-6)

    def test_granularity_rejects_no_tasks(self):
        with self.assertRaises(ValueError):
            metg.granularity(1.0, 1, 0)

    def test_peak_is_the_largest_finite_rate_of_any_system_and_iteration(self):
        def curve(name, rates):
            points = [metg.Point(iterations=2 ** k, elapsed=1.0, tasks=1, work=0, rate=r, granularity=1.0, reps=1)
                      for k, r in enumerate(rates)]
            return metg.Curve(name, 1, points)
        curves = {"a": curve("a", [1.0, 5.0, float("inf")]), "b": curve("b", [3.0, 4.0, 2.0]),
                  "c": curve("c", [])}
        self.assertEqual(metg.find_peak(curves), (5.0, "a", 2))
        self.assertEqual(metg.find_peak({"c": curve("c", [0.0])}), (0.0, None, None))
        self.assertEqual(metg.find_peak({}), (0.0, None, None))

    def test_efficiency_is_rate_over_peak(self):
        self.assertEqual(metg.efficiencies([2.0, 4.0, 1.0], 4.0), [0.5, 1.0, 0.25])
        with self.assertRaises(ValueError):
            metg.efficiencies([1.0], 0.0)


class MetgCrossing(unittest.TestCase):
    def test_exact_crossing_at_a_point(self):
        m = metg.compute_metg([100, 10, 1, 0.1], [1.0, 0.8, 0.5, 0.3], 0.5)
        self.assertEqual(m.bound, "exact")
        self.assertAlmostEqual(m.value, 1.0)

    def test_crossing_between_points_is_interpolated_in_log_granularity(self):
        # From (100, 0.9) to (10, 0.3), 50% is 2/3 of the way: log10 g = 2 - 2/3.
        m = metg.compute_metg([100, 10], [0.9, 0.3], 0.5)
        self.assertEqual(m.bound, "exact")
        self.assertAlmostEqual(m.value, 10 ** (4 / 3), places=9)
        self.assertAlmostEqual(m.best_efficiency, 0.9)
        # Linear interpolation in g would give 40; the log rule must not.
        self.assertNotAlmostEqual(m.value, 40.0, places=1)

    def test_other_threshold(self):
        m = metg.compute_metg([8e-6, 4e-6, 2e-6, 1e-6], [0.99, 0.9, 0.7, 0.2], 0.8)
        expected = math.exp(math.log(4e-6) + (0.9 - 0.8) / (0.9 - 0.7) * (math.log(2e-6) - math.log(4e-6)))
        self.assertAlmostEqual(m.value, expected, delta=1e-15)

    def test_point_order_does_not_matter(self):
        g, e = [1, 100, 0.1, 10], [0.5, 1.0, 0.3, 0.8]
        self.assertAlmostEqual(metg.compute_metg(g, e, 0.5).value, 1.0)

    def test_no_crossing_when_never_reaching_the_threshold(self):
        m = metg.compute_metg([100, 10, 1], [0.45, 0.4, 0.1], 0.5)
        self.assertIsNone(m.value)
        self.assertIsNone(m.bound)
        self.assertAlmostEqual(m.best_efficiency, 0.45)
        self.assertEqual(m.format_us(), "-")

    def test_all_points_above_gives_an_upper_bound(self):
        m = metg.compute_metg([4e-6, 2e-6, 1e-6], [1.0, 0.9, 0.6], 0.5)
        self.assertEqual(m.bound, "upper")
        self.assertAlmostEqual(m.value, 1e-6)
        self.assertEqual(m.format_us(), "<=1.00")

    def test_noisy_dip_at_coarse_grain(self):
        # A slowed-down run at g=10 dips below 50%; the curve is back at 60% at g=5 and then falls.
        g = [100, 50, 10, 5, 1]
        e = [1.0, 0.9, 0.45, 0.6, 0.3]
        finest = metg.compute_metg(g, e, 0.5)  # the default
        expected = math.exp(math.log(5) + (0.6 - 0.5) / (0.6 - 0.3) * (math.log(1) - math.log(5)))
        self.assertAlmostEqual(finest.value, expected, places=9)
        self.assertEqual(finest.outliers, 1)  # the dip
        coarsest = metg.compute_metg(g, e, 0.5, "coarsest")
        expected = math.exp(math.log(50) + (0.9 - 0.5) / (0.9 - 0.45) * (math.log(10) - math.log(50)))
        self.assertAlmostEqual(coarsest.value, expected, places=9)
        self.assertEqual(coarsest.outliers, 1)  # the point back above 50% at g=5

    def test_disturbed_coarsest_point(self):
        # The coarsest point is disturbed (40%); both rules start from the points at or above 50%.
        g = [100, 50, 10, 1]
        e = [0.4, 0.9, 0.7, 0.3]
        expected = math.exp(math.log(10) + (0.7 - 0.5) / (0.7 - 0.3) * (math.log(1) - math.log(10)))
        for rule in metg.CROSSINGS:
            m = metg.compute_metg(g, e, 0.5, rule)
            self.assertAlmostEqual(m.value, expected, places=9)
            self.assertEqual(m.outliers, 1)

    def test_several_dips_and_an_upper_bound_with_outliers(self):
        g = [64, 32, 16, 8, 4, 2, 1]
        e = [0.98, 0.3, 0.95, 0.2, 0.8, 0.1, 0.05]
        self.assertAlmostEqual(metg.compute_metg(g, e, 0.5).value,
                               math.exp(math.log(4) + (0.8 - 0.5) / (0.8 - 0.1) * (math.log(2) - math.log(4))))
        self.assertEqual(metg.compute_metg(g, e, 0.5).outliers, 2)
        self.assertEqual(metg.compute_metg(g, e, 0.5, "coarsest").outliers, 2)  # 16 and 4 back above
        up = metg.compute_metg([8, 4, 2], [0.9, 0.4, 0.7], 0.5)
        self.assertEqual((up.bound, up.value, up.outliers), ("upper", 2, 1))

    def test_monotonic_curve_has_no_outliers_and_both_rules_agree(self):
        g = [1000, 100, 10, 1, 0.1]
        e = [1.0, 0.97, 0.7, 0.2, 0.02]
        a, b = metg.compute_metg(g, e, 0.5), metg.compute_metg(g, e, 0.5, "coarsest")
        self.assertEqual(a, b)
        self.assertEqual(a.outliers, 0)

    def test_single_point(self):
        self.assertEqual(metg.compute_metg([3.0], [0.7], 0.5).bound, "upper")
        self.assertIsNone(metg.compute_metg([3.0], [0.2], 0.5).value)

    def test_empty_and_invalid(self):
        m = metg.compute_metg([], [], 0.5)
        self.assertIsNone(m.value)
        self.assertTrue(math.isnan(m.best_efficiency))
        for bad in (0.0, -0.1, 1.5):
            with self.assertRaises(ValueError):
                metg.compute_metg([1.0], [1.0], bad)
        with self.assertRaises(ValueError):
            metg.compute_metg([1.0, 2.0], [1.0], 0.5)
        with self.assertRaises(ValueError):
            metg.compute_metg([1.0], [1.0], 0.5, "middle")

    def test_format_us(self):
        self.assertEqual(metg.format_us(0.19e-6), "0.190")
        self.assertEqual(metg.format_us(12.34e-6), "12.3")
        self.assertEqual(metg.format_us(4567e-6), "4567")
        self.assertEqual(metg.format_us(0.0123e-6), "0.0123")


class Aggregation(unittest.TestCase):
    def runs(self):
        r = []
        # system a: 1 core, two iteration counts, three reps each (medians 1.0 and 0.1 s)
        for rep, el in enumerate((1.2, 1.0, 0.9)):
            r.append(metg.Run("a", 1, 100, rep, "cmd", summary=summary(el, flops=100_000)))
        for rep, el in enumerate((0.1, 0.3, 0.05)):
            r.append(metg.Run("a", 1, 1, rep, "cmd", summary=summary(el, flops=1_000)))
        # system b: the best at 100 iterations (0.8 s), one failed run
        r.append(metg.Run("b", 1, 100, 0, "cmd", summary=summary(0.8, flops=100_000)))
        r.append(metg.Run("b", 1, 1, 0, "cmd", status="exit status 1"))
        return r

    def test_medians_peak_efficiency_and_failures(self):
        res = metg.analyze(self.runs(), "flops", 50.0)[1]
        self.assertEqual(res.peak_system, "b")
        self.assertAlmostEqual(res.peak, 100_000 / 0.8)
        a = res.curves["a"]
        self.assertEqual([p.iterations for p in a.points], [100, 1])
        self.assertEqual([p.reps for p in a.points], [3, 3])
        self.assertAlmostEqual(a.points[0].elapsed, 1.0)
        self.assertAlmostEqual(a.points[0].granularity, 1.0 / 1000)
        self.assertAlmostEqual(a.points[0].efficiency, 0.8)
        self.assertAlmostEqual(a.points[1].efficiency, (1_000 / 0.1) / (100_000 / 0.8))
        self.assertFalse(a.reaches_peak)  # 80% < 95%
        b = res.curves["b"]
        self.assertEqual(b.failed, 1)
        self.assertTrue(b.reaches_peak)
        self.assertEqual(b.metg.bound, "upper")

    def test_peak_is_per_core_count(self):
        runs = self.runs() + [metg.Run("a", 2, 100, 0, "cmd", summary=summary(0.25, flops=100_000))]
        results = metg.analyze(runs, "flops", 50.0)
        self.assertAlmostEqual(results[2].peak, 400_000)
        self.assertAlmostEqual(results[2].curves["a"].points[0].granularity, 0.25 * 2 / 1000)
        self.assertAlmostEqual(results[1].peak, 125_000)

    def test_integer_lists(self):
        self.assertEqual(metg.positive_int_list("4, 1,2", "--cores"), [4, 1, 2])
        for bad in ("", "1,,2", "0", "x", "-3"):
            with self.assertRaises(metg.UsageError):
                metg.positive_int_list(bad, "--cores")

    def test_sweep_iterations(self):
        self.assertEqual(metg.sweep_iterations(16, 2), [16, 8, 4, 2, 1])
        self.assertEqual(metg.sweep_iterations(100, 4), [100, 25, 6, 1])
        self.assertEqual(metg.sweep_iterations(1, 2), [1])
        with self.assertRaises(ValueError):
            metg.sweep_iterations(16, 1)

    def test_plan_interleaves_systems_and_rotates_them(self):
        config = metg.Config(bin_dir="/x", systems=["weft", "serial", "mpi"], cores=[1, 2], iterations=[4, 1],
                             reps=2, pattern=taskbench.Pattern(), percent=50, crossing="finest", metric="flops",
                             baseline=None, timeout=1, max_failures=1, tolerance=0.05, mpirun=("mpirun",), out_dir="/o")
        plan = metg.planned_runs(config)
        self.assertEqual(plan[:6], [(0, 1, 4, "weft"), (0, 1, 4, "serial"), (0, 1, 4, "mpi"),
                                    (0, 1, 1, "weft"), (0, 1, 1, "serial"), (0, 1, 1, "mpi")])
        # serial only on 1 core
        self.assertNotIn("serial", [s for _, c, _, s in plan if c == 2])
        # the second repetition starts with the next system
        second = [s for r, c, i, s in plan if r == 1 and c == 1 and i == 4]
        self.assertEqual(second, ["serial", "mpi", "weft"])
        self.assertEqual(len(plan), 2 * (2 * 3 + 2 * 2))


class Vary(unittest.TestCase):
    def test_parse_sorts_and_types_the_values(self):
        v = metg.parse_vary("radix=5, 0,3")
        self.assertEqual(v.param.name, "radix")
        self.assertEqual(v.values, (0, 3, 5))
        v = metg.parse_vary("imbalance=1,0.25,0")
        self.assertEqual(v.values, (0.0, 0.25, 1.0))
        self.assertEqual([v.dir_name(x) for x in v.values], ["imbalance-0", "imbalance-0.25", "imbalance-1"])
        self.assertEqual(metg.parse_vary("output=65536,16").values, (16, 65536))
        self.assertEqual(metg.parse_vary("graphs=4,1").values, (1, 4))

    def test_parse_rejects_bad_lists(self):
        for text, message in (("radix", "expected PARAM=V1,V2"), ("depth=1", "unknown parameter 'depth'"),
                              ("radix=", "empty value"), ("radix=1,,2", "empty value"), ("radix=1,", "empty value"),
                              ("radix=1.5", "not an integer"), ("radix=-1", "out of range"),
                              ("output=8", "out of range"), ("output=2147483648", "out of range"),
                              ("imbalance=2.5", "out of range (0..2)"), ("imbalance=nan", "not a finite number"),
                              ("imbalance=x", "not a number"), ("graphs=0", "out of range"),
                              ("radix=3,1,3", "3 is given twice")):
            with self.assertRaises(metg.argparse.ArgumentTypeError, msg=text) as caught:
                metg.parse_vary(text)
            self.assertIn(message, str(caught.exception), text)

    def test_value_configs_set_the_parameter_and_a_folder_each(self):
        base = metg.Config(bin_dir="/x", systems=["weft"], cores=[2], iterations=[4, 1], reps=1,
                           pattern=taskbench.Pattern(type="nearest"), percent=50, crossing="finest", metric="flops",
                           baseline=None, timeout=1, max_failures=1, tolerance=0.05, mpirun=("mpirun",),
                           out_dir="/o", vary=metg.parse_vary("radix=0,5"))
        configs = metg.value_configs(base)
        self.assertEqual([v for v, _ in configs], [0, 5])
        self.assertEqual([c.pattern.radix for _, c in configs], [0, 5])
        self.assertEqual([c.out_dir for _, c in configs], ["/o/radix-0", "/o/radix-5"])
        self.assertTrue(all(c.vary is None for _, c in configs))
        graphs = metg.value_configs(metg.dataclasses.replace(base, vary=metg.parse_vary("graphs=1,4")))
        self.assertEqual([c.pattern.graphs for _, c in graphs], [1, 4])
        plain = metg.dataclasses.replace(base, vary=None)
        self.assertEqual(metg.value_configs(plain), [(None, plain)])

    def test_shared_peak_is_the_best_of_all_sweeps_and_sets_every_efficiency(self):
        fast = [metg.Run("a", 1, 100, 0, "cmd", summary=summary(0.5, flops=100_000))]
        slow = [metg.Run("a", 1, 100, 0, "cmd", summary=summary(1.0, flops=100_000)),
                metg.Run("a", 1, 1, 0, "cmd", summary=summary(0.1, flops=1_000))]
        peaks = metg.shared_peaks([("radix 0", fast), ("radix 5", slow)], "flops")
        self.assertEqual(peaks[1], metg.Peak(200_000, "a", 100, "radix 0"))
        res = metg.analyze(slow, "flops", 50.0, peaks=peaks)[1]
        self.assertAlmostEqual(res.peak, 200_000)
        self.assertEqual(res.peak_from, "radix 0")
        self.assertAlmostEqual(res.curves["a"].points[0].efficiency, 0.5)  # its own peak would give 100%
        self.assertIsNone(metg.analyze(slow, "flops", 50.0)[1].peak_from)


if __name__ == "__main__":
    unittest.main()
