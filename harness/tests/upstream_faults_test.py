"""ctest `upstream_planted_faults` (label upstream): I3, I4, I6 and I9 catch faults planted in DeepSpeed.

    upstream_faults_test.py ZEROCHECK PYTHON TREE WORKDIR

A copy of DeepSpeed's own source (../shared/deepspeed/v0.14.5, or master-* in the Debian 13
lane) gets the faults of FAULTS, each a source edit in the real code path, switched on while one
scenario replays (the worker sets ZEROCHECK_PLANTED_FAULT from ZEROCHECK_DS_PLANT). Every edit's
anchor must be found exactly once: a DeepSpeed that moved the code fails the test instead of
testing nothing. Then, in one run at world 2 on the copy:
  1. every fault is caught by its own invariant, and the control scenario (no fault) by none;
  2. the ablation (--ablate: each scenario replayed again with each of I3, I4, I6, I9 switched off):
     each of them is the only one to catch some fault, so each is necessary;
  3. I3's root causes locate the bug: each fault I3 catches gets a root cause of its own, none of
     them the stale-gradient row's of KNOWN_UPSTREAM.md, and the triage check (`untriaged`)
     reports the one no row describes (the copy back made before the optimizer step) as new;
  4. a new cause with an old field or rule gets a key of its own, untriaged (OLD_KEYS): a rank
     that makes its persistent parameters' whole copies from its own partition after a step (I9
     whole_copy, the Gloo race row's field, but not the gather's copy), a backward's release keeping the gathered data (I4,
     data-kept-after-backward's rule, but the gather's data), a load restoring Adam's moments as
     zeros (I3 at a load: the moments, not the values of the load rows), zero_to_fp32 consolidating
     wrong values (I6, the consolidation of the tied-module row, whose key is a key missing);
  5. the Gloo all_gather race's symptom, planted (a persistent parameter's gathered copy changed
     in place on rank 1 after a step and after a save; a gather's copy whose other rank's elements
     land on the modifier rank after its edit, or after a load wrote it), gets the keys of the
     race's rows: those rows hold
     the keys the race gives, on this DeepSpeed;
  6. the overflow skip's faults, each caught by I11 alone (the twin does not follow fp16, nor
     bf16 below stage 3, so I3 is silent by construction): in FAULTS, ZeRO-3's fp16 skip (fp16
     let through DeepSpeed's CPU refusal, ZEROCHECK_DS_ALLOW_CPU_FP16; models of Offset nodes,
     which torch 1.13 runs in fp16): a skipped step not counted, an overflow check blind to NaN;
     master only (OVERFLOW_FAULTS, replayed with --stage 2: master's bf16 ZeRO-1/2 skip,
     `bf16.check_grad_overflow` at its default true): ZeRO-1/2's check blind to NaN.
Exit 77 (skipped) when TREE does not exist, or for master where the Python's torch is older than 2.
"""

import os
import sys

from upstream_rates import is_nondeterministic, replayed
from upstream_support import (KNOWN, NEW_INVARIANTS, SKIP, Edit, check, patched_tree, read, run,
                              triage_rows, triaged, verdicts, versioned_arguments)

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios", "upstream_faults")


def planted(name):
    """The guard of one fault: true while that fault's scenario replays."""
    return f'__import__("os").environ.get("ZEROCHECK_PLANTED_FAULT") == "{name}"'


STAGE3 = "deepspeed/runtime/zero/stage3.py"
ENGINE = "deepspeed/runtime/engine.py"
OFFLOAD = "deepspeed/runtime/zero/parameter_offload.py"


def keep_data_after(release):
    """Wraps `release` (the post-backward release call) so the parameters it releases keep their
    full data."""
    return [Edit(OFFLOAD, release,
                 f"        _zc_full = {{p: p.data for p in sub_module.parameters(recurse=False)}} if "
                 f"{planted('data-kept-after-backward')} else {{}}\n"
                 + release +
                 "        for _zc_p, _zc_data in _zc_full.items():\n"
                 "            if _zc_p.ds_status == ZeroParamStatus.NOT_AVAILABLE:\n"
                 "                _zc_p.data = _zc_data\n")]


SKIP_LAST_PARAM = [Edit(
    STAGE3,
    "            self.fp16_partitioned_groups_flat[sub_group_id].data.copy_(\n"
    "                self.fp32_partitioned_groups_flat[sub_group_id].data)",
    "            _zc_n = self.fp16_partitioned_groups_flat[sub_group_id].numel() - (\n"
    f"                self.fp16_groups[sub_group_id][-1].partition_numel() if {planted('skip-last-param')} else 0)\n"
    "            self.fp16_partitioned_groups_flat[sub_group_id].data.narrow(0, 0, _zc_n).copy_(\n"
    "                self.fp32_partitioned_groups_flat[sub_group_id].data.narrow(0, 0, _zc_n))")]
GRADIENT_LATE = [Edit(
    STAGE3,
    "                grad_buffer.copy_(grad_partition, non_blocking=True)",
    f"                if {planted('gradient-one-element-late')} and dist.get_rank(self.dp_process_group) == 1:\n"
    "                    grad_partition = torch.cat([grad_partition.new_zeros(1), grad_partition[:-1]])\n"
    "                grad_buffer.copy_(grad_partition, non_blocking=True)")]
# The step copies each sub-group's fp32 master into the parameters' shards before the optimizer
# steps it, not after: the shards hold the master of the step before (the same code in v0.14.5
# and master).
COPY_BACK_EARLY = [Edit(
    STAGE3,
    "            self._optimizer_step(sub_group_id)\n\n"
    "            #put fp16 parameters in appropriate location\n"
    "            self._reassign_or_swap_out_partitioned_parameters(sub_group_id)\n",
    f"            _zc_early = {planted('master-copied-back-before-step')}\n"
    "            if _zc_early:\n"
    "                self._reassign_or_swap_out_partitioned_parameters(sub_group_id)\n"
    "            self._optimizer_step(sub_group_id)\n\n"
    "            #put fp16 parameters in appropriate location\n"
    "            if not _zc_early:\n"
    "                self._reassign_or_swap_out_partitioned_parameters(sub_group_id)\n")]
STEP_COUNT = [Edit(
    ENGINE, "        self.global_steps += 1\n",
    f"        self.global_steps += 0 if ({planted('step-count-skipped-on-one-rank')} and self.global_rank == 1) else 1\n")]

# Rank 1's load leaves its optimizer state as it was (the state it trained past the save).
STATE_STALE = [Edit(
    STAGE3,
    "            self.optimizer.load_state_dict(state_dict[OPTIMIZER_STATE_DICT])",
    f"            if not ({planted('optimizer-state-stale-on-one-rank')} and dist.get_rank() == 1):\n"
    "                self.optimizer.load_state_dict(state_dict[OPTIMIZER_STATE_DICT])")]
# Every rank's optimizer-state file is written empty: the checkpoint cannot be loaded.
STATE_FILE_EMPTY = [Edit(
    ENGINE,
    "        self.checkpoint_engine.save(zero_sd, zero_checkpoint_name)\n",
    "        self.checkpoint_engine.save(zero_sd, zero_checkpoint_name)\n"
    f"        if {planted('optimizer-state-file-empty')}:\n"
    "            open(zero_checkpoint_name, 'wb').close()\n")]

# load_checkpoint forgets the tag it was given and loads the latest checkpoint.
TAG_IGNORED = [Edit(
    ENGINE,
    "        if tag is None:\n"
    "            latest_tag = \"latest_universal\" if self.load_universal_checkpoint() else \"latest\"",
    f"        if {planted('load-ignores-its-tag')}:\n"
    "            tag = None\n"
    "        if tag is None:\n"
    "            latest_tag = \"latest_universal\" if self.load_universal_checkpoint() else \"latest\"")]

# deepspeed.initialize puts a forward pre-hook on the model before it reads the config: a
# refused initialize (an invalid config) leaves it behind (master's engine_timers bug's pattern).
HOOK_LEFT = [Edit(
    "deepspeed/__init__.py",
    '    assert model is not None, "deepspeed.initialize requires a model"\n',
    '    assert model is not None, "deepspeed.initialize requires a model"\n'
    f"    if {planted('failed-initialize-leaves-a-hook')}:\n"
    "        model.register_forward_pre_hook(lambda module, inputs: None)\n")]

# GatheredParameters' exit with a modifier rank does not broadcast the modifier's values: each
# rank repartitions its own copy, so only the modifier rank's shard holds the edit.
PARTITION = "deepspeed/runtime/zero/partition_parameters.py"
NOT_BROADCAST = {
    "v0.14": [Edit(PARTITION, "        handles = [dist.broadcast(p.data, self.src_rank,",
                   f"        handles = [] if {planted('gathered-edit-not-broadcast')} else "
                   "[dist.broadcast(p.data, self.src_rank,")],
    "master": [Edit(PARTITION, "        handles = [\n            dist.broadcast(p.data,\n",
                    f"        handles = [] if {planted('gathered-edit-not-broadcast')} else [\n"
                    "            dist.broadcast(p.data,\n")]}

# gathered-copy-lands-after-the-edit: the Gloo race on the write side (KNOWN_UPSTREAM.md's `I3
# initialize` row), planted: GatheredParameters hands rank 0 a copy whose other rank's elements
# have not arrived (zeros), and they land when the context exits, over rank 0's edit. Its key
# must be the race's row at a gather, which is how that row's key is known to be what it gives.
# gathered-copy-lands-after-the-load: the same, planted only in the gather of
# load_module_state_dict (a load without optimizer states): the values before the load land over
# what load_state_dict wrote, and rank 0 publishes them (the race's rows at a load).
_ENTER = "        self.params[0].all_gather(param_list=self.params)\n"
_EXIT = "    def __exit__(self, *exc):\n        if not self.enabled:\n            return\n"
GATHERED_COPY_LATE = [
    Edit(PARTITION, _ENTER, _ENTER +
         "        self._zc_late = dist.get_rank() == 0 and ("
         f"{planted('gathered-copy-lands-after-the-edit')} or ("
         f"{planted('gathered-copy-lands-after-the-load')} and "
         "__import__('sys')._getframe(1).f_code.co_name == 'load_module_state_dict'))\n"
         "        if self._zc_late:\n"
         "            self._zc_arrived = [p.data.detach().clone() for p in self.params]\n"
         "            for _zc_p in self.params:\n"
         "                _zc_p.data.view(-1)[_zc_p.ds_tensor.numel():].zero_()\n"),
    Edit(PARTITION, _EXIT, _EXIT +
         "        if getattr(self, '_zc_late', False):\n"
         "            for _zc_p, _zc_d in zip(self.params, self._zc_arrived):\n"
         "                _zc_n = _zc_p.ds_tensor.numel()\n"
         "                _zc_p.data.view(-1)[_zc_n:].copy_(_zc_d.view(-1)[_zc_n:])\n")]

# zero_to_fp32 adds 1 to every value it consolidates: a value that differs, where the tied-module
# row's key (a key missing from the same consolidation) was the only one before consolidations
# were keyed by what is wrong in them.
_TO_FP32 = "def _get_fp32_state_dict_from_zero_checkpoint(ds_checkpoint_dir, exclude_frozen_parameters):\n"
ZERO_TO_FP32_OFF = [Edit(
    "deepspeed/utils/zero_to_fp32.py", _TO_FP32,
    "def _get_fp32_state_dict_from_zero_checkpoint(ds_checkpoint_dir, exclude_frozen_parameters):\n"
    "    _zc_state = _zc_get_fp32_state_dict(ds_checkpoint_dir, exclude_frozen_parameters)\n"
    f"    if {planted('zero-to-fp32-value-off-by-one')}:\n"
    "        for _zc_value in {id(v): v for v in _zc_state.values() if torch.is_tensor(v)}.values():\n"
    "            _zc_value.add_(1.0)  # a tensor under two names once\n"
    "    return _zc_state\n\n\n"
    "def _zc_get_fp32_state_dict(ds_checkpoint_dir, exclude_frozen_parameters):\n")]

# Master's reader builds lazy tensors and converts them last (to_torch_tensor): the values are
# changed after that.
ZERO_TO_FP32_OFF_MASTER = [Edit(
    "deepspeed/utils/zero_to_fp32.py", "        return to_torch_tensor(state_dict)\n",
    "        _zc_state = to_torch_tensor(state_dict)\n"
    f"        if {planted('zero-to-fp32-value-off-by-one')}:\n"
    "            for _zc_value in {id(v): v for v in _zc_state.values() if torch.is_tensor(v)}.values():\n"
    "                _zc_value.add_(1.0)  # a tensor under two names once\n"
    "        return _zc_state\n")]

# After the step's gather of the persistent parameters, on rank 1:
# - persistent-copy-made-locally-on-one-rank: each whole copy is replaced by one made from rank
#   1's own partition (the other rank's elements zero): its copies are not the ones the step's
#   collective made (an I9 whole_copy at a step, which the Gloo all_gather race's row, whose copies
#   that very gather made, must not swallow);
# - persistent-copy-changed-in-place-on-one-rank: each whole copy the gather made is changed in
#   place, the race's own symptom (a gathered buffer read before its data arrived): its key must
#   be the race's rows', which is how those rows' keys are known to be what the race gives.
PERSISTENT_COPY = [Edit(
    STAGE3,
    "        #Gathering persisting parameters\n"
    "        if len(self.persistent_parameters) > 0:\n"
    "            self.persistent_parameters[0].all_gather(self.persistent_parameters)\n",
    "        #Gathering persisting parameters\n"
    "        if len(self.persistent_parameters) > 0:\n"
    "            self.persistent_parameters[0].all_gather(self.persistent_parameters)\n"
    f"            if {planted('persistent-copy-made-locally-on-one-rank')} and dist.get_rank() == 1:\n"
    "                for _zc_p in self.persistent_parameters:\n"
    "                    _zc_own = _zc_p.ds_tensor.numel()\n"
    "                    _zc_n = max(0, min(_zc_own, _zc_p.ds_numel - _zc_own))\n"
    "                    _zc_whole = torch.zeros(_zc_p.ds_numel, dtype=_zc_p.ds_tensor.dtype)\n"
    "                    _zc_whole[_zc_own:_zc_own + _zc_n] = _zc_p.ds_tensor.reshape(-1)[:_zc_n]\n"
    "                    _zc_p.data = _zc_whole.view(_zc_p.ds_shape)\n"
    f"            if {planted('persistent-copy-changed-in-place-on-one-rank')} and dist.get_rank() == 1:\n"
    "                for _zc_p in self.persistent_parameters:\n"
    "                    _zc_p.data.add_(1.0)\n")]
# persistent-copy-changed-in-place-at-a-save: the same look-alike at a save (the gather of the
# persistent parameters after a checkpoint is written), for the race's row at a save.
_GATHER = "        if len(self.persistent_parameters) > 0:\n" \
          "            self.persistent_parameters[0].all_gather(self.persistent_parameters)\n"
_CHANGED = (f"        if {planted('persistent-copy-changed-in-place-at-a-save')} and dist.get_rank() == 1:\n"
            "            for _zc_p in self.persistent_parameters:\n"
            "                _zc_p.data.add_(1.0)\n")
PERSISTENT_COPY_AT_SAVE = {
    "v0.14": [Edit(STAGE3, "    def checkpoint_event_epilogue(self):\n" + _GATHER,
                   "    def checkpoint_event_epilogue(self):\n" + _GATHER + _CHANGED)],
    "master": [Edit(STAGE3, "    def checkpoint_event_epilogue(self):\n"
                            "        self.invalidate_secondary_tensor()\n" + _GATHER,
                    "    def checkpoint_event_epilogue(self):\n"
                    "        self.invalidate_secondary_tensor()\n" + _GATHER + _CHANGED)]}
# The partition of a parameter released after its module's backward keeps the gathered data
# (free_param skips the free when the backward's release calls it): I4's "released but holding
# data" at a backward, as data-kept-after-backward, but the data left is the gather's.
RELEASE_KEEPS_GATHER = [Edit(
    PARTITION,
    "    # param.data doesn't store anything meaningful in partitioned state\n"
    "    param.data = torch.empty(0, dtype=param.dtype, device=param.device)\n",
    "    # param.data doesn't store anything meaningful in partitioned state\n"
    f"    _zc_frame = __import__('sys')._getframe(1) if {planted('backward-release-keeps-gathered-data')} else None\n"
    "    while _zc_frame is not None and _zc_frame.f_code.co_name != 'post_sub_module_backward_function':\n"
    "        _zc_frame = _zc_frame.f_back\n"
    "    if _zc_frame is None:\n"
    "        param.data = torch.empty(0, dtype=param.dtype, device=param.device)\n")]
# A load restores Adam's moments as zeros (ZeRO-3's rigid load, after the optimizer's state was
# loaded): the values and fp32 masters are right after the load, the next step is not.
MOMENTS_ZEROED = [Edit(
    STAGE3,
    "        # restore fp32 partitions\n",
    f"        if {planted('optimizer-moments-zeroed-on-load')}:\n"
    "            for _zc_state in self.optimizer.state.values():\n"
    "                for _zc_value in _zc_state.values():\n"
    "                    if torch.is_tensor(_zc_value) and _zc_value.dim() > 0:\n"
    "                        _zc_value.zero_()\n"
    "        # restore fp32 partitions\n")]

# The clip's global norm left unreduced: each rank clips its partitions by the norm of its own
# (the SUM all-reduce over the data-parallel group skipped; the group argument's name moved).
def clip_norm_own_partition(group):
    anchor = ("                total_norm_cuda = torch.sum(torch.pow(torch.stack(grad_norms), 2))\n\n"
              f"            dist.all_reduce(total_norm_cuda, op=dist.ReduceOp.SUM, group={group})\n")
    return [Edit(STAGE3, anchor, anchor.replace(
        "            dist.all_reduce(",
        f"            if not {planted('clip-norm-of-own-partition')}:\n"
        "                dist.all_reduce(", 1))]


# ZeRO-3 fp16's skip (check 6): a skipped step not counted (runtime/engine.py, the same lines in
# v0.14.5 and master), and the overflow check of the rank's flat gradient buffer blind to NaN
# (runtime/zero/stage3.py `has_overflow`, the same lines in both).
SKIP_NOT_COUNTED = [Edit(
    ENGINE, "            self.skipped_steps += 1\n",
    f"            if not {planted('skipped-step-not-counted')}:\n"
    "                self.skipped_steps += 1\n")]
STAGE3_MISSES_NAN = [Edit(
    STAGE3,
    "                    self.inf_or_nan_tracker.logical_or_(torch.isnan(self.grad_partitions_flat_buffer).any())\n",
    f"                    if not {planted('stage3-overflow-check-misses-nan')}:\n"
    "                        self.inf_or_nan_tracker.logical_or_(torch.isnan(self.grad_partitions_flat_buffer).any())\n")]

# name -> (its invariant, its scenario in scenarios/upstream_faults/, the edits that plant it in
# v0.14.5 and in master, whose code moved: the accumulation scaling became a hook on the
# engine's outputs, the coordinator's release takes `forward`).
FAULTS = {
    # ZeRO-3's step copies the updated fp32 partition into the parameters' shards; the copy
    # leaves out the last parameter of the group, which then never moves.
    "skip-last-param": ("I3", "sgd_two_linears", {"v0.14": SKIP_LAST_PARAM, "master": SKIP_LAST_PARAM}),
    # The loss (v0.14.5) or the output's gradient (master) divided by the accumulation steps twice.
    "loss-scaled-twice": ("I3", "sgd_accumulation_2", {
        "v0.14": [Edit(ENGINE, "            loss = self._scale_loss_by_gas(loss.float())",
                       "            loss = self._scale_loss_by_gas(loss.float())\n"
                       f"            if {planted('loss-scaled-twice')}:\n"
                       "                loss = self._scale_loss_by_gas(loss)")],
        "master": [Edit(ENGINE, "            return grad / self.gradient_accumulation_steps()",
                        "            return grad / self.gradient_accumulation_steps() / (\n"
                        f"                self.gradient_accumulation_steps() if {planted('loss-scaled-twice')} else 1)")]}),
    # Rank 1 writes its reduced gradient partition one element late (element i gets i - 1's).
    "gradient-one-element-late": ("I3", "sgd_one_linear", {"v0.14": GRADIENT_LATE, "master": GRADIENT_LATE}),
    # The fp32 master copied back into the parameters before the optimizer step: a wrong number
    # at a step that no row of KNOWN_UPSTREAM.md describes (check 3).
    "master-copied-back-before-step": ("I3", "sgd_copy_back_early",
                                       {"v0.14": COPY_BACK_EARLY, "master": COPY_BACK_EARLY}),
    # After a module's backward its parameters are released (NOT_AVAILABLE) but keep their full
    # data: the memory ZeRO-3 exists to free stays held.
    "data-kept-after-backward": ("I4", "sgd_two_linears_kept", {
        "v0.14": keep_data_after("        self.get_param_coordinator(training=True).release_sub_module(sub_module)\n"),
        "master": keep_data_after("        self.get_param_coordinator().release_sub_module(sub_module, forward=False)\n")}),
    # Rank 1 does not count an optimizer step.
    "step-count-skipped-on-one-rank": ("I9", "sgd_one_linear_steps", {"v0.14": STEP_COUNT, "master": STEP_COUNT}),
    # A load on which rank 1 keeps the optimizer state it had (the scenario ends at the load, so
    # no later step shows it to I3: I6 alone sees it).
    "optimizer-state-stale-on-one-rank": ("I6", "adam_load_stale_state", {"v0.14": STATE_STALE, "master": STATE_STALE}),
    # Two tagged saves, a load of the first: the latest is loaded instead.
    "load-ignores-its-tag": ("I6", "adam_load_first_tag", {"v0.14": TAG_IGNORED, "master": TAG_IGNORED}),
    # An initialize refused for its config leaves a hook on the user's model.
    "failed-initialize-leaves-a-hook": ("I5", "adam_invalid_config_hook", {"v0.14": HOOK_LEFT, "master": HOOK_LEFT}),
    # A gather with modifier rank 0 whose edit reaches rank 0's shard only (the scenario ends
    # before a step, where the pristine engine's own loss of the edit would show).
    "gathered-edit-not-broadcast": ("I3", "sgd_gather_edit_not_broadcast", NOT_BROADCAST),
    # A checkpoint file DeepSpeed cannot read: the load's exception is the finding, the suite goes on.
    "optimizer-state-file-empty": ("op", "adam_load_empty_file", {"v0.14": STATE_FILE_EMPTY, "master": STATE_FILE_EMPTY}),
    # Faults whose finding has a row's rule or field but another cause (check 4): each gets a key
    # of its own, untriaged.
    "persistent-copy-made-locally-on-one-rank": ("I9", "sgd_persistent_copy_local", {
        "v0.14": PERSISTENT_COPY, "master": PERSISTENT_COPY}),
    # The Gloo race's symptom, triaged as the race: at a step (planted by PERSISTENT_COPY) and at
    # a save.
    "persistent-copy-changed-in-place-on-one-rank": ("I9", "sgd_persistent_copy_changed", {
        "v0.14": [], "master": []}),
    "persistent-copy-changed-in-place-at-a-save": ("I9", "sgd_persistent_copy_changed_at_save",
                                                   PERSISTENT_COPY_AT_SAVE),
    "gathered-copy-lands-after-the-edit": ("I3", "sgd_gathered_copy_late", {
        "v0.14": GATHERED_COPY_LATE, "master": GATHERED_COPY_LATE}),
    # (GATHERED_COPY_LATE's edits plant it too: its guard names both faults.)
    "gathered-copy-lands-after-the-load": ("I6", "sgd_gathered_copy_late_at_load", {
        "v0.14": [], "master": []}),
    "zero-to-fp32-value-off-by-one": ("I6", "sgd_save_zero_to_fp32_off", {
        "v0.14": ZERO_TO_FP32_OFF, "master": ZERO_TO_FP32_OFF_MASTER}),
    "backward-release-keeps-gathered-data": ("I4", "sgd_two_linears_release_skipped", {
        "v0.14": RELEASE_KEEPS_GATHER, "master": RELEASE_KEEPS_GATHER}),
    "optimizer-moments-zeroed-on-load": ("I3", "adam_load_moments_not_restored", {
        "v0.14": MOMENTS_ZEROED, "master": MOMENTS_ZEROED}),
    # gradient_clipping 1e-3 binds at every step; the clip's norm is this rank's own (I3, now
    # that the twin follows ZeRO-3's clip).
    "clip-norm-of-own-partition": ("I3", "sgd_clip_binding", {
        "v0.14": clip_norm_own_partition("self.dp_process_group"),
        "master": clip_norm_own_partition("process_group")}),
    # ZeRO-3 fp16 (check 6): the engine skips the step but does not count it in skipped_steps
    # (runtime/engine.py `_take_model_step`, the same lines in both versions).
    "skipped-step-not-counted": ("I11", "fp16_offsets_gradient_inf_skip_not_counted", {
        "v0.14": SKIP_NOT_COUNTED, "master": SKIP_NOT_COUNTED}),
    # ZeRO-3 fp16: the overflow check of the rank's flat gradient buffer sees infinities only, so
    # a NaN gradient is stepped on every rank (stage3.py `has_overflow`).
    "stage3-overflow-check-misses-nan": ("I11", "fp16_offsets_loss_nan_check_misses_nan", {
        "v0.14": STAGE3_MISSES_NAN, "master": STAGE3_MISSES_NAN}),
}
CONTROL = "sgd_control"  # no fault: no finding
# Check 6: a fault in the overflow skip of master's ZeRO-1/2 (oracles/overflow.py's promise row
# "master 1-2 bf16, check_grad_overflow true"), replayed with --stage 2 and caught by I11 alone.
# v0.14.5 makes no such promise (its stage 1/2 check is fp16's only).
OVERFLOW_FAULTS = {
    # The overflow check sees infinities only: a NaN gradient is stepped
    # (runtime/zero/stage_1_and_2.py `_has_inf_or_nan`).
    "stage2-overflow-check-misses-nan": ("I11", "bf16_stage2_loss_nan_check_misses_nan", [Edit(
        "deepspeed/runtime/zero/stage_1_and_2.py", "        nan = float_x.isnan()\n",
        "        nan = float_x.isnan()\n"
        f"        if {planted('stage2-overflow-check-misses-nan')}:\n"
        "            nan = torch.zeros_like(nan)\n")]),
}
# The faults check 6 wants caught by their invariant alone.
ALONE = {"skipped-step-not-counted", "stage3-overflow-check-misses-nan"}
# Scenarios of faults not replayed again per invariant switched off (the ablation shows each of
# I3, I4, I6, I9 necessary without them; they only need their own invariant to catch them).
NOT_ABLATED = {"fp16_offsets_gradient_inf_skip_not_counted", "fp16_offsets_loss_nan_check_misses_nan",
               "adam_load_first_tag", "adam_load_empty_file", "adam_invalid_config_hook",
               "sgd_gather_edit_not_broadcast", "sgd_copy_back_early", "sgd_persistent_copy_local",
               "sgd_persistent_copy_changed", "sgd_persistent_copy_changed_at_save",
               "sgd_two_linears_release_skipped", "adam_load_moments_not_restored",
               "sgd_clip_binding", "sgd_gathered_copy_late", "sgd_gathered_copy_late_at_load",
               "sgd_save_zero_to_fp32_off"}
ABLATED = ("I3", "I4", "I6", "I9")
# The planted look-alikes of the Gloo all_gather race (check 5), each with the invariants whose
# root causes must be the race's rows, and the race's bug in the table.
RACE_LOOKALIKES = {"persistent-copy-changed-in-place-on-one-rank": ("I3", "I9"),
                   "persistent-copy-changed-in-place-at-a-save": ("I9",),
                   "gathered-copy-lands-after-the-edit": ("I3",),
                   "gathered-copy-lands-after-the-load": ("I3", "I6")}
RACE_BUG = ("ZeRO-3 on Gloo: a blocking coalesced all_gather returns before every parameter's "
            "data has arrived")
# The root cause of KNOWN_UPSTREAM.md's stale-gradient row (its first cell): a planted wrong
# number must never land on it, or the triage would call a new bug known.
STALE_GRADIENT = ("I3 step: the gradient handed to the optimizer first differs from the dense "
                  "twin, for a parameter without a gradient in the step: "
                  "deepspeed/runtime/zero/stage3.py _prepare_sub_group()")
UNTRIAGED = "master-copied-back-before-step"
# Where inside the step or backward I3 locates each fault (the words of oracles/inside.py): the
# quantity the fault makes wrong first, not a later one it carries into.
LOCATED = {
    "skip-last-param": "the copy of the fp32 master into the parameter's shard",
    "loss-scaled-twice": "the gradient of this rank's micro-batch before reduction",
    "gradient-one-element-late": "the accumulated gradient partition",
    "master-copied-back-before-step": "the parameter's shard copied back before the optimizer step",
    "clip-norm-of-own-partition": "the gradient after unscale and clip",
}  # the planted fault no row of the table describes
# Faults whose finding has the operation and field (or rule) of a key that a row of the table, or
# another planted fault, held before root causes named who produced the value: the old key each
# would have landed on. Each must now get a key of its own, reported untriaged (check 4).
OLD_KEYS = {
    # The Gloo all_gather race's row (`I9 step: whole_copy`).
    "persistent-copy-made-locally-on-one-rank": "I9 step: whole_copy",
    # data-kept-after-backward's key.
    "backward-release-keeps-gathered-data": "I4 backward: released but holding data",
    # The one row every I3 finding at a load landed on (`I3 load: value first differs ...`).
    "optimizer-moments-zeroed-on-load": "I3 load:",
    # The tied-module row's consolidation (a key missing from it).
    "zero-to-fp32-value-off-by-one": "I6 save: zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint",
}


def bug_titles():
    """Root cause -> its row's bug title (the `bug` column of KNOWN_UPSTREAM.md's tables)."""
    titles, column = {}, None
    with open(KNOWN, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "root cause":
                column = cells.index("bug") if "bug" in cells else None
            elif column is not None and cells[0].startswith("`") and len(cells) > column:
                titles[cells[0].strip("`")] = cells[column]
    return titles


def untriaged(summary, table):
    """The I3/I4/I6/I9 root causes of `summary` that no row of KNOWN_UPSTREAM.md's table (`table`,
    upstream_support.triaged) holds: a cause the pristine suites' triage check fails on."""
    return sorted({c["title"] for c in summary["root_causes"]
                   if c.get("invariant") in NEW_INVARIANTS} - set(table))


def unmasked(summaries, rows, replay):
    """`summaries` with each planted fault's scenario (the race's lookalikes aside) that showed a
    cause KNOWN_UPSTREAM.md triages as nondeterministic judged on a run where none struck: I3
    names only the first place the twin parts, so the Gloo race striking first (a save before
    the fault's load) hides the fault's own cause. Such a scenario is replayed apart, every one of
    upstream_rates.REPLAYS times (replay(names, attempt) -> a summary), and again, up to
    upstream_rates.EXTRA_REPLAYS times, while it struck in every run; the rate is printed, and
    its causes are taken from the first run the race spared. Fails when it struck in every run."""
    lookalikes = {FAULTS[name][1] for name in RACE_LOOKALIKES}
    planted_scenarios = {scenario for _, scenario, _ in FAULTS.values()} - lookalikes

    def titles(summary, name):
        return {c["title"] for c in summary["root_causes"] if name in c["scenarios"]}
    masked = sorted({name for summary in summaries for c in summary["root_causes"]
                     if is_nondeterministic(rows.get(c["title"]))
                     for name in c["scenarios"] if name in planted_scenarios})
    if not masked:
        return summaries
    again = {}

    def replay_apart(names, attempt):
        again[attempt] = replay(names, attempt)
        return {name: titles(again[attempt], name) for name in names}
    runs = replayed({name: (set().union(*(titles(s, name) for s in summaries)),
                            "a nondeterministic cause struck") for name in masked}, replay_apart,
                    rows=rows)
    out = [dict(s, root_causes=[dict(c, scenarios=[n for n in c["scenarios"] if n not in masked])
                                for c in s["root_causes"]]) for s in summaries]
    for name in masked:
        spared = [i for i, found in enumerate(runs[name])
                  if not any(is_nondeterministic(rows.get(t)) for t in found)]
        print(f"{name}: a nondeterministic cause struck in {len(runs[name]) - len(spared)} of "
              f"{len(runs[name])} runs (the suite's and {len(runs[name]) - 1} replays)")
        check(spared, f"{name}: a run the nondeterministic causes spared, to judge its fault on")
        source = summaries if spared[0] == 0 else [again[spared[0]]]
        out.append({"root_causes": [dict(c, scenarios=[name]) for s in source
                                    for c in s["root_causes"] if name in c["scenarios"]]})
    return out


def main():
    args = versioned_arguments()
    if args is None:
        return SKIP
    zerocheck, python, tree, work, version = args
    edits = [edit for _, _, by_version in FAULTS.values() for edit in by_version[version]]
    overflow_faults = OVERFLOW_FAULTS if version == "master" else {}
    edits += [edit for _, _, fault_edits in overflow_faults.values() for edit in fault_edits]
    copy = patched_tree(tree, os.path.join(work, "planted-tree", "deepspeed-planted"), edits,
                        f"planted faults ({version})")
    plant = ",".join(f"{scenario}:{name}" for name, (_, scenario, _) in
                     list(FAULTS.items()) + list(overflow_faults.items()))
    # fp16 let through DeepSpeed's CPU refusal for check 6's ZeRO-3 fp16 scenarios (the others
    # have no fp16).
    env = dict(os.environ, ZEROCHECK_DS_PLANT=plant, ZEROCHECK_DS_ALLOW_CPU_FP16="1")
    scenarios = [os.path.join(SCENARIOS, f"{s}.json") for _, s, _ in FAULTS.values()]
    scenarios.append(os.path.join(SCENARIOS, f"{CONTROL}.json"))

    # One run: the ablated faults and the control, then again with each of I3, I4, I6, I9 off in
    # turn (--ablate); a second, plain run for the faults only their own invariant is asked of.
    out, plain_out = os.path.join(work, "planted"), os.path.join(work, "planted-plain")
    ablated = [s for s in scenarios if os.path.basename(s)[:-len(".json")] not in NOT_ABLATED]
    common = ["--python", python, "--world", "2", "--scenario-timeout", "60", "--deepspeed-tree", copy]
    run(zerocheck, common + ["--scenarios", *ablated, "--out", out, "--ablate"],
        expect=1, env=env, timeout=420)
    run(zerocheck, common + ["--scenarios", *(os.path.join(SCENARIOS, f"{s}.json")
                                             for s in sorted(NOT_ABLATED)), "--out", plain_out],
        expect=1, env=env)
    found = dict(verdicts(out), **verdicts(plain_out))
    # 1. Every fault caught by its own invariant; the control clean.
    for name, (invariant, scenario, _) in FAULTS.items():
        invariants = sorted({f["invariant"] for f in found[scenario]["findings"]})
        example = next((f["message"] for f in found[scenario]["findings"]
                        if f["invariant"] == invariant), "none")
        check(invariant in invariants,
              f"{name}: caught by {invariant} (all: {invariants}); e.g. {example[:160]}")
        if name in ALONE:
            check(invariants == [invariant], f"{name}: caught by {invariant} alone ({invariants})")
    check(found[CONTROL]["outcome"] == "ok", f"the control scenario holds: {found[CONTROL]['outcome']}")
    # 2. The ablation: with each of I3, I4, I6, I9 switched off, which faults survive.
    ablation = read(os.path.join(out, "summary.json"))["ablation"]
    matrix = ablation["matrix"]
    print("fault x invariant switched off ('S' survives, else the invariants that still catch it):")
    print(f"{'fault':<34}" + "".join(f" {off:>8}" for off in ABLATED))
    in_ablation = {name: entry for name, entry in FAULTS.items() if entry[1] not in NOT_ABLATED}
    for name, (_, scenario, _) in in_ablation.items():
        row = matrix[scenario]
        print(f"{name:<34}" + "".join(
            f" {('S' if row[off] == 'survives' else ','.join(row[off])):>8}" for off in ABLATED))
    check(all(matrix[scenario][off] == "survives" or off not in matrix[scenario][off]
              for _, scenario, _ in in_ablation.values() for off in ABLATED),
          "an invariant switched off reports nothing")
    check(matrix[CONTROL]["all"] == "none", "the control scenario is caught by nothing")
    for off in ABLATED:
        only = [name for name, (_, scenario, _) in FAULTS.items()
                if scenario in ablation["necessary_for"][off]]
        check(only, f"{off} is necessary: without it {', '.join(only) or 'nothing'} survives")
    # 3. I3's root causes: one per fault, none the stale gradient's, the new one untriaged.
    summaries = [read(os.path.join(folder, "summary.json")) for folder in (out, plain_out)]

    def replay(names, attempt):
        folder = os.path.join(work, f"unmasked-{attempt}")
        run(zerocheck, common + ["--scenarios", *(os.path.join(SCENARIOS, f"{n}.json") for n in names),
                                 "--out", folder], expect=None, env=env)
        return read(os.path.join(folder, "summary.json"))
    summaries = unmasked(summaries, triage_rows(), replay)
    causes = {}
    for name, (_, scenario, _) in FAULTS.items():
        titles = sorted({c["title"] for summary in summaries for c in summary["root_causes"]
                         if c.get("invariant") == "I3" and scenario in c["scenarios"]})
        if titles:
            causes[name] = titles
            print(f"I3 root cause of {name}: {titles}")
    check(len(causes) >= 5, f"I3 catches {len(causes)} planted faults: {sorted(causes)}")
    check(all(len(titles) == 1 for titles in causes.values()),
          "each fault I3 catches has one I3 root cause")
    for name, words in LOCATED.items():
        check(name in causes and words in causes[name][0],
              f"I3 locates {name} at {words!r}: {causes.get(name)}")
    firsts = [titles[0] for titles in causes.values()]
    check(len(set(firsts)) == len(firsts), "each fault I3 catches has a root cause of its own")
    table = triaged()
    check(STALE_GRADIENT in table, f"the stale-gradient row's key is in KNOWN_UPSTREAM.md: {STALE_GRADIENT}")
    check(STALE_GRADIENT not in firsts, "no planted fault lands on the stale-gradient row")
    new = [t for summary in summaries for t in untriaged(summary, table)]
    check(causes[UNTRIAGED][0] in new,
          f"the triage check reports {UNTRIAGED} as untriaged: {causes[UNTRIAGED][0]}")
    # 4. A new cause with an old rule or field: its own key, untriaged, none another fault's.
    keys = {name: sorted({c["title"] for summary in summaries for c in summary["root_causes"]
                          if c.get("invariant") == FAULTS[name][0]
                          and FAULTS[name][1] in c["scenarios"]})
            for name in list(OLD_KEYS) + ["data-kept-after-backward", "step-count-skipped-on-one-rank"]}
    for name, titles in keys.items():
        print(f"{FAULTS[name][0]} root cause of {name}: {titles}")
    for name, old in OLD_KEYS.items():
        check(any(t.startswith(old) for t in keys[name]) and not set(keys[name]) & set(table),
              f"{name}: a key of its own beside {old!r}, untriaged: {keys[name]}")
        check(all(t in new for t in keys[name]), f"the triage check reports {name} as untriaged")
    distinct = [t for titles in keys.values() for t in titles]
    check(len(set(distinct)) == len(distinct), f"no two planted faults share a key: {keys}")
    # 5. The race's symptom, planted, gets the keys of the race's rows (I9 at a step and at a
    # save, I3's whole copy at a step, I3 at a gathered edit, I3 and I6 at a load).
    race = sorted({c["title"] for name, invariants in RACE_LOOKALIKES.items()
                   for summary in summaries for c in summary["root_causes"]
                   if c.get("invariant") in invariants and FAULTS[name][1] in c["scenarios"]})
    print(f"root causes of the race's look-alikes: {race}")
    bugs = bug_titles()
    check(len(race) == 6 and all(bugs.get(t) == RACE_BUG for t in race),
          f"the race's look-alikes land on the Gloo all_gather race's rows: {race}")
    # 6. The overflow skip's faults (master): each caught by I11 alone, at stage 2.
    if overflow_faults:
        stage2 = os.path.join(work, "planted-stage2")
        run(zerocheck, common + ["--stage", "2", "--scenarios",
                                 *(os.path.join(SCENARIOS, f"{s}.json")
                                   for _, s, _ in overflow_faults.values()), "--out", stage2],
            expect=1, env=env)
        caught = verdicts(stage2)
        for name, (invariant, scenario, _) in overflow_faults.items():
            invariants = sorted({f["invariant"] for f in caught[scenario]["findings"]})
            example = next((f["message"] for f in caught[scenario]["findings"]), "none")
            check(invariants == [invariant],
                  f"{name}: caught by {invariant} alone (all: {invariants}); e.g. {example[:200]}")
    print(f"planted upstream faults ({version}): all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
