"""I6 in-process: a save and a load round trip on the pass-through engine holds; loads that restore
the wrong thing (the optimizer state left as it was, an older checkpoint, a consolidated state dict
without a tied key) are caught, each by I6; what a load's options must restore."""

import os
import tempfile
import unittest

import torch

from zerocheck_ds.oracles import checkpoints
from zerocheck_ds.engines.adapters import PassThroughAdapter
from zerocheck_ds.world.exchange import Exchange
from zerocheck_ds.replay.replay import Replay
from zerocheck_ds.scenario.scenario import load_scenario

SCENARIOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tests",
                         "scenarios", "upstream_checkpoints")


class OptimizerStateNotLoaded(PassThroughAdapter):
    """A load that restores the module but leaves the optimizer's state as it was."""

    def load(self, engine, directory, tag, optimizer_states=True, module_only=False):
        super().load(engine, directory, tag, optimizer_states=False, module_only=module_only)


class LoadsTheFirstSave(PassThroughAdapter):
    """A load that reads the first checkpoint ever saved, whatever `latest` says."""

    def save(self, engine, directory, tag):
        tag = tag or f"save{len(os.listdir(directory))}"
        super().save(engine, directory, tag)

    def load(self, engine, directory, tag, optimizer_states=True, module_only=False):
        first = sorted(n for n in os.listdir(directory) if n != "latest")[0]
        super().load(engine, directory, first, optimizer_states, module_only)


class ConsolidatesWithoutTiedKeys(PassThroughAdapter):
    """A consolidated state dict that keeps each tied parameter under its first key only."""

    def consolidated(self, engine, directory, tag):
        seen, out = set(), {}
        for key, value in engine.module.state_dict(keep_vars=True).items():
            if id(value) not in seen:
                seen.add(id(value))
                out[key] = value.detach().clone()
        return {"a consolidated state dict": out}


def replay(name, adapter):
    with tempfile.TemporaryDirectory() as folder:
        scenario = load_scenario(os.path.join(SCENARIOS, f"{name}.json"))
        scenario.world_size = 1  # one rank here: the twin follows (I3 after the load too)
        return Replay(scenario, adapter, exchange=Exchange(0, 1), checkpoint_dir=folder).run()


def i6(result):
    return [f for f in result.findings if f.invariant == "I6"]


class RoundTrip(unittest.TestCase):
    def test_pass_through_restores_what_it_saved(self):
        for name in ("adam_save_train_load", "sgd_save_destroy_initialize_load",
                     "adam_two_saves_load_latest", "tied_adam_save_load"):
            with self.subTest(name):
                result = replay(name, PassThroughAdapter())
                self.assertEqual([f.one_line() for f in result.findings], [])
                self.assertGreaterEqual(result.checks["I6"]["checked"], 2)
                self.assertFalse(result.checks["I3"]["not_checked"])

    def test_optimizer_state_left_as_it_was_is_caught(self):
        found = i6(replay("adam_save_train_load", OptimizerStateNotLoaded()))
        self.assertTrue(any(f.attribute == "exp_avg" for f in found), [f.message for f in found])
        self.assertFalse(any(f.attribute == "value" for f in found))

    def test_an_older_checkpoint_is_caught(self):
        found = i6(replay("adam_two_saves_load_latest", LoadsTheFirstSave()))
        self.assertTrue(any(f.attribute == "value" for f in found), [f.message for f in found])

    def test_a_consolidated_state_dict_without_the_tied_keys_is_caught(self):
        found = i6(replay("tied_adam_save_load", ConsolidatesWithoutTiedKeys()))
        self.assertTrue(any(f.module_path == "2" and "missing" in f.actual for f in found),
                        [f.message for f in found])

    def test_without_a_folder_save_and_load_are_skipped(self):
        scenario = load_scenario(os.path.join(SCENARIOS, "adam_save_train_load.json"))
        result = Replay(scenario, PassThroughAdapter(), exchange=Exchange(0, 1)).run()
        self.assertEqual({s["op"] for s in result.skipped if s["op"]}, {"save", "load"})


class WhatALoadRestores(unittest.TestCase):
    saved = {("w", "value"): torch.tensor([1.0]), ("w", "master"): torch.tensor([1.0]),
             ("w", "exp_avg"): torch.tensor([0.5])}
    before = {("w", "value"): torch.tensor([2.0]), ("w", "master"): torch.tensor([2.0]),
              ("w", "exp_avg"): torch.tensor([0.75])}

    def test_everything_with_optimizer_states(self):
        self.assertEqual(checkpoints.expected_after_load(self.saved, self.before), self.saved)

    def test_without_optimizer_states_the_moments_stay(self):
        for options in ({"optimizer_states": False}, {"module_only": True}):
            expected = checkpoints.expected_after_load(self.saved, self.before, **options)
            self.assertEqual(float(expected[("w", "value")]), 1.0)
            self.assertEqual(float(expected[("w", "master")]), 1.0)
            self.assertEqual(float(expected[("w", "exp_avg")]), 0.75)

    def test_compare_names_the_field_and_the_gap(self):
        actual = dict(self.saved)
        actual[("w", "exp_avg")] = torch.tensor([0.25])
        actual[("w", "extra")] = torch.tensor([0.0])
        del actual[("w", "master")]
        found = checkpoints.compare(3, "load", self.saved, actual)
        self.assertEqual(sorted((f.attribute, str(f.actual)[:7]) for f in found),
                         [("exp_avg", "{'diffe"), ("extra", "held th"), ("master", "missing")])
        self.assertTrue(all(f.invariant == "I6" and f.op_index == 3 for f in found))

    def test_nan_matches_nan(self):
        nan = {("w", "value"): torch.tensor([float("nan")])}
        self.assertEqual(checkpoints.compare(0, "load", nan, dict(nan)), [])


if __name__ == "__main__":
    unittest.main()


class SaveRaises(PassThroughAdapter):
    """A save that raises before it writes anything, and what fails after it: the load (as
    DeepSpeed's load_checkpoint finds no checkpoint), the consolidation that reads the checkpoint,
    one of the live state that breaks as the save did, and one that breaks another way."""

    SAVE_ERROR = "planted: the save broke"

    def save(self, engine, directory, tag):
        raise RuntimeError(self.SAVE_ERROR)

    def load(self, engine, directory, tag, optimizer_states=True, module_only=False):
        if not os.path.exists(os.path.join(directory, "latest")):
            raise FileNotFoundError("found no checkpoint")
        super().load(engine, directory, tag, optimizer_states, module_only)

    def consolidated(self, engine, directory, tag):
        out = {}
        for what, make in (("the saved module state dict",
                            lambda: super(SaveRaises, self).consolidated(engine, directory, tag)),
                           ("the live state, broken alike", self._broken_alike),
                           ("the live state, broken otherwise", self._broken_otherwise)):
            try:
                out[what] = make()
            except Exception as e:  # noqa: BLE001 - as the DeepSpeed adapter hands them on
                out[what] = e
        return out

    def _broken_alike(self):
        raise RuntimeError(self.SAVE_ERROR)

    def _broken_otherwise(self):
        raise ValueError("another bug")


class AfterASaveThatRaised(unittest.TestCase):
    """The load of a save that raised and the consolidations that raised on what it left say so
    (their `after`: root_causes.py joins them to the save's cause); another failure does not."""

    def test_the_load_and_the_consolidations_name_the_failed_save(self):
        result = replay("adam_save_train_load", SaveRaises())
        save = next(f for f in result.findings if f.invariant == "op" and f.op == "save")
        after = {(f.invariant, f.op, f.attribute): f.after for f in result.findings}
        self.assertEqual(after[("op", "load", None)]["op_index"], save.op_index)
        self.assertEqual(after[("op", "load", None)]["action"], "failed save")
        for what in ("the saved module state dict", "the live state, broken alike"):
            self.assertEqual(after[("I6", "save", what)]["op_index"], save.op_index, what)
        self.assertIsNone(after[("I6", "save", "the live state, broken otherwise")])
        self.assertIsNone(after[("op", "save", None)])


class ValuesRestoredFromTheMasters(unittest.TestCase):
    """A load whose values are the save's fp32 masters where those differed from the saved values
    (a gathered edit reached the values, never the masters) is named so: a cause of its own,
    not the catch-all 'value' (campaign 11's random-0004 on DeepSpeed v0.14.5)."""

    def test_named_after_the_saved_masters(self):
        saved = {("w", "value"): -torch.ones(2), ("w", "master"): torch.ones(2)}
        others = [("the saved masters", "the save's fp32 master",
                   checkpoints.values_from_masters(saved))]
        found = checkpoints.compare(6, "load", {("w", "value"): -torch.ones(2)},
                                    {("w", "value"): torch.ones(2)}, others)
        self.assertEqual(found[0].actual["same_as"], "the save's fp32 master")

    def test_masters_equal_to_the_values_name_nothing(self):
        saved = {("w", "value"): torch.ones(2), ("w", "master"): torch.ones(2)}
        others = [("the saved masters", "the save's fp32 master",
                   checkpoints.values_from_masters(saved))]
        found = checkpoints.compare(6, "load", {("w", "value"): torch.ones(2)},
                                    {("w", "value"): torch.zeros(2)}, others)
        self.assertNotIn("same_as", found[0].actual)
