"""The DeepSpeed adapter without DeepSpeed: a clear exit 2 when it is missing, and a run over a
stand-in `deepspeed` package (tests/fixtures/stub_deepspeed) with upstream's habits."""

import importlib.util
import json
import os
import tempfile
import unittest

from . import support


class DeepSpeedAdapter(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self._tmp.name, "out")

    def tearDown(self):
        self._tmp.cleanup()

    def run_upstream(self, extra_paths, **variables):
        # ds_id_experts is for 2 ranks: one rank's view of it (--any-world).
        return support.run_cli(["--scenarios", support.UPSTREAM, "--out", self.out,
                                "--adapter", "deepspeed", "--any-world"], extra_paths=extra_paths,
                               **variables)

    def verdict(self):
        with open(os.path.join(self.out, "ds_id_experts.verdict.json"), encoding="utf-8") as f:
            return json.load(f)

    def test_unimportable_deepspeed_exits_2_with_a_clear_message(self):
        run = self.run_upstream([support.BROKEN_DEEPSPEED])
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("`import deepspeed` failed", run.stderr)
        self.assertIn("planted by zerocheck tests", run.stderr)
        self.assertIn("--adapter passthrough", run.stderr)
        self.assertNotIn("Traceback", run.stderr)
        self.assertFalse(os.path.exists(self.out))

    @unittest.skipIf(importlib.util.find_spec("deepspeed") is not None, "DeepSpeed is installed")
    def test_missing_deepspeed_exits_2(self):
        run = self.run_upstream([])
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("No module named 'deepspeed'", run.stderr)

    def test_upstream_habits_are_findings(self):
        run = self.run_upstream([support.STUB_DEEPSPEED])
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        verdict = self.verdict()
        self.assertEqual(verdict["adapter_version"], "0.0.0+zerocheck.stub")
        found = {(f["invariant"], f["module_path"], f["param"], f["attribute"])
                 for f in verdict["findings"]}
        self.assertIn(("I1", "0.experts.0", "", "ds_id"), found)
        self.assertIn(("I1", "0.experts.0.linear", "weight", "ds_numel"), found)
        self.assertIn(("I2", "0.experts.0", "", "ds_id"), found)
        self.assertTrue(any(f["invariant"] == "I5" and f["actual"] == "accepted"
                            for f in verdict["findings"]))
        self.assertFalse(any(f["invariant"] == "op" for f in verdict["findings"]),
                         verdict["findings"])

    def test_exceptions_inside_the_engine_are_findings(self):
        for call in ("initialize", "step"):
            with self.subTest(call):
                run = self.run_upstream([support.STUB_DEEPSPEED], ZEROCHECK_STUB_DEEPSPEED_FAIL=call)
                self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
                self.assertNotIn("Traceback", run.stderr)
                errors = [f for f in self.verdict()["findings"] if f["op"] == call and f["exception"]]
                self.assertTrue(errors, self.verdict()["findings"])
                self.assertIn(f"stub deepspeed: {call} failed on purpose", errors[0]["exception"])


class RefusalRecognition(unittest.TestCase):
    """Only DeepSpeed's own refusal of a repeated initialize counts as one (I5)."""

    def setUp(self):
        import sys
        sys.path.insert(0, support.STUB_DEEPSPEED)
        self.addCleanup(sys.path.remove, support.STUB_DEEPSPEED)
        self.addCleanup(sys.modules.pop, "deepspeed", None)
        from zerocheck_ds.engines.deepspeed_adapter import DeepSpeedAdapter
        self.adapter = DeepSpeedAdapter()

    def test_the_guarded_initialize_refusal_counts(self):
        for e in (ValueError("Model has already been initialized by deepspeed.initialize"),
                  RuntimeError("optimizer already initialized: call destroy() first")):
            self.assertTrue(self.adapter.is_refusal(e), e)

    def test_any_other_error_is_not_a_refusal(self):
        for e in (IndexError("list index out of range"), KeyError(140213),
                  AttributeError("'int' object has no attribute 'apply'"),
                  ValueError("expected a positive batch size")):
            self.assertFalse(self.adapter.is_refusal(e), e)


if __name__ == "__main__":
    unittest.main()
