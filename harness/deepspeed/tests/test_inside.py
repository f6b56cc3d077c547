"""I3's root cause located inside an operation (oracles/inside.py, engines/zero3_inside.py) and the
key it gives (findings/root_causes.py), by hand, without DeepSpeed.

The planted DeepSpeed faults of harness/tests/upstream_faults_test.py show the same on the real
engine: a wrong gradient, a wrong accumulation, a wrong copy back and a copy back made too early
are four root causes, none of them the stale gradient's.
"""

import unittest

import torch

from zerocheck_ds.engines import zero3_inside
from zerocheck_ds.findings import root_causes
from zerocheck_ds.oracles import inside

WORLD = 2
W = torch.arange(1.0, 6.0)  # one parameter "w" of 5 elements: rank 0 holds [0, 3), rank 1 [3, 5)
PARAMS = [("w", 5)]


def partition(whole, rank):
    """A ZeRO-3 partition of `whole`: ceil(5 / 2) = 3 elements, zero padded."""
    part = whole[rank * 3:rank * 3 + 3]
    return torch.cat([part, part.new_zeros(3 - part.numel())])


def a_correct_step(rank, used, before, after):
    observed = inside.Observed()
    for quantity, whole in (("handed_gradient", used), ("unscaled_gradient", used),
                            ("master_before", before), ("master_after", after),
                            ("shard_after_copy", after), ("master_at_copy", after)):
        observed.add(quantity, "w", partition(whole, rank))
    return observed


class LocateStep(unittest.TestCase):
    used, before = W / 10, W
    after = W - W / 100

    def locate(self, observed, rank=1, clipped=None):
        return inside.locate_step(observed, {"w": self.used},
                                  {"w": self.used if clipped is None else clipped},
                                  {"w": self.before}, {"w": self.after}, rank, WORLD, PARAMS)

    def test_a_correct_step_locates_nothing_and_padding_is_ignored(self):
        observed = a_correct_step(1, self.used, self.before, self.after)
        observed.master_after["w"][0][2] = 99.0  # rank 1's padding element
        self.assertIsNone(self.locate(observed))

    def test_each_quantity_is_found_where_it_first_differs(self):
        cases = {
            "handed_gradient": ("handed_gradient", "unscaled_gradient", "master_after"),
            "unscaled_gradient": ("unscaled_gradient", "master_after", "shard_after_copy"),
            "master_before": ("master_before", "master_after"),
            "master_after": ("master_after", "master_at_copy", "shard_after_copy"),
            "copy_back": ("shard_after_copy",),
        }
        for expected, wrong in cases.items():
            with self.subTest(expected):
                observed = a_correct_step(1, self.used, self.before, self.after)
                for quantity in wrong:
                    getattr(observed, quantity)["w"][0][0] += 1.0
                self.assertEqual(self.locate(observed), {"quantity": expected, "param": "w"})

    def test_a_copy_back_made_before_the_optimizer_step(self):
        observed = a_correct_step(0, self.used, self.before, self.after)
        observed.shard_after_copy["w"] = [partition(self.before, 0)]
        observed.master_at_copy["w"] = [partition(self.before, 0)]
        self.assertEqual(self.locate(observed, rank=0), {"quantity": "copied_early", "param": "w"})

    def test_bf16_shards_hold_the_master_rounded_and_the_master_keeps_its_bits(self):
        # A bf16 step: the shard is the fp32 master rounded to nearest even, the master is not.
        after = self.after + 1e-3
        observed = a_correct_step(0, self.used, self.before, after)
        rounded = partition(after, 0).to(torch.bfloat16)
        observed.shard_after_copy["w"] = [rounded.float()]
        observed.copy_of_master["w"] = [rounded.float()]
        self.assertIsNone(inside.locate_step(observed, {"w": self.used}, {"w": self.used},
                                             {"w": self.before}, {"w": after}, 0, WORLD, PARAMS))
        observed.shard_after_copy["w"] = [partition(after, 0)]  # not rounded: not the copy's
        self.assertEqual(inside.locate_step(observed, {"w": self.used}, {"w": self.used},
                                            {"w": self.before}, {"w": after}, 0, WORLD, PARAMS),
                         {"quantity": "copy_back", "param": "w"})

    def test_with_a_loss_scale_the_unscaled_gradient_is_not_compared(self):
        observed = a_correct_step(0, self.used, self.before, self.after)
        observed.unscaled_gradient["w"][0][0] += 1.0
        observed.unit_loss_scale = False
        self.assertIsNone(self.locate(observed, rank=0))

    def test_with_clipping_the_clip_s_result_is_compared_with_the_twin_s(self):
        # The twin clips by 1/2: an engine that clips alike holds; one that does not clip, or
        # clips by another coefficient (a norm of its own partition), is located at the clip,
        # before the optimizer step its wrong gradient then moves.
        clipped = self.used / 2
        observed = a_correct_step(1, self.used, self.before, self.after)
        observed.unscaled_gradient["w"] = [partition(clipped, 1)]
        self.assertIsNone(self.locate(observed, clipped=clipped))
        for wrong in (self.used, self.used / 3):
            with self.subTest(wrong=wrong.tolist()):
                observed = a_correct_step(1, self.used, self.before, self.after)
                observed.unscaled_gradient["w"] = [partition(wrong, 1)]
                observed.master_after["w"][0][0] += 1.0  # the step after it differs too
                self.assertEqual(self.locate(observed, clipped=clipped),
                                 {"quantity": "unscaled_gradient", "param": "w"})


class MastersThatDiffer(unittest.TestCase):
    """With 16-bit parameters I3 also compares each rank's fp32 master after a step."""

    after = W - W / 100

    def test_a_master_off_in_its_low_digits_is_named_and_padding_is_ignored(self):
        for rank in (0, 1):
            observed = a_correct_step(rank, W / 10, W, self.after)
            self.assertEqual(inside.masters_that_differ(observed, {"w": self.after}, rank, WORLD,
                                                        PARAMS), [])
            observed.master_after["w"][0][2] += 0 if rank == 1 else 2.0 ** -20  # rank 1: padding
            observed.master_after["w"][0][2] += 99.0 if rank == 1 else 0
            want = ["w"] if rank == 0 else []
            self.assertEqual(inside.masters_that_differ(observed, {"w": self.after}, rank, WORLD,
                                                        PARAMS), want)

    def test_a_rank_that_read_no_master_compares_nothing(self):
        self.assertEqual(inside.masters_that_differ(inside.Observed(), {"w": self.after}, 0,
                                                    WORLD, PARAMS), [])


class LocateBackward(unittest.TestCase):
    grads = [W, 2 * W]  # each rank's gradient
    reduced = W / 2 + 2 * W / 2

    def locate(self, observed, rank=0, accumulated=None):
        return inside.locate_backward(observed, {"w": self.grads},
                                      {"w": self.reduced if accumulated is None else accumulated},
                                      rank, WORLD, True, PARAMS)

    def correct(self, rank=0):
        observed = inside.Observed()
        observed.add("local_gradient", "w", self.grads[rank])
        observed.add("reduced_partition", "w", partition(self.reduced, rank))
        observed.add("accumulated_partition", "w", partition(self.reduced, rank))
        return observed

    def test_a_correct_backward_locates_nothing(self):
        self.assertIsNone(self.locate(self.correct()))
        self.assertIsNone(self.locate(self.correct(1), rank=1))

    def test_the_gradient_before_reduction_then_the_reduction_then_the_accumulation(self):
        observed = self.correct()
        observed.local_gradient["w"][0] *= 0.5  # the loss scaled twice
        observed.reduced_partition["w"][0] *= 0.5
        self.assertEqual(self.locate(observed)["quantity"], "local_gradient")
        observed = self.correct()
        observed.reduced_partition["w"][0][1] += 1
        self.assertEqual(self.locate(observed)["quantity"], "reduced_partition")
        observed = self.correct(1)
        observed.accumulated_partition["w"][0][:2] = torch.tensor([0.0, 6.0])  # one element late
        self.assertEqual(self.locate(observed, rank=1)["quantity"], "accumulated_partition")

    def test_a_parameter_reduced_twice_in_one_backward_is_judged_by_its_accumulation(self):
        observed = self.correct()
        observed.add("reduced_partition", "w", torch.zeros(3))
        self.assertIsNone(self.locate(observed))

    def test_the_earliest_of_the_ranks_wins_on_every_rank(self):
        late = {"quantity": "accumulated_partition", "param": "w"}
        early = {"quantity": "local_gradient", "param": "v"}
        self.assertEqual(inside.earliest([late, None, early]), early)
        self.assertIsNone(inside.earliest([None, None]))


class LocateLoad(unittest.TestCase):
    values, moments = W, W / 10

    def loaded(self, rank=1, **changes):
        """Rank `rank`'s fields after a load that restored everything as the twin did."""
        observed = inside.Observed()
        observed.loaded = {"values": {"w": partition(self.values, rank)},
                           "master": {"w": partition(self.values, rank)},
                           "state:exp_avg": {"w": partition(self.moments, rank)},
                           "state:step": {"w": torch.tensor([3.0])}}
        for field_name, tensor in changes.items():
            observed.loaded[field_name.replace("__", ":")]["w"] = tensor
        return observed

    def locate(self, observed, rank=1):
        return inside.locate_load(observed, {"w": self.values},
                                  {"w": {"exp_avg": self.moments, "step": torch.tensor(3.0)}},
                                  rank, WORLD, PARAMS)

    def test_a_correct_load_locates_nothing(self):
        self.assertIsNone(self.locate(self.loaded()))

    def test_the_first_field_that_differs_and_who_restored_it(self):
        wrong = torch.full((3,), 9.0)
        observed = self.loaded(master=wrong, state__exp_avg=wrong)
        observed.restored_by = {"master": {"w": ("deepspeed/runtime/zero/stage3.py",
                                                 "_restore_from_bit16_weights")}}
        found = self.locate(observed)
        self.assertEqual((found["quantity"], found["field"], found["function"], found["restored"]),
                         ("restored_master", "master", "_restore_from_bit16_weights", True))
        found = self.locate(self.loaded(state__step=torch.tensor([2.0])))
        self.assertEqual((found["field"], found["function"], found["restored"]),
                         ("state:step", "load_checkpoint", False))  # the load left it as it was
        self.assertEqual(inside.described(found)["quantity"], "the optimizer's step")


class LocateGather(unittest.TestCase):
    """A gather with a modifier rank: the copy that rank edited against the twin's value before
    the edit, then after it (a gather that handed over a copy before its data arrived)."""

    def observed(self, copy, edited):
        observed = inside.Observed()
        observed.add("gathered_copy", "w", copy)
        observed.add("edited_copy", "w", edited)
        return observed

    def locate(self, observed):
        return inside.locate_gather(observed, {"w": W}, {"w": W / 2}, PARAMS)

    def test_a_right_copy_edited_locates_nothing(self):
        self.assertIsNone(self.locate(self.observed(W, W / 2)))
        self.assertIsNone(self.locate(inside.Observed()))  # a rank that read no copy

    def test_a_copy_handed_over_wrong_then_one_changed_under_the_edit(self):
        stale = W.clone()
        stale[4] = 0.0  # rank 1's element, as before its data arrived
        self.assertEqual(self.locate(self.observed(stale, stale / 2)),
                         {"quantity": "gathered_copy", "param": "w"})
        # The copy was right, and the gather's data landed after the edit: the edit is gone.
        self.assertEqual(self.locate(self.observed(W, W)),
                         {"quantity": "edited_copy", "param": "w"})
        self.assertFalse(self.observed(W, W).empty())


class Keys(unittest.TestCase):
    def finding(self, origin, attribute="value", op="step"):
        return {"invariant": "I3", "op": op, "attribute": attribute, "origin": origin,
                "signature": f"I3 {op}: {attribute} differs from the dense twin on Linear parameter"}

    def located(self, key, got_gradient, op="step", edit=False):
        words = inside.described({"quantity": key, "param": "w"})
        return {"action": "located", "op": op, "op_index": 3, "param": "w",
                "quantity": words["quantity"], "file": words["file"],
                "function": words["function"], "got_gradient": got_gradient,
                "after_gathered_edit": edit}

    def test_each_quantity_and_the_gradient_give_their_own_key(self):
        titles = {root_causes.cause_title(self.finding(self.located(q.key, got)))
                  for q in inside.QUANTITIES for got in (True, False)}
        self.assertEqual(len(titles), 2 * len(inside.QUANTITIES))
        stale = root_causes.cause_title(self.finding(self.located("handed_gradient", False)))
        self.assertEqual(stale, "I3 step: the gradient handed to the optimizer first differs from "
                                "the dense twin, for a parameter without a gradient in the step: "
                                "deepspeed/runtime/zero/stage3.py _prepare_sub_group()")
        self.assertIn(stale, root_causes.known_upstream())  # KNOWN_UPSTREAM.md's stale gradient

    def test_a_backward_is_named_by_its_operation_and_keeps_no_gradient_words(self):
        title = root_causes.cause_title(self.finding(
            self.located("accumulated_partition", None, op="backward")))
        self.assertEqual(title, "I3 backward: the accumulated gradient partition first differs "
                                "from the dense twin: deepspeed/runtime/zero/stage3.py "
                                "partition_grads()")

    def test_without_the_engine_s_quantities_the_operation_and_the_gradient(self):
        got = root_causes.cause_title(self.finding({"action": "not located", "got_gradient": True}))
        none = root_causes.cause_title(self.finding({"action": "not located",
                                                     "got_gradient": False}))
        self.assertEqual(got, "I3 step: value first differs from the dense twin, for a parameter "
                              "that got a gradient in the step")
        self.assertNotEqual(got, none)
        # A whole copy, a load, a loss: as before.
        self.assertEqual(root_causes.cause_title(self.finding(None, "whole copy")),
                         "I3 step: whole copy first differs from the dense twin")
        self.assertEqual(root_causes.cause_title(self.finding(None, op="load")),
                         "I3 load: value first differs from the dense twin")

    def test_a_load_is_keyed_by_the_restored_field_and_who_restored_it(self):
        def title(field_name, function):
            found = {"quantity": "restored_" + field_name.partition(":")[0], "param": "w",
                     "field": field_name, "file": "deepspeed/runtime/engine.py",
                     "function": function or "load_checkpoint", "restored": bool(function)}
            words = inside.described(found)
            origin = dict(self.located("copy_back", None, op="load"), quantity=words["quantity"],
                          file=words["file"], function=words["function"],
                          restored=words["restored"])
            return root_causes.cause_title(self.finding(origin, op="step"))
        titles = {title(f, fn) for f in ("values", "master", "state:exp_avg")
                  for fn in ("load_module_state_dict", None)}
        self.assertEqual(len(titles), 6)
        self.assertIn("I3 load: the parameter's value first differs from the dense twin, not "
                      "restored by the load: deepspeed/runtime/engine.py load_checkpoint()", titles)
        self.assertNotIn("I3 load: value first differs from the dense twin", titles)

    def test_a_whole_copy_not_located_is_keyed_by_who_wrote_it(self):
        gather = "deepspeed/runtime/zero/partition_parameters.py _allgather_params_coalesced()"
        fetch = "deepspeed/runtime/zero/partition_parameters.py wait()"
        titles = {root_causes.cause_title(self.finding(
            {"action": "not located", "got_gradient": True, "written_by": w}, "whole copy"))
            for w in (gather, fetch)}
        self.assertEqual(titles, {f"I3 step: whole copy first differs from the dense twin, last "
                                  f"written by {w}" for w in (gather, fetch)})

    def test_a_gathered_copy_is_keyed_at_the_gather_not_after_the_edit(self):
        origin = dict(self.located("gathered_copy", None, op="gather"), after_gathered_edit=False)
        title = root_causes.cause_title(self.finding(origin, "value after a gathered edit", "gather"))
        self.assertEqual(title, "I3 gather: the gathered copy the edit was made on first differs "
                                "from the dense twin: deepspeed/runtime/zero/partition_parameters.py "
                                "GatheredParameters.__enter__()")
        self.assertNotEqual(title, root_causes.cause_title(
            self.finding(None, "value after a gathered edit", "gather")))

    def test_an_edit_does_not_key_the_gradient_of_a_parameter_that_got_none(self):
        # Master, random-0045 of seed 7: the stale gradient's step, after a gathered edit of other
        # parameters, landed beside the stale-gradient row; without the gather it is that row.
        stale = root_causes.cause_title(self.finding(self.located("handed_gradient", False)))
        edited = root_causes.cause_title(self.finding(
            self.located("handed_gradient", False, edit=True), "value after a gathered edit"))
        self.assertEqual(edited, stale)
        # The edit still keys what it can explain: a value, or a gradient that was computed.
        for key, got in (("master_before", False), ("handed_gradient", True)):
            self.assertNotEqual(
                root_causes.cause_title(self.finding(self.located(key, got, edit=True))),
                root_causes.cause_title(self.finding(self.located(key, got))))

    def test_later_i3_findings_belong_to_the_first(self):
        first = dict(self.finding(self.located("copy_back", True)), op_index=3)
        loss = dict(self.finding(None, "loss", "forward"), op_index=5)
        verdict = {"findings": [loss, first]}
        titles = {title for title, _ in root_causes.scenario_causes(verdict)}
        self.assertEqual(titles, {root_causes.cause_title(first)})


class FakeStage3:
    """The stage-3 optimizer's methods zero3_inside wraps, computing a one-parameter step."""

    class Param:
        def __init__(self):
            self.ds_id, self.grad = 0, None
            self.ds_tensor = torch.zeros(3)

        def partition_numel(self):
            return 3

    def __init__(self):
        self.fp16_groups = [[self.Param()]]
        self.fp32_partitioned_groups_flat = [torch.arange(1.0, 4.0)]
        self._DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition = {0: torch.zeros(3)}
        self.clip_grad, self.loss_scale = 0.0, 1.0
        self.calls = []

    def reduce_ready_partitions_and_remove_grads(self, param):
        self.calls.append("reduce")

    def partition_grads(self, params, grad_partitions):
        self._DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition[0].copy_(grad_partitions[0])
        return "buffers"

    def _prepare_sub_group(self, i, timer_names):
        self.fp32_partitioned_groups_flat[i].grad = torch.ones(3)

    def unscale_and_clip_grads(self, i, total_norm):
        pass

    def _optimizer_step(self, i):
        self.fp32_partitioned_groups_flat[i].sub_(self.fp32_partitioned_groups_flat[i].grad)

    def _reassign_or_swap_out_partitioned_parameters(self, i):
        self.fp16_groups[i][0].ds_tensor.copy_(self.fp32_partitioned_groups_flat[i])

    def _rigid_load_state_dict(self, state_dict, load_optimizer_states=True):
        self.optimizer.state[self.fp32_partitioned_groups_flat[0]] = {
            "exp_avg": state_dict["exp_avg"].clone(), "step": 4}
        self._restore_from_bit16_weights()  # a nested load method: the master is its

    def _restore_from_bit16_weights(self):
        self.fp32_partitioned_groups_flat[0].copy_(self.fp16_groups[0][0].ds_tensor)


class Capture(unittest.TestCase):
    def make(self):
        optimizer = FakeStage3()
        param = optimizer.fp16_groups[0][0]
        return optimizer, param, zero3_inside.Zero3Inside(optimizer, {id(param): "w"})

    def test_each_method_records_what_it_produced_and_still_runs(self):
        optimizer, param, capture = self.make()
        param.grad = torch.full((5,), 2.0)
        optimizer.reduce_ready_partitions_and_remove_grads(param)
        self.assertEqual(optimizer.partition_grads([param], [torch.tensor([4.0, 5.0, 6.0])]),
                         "buffers")
        optimizer._prepare_sub_group(0, set())
        optimizer.unscale_and_clip_grads(0, None)
        optimizer._optimizer_step(0)
        optimizer._reassign_or_swap_out_partitioned_parameters(0)
        observed = capture.take()
        self.assertEqual(observed.local_gradient["w"][0].tolist(), [2.0] * 5)
        self.assertEqual(observed.accumulated_partition["w"][0].tolist(), [4.0, 5.0, 6.0])
        self.assertEqual(observed.master_before["w"][0].tolist(), [1.0, 2.0, 3.0])
        self.assertEqual(observed.master_after["w"][0].tolist(), [0.0, 1.0, 2.0])
        self.assertEqual(observed.shard_after_copy["w"][0].tolist(), [0.0, 1.0, 2.0])
        self.assertTrue(observed.unit_loss_scale)
        self.assertTrue(capture.take().empty())  # taken: nothing piles up
        # The class is untouched: another optimizer is not captured.
        self.assertNotIn("_optimizer_step", vars(FakeStage3()))

    def test_a_gathered_copy_is_recorded_as_handed_over_before_the_edit(self):
        _, param, capture = self.make()
        param.data = torch.arange(1.0, 6.0)
        capture.note_gathered([param, FakeStage3.Param()])  # a parameter of no name is left out
        param.data.mul_(0.5)  # the user's edit after the note: not what was handed over
        capture.note_gathered([param], "edited_copy")
        observed = capture.take()
        self.assertEqual(observed.gathered_copy["w"][0].tolist(), [1.0, 2.0, 3.0, 4.0, 5.0])
        self.assertEqual(observed.edited_copy["w"][0].tolist(), [0.5, 1.0, 1.5, 2.0, 2.5])
        self.assertEqual(list(observed.gathered_copy), ["w"])

    def test_a_load_hands_over_each_field_and_the_method_that_restored_it(self):
        optimizer, param, capture = self.make()
        optimizer.optimizer = type("Inner", (), {"state": {}})()
        param.ds_tensor.copy_(torch.tensor([1.0, 2.0, 7.0]))  # the master's third element differs
        optimizer._rigid_load_state_dict({"exp_avg": torch.tensor([0.5, 0.5, 0.5])})
        observed = capture.take()
        self.assertEqual(observed.loaded["master"]["w"].tolist(), [1.0, 2.0, 7.0])
        self.assertEqual(observed.loaded["state:step"]["w"].tolist(), [4.0])
        self.assertEqual(observed.restored_by["master"]["w"][1], "_restore_from_bit16_weights")
        self.assertEqual(observed.restored_by["state:exp_avg"]["w"][1], "_rigid_load_state_dict")
        self.assertNotIn("values", observed.restored_by)  # the shards were left as they were
        self.assertEqual(capture.take().loaded, {})  # handed over once
        # A change no method was seen making (a collective's data landing late, on Gloo) is the
        # last method's that restores such a field.
        optimizer._rigid_load_state_dict({"exp_avg": torch.tensor([0.5, 0.5, 0.5])})
        param.ds_tensor.add_(1.0)
        observed = capture.take()
        self.assertEqual(observed.restored_by["values"]["w"][1], "_rigid_load_state_dict")

    def test_a_shard_not_published_as_the_load_wrote_it_was_written_by_the_gather(self):
        optimizer = FakeStage3()
        param = optimizer.fp16_groups[0][0]
        param.ds_numel, param.dtype = 3, torch.float32

        class Engine:
            """load_module_state_dict as ZeRO-3 runs it, at world 1: the state dict written into
            the gathered copy, which is published into the shard; `late`: the gather's copy of
            the values before the load lands over part of the write first (the Gloo race)."""
            late = False

            def load_module_state_dict(self, checkpoint, strict=True, custom_load_fn=None,
                                       fetch_z3_params=False):
                before, written = param.ds_tensor.clone(), checkpoint["module"]["w"]
                if written.numel() == param.ds_numel:  # a placeholder is written nowhere
                    param.ds_tensor.copy_(written)
                if self.late:
                    param.ds_tensor[1:].copy_(before[1:])
        engine = Engine()
        capture = zero3_inside.Zero3Inside(optimizer, {id(param): "w"}, engine)
        engine.load_module_state_dict({"module": {"w": torch.tensor([5.0, 6.0, 7.0])}},
                                      fetch_z3_params=True)
        self.assertEqual(capture.published_late, [])
        self.assertEqual(capture.take().restored_by["values"]["w"][1], "load_module_state_dict")
        engine.late = True
        engine.load_module_state_dict({"module": {"w": torch.tensor([1.0, 2.0, 3.0])}},
                                      fetch_z3_params=True)
        self.assertEqual(capture.published_late, ["w"])
        self.assertEqual(capture.take().restored_by["values"]["w"], inside.GATHERED_LATE)
        # Without fetch_z3_params nothing was gathered (the optimizer's load restores the shards
        # after it): not compared.
        engine.load_module_state_dict({"module": {"w": torch.tensor([4.0, 4.0, 4.0])}})
        self.assertEqual(capture.published_late, [])
        # A placeholder of another size (ZeRO-3's module-only checkpoint) is not compared.
        engine.load_module_state_dict({"module": {"w": torch.empty(0)}}, True, None, True)
        self.assertEqual(capture.published_late, [])

    def test_a_recording_that_raises_switches_the_capture_off_not_the_engine(self):
        optimizer, param, capture = self.make()
        optimizer.fp32_partitioned_groups_flat = [torch.zeros(1)]  # too short to slice
        optimizer._optimizer_step.__wrapped__  # the original stays reachable
        optimizer.fp32_partitioned_groups_flat[0].grad = torch.zeros(1)
        optimizer._optimizer_step(0)  # the engine's own method still runs
        self.assertIsNone(capture.take())
        self.assertIn("raised", capture.why)

    def test_an_engine_it_cannot_read_is_left_alone(self):
        class Engine:
            optimizer = object()
            module = torch.nn.Linear(2, 2)

            def zero_optimization_stage(self):
                return 3
        found, why = zero3_inside.capture(Engine())
        self.assertIsNone(found)
        self.assertIn("has no", why)


if __name__ == "__main__":
    unittest.main()
