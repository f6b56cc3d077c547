"""ctest `upstream_planted_faults` (label upstream): I3, I4 and I9 catch faults planted in DeepSpeed.

    upstream_faults_test.py ZEROCHECK PYTHON TREE WORKDIR

A copy of DeepSpeed's own source (../shared/deepspeed/v0.14.5) gets the faults of FAULTS, each a
source edit in the real code path, switched on while one scenario replays (the worker sets
ZEROCHECK_PLANTED_FAULT from ZEROCHECK_DS_PLANT). Every edit's anchor must be found exactly
once: a DeepSpeed that moved the code fails the test instead of testing nothing. Then, at world
2 on the copy:
  1. every fault is caught by its own invariant, and the control scenario (no fault) by none;
  2. the ablation: replayed again with each of I3, I4 and I9 switched off (--disable), some
     fault is caught by no other invariant, so each of them is necessary; a fault that survives
     when its own invariant is off proves the others do not catch it.
Exit 77 (skipped) only when TREE does not exist.
"""

import json
import os
import sys

from upstream_support import SKIP, Edit, arguments, check, patched_tree, run, verdicts

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios", "upstream_faults")


def planted(name):
    """The guard of one fault: true while that fault's scenario replays."""
    return f'__import__("os").environ.get("ZEROCHECK_PLANTED_FAULT") == "{name}"'


# name -> (its invariant, its scenario in scenarios/upstream_faults/, the edits that plant it).
FAULTS = {
    # ZeRO-3's step copies the updated fp32 partition into the parameters' shards; the copy
    # leaves out the last parameter of the group, which then never moves.
    "skip-last-param": ("I3", "sgd_two_linears", [Edit(
        "deepspeed/runtime/zero/stage3.py",
        "            self.fp16_partitioned_groups_flat[sub_group_id].data.copy_(\n"
        "                self.fp32_partitioned_groups_flat[sub_group_id].data)",
        "            _zc_n = self.fp16_partitioned_groups_flat[sub_group_id].numel() - (\n"
        f"                self.fp16_groups[sub_group_id][-1].partition_numel() if {planted('skip-last-param')} else 0)\n"
        "            self.fp16_partitioned_groups_flat[sub_group_id].data.narrow(0, 0, _zc_n).copy_(\n"
        "                self.fp32_partitioned_groups_flat[sub_group_id].data.narrow(0, 0, _zc_n))")]),
    # The loss divided by the accumulation steps twice.
    "loss-scaled-twice": ("I3", "sgd_accumulation_2", [Edit(
        "deepspeed/runtime/engine.py",
        "            loss = self._scale_loss_by_gas(loss.float())",
        "            loss = self._scale_loss_by_gas(loss.float())\n"
        f"            if {planted('loss-scaled-twice')}:\n"
        "                loss = self._scale_loss_by_gas(loss)")]),
    # Rank 1 writes its reduced gradient partition one element late (element i gets i - 1's).
    "gradient-one-element-late": ("I3", "sgd_one_linear", [Edit(
        "deepspeed/runtime/zero/stage3.py",
        "                grad_buffer.copy_(grad_partition, non_blocking=True)",
        f"                if {planted('gradient-one-element-late')} and dist.get_rank(self.dp_process_group) == 1:\n"
        "                    grad_partition = torch.cat([grad_partition.new_zeros(1), grad_partition[:-1]])\n"
        "                grad_buffer.copy_(grad_partition, non_blocking=True)")]),
    # After a module's backward its parameters are released (NOT_AVAILABLE) but keep their full
    # data: the memory ZeRO-3 exists to free stays held.
    "data-kept-after-backward": ("I4", "sgd_two_linears_kept", [Edit(
        "deepspeed/runtime/zero/parameter_offload.py",
        "        self.get_param_coordinator(training=True).release_sub_module(sub_module)\n\n"
        "        see_memory_usage(\n"
        "            f\"After sub module backward function",
        f"        _zc_full = {{p: p.data for p in sub_module.parameters(recurse=False)}} if {planted('data-kept-after-backward')} else {{}}\n"
        "        self.get_param_coordinator(training=True).release_sub_module(sub_module)\n"
        "        for _zc_p, _zc_data in _zc_full.items():\n"
        "            if _zc_p.ds_status == ZeroParamStatus.NOT_AVAILABLE:\n"
        "                _zc_p.data = _zc_data\n\n"
        "        see_memory_usage(\n"
        "            f\"After sub module backward function")]),
    # Rank 1 does not count an optimizer step.
    "step-count-skipped-on-one-rank": ("I9", "sgd_one_linear_steps", [Edit(
        "deepspeed/runtime/engine.py",
        "        self.global_steps += 1\n",
        f"        self.global_steps += 0 if ({planted('step-count-skipped-on-one-rank')} and self.global_rank == 1) else 1\n")]),
}
CONTROL = "sgd_control"  # no fault: no finding
ABLATED = ("I3", "I4", "I9")


def main():
    args = arguments()
    if args is None:
        return SKIP
    zerocheck, python, tree, work = args
    edits = [edit for _, _, fault_edits in FAULTS.values() for edit in fault_edits]
    copy = patched_tree(tree, os.path.join(work, "planted-tree", "deepspeed-planted"), edits,
                        "planted faults")
    plant = ",".join(f"{scenario}:{name}" for name, (_, scenario, _) in FAULTS.items())
    env = dict(os.environ, ZEROCHECK_DS_PLANT=plant)
    scenarios = [os.path.join(SCENARIOS, f"{s}.json") for _, s, _ in FAULTS.values()]
    scenarios.append(os.path.join(SCENARIOS, f"{CONTROL}.json"))
    common = ["--python", python, "--world", "2", "--scenario-timeout", "60",
              "--deepspeed-tree", copy, "--scenarios", *scenarios]

    # 1. Every fault caught by its own invariant; the control clean.
    out = os.path.join(work, "all")
    run(zerocheck, common + ["--out", out], expect=1, env=env)
    found = verdicts(out)
    caught_by = {}
    for name, (invariant, scenario, _) in FAULTS.items():
        invariants = sorted({f["invariant"] for f in found[scenario]["findings"]})
        caught_by[name] = invariants
        example = next((f["message"] for f in found[scenario]["findings"]
                        if f["invariant"] == invariant), "none")
        check(invariant in invariants,
              f"{name}: caught by {invariant} (all: {invariants}); e.g. {example[:160]}")
    check(found[CONTROL]["outcome"] == "ok", f"the control scenario holds: {found[CONTROL]['outcome']}")

    # 2. The ablation: each new invariant switched off in turn; which faults survive.
    matrix = {name: {} for name in FAULTS}
    for off in ABLATED:
        ablated = os.path.join(work, f"without-{off}")
        run(zerocheck, common + ["--out", ablated, "--disable", off], expect=None, env=env)
        found = verdicts(ablated)
        for name, (_, scenario, _) in FAULTS.items():
            invariants = sorted({f["invariant"] for f in found[scenario]["findings"]})
            check(off not in invariants, f"--disable {off}: {name} reports no {off} finding")
            matrix[name][off] = invariants or "survives"
    print("fault x invariant switched off ('S' survives, else the invariants that still catch it):")
    print(f"{'fault':<34}" + "".join(f" {off:>8}" for off in ABLATED))
    for name, row in matrix.items():
        print(f"{name:<34}" + "".join(
            f" {('S' if row[off] == 'survives' else ','.join(row[off])):>8}" for off in ABLATED))
    for off in ABLATED:
        only = [name for name, row in matrix.items() if row[off] == "survives"]
        check(only, f"{off} is necessary: without it {', '.join(only) or 'nothing'} survives")
    with open(os.path.join(work, "ablation.json"), "w", encoding="utf-8") as f:
        json.dump({"caught_by": caught_by, "matrix": matrix}, f, indent=1)
    print("planted upstream faults: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
