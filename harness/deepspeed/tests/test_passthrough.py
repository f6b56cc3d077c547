"""Replays in-process: the pass-through engine keeps every invariant; broken engines are caught."""

import json
import os
import tempfile
import unittest

import torch

from . import support
from zerocheck_ds.engines.adapters import AlreadyInitialized, FaultyAdapter, PassThroughAdapter
from zerocheck_ds.replay.replay import Replay
from zerocheck_ds.scenario.scenario import load_scenario
from zerocheck_ds.world.exchange import Exchange
from zerocheck_ds.model.tree import RouteCursor, build_tree


def replay(name, adapter):
    run = Replay(load_scenario(support.good(name)), adapter)
    return run, run.run()


def skipped_reasons(result):
    return [s["reason"] for s in result.skipped]


class PassThroughHoldsEveryInvariant(unittest.TestCase):
    def test_every_good_fixture(self):
        for name in sorted(os.listdir(support.GOOD)):
            with self.subTest(name):
                _, result = replay(name[: -len(".json")], PassThroughAdapter())
                self.assertEqual([f.one_line() for f in result.findings], [])

    def test_tied_weights_are_one_object_with_one_set_of_attributes(self):
        run, result = replay("tied_frozen_values", PassThroughAdapter())
        root = run.root
        self.assertIs(root.get_submodule("0"), root.get_submodule("2"))
        weight = root.get_submodule("0").weight
        self.assertEqual(weight.ds_status, "theirs")  # written through path "2"
        self.assertFalse(hasattr(weight, "partition"))  # deleted by the user
        self.assertFalse(root.get_submodule("0").bias.requires_grad)
        self.assertEqual(root.get_submodule("0").label, "tied twice")  # last write wins
        reasons = skipped_reasons(result)
        self.assertIn("no forward since the last backward", reasons)
        self.assertIn("no module at path '9'", reasons)
        self.assertIn("module '0' parameter 'weight' has no attribute 'partition' to delete", reasons)
        self.assertIn("no engine", reasons)

    def test_a_backward_of_a_loss_that_needs_no_gradient_is_skipped(self):
        # Every parameter frozen: nothing to back-propagate (SCENARIO_FORMAT.md; the C++
        # interpreter skips it too), not a RuntimeError of torch's charged to the engine.
        scenario = {"format": "zerocheck-scenario/2", "world_size": 1, "seed": 3, "features": 1,
                    "batch": 2, "optimizer": {"kind": "sgd", "lr": 0.1},
                    "config": {"gradient_accumulation_steps": 1, "zero_optimization": {"stage": 3}},
                    "tree": [{"kind": "Offset", "shape": [7], "frozen": ["value"]}],
                    "ops": [{"op": "forward", "route": []}, {"op": "backward"}]}
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "frozen.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(scenario, f)
            result = Replay(load_scenario(path), PassThroughAdapter()).run()
        self.assertEqual([f.one_line() for f in result.findings], [])
        self.assertIn("nothing trainable: the loss needs no gradient", skipped_reasons(result))

    def test_a_release_that_keeps_the_model_partitioned_is_caught_by_i4(self):
        class LeavesNoData(PassThroughAdapter):
            def release(self, engine):  # as DeepSpeed's destroy() leaves a ZeRO-3 model
                super().release(engine)
                for p in engine.module.parameters():
                    p.data = torch.empty(0)

        scenario = {"format": "zerocheck-scenario/2", "world_size": 1, "seed": 3, "features": 2,
                    "batch": 2, "optimizer": {"kind": "sgd", "lr": 0.1},
                    "config": {"gradient_accumulation_steps": 1, "zero_optimization": {"stage": 3}},
                    "tree": [{"kind": "Linear"}],
                    "ops": [{"op": "initialize", "optimizer": "same", "target": ""},
                            {"op": "release"}, {"op": "forward", "route": []}]}
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "released.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(scenario, f)
            # With the checks' exchange: the numeric checks (I4 among them) run.
            kept = Replay(load_scenario(path), PassThroughAdapter(), exchange=Exchange(0, 1)).run()
            left = Replay(load_scenario(path), LeavesNoData(), exchange=Exchange(0, 1)).run()
        self.assertEqual([f.one_line() for f in kept.findings], [])
        given_back = [f for f in left.findings if f.invariant == "I4"]
        self.assertEqual({(f.op_index, f.attribute) for f in given_back}, {(1, "given back whole")})
        forward = [f for f in left.findings if f.invariant == "op"]
        self.assertEqual(len(forward), 1)
        self.assertEqual((forward[0].op_index, forward[0].after["op_index"]), (2, 1))

    def test_names_python_reserves_are_skipped_not_written(self):
        run, result = replay("name_collisions", PassThroughAdapter())
        reasons = "\n".join(skipped_reasons(result))
        for name in ("'forward' is defined by class", "'training' is an instance attribute",
                     "'weight' is a registered parameter", "'data' is defined by class",
                     "'experts' is a registered submodule", "'0' is a registered submodule"):
            self.assertIn(name, reasons)
        self.assertTrue(all(r.startswith("not representable upstream")
                            for r in skipped_reasons(result)
                            if "defined by" in r or "registered" in r or "constructor" in r))
        root = run.root
        self.assertTrue(callable(root.forward))
        self.assertIs(root.training, True)
        self.assertIsInstance(root.get_submodule("0").weight, torch.nn.Parameter)
        self.assertEqual(root.get_submodule("0").weight.all_gather, "user")
        self.assertEqual(root.get_submodule("2.experts.0").id, 4)

    def test_route_picks_experts_cyclically(self):
        cursor = RouteCursor([4, -1])
        self.assertEqual([cursor.choose(3) for _ in range(3)], [1, 2, 1])
        self.assertEqual(RouteCursor([]).choose(4), 0)
        scenario = load_scenario(support.good("reinit_submodule_map"))
        built = build_tree(scenario)
        self.assertIs(built.root.get_submodule("0.experts.0"), built.root.get_submodule("0.experts.2"))
        self.assertEqual(built.expert_paths, ["0.experts.0", "0.experts.1"])


class PassThroughRegistry(unittest.TestCase):
    def setUp(self):
        self.model = build_tree(load_scenario(support.good("reinit_submodule_map"))).root
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.adapter = PassThroughAdapter()

    def test_repeated_initialize_is_refused_until_release(self):
        engine = self.adapter.initialize(self.model.get_submodule("0"), None, {})
        for target in ("0", "0.experts.1", ""):
            with self.assertRaises(AlreadyInitialized):
                self.adapter.initialize(self.model.get_submodule(target), None, {})
        other = self.adapter.initialize(self.model.get_submodule("1"), self.optimizer, {})
        with self.assertRaises(AlreadyInitialized):
            self.adapter.initialize(self.model.get_submodule("1"), torch.optim.SGD([torch.zeros(1)], lr=1), {})
        self.adapter.release(engine)
        self.adapter.release(other)
        self.adapter.initialize(self.model, self.optimizer, {})


class MutatingRefusal(PassThroughAdapter):
    """Refuses a repeated initialize, but only after writing on the model."""

    def initialize(self, model, optimizer, config):
        if self._clash(model, optimizer):
            model.ds_id = 99
        return super().initialize(model, optimizer, config)


class BreakingRefusal(PassThroughAdapter):
    """Refuses a repeated initialize, and breaks the model's forward while doing so."""

    def initialize(self, model, optimizer, config):
        if self._clash(model, optimizer):
            for module in model.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.data = torch.empty(0)
        return super().initialize(model, optimizer, config)


class WrongError(PassThroughAdapter):
    def initialize(self, model, optimizer, config):
        if self._clash(model, optimizer):
            raise ValueError("something else went wrong")
        return super().initialize(model, optimizer, config)


class AttributeEater(PassThroughAdapter):
    """Deletes every `id` it finds, and swaps the first expert for a copy."""

    def initialize(self, model, optimizer, config):
        for module in model.modules():
            if "id" in vars(module):
                del module.id
        if hasattr(model, "1"):
            experts = model.get_submodule("1").experts
            experts[0] = type(experts[0])(4)
        return super().initialize(model, optimizer, config)


class ExpertSwapper(PassThroughAdapter):
    """Replaces every MoE's first expert with a fresh one, as a wrapping engine might."""

    def initialize(self, model, optimizer, config):
        for module in model.modules():
            if hasattr(module, "experts"):
                module.experts[0] = type(module.experts[0])(5)
        return super().initialize(model, optimizer, config)


class BrokenEnginesAreCaught(unittest.TestCase):
    def invariants(self, name, adapter):
        _, result = replay(name, adapter)
        return result.findings

    def test_faulty_adapter(self):
        findings = self.invariants("experts_attr_mod", FaultyAdapter())
        i1 = [f for f in findings if f.invariant == "I1" and f.op_index == 0]
        self.assertIn(("1.experts.0", "id", 0), [(f.module_path, f.attribute, f.expected) for f in i1])
        self.assertTrue(any(f.invariant == "I2" and f.module_path.startswith("1.experts.") for f in findings))
        self.assertTrue(any(f.invariant == "I5" and f.actual == "accepted" and f.op_index == 5
                            for f in findings))

    def test_state_changed_by_a_refusal(self):
        findings = self.invariants("experts_attr_mod", MutatingRefusal())
        self.assertTrue(any(f.invariant == "I5" and f.expected == "nothing changed"
                            and "ds_id" in f.message for f in findings), findings)

    def test_training_broken_by_a_refusal(self):
        findings = self.invariants("experts_attr_mod", BreakingRefusal())
        self.assertTrue(any(f.attribute == "training still runs after a rejected initialize"
                            for f in findings), findings)

    def test_refusal_with_the_wrong_error(self):
        findings = self.invariants("experts_attr_mod", WrongError())
        self.assertTrue(any(f.invariant == "I5" and "ValueError" in (f.exception or "")
                            for f in findings), findings)

    def test_deleted_attribute_and_replaced_module(self):
        findings = self.invariants("experts_attr_mod", AttributeEater())
        self.assertTrue(any(f.invariant == "I1" and f.actual == {"absent": True}
                            and f.module_path == "1.experts.1" for f in findings), findings)
        self.assertTrue(any(f.invariant == "I2" and f.module_path == "1.experts.0"
                            and "replaced" in f.message for f in findings), findings)

    def test_map_placement_sees_a_replaced_module(self):
        # A map names paths; the promise is that each path still holds the module the user
        # placed there. Only the swapped path may be reported, and with the swap as the reason.
        findings = [f for f in self.invariants("reinit_submodule_map", ExpertSwapper())
                    if f.invariant == "I2"]
        self.assertEqual({f.module_path for f in findings}, {"0.experts.0"}, findings)
        self.assertIn("replaced by a ExpertNode", findings[0].message)
        self.assertNotEqual(findings[0].expected, findings[0].actual)

    def test_map_placement_holds_on_the_passthrough(self):
        findings = self.invariants("reinit_submodule_map", PassThroughAdapter())
        self.assertFalse([f for f in findings if f.invariant == "I2"], findings)


if __name__ == "__main__":
    unittest.main()


class PassThroughAgainstTheTwin(unittest.TestCase):
    """Supervised at world 2, where the dense twin checks the numbers (I3)."""

    def test_a_step_before_the_accumulation_boundary_does_not_step_the_optimizer(self):
        # gradient_accumulation_steps 2, one backward and one step: the twin does not step yet;
        # a pass-through engine that stepped the optimizer anyway showed I3 on every parameter.
        with tempfile.TemporaryDirectory() as out:
            run = support.run_cli(["suite", "--adapter", "passthrough", "--world", "2", "--out", out,
                                   "--scenarios", os.path.join(support.FIXTURES, "twin",
                                                               "step_before_the_accumulation_boundary.json")])
            self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-3000:])
