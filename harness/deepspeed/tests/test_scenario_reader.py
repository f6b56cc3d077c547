"""The strict scenario reader: good files load, every malformed one names its JSON path."""

import json
import os
import tempfile
import unittest

from . import support
from zerocheck_ds.scenario import ScenarioError, TensorLiteral, load_scenario, parse_scenario

# Each malformed fixture and the start of the message it must give (the JSON path first).
BAD_FIXTURES = {
    "batch_bool": "batch: expected an integer, got boolean",
    "child_not_greater": "tree[2].children[0]: child index 2 must be greater",
    "child_past_end": "tree[0].children[1]: child index 7 is past the last node",
    "config_stage": "config.zero_optimization.stage: value 2 is out of range",
    "duplicate_key": "tree[3].kind: duplicate key",
    "empty_attr_name": "tree[1].attrs[0].name: the empty name",
    "features_out_of_range": "features: value 65 is out of range",
    "frozen_unknown": "tree[1].frozen[0]: a Linear node has no parameter",
    "leaf_children": "tree[1].children: a Linear node takes no children",
    "missing_tree": "tree: missing required key",
    "placement_rank": 'placement.owners["1"]: value 2 is out of range',
    "set_attr_without_value": "ops[2].value: missing required key",
    "tensor_shape_mismatch": "tree[1].attrs[0].value: tensor has 5 numbers",
    "truncated": "$: malformed JSON at line",
    "unknown_node_key": "tree[2].colour: unknown key",
    "unknown_op": "ops[1].op: unknown op",
    "world_size_string": "world_size: expected an integer, got string",
}


def minimal(**changes):
    doc = {
        "format": "zerocheck-scenario/1", "world_size": 1, "seed": 0, "features": 2, "batch": 1,
        "optimizer": {"kind": "sgd", "lr": 0.1}, "config": {},
        "tree": [{"kind": "Linear", "attrs": [{"name": "id", "value": 0}]}], "ops": [],
    }
    doc.update(changes)
    return doc


def linear_with_attr(name, value):
    return minimal(tree=[{"kind": "Linear", "attrs": [{"name": name, "value": value}]}])


class GoodScenarios(unittest.TestCase):
    def test_every_good_fixture_loads(self):
        for name in sorted(os.listdir(support.GOOD)):
            with self.subTest(name):
                scenario = load_scenario(os.path.join(support.GOOD, name))
                self.assertEqual(scenario.name, name[: -len(".json")])

    def test_values_keep_their_json_types(self):
        scenario = load_scenario(support.good("tied_frozen_values"))
        attrs = {e.name: e.value for e in scenario.tree[1].attrs if e.name != "label"}
        self.assertEqual(attrs["id"], 3)
        self.assertIs(type(attrs["scale"]), float)
        self.assertEqual(attrs["flags"], (True, None, 1, 2.5, "x", (0,)))
        self.assertEqual(attrs["mask"], TensorLiteral((1.0, 0.0, 1.5, 2.0), (2, 2)))

    def test_defaults(self):
        scenario = parse_scenario(json.dumps(minimal(ops=[{"op": "initialize"}, {"op": "forward"}])))
        self.assertEqual(scenario.placement.kind, "none")
        self.assertEqual((scenario.ops[0].optimizer, scenario.ops[0].target), ("same", ""))
        self.assertEqual(scenario.ops[1].route, [])
        self.assertEqual(scenario.config["zero_optimization"]["stage"], 3)
        self.assertNotIn("train_batch_size", scenario.config)

    def test_config_zerocheck_section_is_read_and_kept_from_deepspeed(self):
        section = {"zerocheck": {"placement": {"kind": "attr_mod", "attr": "id"}}}
        scenario = parse_scenario(json.dumps(minimal(config=section)))
        self.assertEqual((scenario.placement.kind, scenario.placement.attr), ("attr_mod", "id"))
        self.assertNotIn("zerocheck", scenario.config)
        # One policy per scenario, as the C++ reader rules: giving it twice is refused.
        both = minimal(config=section, placement={"kind": "map", "owners": {"": 0}})
        with self.assertRaises(ScenarioError) as caught:
            parse_scenario(json.dumps(both))
        self.assertTrue(str(caught.exception).startswith("placement: a policy is also given"), str(caught.exception))


class BadScenarios(unittest.TestCase):
    def assert_refused(self, doc_or_text, path_and_message):
        text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
        with self.assertRaises(ScenarioError) as caught:
            parse_scenario(text)
        self.assertTrue(str(caught.exception).startswith(path_and_message), str(caught.exception))

    def test_every_bad_fixture_names_its_path(self):
        self.assertEqual(sorted(BAD_FIXTURES), sorted(n[:-5] for n in os.listdir(support.BAD)))
        for name, expected in BAD_FIXTURES.items():
            with self.subTest(name):
                with self.assertRaises(ScenarioError) as caught:
                    load_scenario(os.path.join(support.BAD, name + ".json"))
                self.assertTrue(str(caught.exception).startswith(expected), str(caught.exception))

    def test_json_that_python_would_accept(self):
        self.assert_refused('{"format": NaN}', "$: malformed JSON")
        self.assert_refused(minimal(seed=-1), "seed: value -1 is out of range")
        overflowing = json.dumps(minimal(optimizer={"kind": "adam", "lr": 12345})).replace("12345", "1e400")
        self.assert_refused(overflowing, "optimizer.lr: number is out of range")
        self.assert_refused(linear_with_attr("id", 2**63), "tree[0].attrs[0].value: value")
        self.assert_refused(minimal(features=4.0), "features: expected an integer, got float")

    def test_attribute_name_rule(self):
        self.assert_refused(linear_with_attr("a\0b", 1), "tree[0].attrs[0].name: name contains a NUL")
        self.assert_refused(linear_with_attr("x" * 1025, 1), "tree[0].attrs[0].name: name of 1025")
        self.assert_refused(linear_with_attr("\ud800", 1), "tree[0].attrs[0].name: name is not valid UTF-8")
        parse_scenario(json.dumps(linear_with_attr("x" * 1024, 1)))  # the limit itself is fine

    def test_structure(self):
        self.assert_refused(minimal(tree=[]), "tree: array of 0 elements")
        self.assert_refused(minimal(tree=[{"kind": "MoE"}]), "tree[0].children: an MoE node needs")
        self.assert_refused(minimal(tree=[{"kind": "Offset", "shape": [257, 256]}]), "tree[0].shape: shape")
        self.assert_refused(minimal(tree=[{"kind": "Tanh", "bias": False}]), "tree[0].bias: unknown key")
        self.assert_refused(minimal(tree=[{"kind": "Expert", "param_attrs": {"weight": []}}]),
                            "tree[0].param_attrs.weight: unknown key")
        self.assert_refused(minimal(config={"train_batch_size": 3}), "config.train_batch_size: 3 !=")
        self.assert_refused(minimal(placement={"kind": "attr_mod"}), "placement.attr: missing")
        self.assert_refused(minimal(ops=[{"op": "forward", "target": ""}]), "ops[0].target: unknown key")
        self.assert_refused(minimal(ops=[{"op": "initialize", "optimizer": "old"}]), "ops[0].optimizer:")
        self.assert_refused(minimal(extra=1), "extra: unknown key")
        self.assert_refused(minimal(config={"zerocheck": {"colour": 1}}),
                            "config.zerocheck.colour: unknown key")
        self.assert_refused(minimal(config={"zerocheck": {"placement": {"kind": "ring"}}}),
                            "config.zerocheck.placement.kind: unknown placement kind")
        self.assert_refused("[]", "$: expected an object")

    def test_unreadable_files(self):
        with self.assertRaises(ScenarioError) as caught:
            load_scenario(os.path.join(support.FIXTURES, "no_such_file.json"))
        self.assertTrue(str(caught.exception).startswith("$: cannot read"))
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            f.write(b'{"format": "\xff"}')
            f.flush()
            with self.assertRaises(ScenarioError) as caught:
                load_scenario(f.name)
            self.assertTrue(str(caught.exception).startswith("$: file is not valid UTF-8"))


if __name__ == "__main__":
    unittest.main()
