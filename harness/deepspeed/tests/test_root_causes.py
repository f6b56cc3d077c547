"""The keys of I4 and I9 root causes (findings/root_causes.py): the rule or field, and the upstream
function that last wrote it (numerics.py reads it from the audit of provenance.py), by hand.

The planted DeepSpeed faults of harness/tests/upstream_faults_test.py show the same on the real
engine: a rank whose persistent parameters were not gathered after a step is not the Gloo
all_gather race's row, and a release that keeps the gathered data is not one that put the data back.
"""

import unittest
from dataclasses import asdict

import torch

from zerocheck_ds.findings import root_causes
from zerocheck_ds.oracles import checkpoints

GATHER = "deepspeed/runtime/zero/partition_parameters.py _allgather_params_coalesced()"
FETCH = "deepspeed/runtime/zero/partition_parameters.py wait()"


def i9(writers, field="whole_copy", op="step"):
    origin = None if writers is None else {"action": "last written", "writers": writers}
    return {"invariant": "I9", "op": op, "attribute": field, "origin": origin,
            "signature": f"I9 {op}: ranks disagree on {field}"}


def i4(writer, rule="released but holding data", op="backward"):
    origin = None if writer is None else {"action": "left", "attribute": "data", "writer": writer}
    return {"invariant": "I4", "op": op, "attribute": rule, "origin": origin,
            "signature": f"I4 {op}: {rule} on Linear parameter"}


class I9Keys(unittest.TestCase):
    def test_the_field_and_the_function_every_rank_names(self):
        self.assertEqual(root_causes.cause_title(i9([GATHER, GATHER])),
                         f"I9 step: whole_copy, last written by {GATHER}")

    def test_ranks_whose_values_came_other_ways_are_another_cause_whichever_rank(self):
        one = root_causes.cause_title(i9([GATHER, FETCH]))
        self.assertEqual(one, root_causes.cause_title(i9([FETCH, GATHER])))
        self.assertEqual(one, f"I9 step: whole_copy, last written by {GATHER} on some ranks and "
                              f"{FETCH} on others")
        self.assertNotEqual(one, root_causes.cause_title(i9([GATHER, GATHER])))
        self.assertIn("no upstream code", root_causes.cause_title(i9([GATHER, None])))

    def test_without_a_writer_the_field_alone(self):
        self.assertEqual(root_causes.cause_title(i9(None)), "I9 step: whole_copy")
        self.assertEqual(root_causes.cause_title(i9([None, None])), "I9 step: whole_copy")

    def test_the_gloo_race_rows_hold_the_keys_the_race_gives(self):
        table = root_causes.known_upstream()
        for op in ("step", "save"):
            self.assertIn(root_causes.cause_title(i9([GATHER, GATHER], op=op)), table)
        self.assertNotIn("I9 step: whole_copy", table)


class I6LoadKeys(unittest.TestCase):
    """A load's I6 findings: the wrong state they equal is the cause, unless the shard is not what
    the load wrote into the gathered copy (the Gloo race at a load): then the gather is, whatever
    value the late copy left."""
    saved = {("0.w", "value"): torch.tensor([1.0, 2.0]), ("0.v", "value"): torch.tensor([1.0])}
    other = {("0.w", "value"): torch.tensor([3.0, 4.0]), ("0.v", "value"): torch.tensor([3.0])}
    before = {("0.w", "value"): torch.tensor([5.0, 6.0]), ("0.v", "value"): torch.tensor([5.0])}

    def keys(self, actual, late=()):
        found = checkpoints.compare(4, "load", self.saved, actual,
                                    [("t2", "another save's value", self.other),
                                     ("before", "the value before the load", self.before)])
        found = checkpoints.published_late(found, list(late))
        return {f.param: root_causes.cause_title(dict(asdict(f), signature="s")) for f in found}

    def test_a_wrong_save_loaded_is_named_by_that_save(self):
        keys = self.keys(self.other)
        self.assertEqual(set(keys.values()), {"I6 load: restores another save's value"})

    def test_a_shard_the_gather_changed_is_the_gathers_whatever_value_it_holds(self):
        mixed = {("0.w", "value"): torch.tensor([3.0, 6.0]), ("0.v", "value"): torch.tensor([3.0])}
        keys = self.keys(mixed, late=["0.w"])
        race = ("I6 load: the shard is not what the load wrote into the gathered copy: "
                "deepspeed/runtime/zero/partition_parameters.py GatheredParameters.__enter__()")
        self.assertEqual(keys, {"w": race, "v": "I6 load: restores another save's value"})
        self.assertEqual(self.keys(self.before, late=["0.w", "0.v"]), {"w": race, "v": race})
        self.assertIn(race, root_causes.known_upstream())


class I4Keys(unittest.TestCase):
    def test_the_rule_and_who_last_wrote_the_storage(self):
        kept = root_causes.cause_title(i4("deepspeed/runtime/zero/parameter_offload.py "
                                          "post_sub_module_backward_function()"))
        gathered = root_causes.cause_title(i4(FETCH))
        self.assertEqual(gathered, f"I4 backward: released but holding data, its data last "
                                   f"written by {FETCH}")
        self.assertNotEqual(kept, gathered)
        self.assertEqual(root_causes.cause_title(i4(None)), "I4 backward: released but holding data")


class AfterARelease(unittest.TestCase):
    """The user's forward that fails on what a release left is the release's cause, whatever
    torch says for each layer; without the release's I4 finding it keeps a key of its own."""

    FREE = "deepspeed/runtime/zero/partition_parameters.py free_param()"

    def failed_forward(self, op_index, message):
        return {"invariant": "op", "op": "forward", "op_index": op_index, "origin": None,
                "after": {"action": "release", "op_index": 2, "params": ["0.weight"], "why": "..."},
                "signature": f"op forward: RuntimeError: {message}"}

    def test_failures_after_the_release_join_its_i4_cause(self):
        release = dict(i4(self.FREE, rule="given back whole", op="release"), op_index=2)
        verdict = {"findings": [release, self.failed_forward(4, "mat2 must be a matrix"),
                                self.failed_forward(6, "size mismatch")]}
        titles = [t for t, _ in root_causes.scenario_causes(verdict)]
        self.assertEqual(set(titles), {f"I4 release: given back whole, its data last written by "
                                       f"{self.FREE}"})
        self.assertIn(titles[0], root_causes.known_upstream())

    def test_i5_s_forward_after_the_release_joins_its_i4_cause_too(self):
        release = dict(i4(self.FREE, rule="given back whole", op="release"), op_index=2)
        probe = dict(self.failed_forward(5, "mat2 must be a matrix"), invariant="I5",
                     op="initialize", signature="I5 initialize: not true that training still runs "
                     "after a rejected initialize: RuntimeError: mat2 must be a matrix, got N-D "
                     "tensor")
        titles = [t for t, _ in root_causes.scenario_causes({"findings": [release, probe]})]
        self.assertEqual(titles[1], titles[0])

    def test_after_an_initialize_that_raised_its_cause(self):
        raised = {"invariant": "op", "op": "initialize", "op_index": 0, "signature": "op initialize",
                  "origin": {"action": "raised", "file": "deepspeed/runtime/zero/parameter_offload.py",
                             "function": "_register_hooks_recursively", "line": 265}}
        forward = dict(self.failed_forward(1, "size mismatch"),
                       after={"action": "failed initialize", "op_index": 0, "params": ["w"],
                              "why": "..."})
        titles = [t for t, _ in root_causes.scenario_causes({"findings": [raised, forward]})]
        self.assertEqual(titles, ["op: raised in deepspeed/runtime/zero/parameter_offload.py "
                                  "_register_hooks_recursively()"] * 2)
        alone = {t for t, _ in root_causes.scenario_causes({"findings": [forward]})}
        self.assertEqual(alone, {"op forward: after an initialize that raised and left the model's "
                                 "parameters without their data"})

    def test_without_the_release_finding_one_key_of_its_own(self):
        verdict = {"findings": [self.failed_forward(4, "mat2 must be a matrix"),
                                self.failed_forward(6, "size mismatch")]}
        titles = {t for t, _ in root_causes.scenario_causes(verdict)}
        self.assertEqual(titles, {"op forward: after a release that left the model's parameters "
                                  "without their data"})


class AfterASaveThatRaised(unittest.TestCase):
    """A load of a save that raised, and a consolidation that raised on what it left, are the
    save's cause (replay/checkpoints.py marks them); without the save's finding, a key of its own
    that no row holds; a finding without the mark keeps its own key."""

    SAVE = "deepspeed/runtime/zero/parameter_offload.py get_param_coordinator()"
    AFTER = {"action": "failed save", "op_index": 1, "exception": "TypeError: 'int' object is not "
             "subscriptable", "why": "..."}

    def save(self):
        return {"invariant": "op", "op": "save", "op_index": 1, "signature": "op save: TypeError",
                "origin": {"action": "raised", "file": self.SAVE.split()[0],
                           "function": "get_param_coordinator", "line": 171}}

    def load(self, after=AFTER):
        return {"invariant": "op", "op": "load", "op_index": 2, "origin": None, "after": after,
                "signature": "op load: FileNotFoundError: load_checkpoint('PATH', tag=None) found "
                             "no checkpoint (it returned None)"}

    def consolidation(self, what, after=AFTER):
        return {"invariant": "I6", "op": "save", "op_index": 1, "attribute": what, "origin": None,
                "after": after, "signature": f"I6 save: {what}: TypeError"}

    def test_the_load_and_the_consolidations_join_the_save(self):
        verdict = {"findings": [self.save(), self.consolidation("the engine's 16-bit consolidated "
                                                                "state dict"),
                                self.consolidation("zero_to_fp32's reader"), self.load()]}
        titles = {t for t, _ in root_causes.scenario_causes(verdict)}
        self.assertEqual(titles, {f"op: raised in {self.SAVE}"})

    def test_without_the_save_finding_one_key_of_its_own(self):
        verdict = {"findings": [self.load()]}
        titles = {t for t, _ in root_causes.scenario_causes(verdict)}
        self.assertEqual(titles, {"op load: after a save that raised"})
        self.assertNotIn("op load: after a save that raised", root_causes.known_upstream())

    def test_without_the_mark_its_own_key(self):
        verdict = {"findings": [self.save(), self.load(after=None),
                                self.consolidation("zero_to_fp32's reader", after=None)]}
        titles = [t for t, _ in root_causes.scenario_causes(verdict)]
        self.assertEqual(titles[1:], [self.load()["signature"], "I6 save: zero_to_fp32's reader"])


if __name__ == "__main__":
    unittest.main()


class I6ConsolidationKeys(unittest.TestCase):
    """A consolidated state dict's findings are keyed by what is wrong in it: a module missing
    (the tied-module row) and a value taken from the fp32 master without a gathered edit are two
    causes (oracles/checkpoints.py compare_state_dict)."""

    def keys(self, expected, actual):
        findings = checkpoints.compare_state_dict(
            5, "save", "zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint", expected, actual)
        return {root_causes.cause_title(asdict(f)) for f in findings}

    def test_a_key_missing_and_a_value_that_differs_are_two_causes(self):
        expected = {"0.weight": torch.ones(2), "1.weight": torch.ones(2)}
        missing = self.keys(expected, {"0.weight": torch.ones(2)})
        differs = self.keys(expected, {"0.weight": torch.ones(2), "1.weight": -torch.ones(2)})
        self.assertEqual(missing, {"I6 save: zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint: "
                                   "a key of the model's state dict is missing"})
        self.assertEqual(differs, {"I6 save: zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint: "
                                   "a value differs from the dense twin's"})
        self.assertIn(next(iter(missing)), root_causes.known_upstream())  # the tied module's row
        edited = {root_causes.cause_title(asdict(f)) for f in checkpoints.compare_state_dict(
            5, "save", "zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint", expected,
            {"0.weight": torch.ones(2), "1.weight": -torch.ones(2)}, after_gathered_edit=True)}
        self.assertEqual(edited, {next(iter(differs)) + " after a gathered edit"})

    def test_a_value_of_a_parameter_i3_found_off_the_twin_before_is_i3s_cause(self):
        expected = {"0.weight": torch.ones(2), "1.weight": torch.ones(2)}
        differs = [asdict(f) for f in checkpoints.compare_state_dict(
            5, "save", "zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint", expected,
            {"0.weight": -torch.ones(2), "1.weight": -torch.ones(2)})]
        located = {"action": "located", "op": "step", "quantity": "the gradient handed to the "
                   "optimizer", "file": "deepspeed/runtime/zero/stage3.py",
                   "function": "_prepare_sub_group", "got_gradient": False}
        stale = {"invariant": "I3", "op": "step", "op_index": 3, "module_path": "1",
                 "param": "weight", "attribute": "value", "origin": located,
                 "signature": "I3 step: value differs from the dense twin on Linear parameter"}
        titles = dict((f["module_path"], t) for t, f in
                      root_causes.scenario_causes({"findings": [stale] + differs})[1:])
        self.assertEqual(titles["1"], root_causes.cause_title(stale))  # off the twin since op 3
        self.assertEqual(titles["0"], "I6 save: zero_to_fp32's get_fp32_state_dict_from_zero_"
                                      "checkpoint: a value differs from the dense twin's")
        later = dict(stale, op_index=7)  # I3 after the save: the consolidation's own cause
        self.assertEqual({t for t, _ in root_causes.scenario_causes(
            {"findings": [later] + differs})[1:]}, {titles["0"]})
