"""I3, I4 and I9 (numerics.py) end to end on the stand-in DeepSpeed at world 2, without DeepSpeed.

The stub (tests/fixtures/stub_deepspeed) trains as ZeRO-3 does (shards, divide then sum, steps at
the boundary): every invariant holds on it. Each of its planted faults must be caught by its own
invariant, and switching that invariant off (--disable) must make the fault survive. The pieces
(the twin's rules, the partition model, the comparison) are tested by hand below.
"""

import json
import os
import tempfile
import unittest

from . import support

TWIN_SCENARIOS = os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests", "scenarios", "twin")
FAULT_SCENARIOS = os.path.join(os.path.dirname(support.PACKAGE_ROOT), "tests", "scenarios",
                               "upstream_faults")


# The stub's planted faults and the invariant each must be caught by.
FAULTS = {"gradient-not-averaged": "I3", "data-kept-after-backward": "I4",
          "step-count-on-rank-0-only": "I9"}


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class OnTheStub(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)

    def suite(self, scenarios, *extra, **variables):
        out = os.path.join(self._tmp.name, f"out{len(os.listdir(self._tmp.name))}")
        if "--world" not in extra:
            extra = ("--world", "2") + extra
        run = support.run_cli(["suite", "--adapter", "deepspeed", "--out", out,
                               "--scenarios", *scenarios, *extra],
                              extra_paths=[support.STUB_DEEPSPEED], timeout=240, **variables)
        self.assertIn(run.returncode, (0, 1), run.stdout + run.stderr)
        summary = read_json(os.path.join(out, "summary.json"))
        verdicts = {v["name"]: read_json(os.path.join(out, "verdicts", f"{v['name']}.verdict.json"))
                    for v in summary["scenarios"]}
        return summary, verdicts

    def test_a_correct_zero3_holds_every_invariant_and_the_checks_are_made(self):
        names = ["mlp_sgd_world2", "tied_adam_world2", "release_reinitialize_world4"]
        summary, verdicts = self.suite([os.path.join(TWIN_SCENARIOS, f"{n}.json") for n in names])
        self.assertEqual(summary["signatures"], [], summary["signatures"])
        checks = summary["checks"]
        self.assertGreater(checks["I3"]["checked"], 20)
        self.assertGreater(checks["I4"]["checked"], 20)
        self.assertGreater(checks["I9"]["checked"], 30)
        # A scenario of another world size is not followed, and says so.
        self.assertIn("replayed on 2 ranks, the scenario has 4", checks["I3"]["not_checked"])
        self.assertEqual(verdicts["mlp_sgd_world2"]["checks"]["I3"]["not_checked"], {})
        self.assertEqual(summary["stage"], 3)

    def planted(self):
        """One copy of a scenario per stub fault, and ZEROCHECK_DS_PLANT naming each one's fault."""
        with open(os.path.join(FAULT_SCENARIOS, "sgd_two_linears.json"), encoding="utf-8") as f:
            scenario = json.load(f)
        paths = []
        for fault in FAULTS:
            paths.append(os.path.join(self._tmp.name, f"{fault}.json"))
            with open(paths[-1], "w", encoding="utf-8") as f:
                json.dump(scenario, f)
        return paths, ",".join(f"{fault}:{fault}" for fault in FAULTS)

    def test_each_planted_fault_is_caught_by_its_own_invariant_and_only_it(self):
        paths, plant = self.planted()
        summary, verdicts = self.suite(paths, ZEROCHECK_DS_PLANT=plant)
        # The stub's stage-3 internals cannot be read: I3's root cause falls back to the
        # operation and says whether the parameter got a gradient in the step.
        self.assertIn("I3 step: value first differs from the dense twin, for a parameter that got "
                      "a gradient in the step",
                      {c["title"] for c in summary["root_causes"]
                       if "gradient-not-averaged" in c["scenarios"]})
        for fault, invariant in FAULTS.items():
            found = {f["invariant"] for f in verdicts[fault]["findings"]}
            self.assertEqual(found, {invariant}, verdicts[fault]["findings"])
        # The messages say what differs, and the signatures what kind of thing.
        value = next(f for f in verdicts["gradient-not-averaged"]["findings"] if f["attribute"] == "value")
        self.assertEqual(value["op"], "step")
        self.assertIn("differs from the dense twin's after op 3 (step)", value["message"])
        self.assertIn("max abs", value["message"])
        self.assertEqual(value["signature"], "I3 step: value differs from the dense twin on Linear parameter")
        i9 = verdicts["step-count-on-rank-0-only"]["findings"][0]
        self.assertIn("state.steps.global_steps: rank 0: 1, rank 1: 0", i9["message"])
        self.assertEqual(i9["signature"], "I9 step: ranks disagree on global_steps")

    def test_switched_off_the_fault_only_it_catches_survives(self):
        paths, plant = self.planted()
        for fault, invariant in FAULTS.items():
            with self.subTest(invariant):
                summary, verdicts = self.suite(paths, "--disable", invariant, ZEROCHECK_DS_PLANT=plant)
                self.assertEqual(verdicts[fault]["findings"], [],
                                 f"without {invariant} the {fault} fault survives")
                self.assertEqual(summary["disabled"], [invariant])

    def test_at_world_3_the_first_step_is_compared_within_its_sum_order_bound(self):
        with open(os.path.join(FAULT_SCENARIOS, "sgd_two_linears.json"), encoding="utf-8") as f:
            scenario = json.load(f)
        scenario["world_size"] = 3
        paths = [os.path.join(self._tmp.name, f"{name}.json") for name in ("world3", "world3_fault")]
        for path in paths:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(scenario, f)
        summary, verdicts = self.suite(paths, "--world", "3",
                                       ZEROCHECK_DS_PLANT="world3_fault:gradient-not-averaged")
        self.assertEqual(verdicts["world3"]["findings"], [])
        self.assertGreater(verdicts["world3"]["checks"]["I3"]["checked"], 3)
        self.assertTrue(any("after the first optimizer step" in reason
                            for reason in summary["checks"]["I3"]["not_checked"]))
        values = [f for f in verdicts["world3_fault"]["findings"] if f["attribute"] == "value"]
        self.assertTrue(values and "allowed" in values[0]["message"],
                        verdicts["world3_fault"]["findings"])

    def test_stage_is_recorded_and_part_of_signatures(self):
        scenario = os.path.join(FAULT_SCENARIOS, "sgd_two_linears.json")
        summary, verdicts = self.suite([scenario], "--stage", "2",
                                       ZEROCHECK_DS_PLANT="sgd_two_linears:step-count-on-rank-0-only")
        self.assertEqual(summary["stage"], 2)
        self.assertTrue(all(s["signature"].endswith("[ZeRO stage 2]") for s in summary["signatures"]))
        self.assertIn("--stage 2", summary["signatures"][0]["replay_command"])


class Pieces(unittest.TestCase):
    def test_partition_model(self):
        from zerocheck_ds.model import partition_model as pm
        self.assertEqual([pm.chunk(n, 3) for n in (0, 1, 3, 4, 7)], [0, 1, 1, 2, 3])
        self.assertEqual(pm.persistent_names([("a", 5), ("b", 3), ("c", 3)], threshold=4), {"b", "c"})
        self.assertEqual(pm.persistent_names([("a", 3), ("b", 3)], 4, model_threshold=5), {"a"})
        group = pm.flat_group([("w", 9), ("b", 3)], world_size=2)
        self.assertEqual((group.padded, group.partition), (12, 6))
        self.assertEqual(pm.flat_group([("w", 9)], world_size=3).padded, 12)

    def test_difference_is_numbers_with_nan_matching_nan(self):
        import torch
        from zerocheck_ds.oracles.numerics import difference
        a = torch.tensor([1.0, float("nan"), -0.0])
        self.assertIsNone(difference(a, torch.tensor([1.0, float("nan"), 0.0])))
        gap = difference(a, torch.tensor([1.0, 2.0, 0.0]))
        self.assertEqual((gap["differing"], gap["first_index"]), (1, 1))
        one_ulp = torch.nextafter(torch.tensor([1.0]), torch.tensor([2.0]))
        self.assertEqual(difference(torch.tensor([1.0]), one_ulp)["max_ulp"], 1)
        self.assertEqual(difference(torch.tensor([-1.0]), -one_ulp)["max_ulp"], 1)

    def test_first_difference_names_the_field_and_parameter(self):
        from zerocheck_ds.oracles.numerics import _first_difference
        summaries = [{"engines": 1, "state": {"params": [{"name": "0.weight", "status": s}]}}
                     for s in ("AVAILABLE", "NOT_AVAILABLE")]
        path, values = _first_difference(summaries)
        self.assertEqual(path, "state.params['0.weight'].status")
        self.assertEqual(values, ["AVAILABLE", "NOT_AVAILABLE"])


class TwinRules(unittest.TestCase):
    """The twin's reduction rules by hand, on one Linear and two ranks."""

    def twin(self, rules, world=2, gas=1):
        import torch
        from zerocheck_ds.model import twin
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1, bias=False)
        return twin.DenseTwin(model, world, rules, gas,
                              lambda ps: torch.optim.SGD(ps, lr=1.0), lambda m, x, r: m(x))

    def batches(self):
        import torch
        return [(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0]])),
                (torch.tensor([[0.0, 3.0]]), torch.tensor([[0.0]]))]

    def test_sum_then_divide_and_divide_then_sum(self):
        from zerocheck_ds.model import twin
        for rules in (twin.ZEROCHECK, twin.deepspeed_training(3, "loss")):
            t = self.twin(rules)
            t.start("")
            before = t.params[0][1].detach().clone()
            t.forward(self.batches(), lambda: None)
            t.backward()
            self.assertTrue(t.step())
            w = before[0]
            # d/dw mse(w.x, 0) = 2 (w.x) x; averaged over the two ranks.
            expected = before - (2 * (w[0] * 1.0) * torch_tensor([1.0, 0.0])
                                 + 2 * (w[1] * 3.0) * torch_tensor([0.0, 3.0])) / 2
            self.assertTrue(torch_allclose(t.params[0][1].detach(), expected), rules.name)

    def test_accumulation_steps_only_at_the_boundary_and_scales_the_loss(self):
        from zerocheck_ds.model import twin
        t = self.twin(twin.deepspeed_training(3, "loss"), gas=2)
        t.start("")
        before = t.params[0][1].detach().clone()
        t.forward(self.batches(), lambda: None)
        t.backward()
        self.assertFalse(t.step())
        self.assertTrue(bool((t.params[0][1].detach() == before).all()))
        t.forward(self.batches(), lambda: None)
        t.backward()
        self.assertTrue(t.step())
        t2 = self.twin(twin.deepspeed_training(3, "loss"), gas=1)
        t2.start("")
        t2.forward(self.batches(), lambda: None)
        t2.backward()
        t2.step()
        # Two identical micro-batches, each loss / 2: the same step as one micro-batch.
        self.assertTrue(torch_allclose(t.params[0][1].detach(), t2.params[0][1].detach()))

    def test_gradients_after_a_step_deepspeed_forgets_them_zerocheck_keeps_them(self):
        from zerocheck_ds.model import twin
        import torch
        # A second step with no backward since: DeepSpeed steps with a zero gradient (momentum
        # alone moves it, 0.9 of the first move); zerocheck's engine, like torch, steps with the
        # kept gradient again (1.9 of it).
        for rules, ratio in ((twin.deepspeed_training(3, "loss"), 0.9), (twin.ZEROCHECK, 1.9)):
            t = self.twin(rules)
            t._make_optimizer = lambda ps: torch.optim.SGD(ps, lr=1.0, momentum=0.9)
            t.start("")
            start = t.params[0][1].detach().clone()
            t.forward(self.batches(), lambda: None)
            t.backward()
            t.step()
            first = t.params[0][1].detach().clone()
            t.step()
            second = t.params[0][1].detach() - first
            self.assertTrue(torch_allclose(second, ratio * (first - start)), rules.name)


def torch_tensor(values):
    import torch
    return torch.tensor(values)


def torch_allclose(a, b):
    import torch
    return torch.allclose(a, b, rtol=0, atol=1e-6)


if __name__ == "__main__":
    unittest.main()


class RanksOwnViews(unittest.TestCase):
    def test_a_rank_s_own_view_is_no_disagreement(self):
        from zerocheck_ds.oracles.numerics import NumericChecks
        same = {"engines": 1, "state": {"steps": {"global_steps": 1}}, "plan": None}
        # Only rank 0 holds the one element of a parameter whose master differs (I3's view).
        everyone = [dict(same, masters=["experts.0.linear.weight"], inside={"q": 1}),
                    dict(same, masters=[], inside=None)]
        self.assertEqual(NumericChecks._agreement(None, 11, "step", everyone), [])
        behind = [dict(same, masters=[]), dict(same, masters=[], state={"steps": {"global_steps": 0}})]
        self.assertEqual(len(NumericChecks._agreement(None, 11, "step", behind)), 1)

