"""The strict scenario reader: good files load, bad input names its JSON path (SPEC: harness/SCENARIO_FORMAT.md).

The shared malformed fixtures are test_shared_fixtures.py's; these are the cases a fixture file
cannot express well (values at their limits, hand-built documents).
"""

import json
import os
import tempfile
import unittest

from . import support
from zerocheck_ds.scenario.scenario import ScenarioError, TensorLiteral, load_scenario, parse_scenario

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
        self.assertEqual(str(caught.exception),
                         "$.placement: a policy is also given in $.config.zerocheck.placement; give it once")


class BadScenarios(unittest.TestCase):
    def assert_refused(self, doc_or_text, line):
        text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
        with self.assertRaises(ScenarioError) as caught:
            parse_scenario(text)
        self.assertEqual(str(caught.exception), line)

    def assert_prefix(self, text, start):
        with self.assertRaises(ScenarioError) as caught:
            parse_scenario(text)
        self.assertTrue(str(caught.exception).startswith(start), str(caught.exception))

    def test_json_that_python_would_accept(self):
        self.assert_prefix('{"format": NaN}', "$: malformed JSON")
        self.assert_prefix('{"format": 1e400}', "$: malformed JSON")
        self.assert_prefix('{"format": "\\udc00"}', "$: malformed JSON")
        self.assert_prefix(b'{"format": "\xff"}', "$: malformed JSON")
        self.assert_refused('{"ops": {"a": 1, "b": {"c": 1, "c": 2}}, "ops": 1}', "$.ops.b.c: duplicate key")
        self.assert_refused(minimal(seed=-1), "$.seed: value -1 is out of range [0, 9223372036854775807]")
        self.assert_refused(linear_with_attr("id", 2**63),
                            "$.tree[0].attrs[0].value: value 9223372036854775808 is out of range "
                            "[-9223372036854775808, 9223372036854775807]")
        self.assert_refused(minimal(features=4.0), "$.features: expected an integer, got number")
        self.assert_refused(minimal(features=2**64), "$.features: expected an integer, got number")
        self.assert_refused(minimal(features=-2**63 - 1), "$.features: expected an integer, got number")
        self.assert_refused(minimal(features=2**64 - 1),
                            "$.features: value 18446744073709551615 is out of range [1, 64]")
        # An integer beyond uint64 is a double, as nlohmann reads it: a fine attribute value.
        self.assertEqual(parse_scenario(json.dumps(linear_with_attr("id", 2**64))).tree[0].attrs[0].value,
                         float(2**64))

    def test_path_convention(self):
        self.assert_refused(minimal(**{"odd key": 1}),
                            '$["odd key"]: unknown key (expected one of: format, world_size, seed, '
                            'features, batch, optimizer, config, tree, ops, placement, construct, overflow_protection)')
        self.assert_refused(minimal(tree=[{"kind": "Expert", "param_attrs": {"linear.weight": [{"name": "", "value": 1}]}}]),
                            '$.tree[0].param_attrs["linear.weight"][0].name: the empty name is not an attribute name')
        self.assert_refused(minimal(placement={"kind": "map", "owners": {"é \"q\"": 1}}),
                            '$.placement.owners["é \\"q\\""]: value 1 is out of range [0, 0]')

    def test_limits(self):
        self.assert_refused(minimal(optimizer={"kind": "sgd", "lr": 10}),
                            "$.optimizer.lr: expected a learning rate in (0, 10)")
        parse_scenario(json.dumps(minimal(optimizer={"kind": "sgd", "lr": 9.99})))
        parse_scenario(json.dumps(minimal(seed=2**63 - 1)))

        def nested(depth):
            value = 1
            for _ in range(depth):
                value = [value]
            return value

        parse_scenario(json.dumps(linear_with_attr("deep", nested(8))))
        self.assert_refused(linear_with_attr("deep", nested(9)),
                            "$.tree[0].attrs[0].value" + "[0]" * 9 + ": attribute value nested deeper than 8 lists")
        self.assert_refused(minimal(ops=[{"op": "forward", "route": [-1]}]),
                            "$.ops[0].route[0]: value -1 is out of range [0, 1048576]")
        parse_scenario(json.dumps(minimal(ops=[{"op": "forward", "route": [2**20] * 64}])))
        self.assert_refused(linear_with_attr("t", {"tensor": [3.5e38], "shape": [1]}),
                            "$.tree[0].attrs[0].value.tensor[0]: does not fit a float32 tensor")
        parse_scenario(json.dumps(linear_with_attr("t", {"tensor": [3.4028234663852886e38], "shape": [1]})))
        self.assert_refused(minimal(tree=[{"kind": "Offset", "shape": [257, 256]}]),
                            "$.tree[0].shape: has more than 65536 elements")

    def test_set_attr_module_and_param_are_optional(self):
        scenario = parse_scenario(json.dumps(minimal(ops=[
            {"op": "set_attr", "name": "id", "value": 1}, {"op": "del_attr", "name": "id"}])))
        self.assertEqual([(op.module, op.param) for op in scenario.ops], [("", ""), ("", "")])

    def test_load_may_name_a_world_to_reshard_into(self):
        scenario = parse_scenario(json.dumps(minimal(ops=[
            {"op": "save"}, {"op": "load"}, {"op": "load", "world_size": 8}])))
        self.assertEqual([op.world_size for op in scenario.ops], [0, 0, 8])
        self.assert_refused(minimal(ops=[{"op": "load", "world_size": 9}]),
                            "$.ops[0].world_size: value 9 is out of range [1, 8]")
        self.assert_refused(minimal(ops=[{"op": "load", "world_size": 0}]),
                            "$.ops[0].world_size: value 0 is out of range [1, 8]")
        self.assert_refused(minimal(ops=[{"op": "save", "world_size": 2}]),
                            "$.ops[0].world_size: unknown key (expected one of: op, tag)")

    def test_format_one_is_still_read_and_means_the_same(self):
        ops = [{"op": "initialize"}, {"op": "save"}, {"op": "load", "world_size": 2}]
        one = parse_scenario(json.dumps(minimal(ops=ops)))
        two = parse_scenario(json.dumps(minimal(ops=ops, format="zerocheck-scenario/2")))
        self.assertEqual(one, two)
        self.assertEqual(one.construct, "eager")

    def test_checkpoint_options(self):
        scenario = parse_scenario(json.dumps(minimal(ops=[
            {"op": "save", "tag": "global_step3"}, {"op": "load"},
            {"op": "load", "tag": "global_step3", "optimizer_states": False, "module_only": True}])))
        self.assertEqual([(op.tag, op.optimizer_states, op.module_only) for op in scenario.ops],
                         [("global_step3", True, False), (None, True, False), ("global_step3", False, True)])
        for tag, problem in (("a/b", 'contains "/"'), ("..", 'contains ".."'), ("a\\b", 'contains "\\\\"'),
                             ("a\0b", 'contains "\\u0000"'), ("", "has 0 bytes, expected 1..64"),
                             ("t" * 65, "has 65 bytes, expected 1..64"),
                             ("latest", "is reserved (the checkpoint folder, or a file beside the tags)")):
            with self.subTest(tag=tag):
                self.assert_refused(minimal(ops=[{"op": "load", "tag": tag}]),
                                    f"$.ops[0].tag: tag {json.dumps(tag, ensure_ascii=False)} {problem}")
        parse_scenario(json.dumps(minimal(ops=[{"op": "save", "tag": "\u03bb" * 32}])))  # 64 bytes

    def test_gather_and_life_cycle_keys(self):
        doc = minimal(world_size=2, construct="zero_init", ops=[
            {"op": "gather", "module": "", "modifier_rank": 1, "scale": 0.5},
            {"op": "gather", "modifier_rank": None, "scale": -8},
            {"op": "initialize", "config_error": "zero_stage"}])
        scenario = parse_scenario(json.dumps(doc))
        self.assertEqual(scenario.construct, "zero_init")
        self.assertEqual([(op.module, op.modifier_rank, op.scale) for op in scenario.ops[:2]],
                         [("", 1, 0.5), ("", None, -8.0)])
        self.assertEqual(scenario.ops[2].config_error, "zero_stage")
        self.assert_refused(minimal(ops=[{"op": "gather", "modifier_rank": 1, "scale": 1}]),
                            "$.ops[0].modifier_rank: value 1 is out of range [0, 0]")
        self.assert_refused(minimal(ops=[{"op": "gather", "modifier_rank": 0, "scale": 8.5}]),
                            "$.ops[0].scale: expected a scale in [-8, 8]")
        self.assert_refused(minimal(ops=[{"op": "gather", "scale": 1}]),
                            "$.ops[0].modifier_rank: missing required key")

    def test_attribute_name_rule(self):
        self.assert_refused(linear_with_attr("a\0b", 1), "$.tree[0].attrs[0].name: name contains a NUL byte")
        self.assert_refused(linear_with_attr("x" * 1025, 1),
                            "$.tree[0].attrs[0].name: name of 1025 bytes exceeds the limit of 1024")
        parse_scenario(json.dumps(linear_with_attr("x" * 1024, 1)))  # the limit itself is fine

    def test_structure(self):
        self.assert_refused(minimal(tree=[]), "$.tree: has 0 items, expected at least 1")
        self.assert_refused(minimal(tree=[{"kind": "MoE"}]),
                            "$.tree[0].children: a node of kind MoE needs at least one child")
        self.assert_refused(minimal(tree=[{"kind": "Tanh", "bias": False}]),
                            "$.tree[0].bias: unknown key (expected one of: kind, children, attrs, param_attrs, frozen)")
        self.assert_refused(minimal(tree=[{"kind": "Expert", "param_attrs": {"weight": []}}]),
                            '$.tree[0].param_attrs.weight: a node of kind Expert has no parameter "weight" '
                            '(parameters: linear.weight, linear.bias)')
        self.assert_refused(minimal(tree=[{"kind": "Linear", "bias": False, "frozen": ["bias"]}]),
                            '$.tree[0].frozen[0]: a node of kind Linear has no parameter "bias" (parameters: weight)')
        self.assert_refused(minimal(config={"train_batch_size": 3}),
                            "$.config.train_batch_size: 3 != train_micro_batch_size_per_gpu * "
                            "gradient_accumulation_steps * world size = 1")
        self.assert_refused(minimal(placement={"kind": "attr_mod"}), "$.placement.attr: missing required key")
        self.assert_refused(minimal(ops=[{"op": "forward", "target": ""}]),
                            "$.ops[0].target: unknown key (expected one of: op, route)")
        self.assert_refused(minimal(ops=[{"op": "initialize", "optimizer": "old"}]),
                            '$.ops[0].optimizer: unknown value "old" (expected one of: same, fresh)')
        self.assert_refused(minimal(config={"zerocheck": {"colour": 1}}),
                            "$.config.zerocheck.colour: unknown key (expected one of: placement)")
        self.assert_refused(minimal(config={"zerocheck": {"placement": {"kind": "ring"}}}),
                            '$.config.zerocheck.placement.kind: unknown value "ring" (expected one of: none, attr_mod, map)')
        self.assert_refused(minimal(ops=[7]), "$.ops[0]: expected an object, got integer")
        self.assert_refused(minimal(ops=[{}]), "$.ops[0].op: missing required key")
        self.assert_refused("[]", "$: expected an object, got array")

    def test_unreadable_files(self):
        with self.assertRaises(ScenarioError) as caught:
            load_scenario(os.path.join(support.FIXTURES, "no_such_file.json"))
        self.assertTrue(str(caught.exception).startswith("$: cannot read"))
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            f.write(b'{"format": "\xff"}')
            f.flush()
            with self.assertRaises(ScenarioError) as caught:
                load_scenario(f.name)
            self.assertEqual(str(caught.exception), "$: malformed JSON: invalid UTF-8 at byte 12")


if __name__ == "__main__":
    unittest.main()
