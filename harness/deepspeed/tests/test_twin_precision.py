"""The dense twin in DeepSpeed ZeRO-3's bf16 dtypes (model/twin.py Precision, reduce_in_dtypes):
which configs it follows, the reduce's casts per version, and an fp32 master the step rounds
back to bf16 (docs/deepspeed-precision.md, rules R1, R3, R4, R9). Bit-exactness against DeepSpeed
itself is the upstream ctest's (upstream_precision_master)."""

import unittest

import torch

from zerocheck_ds.model import twin

BF16 = torch.bfloat16


def config(**keys):
    return dict({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}, **keys)


class WhatIsFollowed(unittest.TestCase):
    def test_bf16_defaults_reduce_and_accumulate_in_bf16(self):
        p = twin.deepspeed_precision(config(), "master")
        self.assertEqual((p.param, p.comm, p.accum, p.reduced_to_param_first), (BF16, BF16, BF16, False))
        self.assertTrue(twin.deepspeed_precision(config(), "v0.14.5").reduced_to_param_first)
        fp32 = twin.deepspeed_precision(config(communication_data_type="fp32",
                                               data_types={"grad_accum_dtype": "fp32"}), "master")
        self.assertEqual((fp32.comm, fp32.accum), (torch.float32, torch.float32))
        self.assertTrue(twin.deepspeed_precision({"zero_optimization": {"stage": 3}}, "master").plain)

    def test_what_the_twin_does_not_follow_is_named(self):
        self.assertEqual(twin.precision_not_followed(config(), world_size=2), ())
        self.assertEqual(twin.precision_not_followed(config(), world_size=3),
                         ("bf16.enabled at world >= 3",))
        self.assertEqual(twin.precision_not_followed(dict(config(), zero_optimization={"stage": 2})),
                         ("bf16.enabled below ZeRO stage 3",))
        self.assertEqual(twin.precision_not_followed({"fp16": {"enabled": True}}), ("fp16.enabled",))
        self.assertEqual(twin.precision_not_followed({"communication_data_type": "bf16"}),
                         ("communication_data_type",))  # fp32 parameters, a bf16 reduce


class Reduce(unittest.TestCase):
    # Two ranks' bf16 gradients whose halves sum to a value between two bf16 neighbours.
    a = torch.tensor([1.0, 3.0, -2.0], dtype=BF16)
    b = torch.tensor([2.0 ** -8, 2.0 ** -7 + 2.0 ** -9, 0.5], dtype=BF16)

    def test_bf16_reduce_is_the_fp32_sum_of_the_halves_rounded_once(self):
        got = twin.reduce_in_dtypes([self.a, self.b], 2, twin.Precision(BF16, BF16, BF16))
        want = (self.a.div(2).float() + self.b.div(2).float()).to(BF16)
        self.assertEqual(got.dtype, BF16)
        self.assertTrue(torch.equal(got, want))

    def test_v0_14_5_rounds_an_fp32_reduce_to_bf16_before_the_fp32_accumulation(self):
        fp32 = torch.float32
        master = twin.reduce_in_dtypes([self.a, self.b], 2, twin.Precision(BF16, fp32, fp32))
        v0145 = twin.reduce_in_dtypes([self.a, self.b], 2, twin.Precision(BF16, fp32, fp32, True))
        self.assertEqual((master.dtype, v0145.dtype), (fp32, fp32))
        self.assertTrue(torch.equal(v0145, master.to(BF16).float()))
        self.assertFalse(torch.equal(v0145, master))  # the rounding shows on these values

    def test_a_rank_without_a_gradient_and_none_at_all(self):
        p = twin.Precision(BF16, BF16, BF16)
        self.assertTrue(torch.equal(twin.reduce_in_dtypes([None, self.a], 2, p), self.a.div(2)))
        self.assertIsNone(twin.reduce_in_dtypes([None, None], 2, p))


class Step(unittest.TestCase):
    def make(self):
        torch.manual_seed(3)
        model = torch.nn.Linear(3, 2)
        training = twin.deepspeed_training(3, "output_gradient",
                                           precision=twin.deepspeed_precision(config(), "master"))
        dense = twin.DenseTwin(model, 1, training, 1, lambda ps: torch.optim.SGD(ps, lr=1e-3),
                               lambda module, x, route: module(x))
        dense.start("")
        return model, dense

    def test_bf16_parameters_over_an_fp32_master_rounded_back_after_the_step(self):
        model, dense = self.make()
        self.assertEqual(model.weight.dtype, BF16)
        before = dense.masters()
        self.assertTrue(torch.equal(before["weight"], model.weight.detach().float()))  # R1
        x, y = torch.ones(4, 3), torch.zeros(4, 2)
        dense.forward([(x, y)], lambda: None)
        dense.backward()
        self.assertEqual(dense.accumulated()["weight"].dtype, BF16)  # R4: bf16 accumulation
        self.assertTrue(dense.step())
        used = dense.last_step[0]["weight"][0]
        after = dense.masters()["weight"]
        self.assertTrue(torch.equal(after, before["weight"] - 1e-3 * used))  # fp32 SGD on the master
        self.assertTrue(torch.equal(model.weight.detach(), after.to(BF16)))  # R9: nearest even
        # A lr this small moves the fp32 master by less than a bf16 ulp: the master keeps it.
        self.assertFalse(torch.equal(after, model.weight.detach().float()))

    def test_an_edit_reaches_the_master(self):
        model, dense = self.make()
        with torch.no_grad():
            model.weight.mul_(0.5)
        dense.edited()
        self.assertTrue(torch.equal(dense.masters()["weight"], model.weight.detach().float()))


class Load(unittest.TestCase):
    """R10: what a load restores under bf16 parameters."""

    def saved_then_stepped(self):
        model, dense = Step.make(self)
        x, y = torch.ones(4, 3), torch.zeros(4, 2)
        dense.forward([(x, y)], lambda: None)
        dense.backward()
        dense.step()
        saved = dense.snapshot()
        # The master holds digits below bf16 (a step smaller than an ulp), so the two loads differ.
        self.assertFalse(torch.equal(saved["masters"]["weight"], saved["values"]["weight"].float()))
        dense.forward([(x, y)], lambda: None)
        dense.backward()
        dense.step()
        return model, dense, saved

    def test_with_the_optimizers_states_the_saved_fp32_master_comes_back(self):
        model, dense, saved = self.saved_then_stepped()
        dense.restore(saved, optimizer_states=True)
        self.assertTrue(torch.equal(dense.masters()["weight"], saved["masters"]["weight"]))
        self.assertTrue(torch.equal(model.weight.detach(), saved["values"]["weight"]))

    def test_without_them_the_master_is_rebuilt_from_the_bf16_parameter(self):
        model, dense, saved = self.saved_then_stepped()
        dense.restore(saved, optimizer_states=False)
        self.assertTrue(torch.equal(model.weight.detach(), saved["values"]["weight"]))
        self.assertTrue(torch.equal(dense.masters()["weight"], saved["values"]["weight"].float()))


if __name__ == "__main__":
    unittest.main()
