"""I11, the overflow contract (oracles/overflow.py): the promise table read from DeepSpeed's code,
which windows must overflow from the scenario alone, and the judgement of every rank's view.

The rows' citations are checked against the two DeepSpeed trees when ../shared/deepspeed has them:
a citation that no longer points at the code it names fails here."""

import math
import os
import re
import types
import unittest

from zerocheck_ds.findings.verdict import Tally
from zerocheck_ds.model.loss_scale import LossScaleModel
from zerocheck_ds.oracles import overflow

from . import support

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(support.PACKAGE_ROOT))),
                      "shared", "deepspeed")
TREES = {"v0.14.5": "v0.14.5", "master": "master-edaa722"}
# What the first cited line of each citation must say: the promise hangs on it.
ANCHORS = {
    ("v0.14.5", "runtime/zero/stage3.py", 1968): "if self.dtype == torch.float16:",
    ("master", "runtime/zero/stage3.py", 2550): "if self.dtype == torch.float16:",
    ("master", "runtime/precision_config.py", 56): "check_grad_overflow: bool = True",
    ("master", "runtime/zero/stage_1_and_2.py", 2290): "if self.check_grad_overflow:",
    ("master", "runtime/engine.py", 2365): "if self.bfloat16_enabled():",
    ("v0.14.5", "runtime/engine.py", 2141): "# Check overflow here",
    ("master", "runtime/engine.py", 3371): "# Check overflow here",
    ("v0.14.5", "runtime/zero/stage_1_and_2.py", 1831): "if self.dtype == torch.float16:",
    ("v0.14.5", "runtime/engine.py", 487): "def get_global_grad_norm(self) -> float:",
    ("master", "runtime/engine.py", 962): "def get_global_grad_norm(self) -> float:",
}


def config(dtype="fp32", stage=3, flag=None):
    c = {"zero_optimization": {"stage": stage}, "gradient_accumulation_steps": 1}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    if flag is not None:
        c["bf16"]["check_grad_overflow"] = flag
    return c


class PromiseTable(unittest.TestCase):
    def test_every_version_stage_and_dtype_has_a_row(self):
        for column in ("v0.14.5", "master"):
            for stage in (1, 2, 3):
                for dtype in ("fp32", "bf16", "fp16"):
                    for flag in ((None, True, False) if dtype == "bf16" else (None,)):
                        with self.subTest(column=column, stage=stage, dtype=dtype, flag=flag):
                            row = overflow.promise(column, stage, config(dtype, stage, flag))
                            self.assertRegex(row.where, r"\.py:\d+")

    def test_what_each_version_promises(self):
        self.assertFalse(overflow.promise("v0.14.5", 3, config("bf16")).skips)
        self.assertFalse(overflow.promise("v0.14.5", 3, config("bf16", flag=True)).skips)
        self.assertFalse(overflow.promise("v0.14.5", 3, config("fp32")).skips)
        self.assertTrue(overflow.promise("v0.14.5", 3, config("fp16")).skips)
        self.assertFalse(overflow.promise("master", 3, config("fp32")).skips)
        self.assertTrue(overflow.promise("master", 3, config("fp16")).skips)
        # The key's documentation promises the skip at every stage (default true); ZeRO-3 never
        # gets the flag: a promise made and broken.
        documented = overflow.promise("master", 3, config("bf16"))
        self.assertTrue(documented.skips)
        self.assertIn("precision_config.py:56-61", documented.where)
        self.assertIn("engine.py:2365-2370", documented.broken_by)
        self.assertFalse(overflow.promise("master", 3, config("bf16", flag=False)).skips)
        self.assertTrue(overflow.promise("master", 2, config("bf16", 2)).skips)
        self.assertFalse(overflow.promise("master", 2, config("bf16", 2, False)).skips)
        self.assertFalse(overflow.promise("v0.14.5", 2, config("bf16", 2)).skips)
        self.assertEqual(overflow.row_name("master", 3, config("bf16")),
                         "master ZeRO-3 bf16, check_grad_overflow true")

    def test_the_citations_point_at_the_code(self):
        if not all(os.path.isdir(os.path.join(SHARED, t)) for t in TREES.values()):
            self.skipTest("no ../shared/deepspeed trees")
        cited = re.compile(r"(runtime/[\w/]+\.py):(\d+)(?:-(\d+))?((?:,\s*:?\d+(?:-\d+)?)*)[^()]*\((v0\.14\.5|master)\)")
        rows = list(overflow.PROMISES.values())
        texts = [t for r in rows for t in (r.where, r.broken_by) if t] + [overflow.NORM_PROMISE]
        seen = 0
        for text in texts:
            for m in cited.finditer(text):
                path = os.path.join(SHARED, TREES[m.group(5)], "deepspeed", m.group(1))
                with open(path, encoding="utf-8") as f:
                    lines = f.read().splitlines()
                last = max(int(n) for n in re.findall(r"\d+", m.group(0).split("(")[0].split(".py:")[1]))
                self.assertLessEqual(last, len(lines), m.group(0))
                seen += 1
        self.assertGreater(seen, 10)
        for (version, path, line), words in ANCHORS.items():
            with self.subTest(path=path, line=line, version=version):
                with open(os.path.join(SHARED, TREES[version], "deepspeed", path),
                          encoding="utf-8") as f:
                    self.assertIn(words, f.read().splitlines()[line - 1])


class LossScale(unittest.TestCase):
    """model/loss_scale.py against what docs/deepspeed-precision.md measured on both versions."""

    def scales(self, column, fp16, overflows):
        model = LossScaleModel.of({"fp16": dict({"enabled": True}, **fp16)}, column)
        out = []
        for overflow in overflows:
            model.update(overflow)
            out.append("raise" if model.raised else model.scale)
        return out

    def test_the_start(self):
        self.assertEqual(self.scales("v0.14.5", {}, [True]), [2.0 ** 31])  # 2**32, hysteresis 1
        self.assertEqual(self.scales("v0.14.5", {"hysteresis": 2}, [True]), [65536.0])
        self.assertEqual(self.scales("master", {}, [True, True]), [65536.0, 32768.0])
        self.assertEqual(self.scales("master", {"loss_scale": 8}, [True, False]), [8.0, 8.0])

    def test_doubling_point_per_version(self):
        # Measured: window 2, start 16: v0.14.5 doubles at step 1, master at step 2.
        fp16 = {"initial_scale_power": 4, "loss_scale_window": 2}
        self.assertEqual(self.scales("v0.14.5", fp16, [False, False, False]), [16.0, 32.0, 32.0])
        self.assertEqual(self.scales("master", fp16, [False, False, False]), [16.0, 16.0, 32.0])

    def test_hysteresis_and_the_minimum(self):
        fp16 = {"initial_scale_power": 4, "hysteresis": 2, "min_loss_scale": 8}
        self.assertEqual(self.scales("master", fp16, [True, True, True]), [16.0, 8.0, "raise"])
        fp16 = dict(fp16, consecutive_hysteresis=True, min_loss_scale=1)
        self.assertEqual(self.scales("master", fp16, [True, False, True]), [16.0, 16.0, 16.0])


class ScenarioSays(unittest.TestCase):
    def test_rules(self):
        says = overflow._scenario_says
        trainable = {"0.weight", "1.experts.0.linear.weight"}
        self.assertIs(says([("loss", math.inf, "")], trainable), True)
        self.assertIs(says([("input", math.nan, "")], trainable), True)
        self.assertIsNone(says([("input", math.inf, "")], trainable))
        self.assertIs(says([("gradient", -math.inf, "0.weight")], trainable), True)
        self.assertIsNone(says([("gradient", math.nan, "1.experts.0.linear.weight")], trainable))
        self.assertIs(says([("gradient", math.nan, "frozen.weight")], trainable), False)
        self.assertIs(says([], trainable), False)


def view(skipped, nonfinite=(), norm=0.5, scale=None):
    return {"skipped_steps": skipped, "global_steps": 1, "norm": norm, "nonfinite": list(nonfinite),
            "loss_scale": scale}


class Judge(unittest.TestCase):
    def checks(self, column="master", cfg=None, consumed=(("gradient", math.inf, "0.weight"),),
               twin=None):
        tally = Tally()
        checks = overflow.OverflowChecks(cfg or config("bf16", 2), column, tally)
        checks.initialized(["0.weight"])
        checks.backward(True, {}, {}, twin)
        checks._window = list(consumed)
        checks.step()
        return checks, tally

    def attributes(self, checks, everyone):
        return [f.attribute for f in checks.judge(3, "step", everyone)]

    def test_a_promise_kept(self):
        checks, tally = self.checks()
        self.assertEqual(self.attributes(checks, [view(1), view(1)]), [])
        self.assertEqual(tally.checked["I11"], 1)

    def test_a_promised_skip_not_made_and_the_state_left_non_finite(self):
        checks, _ = self.checks()
        self.assertEqual(self.attributes(checks, [view(0, ["weights"]), view(0)]),
                         ["promised skip not made", "non-finite state after a promised skip"])

    def test_ranks_that_disagree(self):
        for column, cfg in (("master", config("bf16", 2)), ("v0.14.5", config("bf16"))):
            with self.subTest(column):
                checks, _ = self.checks(column, cfg)
                found = self.attributes(checks, [view(1), view(0)])
                self.assertIn("skipped on some ranks only", found)

    def test_a_clean_step_skipped(self):
        checks, _ = self.checks(consumed=())
        self.assertEqual(self.attributes(checks, [view(1), view(1)]), ["skipped a clean step"])

    def test_the_twin_decides_when_it_follows(self):
        checks, _ = self.checks(consumed=(("input", math.inf, ""),), twin=False)
        self.assertEqual(self.attributes(checks, [view(0), view(0)]), [])
        checks, tally = self.checks(consumed=(("input", math.inf, ""),), twin=None)
        self.assertEqual(self.attributes(checks, [view(0), view(0)]), [])
        self.assertIn("an infinite input", next(iter(tally.not_checked["I11"])))

    def test_never_promised_is_reported_not_found(self):
        checks, tally = self.checks("v0.14.5", config("bf16"))
        self.assertEqual(self.attributes(checks, [view(0, ["fp32 master", "weights"], math.nan),
                                                  view(0, ["weights"], math.nan)]), [])
        (reason,) = tally.not_checked["I11"]
        self.assertTrue(reason.startswith("never promised (v0.14.5 ZeRO-3 bf16: "
                                          "runtime/zero/stage3.py:1968-1969"), reason)
        self.assertIn("skipped on no rank; non-finite in fp32 master, weights; reported norm nan",
                      reason)

    def test_skipped_steps_counted_from_the_last_step(self):
        checks, _ = self.checks()
        self.assertEqual(self.attributes(checks, [view(1), view(1)]), [])
        checks.backward(True, {}, {}, None)
        checks._window = [("loss", math.nan, "")]
        checks.step()
        self.assertEqual(self.attributes(checks, [view(1), view(2)]),
                         ["skipped on some ranks only", "promised skip not made"])

    def test_after_a_promised_skip_the_twin_no_longer_decides(self):
        # The twin never skips: its later gradients are non-finite where the engine's are not.
        checks, _ = self.checks(twin=True)
        self.assertEqual(self.attributes(checks, [view(1), view(1)]), [])
        checks.backward(True, {}, {}, True)
        checks._window = []
        checks.step()
        self.assertEqual(self.attributes(checks, [view(1), view(1)]), [])

    def test_the_reported_norm_after_an_applied_step(self):
        def judged(twin_norm, reported, stage=3, skipped=0, consumed=(("gradient", math.inf, "0.weight"),)):
            checks, _ = self.checks("v0.14.5", config("fp32", stage), consumed=consumed)
            checks._twin_norm = twin_norm
            return self.attributes(checks, [view(skipped, norm=r) for r in reported])
        self.assertEqual(judged(0.25, [0.25, 0.25 * (1 + 1e-13)]), [])
        self.assertEqual(judged(0.25, [0.25, 0.2501]), ["reported gradient norm"])
        self.assertEqual(judged(math.inf, [math.nan, math.nan]), [])  # v0.14.5's NaN sentinel
        self.assertEqual(judged(math.inf, [1.0, 1.0]), ["reported gradient norm"])  # master's 1.0
        self.assertEqual(judged(math.inf, [1.0, 1.0], stage=2), [])  # ZeRO-1/2: fp32 norm
        self.assertEqual(judged(math.inf, [1.0, 1.0], consumed=()), [])  # a clean window: I3's
        self.assertEqual(judged(None, [1.0, 1.0]), [])  # the twin does not follow
        checks, _ = self.checks(twin=True)  # a skipped step reports the cached norm
        checks._twin_norm = math.inf
        self.assertEqual(self.attributes(checks, [view(1, norm=0.5), view(1, norm=0.5)]), [])

    def test_the_fp16_loss_scale(self):
        cfg = config("fp16")
        cfg["fp16"].update(initial_scale_power=4, hysteresis=1)
        checks, _ = self.checks("master", cfg)
        self.assertEqual(self.attributes(checks, [view(1, scale=8.0), view(1, scale=8.0)]), [])
        checks, _ = self.checks("master", cfg)
        self.assertEqual(self.attributes(checks, [view(1, scale=16.0), view(1, scale=8.0)]),
                         ["loss scale"])

    def test_a_load_restores_the_count(self):
        checks, tally = self.checks()
        checks.loaded()
        self.assertEqual(self.attributes(checks, [view(0), view(0)]), [])  # not 1: the baseline
        self.assertIn("restored by a load", next(iter(tally.not_checked["I11"])))
        checks.backward(True, {}, {}, None)
        checks._window = [("loss", math.nan, "")]
        checks.step()
        self.assertEqual(self.attributes(checks, [view(1), view(1)]), [])

    def test_no_view_is_not_checked(self):
        checks, tally = self.checks()
        self.assertEqual(self.attributes(checks, [{"unavailable": "x"}, view(1)]), [])
        self.assertIn("cannot be read", next(iter(tally.not_checked["I11"])))


if __name__ == "__main__":
    unittest.main()
