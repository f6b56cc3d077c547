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
     reports the one no row describes (the copy back made before the optimizer step) as new.
Exit 77 (skipped) when TREE does not exist, or for master where the Python's torch is older than 2.
"""

import os
import sys

from upstream_support import (NEW_INVARIANTS, SKIP, Edit, check, patched_tree, read, run,
                              triaged, verdicts, versioned_arguments)

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
}
CONTROL = "sgd_control"  # no fault: no finding
# Scenarios of faults not replayed again per invariant switched off (the ablation shows each of
# I3, I4, I6, I9 necessary without them; they only need their own invariant to catch them).
NOT_ABLATED = {"adam_load_first_tag", "adam_load_empty_file", "adam_invalid_config_hook",
               "sgd_gather_edit_not_broadcast", "sgd_copy_back_early"}
ABLATED = ("I3", "I4", "I6", "I9")
# The root cause of KNOWN_UPSTREAM.md's stale-gradient row (its first cell): a planted wrong
# number must never land on it, or the triage would call a new bug known.
STALE_GRADIENT = ("I3 step: the gradient handed to the optimizer first differs from the dense "
                  "twin, for a parameter without a gradient in the step: "
                  "deepspeed/runtime/zero/stage3.py _prepare_sub_group()")
UNTRIAGED = "master-copied-back-before-step"  # the planted fault no row of the table describes


def untriaged(summary, table):
    """The I3/I4/I6/I9 root causes of `summary` that no row of KNOWN_UPSTREAM.md's table (`table`,
    upstream_support.triaged) holds: a cause the pristine suites' triage check fails on."""
    return sorted({c["title"] for c in summary["root_causes"]
                   if c.get("invariant") in NEW_INVARIANTS} - set(table))


def main():
    args = versioned_arguments()
    if args is None:
        return SKIP
    zerocheck, python, tree, work, version = args
    edits = [edit for _, _, by_version in FAULTS.values() for edit in by_version[version]]
    copy = patched_tree(tree, os.path.join(work, "planted-tree", "deepspeed-planted"), edits,
                        f"planted faults ({version})")
    plant = ",".join(f"{scenario}:{name}" for name, (_, scenario, _) in FAULTS.items())
    env = dict(os.environ, ZEROCHECK_DS_PLANT=plant)
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
    firsts = [titles[0] for titles in causes.values()]
    check(len(set(firsts)) == len(firsts), "each fault I3 catches has a root cause of its own")
    table = triaged()
    check(STALE_GRADIENT in table, f"the stale-gradient row's key is in KNOWN_UPSTREAM.md: {STALE_GRADIENT}")
    check(STALE_GRADIENT not in firsts, "no planted fault lands on the stale-gradient row")
    new = [t for summary in summaries for t in untriaged(summary, table)]
    check(causes[UNTRIAGED][0] in new,
          f"the triage check reports {UNTRIAGED} as untriaged: {causes[UNTRIAGED][0]}")
    print(f"planted upstream faults ({version}): all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
