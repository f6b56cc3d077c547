"""I10's parts without DeepSpeed: the per-version table, the choice of scenarios, the second draw
of the knobs, the comparison of two replays' traces (oracles/inert_knobs.py), the trace's digests
(replay/trace.py) and the suite's second and third replays (suite.py)."""

import unittest

from . import support  # noqa: F401  (puts zerocheck_ds on sys.path)
from zerocheck_ds.findings.signatures import signature
from zerocheck_ds.oracles import inert_knobs
from zerocheck_ds.scenario import schema
from zerocheck_ds.scenario.config import read_config


def zero_defaults():
    config, _ = read_config({}, "$", 2)
    return config["zero_optimization"]


class Table(unittest.TestCase):
    def test_every_knob_of_the_language_has_a_promise_citing_code(self):
        knobs = {k.name for k in schema.CONFIG_ZERO_KEYS + schema.CONFIG_ZERO_FLAGS}
        self.assertEqual(set(inert_knobs.PROMISES) | set(inert_knobs.NOT_KNOBS), knobs)
        for name, promise in inert_knobs.PROMISES.items():
            self.assertRegex(promise.code, r"\.py:\d+", name)

    def test_the_reduction_layout_is_inert_at_two_ranks_only(self):
        at_two = inert_knobs.inert(3, 2, "0.14.5")
        at_three = inert_knobs.inert(3, 3, "0.14.5")
        self.assertIn("reduce_bucket_size", at_two)
        self.assertNotIn("reduce_bucket_size", at_three)
        self.assertIn("stage3_prefetch_bucket_size", at_three)

    def test_sub_groups_are_inert_without_clipping_which_the_replay_turns_off(self):
        from zerocheck_ds.engines.deepspeed_adapter import deepspeed_config
        self.assertEqual(deepspeed_config({})["gradient_clipping"], 0.0)
        self.assertIn("sub_group_size", inert_knobs.inert(3, 2, "0.14.5"))
        self.assertIn("sub_group_size", inert_knobs.inert(3, 2, "0.19.6"))

    def test_sub_groups_are_not_inert_with_clipping(self):
        self.assertNotIn("sub_group_size", inert_knobs.inert(3, 2, "0.14.5", clipping=1.0))
        self.assertIn("overlap_comm", inert_knobs.inert(3, 2, "0.14.5", clipping=1.0))

    def test_stages_one_and_two_are_not_judged_yet(self):
        self.assertEqual(inert_knobs.inert(2, 2, "0.14.5"), ())


class Choice(unittest.TestCase):
    def test_the_same_names_every_run_and_about_the_fraction(self):
        names = [f"case-{i}" for i in range(2000)]
        picked = [n for n in names if inert_knobs.chosen(n, 0.25)]
        self.assertEqual(picked, [n for n in names if inert_knobs.chosen(n, 0.25)])
        self.assertLess(abs(len(picked) / len(names) - 0.25), 0.04)
        self.assertFalse(any(inert_knobs.chosen(n, 0.0) for n in names))
        self.assertTrue(all(inert_knobs.chosen(n, 1.0) for n in names))
        self.assertNotEqual(picked, [n for n in names if inert_knobs.chosen(n, 0.25, seed=1)])


class Redraw(unittest.TestCase):
    def test_sizes_land_on_and_beside_the_scenarios_sizes(self):
        numels = [16, 4, 16, 4]  # two Linear(4, 4)
        sizes = set(inert_knobs._sizes(numels, 2))
        self.assertLessEqual({16, 4, 8, 2, 20, 36, 40}, sizes)
        seen = set()
        for seed in range(200):
            zero = zero_defaults()
            changed = inert_knobs.redraw(zero, ("reduce_bucket_size",), numels, 2, seed)
            self.assertTrue(changed)
            seen.add(zero["reduce_bucket_size"])
        near = {s + d for s in sizes for d in (-1, 0, 1)} | {0, 500000000}
        self.assertLessEqual(seen, near)
        self.assertGreater(len(seen), 10)

    def test_only_the_knobs_asked_change_and_the_same_seed_draws_the_same(self):
        knobs = inert_knobs.inert(3, 2, "0.14.5")
        a, b = zero_defaults(), zero_defaults()
        changed = inert_knobs.redraw(a, knobs, [16, 4], 2, 7)
        self.assertEqual(changed, inert_knobs.redraw(b, knobs, [16, 4], 2, 7))
        self.assertEqual(a, b)
        before = zero_defaults()
        self.assertEqual({k for k in a if a[k] != before[k]}, set(changed))
        self.assertLessEqual(set(changed), set(knobs))
        self.assertEqual(a["stage"], 3)
        self.assertEqual(a["stage3_param_persistence_threshold"], before["stage3_param_persistence_threshold"])
        for name in changed:
            self.assertIsInstance(a[name], type(before[name]))


def entry(index, op, **fields):
    base = {"op_index": index, "op": op, "errors": "e", "loss": None, "parameters": "p",
            "optimizer": "o", "steps": "s"}
    base.update(fields)
    return base


class Compare(unittest.TestCase):
    def test_equal_traces_have_no_difference(self):
        trace = [[entry(None, "build"), entry(0, "initialize")]] * 2
        self.assertIsNone(inert_knobs.first_difference(trace, [list(t) for t in trace]))

    def test_the_first_difference_names_the_operation_the_field_and_the_ranks(self):
        first = [[entry(None, "build"), entry(0, "step", optimizer="a"), entry(1, "forward", loss="x")]] * 2
        second = [[entry(None, "build"), entry(0, "step", optimizer="b"), entry(1, "forward", loss="y")],
                  [entry(None, "build"), entry(0, "step", optimizer="a"), entry(1, "forward", loss="y")]]
        where = inert_knobs.first_difference(first, second)
        self.assertEqual(where, (0, 1, "optimizer"))
        finding = inert_knobs.finding(first, second, {"reduce_bucket_size": (500000000, 19)}, where)
        self.assertEqual((finding["invariant"], finding["op_index"], finding["op"], finding["attribute"]),
                         ("I10", 0, "step", "optimizer"))
        self.assertEqual(finding["ranks"], [0])
        self.assertIn("reduce_bucket_size 500000000 -> 19", finding["message"])
        self.assertEqual(signature(finding), "I10 step: optimizer change when the inert knobs change")

    def test_a_replay_that_stops_early_differs(self):
        first = [[entry(None, "build"), entry(0, "step")]]
        self.assertEqual(inert_knobs.first_difference(first, [first[0][:1]]), (0, 1, "operations"))


class TraceDigests(unittest.TestCase):
    def test_digests_follow_the_bits(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        from zerocheck_ds.replay import trace
        a = trace._digest([("w", torch.tensor([1.0, 2.0]))])
        self.assertEqual(a, trace._digest([("w", torch.tensor([1.0, 2.0]))]))
        self.assertNotEqual(a, trace._digest([("w", torch.tensor([1.0, 2.0000002]))]))
        self.assertNotEqual(a, trace._digest([("v", torch.tensor([1.0, 2.0]))]))
        self.assertNotEqual(trace._digest([("b", torch.tensor([1.0], dtype=torch.bfloat16))]),
                            trace._digest([("b", torch.tensor([1.0078125], dtype=torch.bfloat16))]))



class ParameterSizes(unittest.TestCase):
    def test_a_users_ds_numel_is_not_a_size(self):
        # The collision dictionary puts DeepSpeed's names on the user's parameters: a user's
        # `ds_numel = ""` stopped the second replay before its first operation.
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        from zerocheck_ds.replay.replay import _numel
        p = torch.nn.Parameter(torch.zeros(3, 4))
        p.ds_numel = ""
        self.assertEqual(_numel(p), 12)
        empty = torch.nn.Parameter(torch.zeros(0))
        empty.ds_numel = 12  # as zero.Init leaves a partitioned parameter
        self.assertEqual(_numel(empty), 12)


class FakeSupervisor:
    """Replays answered from a script: the traces of the first, second (knobs drawn again), third
    (the first's knobs) and fourth (the second's knobs again) replay, by the job's name suffix."""

    SUFFIXES = ("~inert-knobs-again", "~inert-knobs", "~same-knobs")

    def __init__(self, first, second, third=None, knobs=None, fourth=None):
        self.traces = {"": first, "~inert-knobs": second, "~same-knobs": third or first,
                       "~inert-knobs-again": fourth or second}
        self.knobs = {"reduce_bucket_size": [500000000, 7]} if knobs is None else knobs
        self.jobs = []

    def replay(self, name, path, world_size, disable=None, extra=None):
        from zerocheck_ds.suite.pool import Outcome
        self.jobs.append((name, dict(extra or {})))
        suffix = next((s for s in self.SUFFIXES if name.endswith(s)), "")
        knobs = self.knobs if (extra or {}).get("knob_seed") is not None else {}
        per_rank = [{"findings": [], "skipped": [], "trace": t, "knobs": knobs}
                    for t in self.traces[suffix]]
        return Outcome("done", per_rank=per_rank), []


class Args:
    disabled, world, inert_fraction, inert_seed, scenario_timeout = (), 2, 1.0, 0, 60.0


class SecondReplay(unittest.TestCase):
    """suite._replay_judged: which replays run, and what each answer makes of I10."""

    def judge(self, supervisor, args=Args):
        from zerocheck_ds.suite.suite import _replay_judged
        return _replay_judged(supervisor, "case", "/tmp/case.json", args)[2]

    def test_the_same_bits_are_a_check_made(self):
        trace = [[entry(None, "build"), entry(0, "step")]] * 2
        fake = FakeSupervisor(trace, trace)
        findings, tally, knobs = self.judge(fake)
        self.assertEqual((findings, tally["checked"]), ([], 1))
        self.assertEqual(knobs, fake.knobs)
        self.assertEqual([name for name, _ in fake.jobs], ["case", "case~inert-knobs"])
        self.assertTrue(all(extra["trace"] for _, extra in fake.jobs))

    def test_a_difference_the_same_knobs_do_not_give_is_a_finding(self):
        first = [[entry(None, "build"), entry(0, "step")]] * 2
        second = [[entry(None, "build"), entry(0, "step", parameters="q")]] * 2
        fake = FakeSupervisor(first, second)
        findings, tally, _ = self.judge(fake)
        self.assertEqual([(f["invariant"], f["op"], f["attribute"], f["ranks"]) for f in findings],
                         [("I10", "step", "parameters", [0, 1])])
        self.assertEqual(tally["checked"], 1)
        self.assertEqual([name for name, _ in fake.jobs], [
            "case", "case~inert-knobs", "case~same-knobs", "case~inert-knobs-again"])
        self.assertEqual(fake.jobs[1][1]["knob_seed"], fake.jobs[3][1]["knob_seed"])

    def test_a_difference_the_second_knobs_do_not_give_again_is_not_blamed_on_them(self):
        # A race that struck the second replay alone (DeepSpeed's Gloo all_gather race).
        first = [[entry(None, "build"), entry(0, "step")]] * 2
        second = [[entry(None, "build", parameters="raced"), entry(0, "step")]] * 2
        findings, tally, _ = self.judge(FakeSupervisor(first, second, fourth=first))
        self.assertEqual(findings, [])
        self.assertEqual(list(tally["not_checked"]), [
            "not deterministic: a replay with the second draw's knobs did not give that draw's "
            "numbers again"])

    def test_a_difference_the_same_knobs_give_too_is_not_blamed_on_the_knobs(self):
        first = [[entry(None, "build"), entry(0, "step")]] * 2
        other = [[entry(None, "build"), entry(0, "step", loss="z")]] * 2
        findings, tally, _ = self.judge(FakeSupervisor(first, other, third=other))
        self.assertEqual(findings, [])
        self.assertEqual(list(tally["not_checked"]), [
            "not deterministic: a replay with the same knobs differs too, first at op 0 (step): loss"])

    def test_a_state_one_replay_cannot_read_is_not_judged(self):
        first = [[entry(None, "build"), entry(0, "step", parameters="x", unreadable="RuntimeError: narrow")]]
        second = [[entry(None, "build"), entry(0, "step")]]
        findings, tally, _ = self.judge(FakeSupervisor(first, second))
        self.assertEqual(findings, [])
        self.assertEqual(list(tally["not_checked"]),
                         ["the engine's state could not be read: RuntimeError: narrow"])

    def test_a_scenario_not_chosen_or_i10_off_is_replayed_once(self):
        trace = [[entry(None, "build")]]
        args = type("NotChosen", (Args,), {"inert_fraction": 0.0})
        fake = FakeSupervisor(trace, trace)
        findings, tally, _ = self.judge(fake, args)
        self.assertEqual((findings, tally["checked"], len(fake.jobs)), ([], 0, 1))
        off = type("Off", (Args,), {"disabled": ("I10",)})
        fake = FakeSupervisor(trace, trace)
        self.assertEqual(self.judge(fake, off), ([], {}, {}))
        self.assertEqual(fake.jobs, [("case", {})])


if __name__ == "__main__":
    unittest.main()
