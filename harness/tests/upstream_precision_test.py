"""ctests `upstream_precision` (label upstream) and `upstream_precision_master` (label
upstream-master): DeepSpeed ZeRO-3 with bf16 parameters against the dense twin in bf16.

    upstream_precision_test.py ZEROCHECK PYTHON TREE WORKDIR

TREE is DeepSpeed's own source (../shared/deepspeed/v0.14.5 on torch 1.13, whose Gloo gets bf16
from world/bf16_gloo.py; master-* on torch 2.6 in the Debian 13 lane). The twin computes each
step in DeepSpeed's dtypes and cast order (model/twin.py Precision; docs/deepspeed-precision.md
rules R1-R4, R9): bf16 parameters and gradients, the reduce in the communication dtype, the
accumulation in its dtype, an fp32 master stepped and rounded back. One run at world 2 over
scenarios/upstream_precision:
  1. every scenario has a verdict, and the twin follows every one: I3 made checks in each and
     none was left out (a precision the twin does not follow stops it, saying so);
  2. HOLDS hold bit for bit: SGD, Adam with accumulation, an fp32 reduce and accumulation, a
     binding clip, persistent parameters, a save (both consolidations: the 16-bit values and
     zero_to_fp32's masters), and loads (R10): with the optimizer's states (the saved fp32
     masters back) and without them (the masters rebuilt from the bf16 parameters, their fp32
     digits lost). A run the Gloo all_gather race struck (KNOWN_UPSTREAM.md, PR #8539) shows
     only rows triaged as nondeterministic: check 3 replays it and judges each by its rate;
  3. a gathered edit then a step shows DeepSpeed's documented behaviour (I3, its row: the fp32
     master does not take the edit), in the first run or, where the Gloo race struck the gathered
     copy first, in the replays (masked in that run: judged by its rate); load_module_only shows the catalogued bug under bf16 as
     under fp32, on the same two rows (nothing restored: the masters rebuilt from the unchanged
     bf16 values are "the value before the load" too); every I3/I4/I6/I9 root cause is triaged,
     judged by its rate where it comes and goes (upstream_rates.py);
  4. faults planted in a copy of the tree, each caught by I3 alone and located where it is:
     the copy of the fp32 master into the bf16 shards truncating instead of rounding to nearest
     even (R9), in bf16_sgd at the copy back; the accumulation of a second micro-step rounding
     to bf16 although `grad_accum_dtype` is fp32 (R4), in bf16_fp32_reduce_and_accumulation at
     the accumulated partition. The pristine runs of both scenarios hold (check 2).
"""

import os
import shutil
import sys

from upstream_rates import is_nondeterministic, shown_or_masked
from upstream_support import (SKIP, Edit, check, judge_new_causes, patched_tree, read, replayer,
                              run, triage_rows, verdicts, versioned_arguments)

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "scenarios", "upstream_precision")
HOLDS = ["bf16_sgd", "bf16_adam_accumulation_2", "bf16_fp32_reduce_and_accumulation",
         "bf16_clip_binding", "bf16_persistent_parameters", "bf16_save_then_train",
         "bf16_adam_save_train_load", "bf16_adam_load_without_optimizer_states"]
GATHER = ("bf16_gather_edit_then_step",
          "I3 step: the fp32 master before the optimizer step first differs from the dense twin "
          "after a gathered edit")
MODULE_ONLY = ("bf16_adam_load_module_only", [
    "I3 load: the parameter's value first differs from the dense twin, not restored by the load: "
    "deepspeed/runtime/engine.py load_checkpoint()", "I6 load: restores the value before the load"])
STAGE3 = "deepspeed/runtime/zero/stage3.py"
FAULT, FAULT_SCENARIO = "copy-back-truncates", "bf16_sgd"
COPY_BACK = ("            self.fp16_partitioned_groups_flat[sub_group_id].data.copy_(\n"
             "                self.fp32_partitioned_groups_flat[sub_group_id].data)")
TRUNCATES = [Edit(STAGE3, COPY_BACK,
                  "            _zc_f = self.fp32_partitioned_groups_flat[sub_group_id].data\n"
                  f'            if __import__("os").environ.get("ZEROCHECK_PLANTED_FAULT") == "{FAULT}":\n'
                  "                _zc_f = (_zc_f.view(torch.int32) & -65536).view(torch.float32)\n"
                  "            self.fp16_partitioned_groups_flat[sub_group_id].data.copy_(_zc_f)")]
LOCATED = ("I3 step: the copy of the fp32 master into the parameter's shard first differs from "
           "the dense twin")
ACCUMULATION_FAULT, ACCUMULATION_SCENARIO = "accumulation-rounds-to-bf16", "bf16_fp32_reduce_and_accumulation"
# The accumulation of a micro-step after the first (both versions' line; the CPU accelerator's
# buffers are on it): the sum rounded to bf16, then widened back into the fp32 buffer.
ACCUMULATE = "grad_buffer.add_(grad_partition.to(self.gradient_accumulation_dtype).view(grad_buffer.shape))"
ROUNDS = [Edit(STAGE3, ACCUMULATE,
               f'grad_buffer.copy_(grad_buffer.add(grad_partition.to(self.gradient_accumulation_dtype).view('
               f'grad_buffer.shape)).to(torch.bfloat16 if __import__("os").environ.get('
               f'"ZEROCHECK_PLANTED_FAULT") == "{ACCUMULATION_FAULT}" else grad_buffer.dtype))')]
ACCUMULATION_LOCATED = "I3 backward: the accumulated gradient partition first differs from the dense twin"


def main():
    args = versioned_arguments()
    if args is None:
        return SKIP
    zerocheck, python, tree, work, version = args
    common = ["--python", python, "--world", "2", "--scenario-timeout", "90"]
    out = os.path.join(work, "run")
    run(zerocheck, common + ["--deepspeed-tree", tree, "--scenarios", FOLDER, "--out", out],
        expect=1)
    found, summary = verdicts(out), read(os.path.join(out, "summary.json"))
    names = sorted(n[:-len(".json")] for n in os.listdir(FOLDER) if n.endswith(".json"))
    # 1. Verdicts; the twin follows each scenario.
    check(sorted(found) == names, f"every scenario has a verdict ({len(found)} of {len(names)})")
    for name, verdict in sorted(found.items()):
        i3 = verdict["checks"]["I3"]
        check(i3["checked"] > 0 and not i3["not_checked"],
              f"{version}: the twin follows {name} in bf16 (I3: {i3})")
    # 2. What holds, bit for bit. A run the Gloo all_gather race struck shows only causes whose
    # rows are nondeterministic: check 3 replays it and judges each by its rate.
    rows = triage_rows()
    for name in HOLDS:
        causes = [c for c in summary["root_causes"] if name in c["scenarios"]]
        covered = {s for c in causes for s in c["signatures"]}
        raced = (causes and all(is_nondeterministic(rows.get(c["title"])) for c in causes)
                 and {f["signature"] for f in found[name]["findings"]} <= covered)
        check(found[name]["outcome"] == "ok" or raced,
              f"{version}: {name} holds{' but for a nondeterministic row, judged by its rate below' if raced else ''}: "
              f"{[f['signature'] for f in found[name]['findings']]}")
    # 3. Every root cause triaged; the gathered edit's documented behaviour (after the replays:
    # where the Gloo race struck the gathered copy first, it masks the step's row in that run);
    # load_module_only's catalogued rows.
    failures, rates = judge_new_causes(summary, rows,
                                   replayer(zerocheck, common + ["--deepspeed-tree", tree],
                                            [FOLDER], work),
                                   os.path.join(work, "finding_rates.json"))
    check(not failures, f"{version}: every I3, I4, I6 and I9 root cause is triaged ({failures})")
    for rate in rates:
        print(f"nondeterministic: {rate}")
    name, cause = GATHER
    titles = sorted(c["title"] for c in summary["root_causes"] if name in c["scenarios"])
    why = shown_or_masked(cause, name, titles, read(os.path.join(work, "finding_rates.json")))
    check(why is None, f"{version}: {name} shows {cause!r} ({why or titles})")
    name, causes = MODULE_ONLY
    titles = sorted(c["title"] for c in summary["root_causes"] if name in c["scenarios"])
    check(titles == causes, f"{version}: {name} shows the catalogued load_module_only rows {causes}: {titles}")
    # 4. The planted truncation and the planted bf16 accumulation, one copy of the tree.
    copy = patched_tree(tree, os.path.join(work, "planted-tree", "deepspeed-planted"),
                        TRUNCATES + ROUNDS, f"bf16 copy back and accumulation ({version})")
    planted = os.path.join(work, "planted")
    plants = [(FAULT_SCENARIO, FAULT, LOCATED),
              (ACCUMULATION_SCENARIO, ACCUMULATION_FAULT, ACCUMULATION_LOCATED)]
    scenarios = os.path.join(work, "planted-scenarios")
    os.makedirs(scenarios, exist_ok=True)
    for name, _, _ in plants:
        shutil.copy(os.path.join(FOLDER, f"{name}.json"), scenarios)
    run(zerocheck, common + ["--deepspeed-tree", copy, "--scenarios", scenarios, "--out", planted],
        expect=1, env=dict(os.environ, ZEROCHECK_DS_PLANT=",".join(f"{n}:{f}" for n, f, _ in plants)))
    causes = read(os.path.join(planted, "summary.json"))["root_causes"]
    for name, fault, located in plants:
        caught = verdicts(planted)[name]
        invariants = sorted({f["invariant"] for f in caught["findings"]})
        titles = sorted(c["title"] for c in causes if name in c["scenarios"])
        check(invariants == ["I3"] and len(titles) == 1 and titles[0].startswith(located),
              f"{version}: {fault} is caught by I3 alone ({invariants}) in {name}, located: {titles}")
    print(f"bf16 ({version}): {len(HOLDS)} scenarios bit for bit, "
          f"{summary['checks']['I3']['checked']} I3 checks; all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
