"""A load with a world_size (reshard.py): the saving world hands the checkpoint and its saved
state over only with --reshard; the second world loads the universal form, and I6 and training
on (I3, against the twin resumed from its own save) hold on the pass-through engine; a universal
load that cuts a slice at the wrong place, or leaves the optimizer fresh, is caught there; what
cannot be checked is counted with its reason; and the supervised suite runs the second world on
a pool of its own."""

import json
import os
import sys
import tempfile
import unittest

import torch

from zerocheck_ds.replay import reshard
from zerocheck_ds.engines.adapters import PassThroughAdapter, UniversalUnsupported
from zerocheck_ds.world.exchange import Exchange
from zerocheck_ds.replay.replay import Replay
from zerocheck_ds.scenario.scenario import load_scenario

from . import support

SCENARIOS = os.path.join(support.PACKAGE_ROOT, os.pardir, "tests", "scenarios", "upstream_reshard")
HOLDS = os.path.join(SCENARIOS, "adam_load_t1_world3.json")
WITHOUT_OPTIMIZER = os.path.join(SCENARIOS, "adam_load_without_optimizer_states_world3.json")


class SliceAtTheWrongOffset(PassThroughAdapter):
    """A universal load that shifts every parameter's values by one element (a slice cut one
    element off where it belongs)."""

    def load_universal(self, engine, directory, tag):
        super().load_universal(engine, directory, tag)
        with torch.no_grad():
            for p in engine.module.parameters():
                p.copy_(p.reshape(-1).roll(1).reshape(p.shape))


class OptimizerLeftFresh(PassThroughAdapter):
    """A universal load that restores the module only."""

    def load_universal(self, engine, directory, tag):
        state = torch.load(os.path.join(directory, tag, "universal.pt"))
        engine.module.load_state_dict(state["module"])


def save_and_hand_over(folder, path=HOLDS, reshard_on=True):
    """The saving world (one rank here) of `path`; returns its ReplayResult."""
    scenario = load_scenario(path)
    scenario.world_size = 1
    return Replay(scenario, PassThroughAdapter(), exchange=Exchange(0, 1), checkpoint_dir=folder,
                  reshard=reshard_on).run()


def resume(request, adapter, path=HOLDS, stage=None):
    return reshard.Resume(load_scenario(path), adapter, 0, 1, Exchange(0, 1), request,
                          stage_override=stage).run()


class HandOver(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.folder = self._tmp.name

    def test_with_reshard_the_load_hands_over_the_tag_it_loads(self):
        result = save_and_hand_over(self.folder)
        self.assertEqual(result.findings, [])
        [request] = result.reshard
        self.assertEqual((request["op_index"], request["world_size"], request["target"]),
                         (19, 3, ""))
        staged = torch.load(os.path.join(request["folder"], reshard.SNAPSHOT))
        self.assertEqual(staged["tag"], "t1")  # the load's tag, not the latest save's (t2)
        self.assertTrue(os.path.isfile(os.path.join(request["folder"], "saved", "t1", "rank_0.pt")))
        self.assertIn(("0.weight", "exp_avg"), staged["state"])

    def test_without_reshard_it_is_not_checked_and_counted(self):
        result = save_and_hand_over(self.folder, reshard_on=False)
        self.assertEqual(result.reshard, [])
        reasons = result.checks["I6"]["not_checked"]
        self.assertEqual(list(reasons), ["a load into a world of 3: resharding is checked on "
                                         "demand (--reshard), not in every scenario"])

    def test_a_load_without_optimizer_states_is_not_handed_over(self):
        result = save_and_hand_over(self.folder, WITHOUT_OPTIMIZER)
        self.assertEqual(result.reshard, [])
        self.assertIn("a load into a world of 3: a load without the optimizer's state: a fresh "
                      "optimizer has none to keep", result.checks["I6"]["not_checked"])


class SecondWorld(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        [self.request] = save_and_hand_over(self._tmp.name).reshard

    def test_the_pass_through_engine_loads_what_was_saved(self):
        result = resume(self.request, PassThroughAdapter())
        self.assertEqual(result.findings, [])
        self.assertEqual(result.checks["I6"], {"checked": 1, "not_checked": {}})
        # Training on after the load (4 operations) equals the twin resumed from its own save.
        self.assertEqual(result.checks["I3"]["not_checked"], {})
        self.assertGreaterEqual(result.checks["I3"]["checked"], 7)

    def test_a_slice_at_the_wrong_offset_is_caught_by_i6(self):
        result = resume(self.request, SliceAtTheWrongOffset())
        fields = {(f.invariant, f.op, f.attribute) for f in result.findings}
        self.assertIn(("I6", reshard.OP, "value"), fields)
        self.assertTrue(all(f.message.startswith("in a world of 1 ranks: after op 19 (load into "
                                                 "another world)")
                            for f in result.findings if f.invariant == "I6"),
                        [f.message for f in result.findings])
        # The twin resumed from the right values: the loaded ones differ from it too (I3).
        self.assertIn(("I3", 19), {(f.invariant, f.op_index) for f in result.findings})

    def test_an_optimizer_left_fresh_is_caught_by_i6(self):
        result = resume(self.request, OptimizerLeftFresh())
        fields = {f.attribute for f in result.findings if f.invariant == "I6"}
        self.assertTrue({"exp_avg", "exp_avg_sq", "step"} <= fields, fields)
        # ... and the next step by I3, named after the saving scenario's operation.
        self.assertIn(("I3", 22, "step after a load into another world"),
                      {(f.invariant, f.op_index, f.op) for f in result.findings})

    def test_an_engine_without_a_universal_form_is_not_checked(self):
        class NoUniversal(PassThroughAdapter):
            def universal(self, source, tag, destination):
                raise UniversalUnsupported("no converter here")
        result = resume(self.request, NoUniversal())
        self.assertEqual(result.findings, [])
        self.assertEqual(result.checks["I6"]["not_checked"],
                         {"a load into a world of 1: no converter here": 1})

    def test_a_conversion_that_fails_is_a_finding(self):
        class Refuses(PassThroughAdapter):
            def universal(self, source, tag, destination):
                raise RuntimeError("ds_to_universal exited with 1: KeyError: 'exp_avg'")
        [finding] = resume(self.request, Refuses()).findings
        self.assertEqual((finding.invariant, finding.op), ("op", reshard.OP))
        self.assertIn("KeyError: 'exp_avg'", finding.exception)

    def test_stages_1_and_2_are_not_compared(self):
        result = resume(self.request, PassThroughAdapter(), stage=2)
        self.assertEqual(result.findings, [])
        self.assertIn("stage 2", next(iter(result.checks["I6"]["not_checked"])))


class StubDeepSpeed(unittest.TestCase):
    def test_a_deepspeed_without_the_converter_says_so(self):
        sys.path.insert(0, support.STUB_DEEPSPEED)
        self.addCleanup(sys.path.remove, support.STUB_DEEPSPEED)
        self.addCleanup(sys.modules.pop, "deepspeed", None)
        from zerocheck_ds.engines.deepspeed_adapter import DeepSpeedAdapter
        adapter = DeepSpeedAdapter()
        with self.assertRaisesRegex(UniversalUnsupported, "no deepspeed.checkpoint.ds_to_universal"):
            adapter.universal("in", "t1", "out")
        config = {"zero_optimization": {"stage": 3}}
        self.assertEqual(adapter.universal_config(config)["checkpoint"], {"load_universal": True})
        self.assertNotIn("checkpoint", config)


class Supervised(unittest.TestCase):
    def test_the_suite_resumes_on_a_pool_of_the_load_s_world_size(self):
        with tempfile.TemporaryDirectory() as out:
            run = support.run_cli(["suite", "--scenarios", HOLDS, WITHOUT_OPTIMIZER, "--out", out,
                                   "--world", "2", "--adapter", "passthrough", "--reshard",
                                   "--no-control"], timeout=180)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            with open(os.path.join(out, "verdicts", "adam_load_t1_world3.verdict.json")) as f:
                verdict = json.load(f)
            self.assertEqual([(r["world_size"], r["outcome"]) for r in verdict["reshards"]],
                             [(3, "ok")])
            self.assertEqual(verdict["checks"]["I6"]["not_checked"], {})
            self.assertTrue(os.path.isdir(os.path.join(out, "logs-world3")))
            self.assertFalse(os.path.exists(os.path.join(out, "checkpoints")))


if __name__ == "__main__":
    unittest.main()
