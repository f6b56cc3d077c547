"""The life-cycle operations in-process on the pass-through engine: an initialize with an invalid
config is refused and changes nothing, a gather's published edit is followed by the twin; engines
that break either are caught (I5, I3)."""

import dataclasses
import json
import os
import tempfile
import unittest

import torch

from zerocheck_ds.engines.adapters import PassThroughAdapter
from zerocheck_ds.oracles import inside
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


class ReadsTheGatheredCopy(PassThroughAdapter):
    """Hands I3 the copy a gather's modifier rank edits, as DeepSpeed's adapter does; `late`:
    the copy is handed over before its data arrived (zeros), and the data lands `after` the edit
    (the edit is lost) or before it (the values end right). `skip_steps_after`: the optimizer
    steps no more after the gather (a later bug of its own)."""

    def __init__(self, late=False, after=True, skip_steps_after=False):
        super().__init__()
        self.late, self.after, self.skip_steps_after = late, after, skip_steps_after
        self._observed, self._gathered = inside.Observed(), False

    def inside(self, engine):
        observed, self._observed = self._observed, inside.Observed()
        return observed

    def gather(self, engine, module, modifier_rank, scale):
        prefix = next(n for n, m in engine.module.named_modules() if m is module)
        named = [(f"{prefix}.{n}" if prefix else n, p) for n, p in module.named_parameters()]
        with torch.no_grad():
            for name, p in named:
                self._observed.add("gathered_copy", name, torch.zeros_like(p) if self.late else p)
                if not (self.late and self.after):
                    p.mul_(scale)
                self._observed.add("edited_copy", name, p)
        self._gathered = True

    def step(self, engine):
        if not (self.skip_steps_after and self._gathered):
            super().step(engine)


class PartitionsThenRaises(PassThroughAdapter):
    """An initialize that takes the parameters' data away and then raises, as DeepSpeed's does
    when it fails after partitioning the model (a user attribute it cannot take, say)."""

    def initialize(self, model, optimizer, config):
        super().initialize(model, optimizer, config)  # an invalid config is refused untouched
        for p in model.parameters():
            p.data = torch.empty(0)
        raise RuntimeError("planted: failed after partitioning")


class ReleaseLeavesThePartitions(PassThroughAdapter):
    """A release that leaves the parameters without their data, as DeepSpeed's destroy() does."""

    def release(self, engine):
        super().release(engine)
        for p in engine.module.parameters():
            p.data = torch.empty(0)


def replay(name, adapter, ops=None):
    scenario = load_scenario(os.path.join(SCENARIOS, f"{name}.json"))
    scenario.world_size = 1  # one rank here: the twin follows
    if ops is not None:
        scenario.ops = [dataclasses.replace(scenario.ops[i], **change) for i, change in ops]
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

    def first_i3(self, adapter):
        return [f for f in replay("gather_modifier_rank_0", adapter).findings
                if f.invariant == "I3"][0]

    def test_a_copy_handed_over_before_its_data_is_located_at_the_gather(self):
        first = self.first_i3(ReadsTheGatheredCopy(late=True))
        self.assertEqual((first.op, first.attribute), ("gather", "whole copy after a gathered edit"))
        self.assertEqual((first.origin["quantity"], first.origin["function"],
                          first.origin["after_gathered_edit"]),
                         ("the gathered copy the edit was made on", inside.GATHER_FUNCTION, False))

    def test_a_late_copy_that_left_the_values_right_is_no_later_finding_s_cause(self):
        self.assertEqual(found(replay("gather_modifier_rank_0", ReadsTheGatheredCopy(
            late=True, after=False)), "I3"), [])
        first = self.first_i3(ReadsTheGatheredCopy(late=True, after=False, skip_steps_after=True))
        self.assertEqual(first.op, "step")
        self.assertNotEqual((first.origin or {}).get("function"), inside.GATHER_FUNCTION)

    def test_without_a_modifier_rank_nothing_is_kept(self):
        self.assertEqual(found(replay("gather_no_modifier_rank", DropsTheEdit()), "I3"), [])



class LeftWithoutData(unittest.TestCase):
    """The user's forward that fails on what an earlier operation left without data names it
    (its `after`, which root_causes.py joins to that operation's cause): an initialize that
    raised after partitioning, a release that left the partitions (an operation's forward and
    I5's after an invalid config alike)."""

    def test_a_forward_after_an_initialize_that_raised_names_it(self):
        # config_error_micro_batch op 2 is a plain initialize, op 3 a forward
        result = replay("config_error_micro_batch", PartitionsThenRaises())
        forward = [f for f in result.findings if f.invariant == "op" and f.op == "forward"]
        self.assertTrue(forward, [f.one_line() for f in result.findings])
        self.assertEqual(forward[0].after["action"], "failed initialize")
        self.assertEqual(forward[0].after["op_index"], 2)

    def test_i5_s_forward_after_a_release_names_it(self):
        # ops: a plain initialize, its release, then initialize with the invalid config
        result = replay("config_error_micro_batch", ReleaseLeavesThePartitions(),
                        ops=[(2, {}), (2, {"op": "release"}), (11, {})])
        probe = [f for f in result.findings if f.invariant == "I5"]
        self.assertTrue(probe, [f.one_line() for f in result.findings])
        self.assertEqual(probe[0].after["action"], "release")
        self.assertEqual(probe[0].after["op_index"], 1)



class NeedsABackwardToStep(PassThroughAdapter):
    step_needs_backward = True  # as DeepSpeed's adapter declares


class StepAfterABackwardOfNoEngine(unittest.TestCase):
    """A backward of the user's model before any initialize is not one the new engine's step
    can use: the step is skipped, as DeepSpeed's needs (its KeyError otherwise)."""

    def test_the_step_of_a_new_engine_needs_its_own_backward(self):
        # forward, backward and step with no engine, then initialize and step
        result = replay("config_error_micro_batch", NeedsABackwardToStep(),
                        ops=[(1, {}), (4, {}), (5, {}), (2, {}), (5, {})])
        skipped = {(s["op_index"], s["reason"]) for s in result.skipped}
        self.assertIn((2, "no engine"), skipped)
        self.assertIn((4, "no backward since the last step: passthrough's step needs one"),
                      skipped)



class _ReadRaises(dict):
    """A module's `_parameters` whose reads raise once `armed`, as ZeRO-3's ZeROOrderedDict does
    when a forward that raised left `_in_forward` set (it gathers and registers the parameter)."""

    armed = False

    def __getitem__(self, key):
        if _ReadRaises.armed:
            raise TypeError("'int' object does not support item assignment")
        return super().__getitem__(key)


class ForwardLeavesReadsRaising(PassThroughAdapter):
    """Its forward arms the parameter reads and raises; this file is its upstream code."""

    def upstream_package(self):
        return os.path.abspath(__file__)

    def initialize(self, model, optimizer, config):
        _ReadRaises.armed = False
        for module in model.modules():
            module._parameters = _ReadRaises(module._parameters)
        return super().initialize(model, optimizer, config)

    def forward(self, engine, x, route):
        _ReadRaises.armed = True
        raise RuntimeError("planted: the forward failed")

    def release(self, engine):
        _ReadRaises.armed = False
        super().release(engine)


class AParameterWhoseReadRaises(unittest.TestCase):
    """I1 on a parameter that an engine's code fails to read is not 'the object is gone': the
    finding names the read's error and the upstream code that raised it (its root cause)."""

    def test_the_read_s_raiser_is_named(self):
        with open(os.path.join(SCENARIOS, "config_error_micro_batch.json"), encoding="utf-8") as f:
            data = json.load(f)
        data["tree"][1]["param_attrs"] = {"weight": [{"name": "tag", "value": 1}]}
        data["ops"] = [{"op": "initialize", "optimizer": "same", "target": ""},
                       {"op": "forward", "route": []}]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "read_raises.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f)
            scenario = load_scenario(path)
        scenario.world_size = 1
        try:
            result = Replay(scenario, ForwardLeavesReadsRaising(), exchange=Exchange(0, 1)).run()
        finally:
            _ReadRaises.armed = False
        found = [f for f in result.findings if f.invariant == "I1" and f.param == "weight"]
        self.assertTrue(found, [f.one_line() for f in result.findings])
        self.assertIn("raised TypeError", found[0].exception)
        self.assertNotIn("the object is gone", found[0].exception)
        self.assertEqual((found[0].origin or {}).get("function"), "__getitem__")


if __name__ == "__main__":
    unittest.main()
