"""The general repro script's steps (zerocheck_ds/repro/general_steps.py) as real code: each step
over stand-in engines, with the module's script globals set as a script sets them."""

import unittest

import torch

from . import support  # noqa: F401 - puts zerocheck_ds on the path
from zerocheck_ds.repro import general_steps as gs
from zerocheck_ds.repro import repro_runtime as rt


class Engine:
    """Records the calls a step makes; `fail` names a method that raises."""

    def __init__(self, module, fail=None):
        self.module, self.fail, self.calls = module, fail, []

    def __call__(self, x, *route):
        self.calls.append("forward")
        return self.module(x)

    def _record(self, name):
        self.calls.append(name)
        if name == self.fail:
            raise RuntimeError(f"{name} failed")

    def backward(self, loss):
        self._record("backward")

    def step(self):
        self._record("step")

    def zero_grad(self):
        self._record("zero_grad")

    def destroy(self):
        self._record("destroy")


class StandIn:
    """deepspeed.initialize that accepts everything (a faulty engine for repeats)."""

    def initialize(self, model, optimizer, config):
        return Engine(model), optimizer, None, None


class GeneralSteps(unittest.TestCase):
    def setUp(self):
        self.model = torch.nn.Linear(2, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        saved = {name: getattr(gs, name) for name in ("model", "deepspeed", "user_optimizer", "PLAIN",
                                                      "loss", "loss_engine", "backward_since_step")}
        saved_rt = {name: getattr(rt, name) for name in ("model", "PLAIN", "SEED", "RANK", "BATCH",
                                                         "FEATURES")}
        self.addCleanup(lambda: [setattr(gs, k, v) for k, v in saved.items()])
        self.addCleanup(lambda: [setattr(rt, k, v) for k, v in saved_rt.items()])
        self.addCleanup(gs.live.clear)
        self.addCleanup(gs.accepted_repeats.clear)
        self.addCleanup(rt.failures.clear)
        gs.model, gs.deepspeed, gs.user_optimizer = self.model, StandIn(), self.optimizer
        rt.model, rt.BATCH, rt.FEATURES = self.model, 1, 2
        gs.live.clear()
        rt.failures.clear()

    def test_a_repeat_over_a_managed_module_or_optimizer_must_be_refused(self):
        self.assertIsNone(gs.refusal_reason(self.model, self.optimizer))
        gs.initialize(0, self.model, self.optimizer)
        self.assertEqual(len(gs.live), 1)
        self.assertIn("already manages", gs.refusal_reason(self.model, None))
        other = torch.nn.Linear(2, 2)
        self.assertIn("optimizer already belongs", gs.refusal_reason(other, self.optimizer))
        # The stand-in accepts the repeat: I5 fails, and the accepted engine is kept for release.
        gs.initialize(1, self.model, self.optimizer)
        self.assertEqual([f[0] for f in rt.failures][:1], ["I5"])
        self.assertEqual(len(gs.accepted_repeats), 1)

    def test_training_goes_through_the_engine_that_manages_the_root(self):
        gs.initialize_once(0, self.model, self.optimizer)
        engine = gs.live[0][0]
        gs.forward(1, [])
        self.assertIsNotNone(gs.loss)
        gs.step(2)  # no backward since the last step: skipped, as DeepSpeed's loop needs one
        self.assertEqual(engine.calls, ["forward"])
        gs.backward(3)
        gs.step(4)
        gs.zero_grad(5)
        self.assertEqual(engine.calls, ["forward", "backward", "step", "zero_grad"])
        self.assertEqual(rt.failures, [])

    def test_a_failing_step_is_an_op_failure_and_release_drops_every_engine(self):
        gs.initialize_once(0, self.model, self.optimizer)
        gs.live[0] = (Engine(self.model, fail="zero_grad"),) + gs.live[0][1:]
        gs.zero_grad(1)
        self.assertEqual([f[0] for f in rt.failures], ["op"])
        self.assertIn("zero_grad raised RuntimeError", rt.failures[0][4])
        gs.release(2, "release")
        self.assertEqual(gs.live, [])
        gs.release(3, "release")  # nothing left: skipped, no failure
        self.assertEqual(len(rt.failures), 1)

    def test_the_forms_do_the_general_jobs_job_where_they_are_used(self):
        self.assertEqual(gs.forward_inputs("x", "route"), ("x", "route"))
        self.assertEqual(gs.forward_inputs_without_route("x", "route"), ("x",))
        for forms in gs.FORMS.values():
            for general, form in forms.items():
                self.assertTrue(callable(getattr(gs, general)) and callable(getattr(gs, form)))
        text = rt.source(["initialize"], gs, rt.SCRIPT_GLOBALS | gs.STEP_GLOBALS
                         | set(rt.definitions(rt)), gs.FORMS["initialized_once"])
        self.assertIn("def initialize(op_index, target, optimizer):", text)
        self.assertNotIn("refusal_reason", text)


if __name__ == "__main__":
    unittest.main()
