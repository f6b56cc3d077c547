"""ctest `upstream_inert_knobs` (label upstream): I10 catches a fault planted in DeepSpeed that
only a knob the scenario does not set brings out, by its own id, and the ablation shows I10
necessary for it.

    upstream_inert_knobs_test.py ZEROCHECK PYTHON TREE WORKDIR

The fault: when ZeRO-3's gradient bucket is flushed because the next gradient would overflow it
(stage3.py `reduce_independent_p_g_buckets_and_remove_grads`), the gradient that went in last is
zeroed first: the bucket is flushed one gradient short. With DeepSpeed's default
reduce_bucket_size (5e8 elements) a small model's gradients fit in one bucket and the fault never
bites, so the scenario's own replay holds every invariant (I3 included). I10's second replay draws
the inert knobs again (for this scenario's name: reduce_bucket_size 36, below the model's 40
elements), the bucket fills, and the step's numbers change. The control is the same scenario
under another name on the same patched copy (its second draw: reduce_bucket_size 23), where the
fault is off: I10 holds on pristine code with buckets flushed mid-backward.

Exit 77 (skipped) when TREE does not exist, or for master where the Python's torch is older than 2.
"""

import os
import subprocess

from upstream_support import DS_PACKAGE, SKIP, Edit, check, patched_tree, read, versioned_arguments

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios", "upstream_inert_knobs")
FAULT, PLANTED, CONTROL = "full-bucket-loses-its-last-gradient", "sgd_two_buckets", "sgd_two_buckets_control"
GUARD = f'__import__("os").environ.get("ZEROCHECK_PLANTED_FAULT") == "{FAULT}"'
STAGE3 = "deepspeed/runtime/zero/stage3.py"
EDITS = {
    "v0.14": [Edit(STAGE3,
                   "        if self.elements_in_ipg_bucket + param.ds_numel > self.reduce_bucket_size and self.elements_in_ipg_bucket > 0:\n",
                   "        if self.elements_in_ipg_bucket + param.ds_numel > self.reduce_bucket_size and self.elements_in_ipg_bucket > 0:\n"
                   f"            if {GUARD}:\n"
                   "                self.params_in_ipg_bucket[-1].grad.zero_()\n", count=1)],
    "master": [Edit(STAGE3,
                    "        if bucket.elements + param.ds_numel > self.reduce_bucket_size and bucket.elements > 0:\n",
                    "        if bucket.elements + param.ds_numel > self.reduce_bucket_size and bucket.elements > 0:\n"
                    f"            if {GUARD}:\n"
                    "                bucket.params[-1].grad.zero_()\n", count=1)],
}


def main():
    args = versioned_arguments()
    if args is None:
        return SKIP
    _, python, tree, work, version = args
    copy = patched_tree(tree, os.path.join(work, "inert-tree", "deepspeed-planted"), EDITS[version],
                        f"the inert-knob fault ({version})")
    out = os.path.join(work, "inert")
    command = [python, "-m", "zerocheck_ds", "suite", "--world", "2", "--no-control",
               "--deepspeed-tree", copy, "--inert-fraction", "1", "--ablate", "--out", out,
               "--scenarios", *(os.path.join(SCENARIOS, f"{s}.json") for s in (PLANTED, CONTROL))]
    env = dict(os.environ, ZEROCHECK_DS_PLANT=f"{PLANTED}:{FAULT}",
               PYTHONPATH=os.pathsep.join(filter(None, [DS_PACKAGE, os.environ.get("PYTHONPATH")])))
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=400)
    print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
    check(done.returncode == 1, f"the suite finds the fault: exit {done.returncode}")
    verdicts = {name: read(os.path.join(out, "verdicts", f"{name}.verdict.json"))
                for name in (PLANTED, CONTROL)}
    found = verdicts[PLANTED]["findings"]
    invariants = sorted({f["invariant"] for f in found})
    check(invariants == ["I10"], f"{FAULT}: caught by I10 alone: {invariants}; "
                                 f"{[f['message'][:200] for f in found]}")
    check(any("reduce_bucket_size 500000000 -> 36" in f["message"] for f in found),
          "the finding names the knob drawn again")
    check(verdicts[CONTROL]["outcome"] == "ok" and verdicts[CONTROL]["checks"]["I10"]["checked"] == 1,
          f"the control holds I10 with its buckets flushed mid-backward: {verdicts[CONTROL]['outcome']}, "
          f"{verdicts[CONTROL]['checks'].get('I10')}")
    ablation = read(os.path.join(out, "summary.json"))["ablation"]
    check(ablation["matrix"][PLANTED]["I10"] == "survives",
          f"without I10 the fault survives: {ablation['matrix'][PLANTED]}")
    check(PLANTED in ablation["necessary_for"]["I10"], "I10 is necessary")
    print(f"upstream_inert_knobs: OK ({version}): {found[0]['signature']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
