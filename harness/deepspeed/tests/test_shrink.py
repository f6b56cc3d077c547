"""The scenario minimiser: synthetic oracles shrink to known minimal scenarios, the oracle only
sees files the strict reader accepts, module paths follow their modules, deadlines hold."""

import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

from . import support
from zerocheck_ds.scenario.scenario import load_scenario
from zerocheck_ds.repro.shrink import _resolve, reductions, shrink, size, validate

FIXTURES = [os.path.join(support.GOOD, n) for n in sorted(os.listdir(support.GOOD))]
FIXTURES.append(os.path.join(support.UPSTREAM, "ds_id_experts.json"))

FAR_AWAY = 1e9  # a deadline no test reaches


def read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_through_file(doc):
    """The reader's own entry point: write the candidate as a file and load it."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "candidate.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        return load_scenario(path)


def big_scenario():
    """A 43-op scenario on 4 ranks: six train-and-write rounds and a final initialize."""
    ops = []
    for i in range(6):
        ops += [
            {"op": "initialize", "optimizer": "same", "target": ""},
            {"op": "forward", "route": [i]},
            {"op": "backward"},
            {"op": "step"},
            {"op": "zero_grad"},
            {"op": "set_attr", "module": "2.experts.1", "param": "", "name": "ds_id",
             "value": i},
            {"op": "release"},
        ]
    ops.append({"op": "initialize", "optimizer": "fresh", "target": "2.experts.1"})
    return {
        "format": "zerocheck-scenario/1", "world_size": 4, "seed": 1, "features": 8,
        "batch": 4, "optimizer": {"kind": "adam", "lr": 0.01},
        "config": {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 8},
        "placement": {"kind": "map", "owners": {"2.experts.0": 3, "2.experts.1": 1}},
        "tree": [
            {"kind": "Sequential", "children": [1, 2, 3, 6]},
            {"kind": "Linear", "attrs": [{"name": "id", "value": 0}]},
            {"kind": "LayerNorm", "param_attrs": {"weight": [{"name": "ds_id", "value": 1}]}},
            {"kind": "MoE", "children": [4, 5]},
            {"kind": "Expert", "attrs": [{"name": "ds_id", "value": 0}]},
            {"kind": "Expert", "attrs": [{"name": "marker", "value": "x"},
                                         {"name": "ds_id", "value": 1}]},
            {"kind": "Offset", "shape": [2, 3]},
        ],
        "ops": ops,
    }


def has_marker_and_initialize(doc):
    marked = any(e["name"] == "marker" for n in doc["tree"] for e in n.get("attrs", []))
    return marked and any(op["op"] == "initialize" for op in doc["ops"])


def has_empty_offset(doc):
    def numel(shape):
        result = 1
        for d in shape:
            result *= d
        return result
    return any(n["kind"] == "Offset" and numel(n.get("shape", [])) == 0 for n in doc["tree"])


class RecordingOracle:
    """Wraps a predicate; checks every candidate with the reader and counts the calls."""

    def __init__(self, test, predicate):
        self.test, self.predicate, self.calls = test, predicate, 0

    def __call__(self, candidate):
        self.calls += 1
        load_through_file(candidate)  # raises ScenarioError on an invalid candidate
        return self.predicate(candidate)


class Reductions(unittest.TestCase):
    def test_every_candidate_of_every_fixture_is_valid_and_new(self):
        for path in FIXTURES:
            doc = read(path)
            original = copy.deepcopy(doc)
            with self.subTest(os.path.basename(path)):
                count = 0
                for description, candidate in reductions(doc):
                    count += 1
                    load_through_file(candidate)
                    self.assertNotEqual(candidate, doc, description)
                    self.assertEqual(candidate["format"], doc["format"])
                    after, before = size(candidate), size(doc)
                    for key in after:
                        self.assertLessEqual(after[key], before[key], description)
                self.assertGreater(count, 10)
                self.assertEqual(doc, original, "reductions must not modify their input")

    def test_order_is_world_size_ops_subtrees_attributes_simplifications(self):
        descriptions = [d for d, _ in reductions(read(support.good("experts_attr_mod")))]
        kinds = []
        for d in descriptions:
            kind = ("world" if d.startswith("world_size") else
                    "ops" if d.startswith("remove ops") else
                    "tree" if "child" in d or "unreachable" in d else
                    "attrs" if "attrs" in d or "unfreeze" in d or "owners" in d
                    or "every user attribute" in d else "simplify")
            if not kinds or kinds[-1] != kind:
                kinds.append(kind)
        self.assertEqual(kinds, ["world", "ops", "tree", "attrs", "simplify"])
        self.assertEqual(descriptions[0], "world_size 2 -> 1")
        self.assertEqual(descriptions[1], "remove ops[0:10]")  # 20 ops: halves first

    def test_world_size_drops_a_stale_train_batch_size_and_clips_map_ranks(self):
        doc = big_scenario()
        description, candidate = next(reductions(doc))
        self.assertEqual(description, "world_size 4 -> 1")
        self.assertEqual(candidate["world_size"], 1)
        self.assertNotIn("train_batch_size", candidate["config"])
        self.assertEqual(candidate["placement"]["owners"], {"2.experts.0": 0, "2.experts.1": 0})

    def test_a_set_attr_follows_its_module_when_an_earlier_sibling_goes(self):
        doc = read(support.good("experts_attr_mod"))
        # ops[9] writes "1.experts.2": node 5, the expert whose id is 2.
        self.assertEqual(doc["ops"][9]["module"], "1.experts.2")
        candidate = self.candidate(doc, "remove child 0 (node 3, Expert) of tree[2] MoE")
        set_attrs = [op for op in candidate["ops"] if op["op"] == "set_attr"]
        self.assertEqual([op["module"] for op in set_attrs], ["1.experts.1"])
        _, node, suffix = _resolve(candidate["tree"], 0, "1.experts.1")
        self.assertEqual((candidate["tree"][node]["attrs"], suffix),
                         ([{"name": "id", "value": 2}], ""))
        # The initialize of the removed expert 0 goes with it; nodes are renumbered compactly.
        self.assertNotIn("1.experts.0", [op.get("target") for op in doc["ops"][14:]])
        self.assertEqual(len(candidate["tree"]), 7)
        self.assertEqual(candidate["tree"][2]["children"], [3, 4, 5])

    def test_a_path_that_named_nothing_keeps_naming_nothing(self):
        doc = read(support.good("tied_frozen_values"))  # set_attr on "9": a skipped write
        candidate = self.candidate(doc, "remove child 1 (node 2, Offset) of tree[0] Sequential")
        modules = [op["module"] for op in candidate["ops"] if op["op"] == "set_attr"]
        # Root children [1, 2, 1, 3, 4] become [1, 1, 3, 4]: "2" (the tied Linear's second
        # place) is now "1", "4" (Tanh) is now "3", and "9" still names nothing.
        self.assertEqual(modules, ["1", "9", "3"])

    def test_placement_keys_follow_their_route_before_the_canonical_path(self):
        # Node 3 is experts 0 and 2 of the MoE (tied), node 4 is expert 1.
        doc = read(support.good("reinit_submodule_map"))
        candidate = self.candidate(doc, "remove child 0 (node 3, Expert) of tree[1] MoE")
        # experts.1 -> experts.0 and experts.2 -> experts.1 by their routes; "0.experts.0"
        # falls back to node 3's new canonical path "0.experts.1", which is taken: dropped.
        self.assertEqual(candidate["placement"]["owners"],
                         {"0.experts.0": 3, "0.experts.1": 1, "1": 2})
        self.assertEqual([op["module"] for op in candidate["ops"] if op["op"] == "set_attr"],
                         ["0.experts.1.linear"])

    def test_hoisting_the_root_rewrites_paths_below_it(self):
        doc = read(support.good("reinit_submodule_map"))
        candidate = self.candidate(doc, "hoist child 0 (node 1, MoE) into the place of tree[0] "
                                        "ModuleList")
        self.assertEqual(candidate["tree"][0]["kind"], "MoE")
        self.assertEqual(candidate["placement"]["owners"],
                         {"experts.0": 0, "experts.1": 3, "experts.2": 1})
        # initialize "0" (the MoE) now targets the root it became.
        self.assertEqual(candidate["ops"][0]["target"], "")

    def candidate(self, doc, description):
        found = [c for d, c in reductions(doc) if d == description]
        self.assertEqual(len(found), 1, f"no single candidate {description!r}")
        return found[0]


class Shrinking(unittest.TestCase):
    def test_marker_and_initialize_shrink_to_one_expert_and_one_op(self):
        oracle = RecordingOracle(self, has_marker_and_initialize)
        result = shrink(big_scenario(), oracle, FAR_AWAY)
        self.assertEqual(result.before, {"ops": 43, "modules": 7, "attrs": 5, "world_size": 4})
        self.assertEqual(result.after, {"ops": 1, "modules": 1, "attrs": 1, "world_size": 1})
        self.assertEqual(result.stopped, "fixpoint")
        final = result.scenario
        self.assertEqual(final["tree"], [{"kind": "Expert",
                                          "attrs": [{"name": "marker", "value": "x"}]}])
        self.assertEqual(final["ops"][0]["op"], "initialize")
        self.assertEqual(final["ops"][0]["target"], "")
        self.assertEqual((final["features"], final["batch"]), (1, 1))
        self.assertEqual(final["placement"]["owners"], {})
        self.assertEqual(result.attempts, oracle.calls)
        self.assertEqual(result.accepted, len(result.history))
        # 43 ops, 7 nodes, 5 attributes: the count is logged by test_report_counts below.
        self.assertLess(oracle.calls, 160, f"{oracle.calls} oracle calls")

    def test_sixty_experts_shrink_in_halves_not_one_by_one(self):
        # The bug report's shape: 60 experts with ids in a ModuleList. A failure that needs only
        # expert id 41 must not cost one DeepSpeed run per expert.
        experts = [{"kind": "Expert", "attrs": [{"name": "id", "value": i}]} for i in range(60)]
        doc = {"format": "zerocheck-scenario/1", "world_size": 2, "seed": 1, "features": 4,
               "batch": 1, "optimizer": {"kind": "adam", "lr": 0.01},
               "config": {"zero_optimization": {"stage": 3}},
               "placement": {"kind": "attr_mod", "attr": "id"},
               "tree": [{"kind": "Sequential", "children": [1]},
                        {"kind": "ModuleList", "children": list(range(2, 62))}] + experts,
               "ops": [{"op": "initialize", "optimizer": "same", "target": ""}]}

        def has_expert_41(candidate):
            return any(a["value"] == 41 for n in candidate["tree"] for a in n.get("attrs", []))
        oracle = RecordingOracle(self, has_expert_41)
        result = shrink(doc, oracle, FAR_AWAY)
        self.assertEqual(result.after["modules"], 1)
        self.assertLess(oracle.calls, 40, f"{oracle.calls} oracle calls for 60 experts")

    def test_empty_offset_shrinks_to_a_lone_zero_size_offset(self):
        doc = read(support.good("tied_frozen_values"))
        oracle = RecordingOracle(self, has_empty_offset)
        result = shrink(doc, oracle, FAR_AWAY)
        self.assertEqual(result.before, {"ops": 23, "modules": 5, "attrs": 14, "world_size": 1})
        self.assertEqual(result.after, {"ops": 0, "modules": 1, "attrs": 0, "world_size": 1})
        self.assertEqual(result.scenario["tree"], [{"kind": "Offset", "shape": [0]}])
        self.assertEqual(result.scenario["config"], doc["config"])
        self.assertEqual(result.stopped, "fixpoint")

    def test_a_fixpoint_is_a_fixpoint(self):
        first = shrink(big_scenario(), has_marker_and_initialize, FAR_AWAY)
        again = shrink(first.scenario, has_marker_and_initialize, FAR_AWAY)
        self.assertEqual((again.accepted, again.stopped), (0, "fixpoint"))
        self.assertEqual(again.scenario, first.scenario)

    def test_ops_only_failure_keeps_exactly_the_needed_ops(self):
        # Fails when a set_attr of value 3 comes before the final fresh initialize.
        def needs_two_ops(doc):
            ops = doc["ops"]
            writes = [i for i, op in enumerate(ops) if op["op"] == "set_attr"
                      and op["value"] == 3]
            fresh = [i for i, op in enumerate(ops) if op.get("optimizer") == "fresh"]
            return bool(writes and fresh and writes[0] < fresh[-1])

        oracle = RecordingOracle(self, needs_two_ops)
        result = shrink(big_scenario(), oracle, FAR_AWAY)
        self.assertEqual([op["op"] for op in result.scenario["ops"]],
                         ["set_attr", "initialize"])
        self.assertEqual(result.after["ops"], 2)
        self.assertLess(oracle.calls, 160, f"{oracle.calls} oracle calls")

    def test_when_every_op_is_needed_the_calls_stay_bounded(self):
        # The worst case for the op pass: 48 ops, none removable. A round tries chunks of
        # 24, 12, 6, 3, 2, 1 (2 + 4 + 8 + 16 + 24 + 48 = 102 candidates); the tree reductions
        # accepted after it make one more full round necessary to reach the fixpoint.
        doc = big_scenario()
        doc["ops"] = [{"op": "set_attr", "module": "", "param": "", "name": "v", "value": i}
                      for i in range(48)]
        oracle = RecordingOracle(self, lambda c: len(c["ops"]) == 48)
        result = shrink(doc, oracle, FAR_AWAY)
        self.assertEqual(result.after, {"ops": 48, "modules": 1, "attrs": 0, "world_size": 1})
        self.assertLess(oracle.calls, 2 * 102 + 20, f"{oracle.calls} oracle calls")

    def test_the_input_is_not_modified(self):
        doc = big_scenario()
        shrink(doc, has_marker_and_initialize, FAR_AWAY)
        self.assertEqual(doc, big_scenario())

    def test_progress_is_reported_per_accepted_reduction(self):
        seen = []
        result = shrink(big_scenario(), has_marker_and_initialize, FAR_AWAY,
                        on_progress=lambda description, now, attempts: seen.append(description))
        self.assertEqual(seen, result.history)


class Deadline(unittest.TestCase):
    def test_a_passed_deadline_asks_nothing_and_returns_the_input(self):
        doc = big_scenario()
        result = shrink(doc, lambda c: self.fail("oracle called"), time.monotonic() - 1)
        self.assertEqual((result.stopped, result.attempts, result.accepted), ("deadline", 0, 0))
        self.assertEqual(result.scenario, doc)
        self.assertEqual(result.after, result.before)

    def test_a_deadline_mid_way_returns_the_best_so_far(self):
        # The clock moves only while the oracle runs (one second a call), so what is checked is
        # the behaviour, whatever the machine's load: the deadline is read before each call, so
        # exactly the calls that began before it run, and none after.
        clock = [1000.0]

        def slow_always_fails(candidate):
            clock[0] += 1.0
            return True
        with mock.patch.object(time, "monotonic", lambda: clock[0]):
            result = shrink(big_scenario(), slow_always_fails, clock[0] + 5.0)
        self.assertEqual(result.stopped, "deadline")
        self.assertEqual(result.attempts, 5)
        self.assertGreaterEqual(result.accepted, 1)
        validate(result.scenario)
        self.assertLess(sum(result.after.values()), sum(result.before.values()))


class PathsAgreeWithLibTorch(unittest.TestCase):
    """_resolve must name the same module as get_submodule, aliases and missing paths included."""

    def test_every_path_of_every_fixture(self):
        try:
            from zerocheck_ds.model.tree import build_tree
        except ImportError as e:  # torch missing: the rest of the suite needs none
            self.skipTest(f"torch not importable: {e}")
        for path in FIXTURES:
            doc = read(path)
            built = build_tree(load_scenario(path))
            paths = {p for p, _ in built.root.named_modules(remove_duplicate=False)}
            paths |= {op.get("module", op.get("target", "")) for op in doc["ops"]}
            paths |= {"9", "0.", "00", "-1", "experts", "0.linear.weight", "1.experts.x"}
            for module_path in sorted(paths):
                with self.subTest(os.path.basename(path), module_path=module_path):
                    found = _resolve(doc["tree"], 0, module_path)
                    try:
                        live = built.root.get_submodule(module_path)
                    except AttributeError:
                        self.assertIsNone(found)
                        continue
                    self.assertIsNotNone(found)
                    _, node, suffix = found
                    expected = built.nodes[node]
                    expected = getattr(expected, suffix) if suffix else expected
                    self.assertIs(live, expected)


class TorchFree(unittest.TestCase):
    def test_importing_the_minimiser_does_not_import_torch(self):
        code = "import sys, zerocheck_ds.repro.shrink; sys.exit('torch' in sys.modules)"
        done = subprocess.run([sys.executable, "-c", code], env=support.cli_env(), timeout=60)
        self.assertEqual(done.returncode, 0)

    def test_the_scenario_language_does_not_import_torch(self):
        folder = os.path.join(support.PACKAGE_ROOT, "zerocheck_ds", "scenario")
        names = sorted(n[:-3] for n in os.listdir(folder) if n.endswith(".py") and n != "__init__.py")
        self.assertGreaterEqual(len(names), 7)
        code = ("import sys; " + "; ".join(f"import zerocheck_ds.scenario.{n}" for n in names)
                + "; import zerocheck_ds.engines; sys.exit('torch' in sys.modules)")
        done = subprocess.run([sys.executable, "-c", code], env=support.cli_env(), timeout=60)
        self.assertEqual(done.returncode, 0)


if __name__ == "__main__":
    unittest.main()
