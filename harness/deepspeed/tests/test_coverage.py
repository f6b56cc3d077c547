"""The suite's --coverage (suite/coverage.py, coverage_trace.py): executable lines counted as by
hand, the tracer agreeing with that count, and a figure that moves with the scenarios: on the
stub DeepSpeed a scenario without a save never enters save_checkpoint, one with a save does."""

import importlib.util
import json
import os
import sys
import tempfile
import unittest
import uuid

from . import support
from zerocheck_ds.suite import coverage, coverage_features
from zerocheck_ds.suite.coverage_trace import LineTracer

COUNTED = os.path.join(support.FIXTURES, "coverage", "counted.py")
# counted.py by hand: the docstring's first line, the import, the def and its three statements,
# the class line and its attribute, the method's def, its comprehension's two lines and its
# return. Not: comments, blank lines, the docstring's second line.
COUNTED_BY_HAND = [2, 5, 8, 10, 11, 12, 15, 16, 18, 19, 20, 21]


def tracers():
    """The tracers this Python has: settrace always, sys.monitoring from 3.12."""
    yield "settrace", False
    if hasattr(sys, "monitoring"):
        yield "sys.monitoring", True


class ExecutableLines(unittest.TestCase):
    def test_a_small_file_counts_as_by_hand(self):
        self.assertEqual(sorted(coverage.executable_lines(COUNTED)), COUNTED_BY_HAND)

    def test_functions_own_their_lines(self):
        owners = coverage.executable_lines(COUNTED)
        self.assertEqual(owners[2], "<module>")
        self.assertEqual(owners[8], "<module>")  # a def line is the scope's that runs it
        self.assertEqual(owners[10], "choose")
        self.assertEqual(owners[16], "Keeper")
        self.assertEqual(owners[18], "Keeper")
        self.assertEqual(owners[21], "Keeper.keep")

    def test_line_ranges(self):
        self.assertEqual(coverage.line_ranges([9, 3, 4, 5, 12]), "3-5,9,12")
        self.assertEqual(coverage.line_ranges([]), "")


class Features(unittest.TestCase):
    def test_a_function_gets_its_feature_and_reason(self):
        feature_of = coverage_features.feature_of
        self.assertEqual(feature_of("runtime/zero/stage3.py",
                                    "DeepSpeedZeroOptimizer_Stage3._optimizer_states_and_gradient_swap_in"),
                         ("offload to NVMe (swapping)", coverage_features.NEEDS_NVME))
        self.assertEqual(feature_of("runtime/zero/stage_1_and_2.py", "DeepSpeedZeroOptimizer.step")[1],
                         coverage_features.NOT_REPLAYED)
        self.assertTrue(feature_of("runtime/engine.py", "DeepSpeedEngine.save_checkpoint")[0]
                        .startswith("checkpointing"))
        # ZeRO-3's hooks live in parameter_offload.py: the file's name makes them no offload.
        self.assertEqual(feature_of("runtime/zero/parameter_offload.py",
                                    "DeepSpeedZeRoOffload._post_backward_module_hook"),
                         ("other", coverage_features.OTHER))


class Tracer(unittest.TestCase):
    def run_counted(self, use_monitoring, calls):
        """Imports counted.py afresh under the tracer and makes `calls`; returns its lines."""
        tracer = LineTracer("coverage", ["counted.py"], use_monitoring=use_monitoring)
        spec = importlib.util.spec_from_file_location(f"counted_{uuid.uuid4().hex}", COUNTED)
        module = importlib.util.module_from_spec(spec)
        tracer.start()
        try:
            spec.loader.exec_module(module)
            calls(module)
        finally:
            tracer.stop()
        return set(tracer.snapshot()["files"].get("counted.py", []))

    def test_everything_run_is_every_executable_line(self):
        def everything(m):
            m.choose(True)
            m.choose(False)
            m.Keeper().keep([1, 5])
        for name, use_monitoring in tracers():
            with self.subTest(tracer=name):
                self.assertEqual(sorted(self.run_counted(use_monitoring, everything)),
                                 COUNTED_BY_HAND)

    def test_a_branch_not_taken_is_not_executed(self):
        for name, use_monitoring in tracers():
            with self.subTest(tracer=name):
                ran = self.run_counted(use_monitoring, lambda m: m.choose(False))
                self.assertEqual(sorted(set(COUNTED_BY_HAND) - ran), [11, 19, 20, 21])

    def test_targets_are_globs_under_the_last_folder_of_the_package(self):
        tracer = LineTracer("deepspeed", ["runtime/zero/*.py", "runtime/engine.py"])
        self.assertEqual(tracer.target("/x/deepspeed/runtime/zero/stage3.py"),
                         ("/x/deepspeed", "runtime/zero/stage3.py"))
        self.assertEqual(tracer.target("/h/deepspeed/t/deepspeed/runtime/engine.py"),
                         ("/h/deepspeed/t/deepspeed", "runtime/engine.py"))
        self.assertIsNone(tracer.target("/x/deepspeed/runtime/zero/sub/x.py"))  # * stays put
        self.assertIsNone(tracer.target("/x/deepspeed/runtime/bf16_optimizer.py"))
        self.assertIsNone(tracer.target("/harness/deepspeed/zerocheck_ds/suite/suite.py"))


class OnTheStub(unittest.TestCase):
    """Every rank traced through the suite, its files merged: the checkpoint code of the stub
    (its __init__.py) is reached only by the scenario that saves."""

    def coverage_of(self, scenario):
        with tempfile.TemporaryDirectory() as tmp:
            out, report_path = os.path.join(tmp, "out"), os.path.join(tmp, "coverage.json")
            run = support.run_cli(
                ["suite", "--adapter", "deepspeed", "--world", "1", "--no-control",
                 "--out", out, "--scenarios", support.good(scenario),
                 "--coverage", report_path, "--coverage-of", "__init__.py"],
                extra_paths=[support.STUB_DEEPSPEED], timeout=180)
            self.assertIn(run.returncode, (0, 1), run.stdout + run.stderr)
            self.assertIn("coverage of deepspeed", run.stdout)
            with open(report_path, encoding="utf-8") as f:
                return json.load(f)

    def test_the_checkpoint_functions_are_reached_only_with_a_save(self):
        without = self.coverage_of("name_collisions")  # initialize, train, attributes
        with_save = self.coverage_of("tied_frozen_values")  # ... and a save and a load
        for report in (without, with_save):
            self.assertEqual(report["format"], coverage.FORMAT)
            self.assertEqual(list(report["files"]), ["__init__.py"])
            self.assertGreaterEqual(report["rank_files"], 1)
            self.assertTrue(report["files"]["__init__.py"]["imported"])
        missing = without["files"]["__init__.py"]["unreached"]
        for name in ("_Engine.save_checkpoint", "_Engine.load_checkpoint"):
            self.assertIn(name, missing)
            self.assertFalse(missing[name]["entered"])
            self.assertTrue(missing[name]["feature"].startswith("checkpointing"))
            reached = with_save["files"]["__init__.py"]["unreached"].get(name, {"entered": True})
            self.assertTrue(reached["entered"], name)
        self.assertIn("__init__.py:_Engine.save_checkpoint",
                      next(g for g in without["features"]
                           if g["feature"].startswith("checkpointing"))["functions"])
        # Training ran in both: its step is entered; the figure moved with the save.
        self.assertTrue(missing.get("_Engine.step", {"entered": True})["entered"])
        self.assertGreater(with_save["total"]["executed"], without["total"]["executed"])
        self.assertEqual(without["total"]["executable"], with_save["total"]["executable"])


if __name__ == "__main__":
    unittest.main()
