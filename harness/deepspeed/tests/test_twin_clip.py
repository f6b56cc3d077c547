"""The twin's gradient clip (twin.clip_gradients, DenseTwin's boundary) against DeepSpeed's formula.

DeepSpeed's unscale_and_clip_grads is written out below with torch's 0-dim tensors, as
runtime/zero/stage3.py:2109-2118 (v0.14.5) computes it, so the twin's Python floats are held to
DeepSpeed's tensor arithmetic bit for bit; then one step of the twin, whose SGD update at lr 1 is
the clipped gradient itself.
"""

import math
import unittest


def deepspeed_multiplier(norm, clip_grad, loss_scale=1.0):
    """1. / combined_scale as DeepSpeed's tensors give it (a 0-dim double)."""
    import torch
    total_norm = torch.tensor(norm, dtype=torch.float64)
    clip = ((total_norm / loss_scale) + 1e-6) / clip_grad
    clip = torch.clamp(clip, min=1.0)
    return 1. / (clip * loss_scale)


class ClipGradients(unittest.TestCase):
    def grads(self):
        import torch
        torch.manual_seed(3)
        return [torch.randn(3, 5), torch.randn(7) * 1e-3, torch.randn(2, 2) * 40]

    def test_a_binding_clip_multiplies_every_gradient_as_deepspeed_does(self):
        import torch
        from zerocheck_ds.model import twin
        for max_norm in (1e-3, 0.37, 5.0):
            grads = self.grads()
            before = [g.clone() for g in grads]
            norm, combined = twin.clip_gradients(grads, max_norm)
            whole = torch.cat([g.reshape(-1) for g in before]).double().norm(2).item()
            self.assertAlmostEqual(norm, whole, delta=whole * 1e-15)
            self.assertGreater(combined, 1.0, max_norm)
            multiplier = deepspeed_multiplier(norm, max_norm)
            for g, b in zip(grads, before):
                self.assertTrue(torch.equal(g, b.mul_(multiplier)), max_norm)

    def test_a_clip_above_the_norm_or_off_leaves_every_bit(self):
        import torch
        from zerocheck_ds.model import twin
        for max_norm in (1e6, 0.0):
            grads = self.grads()
            before = [g.clone() for g in grads]
            self.assertEqual(twin.clip_gradients(grads, max_norm)[1], 1.0)
            self.assertTrue(all(torch.equal(g, b) for g, b in zip(grads, before)))

    def test_a_non_finite_norm_is_each_version_s_sentinel(self):
        import torch
        from zerocheck_ds.model import twin
        # v0.14.5: NaN, which clamp keeps: every gradient NaN. Master: 1.0, a finite clip.
        grads = [torch.tensor([float("inf"), 1.0])]
        norm, combined = twin.clip_gradients(grads, 0.5, float("nan"))
        self.assertTrue(math.isnan(norm) and math.isnan(combined))
        self.assertTrue(bool(torch.isnan(grads[0]).all()))
        grads = [torch.tensor([float("inf"), 1.0])]
        self.assertEqual(twin.clip_gradients(grads, 0.5, -1.0), (1.0, (1.0 + 1e-6) / 0.5))
        self.assertEqual(grads[0][1].item(), torch.tensor(1.0).mul_(0.5 / (1.0 + 1e-6)).item())

    def test_sub_groups_are_cut_as_zero_3_cuts_them(self):
        from zerocheck_ds.model import twin
        self.assertEqual(twin.sub_groups([3, 1, 2], None), [[0, 1, 2]])
        self.assertEqual(twin.sub_groups([3, 1, 2], 6), [[0, 1, 2]])
        self.assertEqual(twin.sub_groups([3, 1, 2], 4), [[0, 1], [2]])
        self.assertEqual(twin.sub_groups([3, 1, 2], 1), [[0], [1], [2]])

    def test_master_s_sentinel_counts_one_per_bad_sub_group(self):
        import torch
        from zerocheck_ds.model import twin
        # Master (stage3.py:2304-2309, 2618): a sub-group whose norm is not finite reads -1, and
        # the groups' norms are combined by an L2 norm: the good group's 3 and the bad one's 1.
        grads = [torch.tensor([float("inf")]), torch.tensor([3.0])]
        norm, combined = twin.clip_gradients(grads, 0.5, -1.0, [[0], [1]])
        self.assertEqual(norm, math.sqrt(10.0))
        self.assertEqual(combined, (math.sqrt(10.0) + 1e-6) / 0.5)
        self.assertEqual(grads[1].item(), torch.tensor(3.0).mul_(1.0 / combined).item())
        # In one group the same gradients read 1 (the sentinel alone); v0.14.5's NaN stays NaN.
        grads = [torch.tensor([float("inf")]), torch.tensor([3.0])]
        self.assertEqual(twin.clip_gradients(grads, 0.5, -1.0)[0], 1.0)
        grads = [torch.tensor([float("inf")]), torch.tensor([3.0])]
        self.assertTrue(math.isnan(twin.clip_gradients(grads, 0.5, float("nan"), [[0], [1]])[0]))


class TwinStep(unittest.TestCase):
    """One step of a Linear on two ranks, SGD at lr 1: the step subtracts the clipped gradient."""

    def step(self, rules):
        import torch
        from zerocheck_ds.model import twin
        torch.manual_seed(0)
        t = twin.DenseTwin(torch.nn.Linear(3, 1, bias=False), 2, rules, 1,
                           lambda ps: torch.optim.SGD(ps, lr=1.0), lambda m, x, r: m(x))
        t.start("")
        before = t.params[0][1].detach().clone()
        t.forward([(torch.ones(1, 3), torch.zeros(1, 1)), (torch.full((1, 3), 2.0), torch.zeros(1, 1))],
                  lambda: None)
        t.backward()
        handed = t.accumulated()["weight"]
        t.step()
        return before, t.params[0][1].detach(), handed, t

    def test_deepspeed_rules_step_with_the_clipped_gradient(self):
        from zerocheck_ds.model import twin
        before, after, handed, _ = self.step(twin.deepspeed_training(3, "loss", 1e-3, float("nan")))
        clipped = handed.clone().mul_(deepspeed_multiplier(handed.double().norm(2).item(), 1e-3))
        self.assertLess(clipped.norm().item(), 1.001e-3)
        self.assertTrue(bool((after == before.add(clipped, alpha=-1.0)).all()), (after, clipped))
        before, after, handed, _ = self.step(twin.deepspeed_training(3, "loss", 1e6))
        self.assertTrue(bool((after == before.add(handed, alpha=-1.0)).all()))

    def test_zerocheck_rules_keep_the_clipped_gradient_until_zero_grad(self):
        import dataclasses
        from zerocheck_ds.model import twin
        rules = dataclasses.replace(twin.ZEROCHECK, gradient_clipping=1e-3)
        before, after, handed, t = self.step(rules)
        clipped = t.accumulated()["weight"]
        self.assertLess(clipped.norm().item(), 1.001e-3)
        self.assertTrue(bool((after == before.add(clipped, alpha=-1.0)).all()))

    def test_stages_1_and_2_say_they_do_not_follow_the_clip(self):
        from zerocheck_ds.model import twin
        self.assertEqual([twin.deepspeed_training(s, "loss", 1.0).clip_followed for s in (1, 2, 3)],
                         [False, False, True])


if __name__ == "__main__":
    unittest.main()
