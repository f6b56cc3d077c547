"""The life-cycle operations in-process on the pass-through engine: an initialize with an invalid
config is refused and changes nothing, a gather's published edit is followed by the twin; engines
that break either are caught (I5, I3)."""

import os
import unittest

import torch

from zerocheck_ds.engines.adapters import PassThroughAdapter
from zerocheck_ds.world.exchange import Exchange
from zerocheck_ds.replay.replay import Replay
from zerocheck_ds.scenario.scenario import load_scenario

SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tests",
                         "scenarios", "upstream_lifecycle")


class AcceptsAnyConfig(PassThroughAdapter):
    def initialize(self, model, optimizer, config):
        config = dict(config, train_micro_batch_size_per_gpu=1, zero_optimization={"stage": 3})
        config.pop("train_batch_size", None)
        return super().initialize(model, optimizer, config)


class LeavesAHookWhenRefused(PassThroughAdapter):
    def initialize(self, model, optimizer, config):
        model.register_forward_pre_hook(lambda module, inputs: None)
        return super().initialize(model, optimizer, config)


class DropsTheEdit(PassThroughAdapter):
    """A gather whose edit never reaches the parameters (DeepSpeed's undone edit, at once)."""

    def gather(self, engine, module, modifier_rank, scale):
        pass


def replay(name, adapter):
    scenario = load_scenario(os.path.join(SCENARIOS, f"{name}.json"))
    scenario.world_size = 1  # one rank here: the twin follows
    return Replay(scenario, adapter, exchange=Exchange(0, 1)).run()


def found(result, invariant):
    return [f.message for f in result.findings if f.invariant == invariant]


class InvalidConfig(unittest.TestCase):
    NAMES = ("train_batch_size", "zero_stage", "micro_batch", "offload_optimizer")

    def test_refused_and_nothing_changed(self):
        for name in self.NAMES:
            with self.subTest(name):
                result = replay(f"config_error_{name}", PassThroughAdapter())
                self.assertEqual([f.one_line() for f in result.findings], [])
                self.assertFalse(result.checks["I3"]["not_checked"])

    def test_an_accepted_invalid_config_is_caught(self):
        for name in self.NAMES:
            with self.subTest(name):
                self.assertTrue(any("was accepted" in m for m in
                                    found(replay(f"config_error_{name}", AcceptsAnyConfig()), "I5")))

    def test_a_hook_left_behind_is_caught(self):
        messages = found(replay("config_error_zero_stage", LeavesAHookWhenRefused()), "I5")
        self.assertTrue(any("_forward_pre_hooks" in m for m in messages), messages)


class Gather(unittest.TestCase):
    def test_the_twin_follows_a_published_edit(self):
        for name in ("gather_modifier_rank_0", "gather_no_modifier_rank"):  # rank 0 of one
            with self.subTest(name):
                result = replay(name, PassThroughAdapter())
                self.assertEqual([f.one_line() for f in result.findings], [])

    def test_a_dropped_edit_is_caught_right_after_the_gather(self):
        result = replay("gather_modifier_rank_0", DropsTheEdit())
        first = [f for f in result.findings if f.invariant == "I3"][0]
        self.assertEqual((first.op, first.attribute), ("gather", "whole copy after a gathered edit"))

    def test_without_a_modifier_rank_nothing_is_kept(self):
        self.assertEqual(found(replay("gather_no_modifier_rank", DropsTheEdit()), "I3"), [])


if __name__ == "__main__":
    unittest.main()
