"""The `inject` operation: the reader's rules, the parameter names it checks against, the arming,
the replay applying it on its rank and the twin following it, and I3's NaN equality.

Without DeepSpeed: the pass-through engine at world 1 (plain PyTorch) and the twin. On DeepSpeed
the same mechanics are the upstream ctests' (harness/tests/upstream_overflow_test.py)."""

import json
import math
import os
import unittest
from unittest import mock

import torch

from zerocheck_ds.engines.adapters import PassThroughAdapter
from zerocheck_ds.model.tree import build_tree
from zerocheck_ds.model import twin
from zerocheck_ds.oracles import numerics
from zerocheck_ds.replay import injection, training
from zerocheck_ds.replay.replay import Replay
from zerocheck_ds.scenario.parameter_names import parameter_names
from zerocheck_ds.scenario.scenario import ScenarioError, load_scenario, parse_scenario
from zerocheck_ds.world.exchange import Exchange

from . import support

CORPUS = os.path.join(support.PACKAGE_ROOT, "zerocheck_ds", "corpus", "builtin")


def scenario(ops, world_size=2, tree=None):
    return {
        "format": "zerocheck-scenario/2", "world_size": world_size, "seed": 3, "features": 3,
        "batch": 2, "optimizer": {"kind": "sgd", "lr": 0.1},
        "config": {"train_micro_batch_size_per_gpu": 2,
                   "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}},
        "tree": tree or [{"kind": "Sequential", "children": [1, 2, 3]}, {"kind": "Linear"},
                         {"kind": "Tanh"}, {"kind": "Linear", "bias": False}],
        "ops": ops,
    }


def training_ops(*injects):
    ops = [{"op": "initialize", "optimizer": "same", "target": ""}]
    ops += [{"op": "forward", "route": []}, {"op": "backward"}, {"op": "step"}]
    ops += list(injects)
    for _ in range(2):
        ops += [{"op": "forward", "route": []}, {"op": "backward"}, {"op": "step"},
                {"op": "zero_grad"}]
    return ops


class Reader(unittest.TestCase):
    def refused(self, doc):
        with self.assertRaises(ScenarioError) as caught:
            parse_scenario(json.dumps(doc))
        return str(caught.exception)

    def test_a_valid_inject_is_read(self):
        s = parse_scenario(json.dumps(scenario([
            {"op": "inject", "rank": 1, "into": "gradient", "value": "-inf", "param": "0.weight"},
            {"op": "inject", "rank": 0, "into": "loss", "value": "nan"}])))
        self.assertEqual((s.ops[0].rank, s.ops[0].into, s.ops[0].value, s.ops[0].param),
                         (1, "gradient", "-inf", "0.weight"))
        self.assertEqual((s.ops[1].rank, s.ops[1].into, s.ops[1].param), (0, "loss", ""))

    def test_a_rank_outside_the_world_names_the_op_and_value(self):
        self.assertEqual(self.refused(scenario([{"op": "forward"}, {"op": "inject", "rank": 2,
                                                 "into": "input", "value": "inf"}])),
                         "$.ops[1].rank: value 2 is out of range [0, 1]")
        self.assertEqual(self.refused(scenario([{"op": "inject", "rank": -1, "into": "input",
                                                 "value": "inf"}])),
                         "$.ops[0].rank: value -1 is out of range [0, 7]")

    def test_an_unknown_parameter_names_the_op_and_value(self):
        self.assertEqual(
            self.refused(scenario([{"op": "inject", "rank": 0, "into": "gradient",
                                    "value": "nan", "param": "2.bias"}])),
            '$.ops[0].param: the tree has no parameter "2.bias" '
            '(parameters: 0.weight, 0.bias, 2.weight)')

    def test_param_exactly_with_gradient(self):
        self.assertEqual(self.refused(scenario([{"op": "inject", "rank": 0, "into": "gradient",
                                                 "value": "nan"}])),
                         '$.ops[0].param: missing required key (an inject "into": "gradient" '
                         'names its parameter)')
        self.assertEqual(self.refused(scenario([{"op": "inject", "rank": 0, "into": "loss",
                                                 "value": "nan", "param": "0.weight"}])),
                         '$.ops[0].param: an inject "into": "loss" takes no parameter')

    def test_value_and_into_are_their_spellings(self):
        self.assertEqual(self.refused(scenario([{"op": "inject", "rank": 0, "into": "loss",
                                                 "value": 1.5}])),
                         "$.ops[0].value: expected a string, got number")
        self.assertIn('$.ops[0].value: unknown value "NaN" (expected one of: nan, inf, -inf)',
                      self.refused(scenario([{"op": "inject", "rank": 0, "into": "loss",
                                              "value": "NaN"}])))
        self.assertIn('$.ops[0].into: unknown value "output"',
                      self.refused(scenario([{"op": "inject", "rank": 0, "into": "output",
                                              "value": "nan"}])))
        self.assertEqual(self.refused(scenario([{"op": "inject", "rank": 0, "value": "nan"}])),
                         "$.ops[0].into: missing required key")

    def test_overflow_protection_is_read_and_kept(self):
        doc = dict(scenario([]), overflow_protection={"anything": True})
        self.assertEqual(parse_scenario(json.dumps(doc)).overflow_protection, {"anything": True})


class UsageError(unittest.TestCase):
    """Through the runner's command line: an invalid inject is bad input, exit 2, its op named."""

    def test_exit_2_naming_the_op_and_value(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            for name, inject, line in (
                    ("rank", {"op": "inject", "rank": 2, "into": "loss", "value": "nan"},
                     "$.ops[1].rank: value 2 is out of range [0, 1]"),
                    ("param", {"op": "inject", "rank": 1, "into": "gradient", "value": "inf",
                               "param": "0.gain"},
                     '$.ops[1].param: the tree has no parameter "0.gain"')):
                with self.subTest(name):
                    path = os.path.join(tmp, f"{name}.json")
                    with open(path, "w", encoding="utf-8") as f:
                        json.dump(scenario([{"op": "initialize"}, inject]), f)
                    run = support.run_cli(["--scenarios", path, "--out", os.path.join(tmp, "out"),
                                           "--adapter", "passthrough"])
                    self.assertEqual(run.returncode, 2, run.stderr)
                    self.assertIn(f"{path}: {line}", run.stderr)


class ParameterNames(unittest.TestCase):
    def test_the_torch_free_names_are_build_trees(self):
        paths = [os.path.join(d, n) for d in (os.path.join(CORPUS, "export"),
                                              os.path.join(CORPUS, "upstream"), support.GOOD)
                 for n in sorted(os.listdir(d)) if n.endswith(".json")]
        self.assertGreater(len(paths), 40)
        for path in paths:
            with self.subTest(os.path.basename(path)):
                s = load_scenario(path)
                built = build_tree(s)
                self.assertEqual(parameter_names(s.tree),
                                 [n for n, _ in built.root.named_parameters()])


class Arming(unittest.TestCase):
    def op(self, rank, into, value, param=""):
        return parse_scenario(json.dumps(scenario([dict(
            {"op": "inject", "rank": rank, "into": into, "value": value},
            **({"param": param} if param else {}))]))).ops[0]

    def test_one_shot_replaced_by_a_second_of_the_same_kind(self):
        armed = injection.Injections()
        armed.arm(self.op(1, "loss", "nan"))
        armed.arm(self.op(1, "loss", "-inf"))
        armed.arm(self.op(0, "gradient", "inf", "2.weight"))
        armed.arm(self.op(0, "input", "nan"))
        self.assertEqual(armed.take_backward(), ({1: -math.inf}, {0: ("2.weight", math.inf)}))
        self.assertEqual(armed.take_backward(), ({}, {}))
        inputs = armed.take_inputs()
        self.assertTrue(math.isnan(inputs[0]) and list(inputs) == [0])
        self.assertEqual(armed.take_inputs(), {})

    def test_a_gradient_into_a_placed_module_does_nothing_and_still_replaces(self):
        armed = injection.Injections()
        armed.placed = ["2"]
        armed.arm(self.op(0, "gradient", "inf", "0.weight"))
        armed.arm(self.op(0, "gradient", "nan", "2.weight"))  # replaces the first, then nothing
        armed.arm(self.op(1, "gradient", "inf", "0.weight"))
        self.assertEqual(armed.take_backward(), ({}, {1: ("0.weight", math.inf)}))

    def test_replaced_first_copies(self):
        t = torch.ones(2, 2)
        out = twin.replaced_first(t, math.inf)
        self.assertEqual(out.view(-1).tolist(), [math.inf, 1.0, 1.0, 1.0])
        self.assertEqual(t.view(-1).tolist(), [1.0] * 4)
        self.assertEqual(twin.replaced_first(torch.ones(0), math.nan).numel(), 0)

    def test_the_tensor_hook_runs_before_the_accumulate_grad_hooks(self):
        # ZeRO-3's reduce hook sits on the AccumulateGrad node (v0.14.5, master on torch < 2.1)
        # or is a post-accumulate hook (master, torch >= 2.1): both must see the replaced value.
        p = torch.nn.Parameter(torch.ones(3))
        seen = []
        grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
        grad_acc.register_hook(lambda *_: seen.append(p.grad.clone()))
        handle = injection.gradient_hook(p, math.inf)
        (p * 2).sum().backward()
        handle.remove()
        self.assertEqual(seen[0].tolist(), [math.inf, 2.0, 2.0])
        frozen = torch.nn.Parameter(torch.ones(1), requires_grad=False)
        self.assertIsNone(injection.gradient_hook(frozen, math.nan))


class ThroughTheReplay(unittest.TestCase):
    """World 1 on plain PyTorch: the replay applies the injection, the twin follows it, I3 holds
    comparing NaN with NaN; a replay that drops its injection is caught by I3."""

    INJECTS = [{"op": "inject", "rank": 0, "into": "gradient", "value": "inf",
                "param": "0.weight"},
               {"op": "inject", "rank": 0, "into": "loss", "value": "nan"},
               {"op": "inject", "rank": 0, "into": "input", "value": "-inf"}]

    def replay(self, inject):
        s = parse_scenario(json.dumps(scenario(training_ops(inject), world_size=1)))
        return Replay(s, PassThroughAdapter(), exchange=Exchange(0, 1)).run()

    def test_the_twin_follows_each_injection(self):
        for inject in self.INJECTS:
            with self.subTest(inject["into"]):
                result = self.replay(inject)
                self.assertEqual([f.one_line() for f in result.findings], [])
                self.assertGreater(result.checks["I3"]["checked"], 10)
                self.assertEqual(result.checks["I3"]["not_checked"], {})

    def test_an_injection_the_engine_never_got_is_caught(self):
        no_hook = mock.patch.object(training, "gradient_hook", lambda p, v: None)
        no_input = mock.patch.object(training, "replaced_first", lambda x, v: x)
        for inject, patch in ((self.INJECTS[0], no_hook), (self.INJECTS[2], no_input)):
            with self.subTest(inject["into"]), patch:
                found = {f.invariant for f in self.replay(inject).findings}
                self.assertEqual(found, {"I3"})


class NanEquality(unittest.TestCase):
    """I3 compares as numbers with a NaN matching a NaN: a diverged twin and engine agree."""

    def test_difference(self):
        nan, inf = math.nan, math.inf
        self.assertIsNone(numerics.difference(torch.tensor([nan, inf, -inf, 1.0]),
                                              torch.tensor([nan, inf, -inf, 1.0])))
        for expected, actual in (([nan], [1.0]), ([1.0], [nan]), ([inf], [-inf]), ([inf], [nan])):
            with self.subTest(expected=expected, actual=actual):
                gap = numerics.difference(torch.tensor(expected), torch.tensor(actual))
                self.assertEqual(gap["differing"], 1)

    def test_the_root_cause_comparison(self):
        from zerocheck_ds.oracles import inside
        self.assertTrue(inside._equal(torch.tensor([math.nan, math.inf]), torch.tensor([math.nan, math.inf])))
        self.assertFalse(inside._equal(torch.tensor([math.nan]), torch.tensor([0.0])))

    def test_the_loss_check(self):
        checks = numerics.NumericChecks.__new__(numerics.NumericChecks)
        checks.world_size, checks.rank, checks._located = 1, 0, None
        checks.tally = numerics.Tally()
        checks._boundaries = 0
        self.assertEqual(checks._loss_check(0, "forward", math.nan, math.nan), [])
        self.assertEqual(len(checks._loss_check(0, "forward", math.nan, 1.0)), 1)
        self.assertEqual(len(checks._loss_check(0, "forward", math.inf, -math.inf)), 1)


if __name__ == "__main__":
    unittest.main()
