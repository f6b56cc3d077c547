"""ctest `upstream_suite_deepspeed_master` (label upstream-master): the suite on DeepSpeed master.

    upstream_master_test.py ZEROCHECK PYTHON TREE WORKDIR

TREE is ../shared/deepspeed/master-*, which needs torch 2.x and pydantic 2: it runs in the
Debian 13 lane (ci/lane-debian13). On the fixed-seed export plus a user who placed experts by
their own `ds_id`, at world 2: every scenario gets a verdict; the seed bug's experts keep `id`
(fixed upstream: the module counter moved to `ds_id`); the user's `ds_id` on those experts is
overwritten (I1), which is where the counter went; the zero-size parameter's failure is
reported; I3, I4 and I9 check the numbers and partitions (an expert a route skips is stepped
with its old gradient, I3). Every root cause is printed with its triage from
harness/deepspeed/KNOWN_UPSTREAM.md, and one missing from it fails the test: a new upstream
finding must be triaged; one that comes and goes is replayed apart and judged by its rate, printed
beside it (upstream_rates.py). What the control reproduces on plain PyTorch is listed, not triaged.
Exit 77 (skipped) where the tree is absent or the Python's torch is older than 2.
"""

import os
import re
import shutil
import subprocess
import sys

from upstream_support import (EXTRA, HERE, SKIP, check, check_numbers, export, read, replayer,
                              run, signatures, triaged, verdicts)

# 256 nested Sequentials: plain PyTorch on torch 2.6 exceeds Python's recursion limit in the
# forward too, so the control must report it as a limit of the replay, not as DeepSpeed's.
DEEP_CHAIN = os.path.join(HERE, "scenarios", "upstream_limits", "deep_chain_256.json")

def main():
    zerocheck, python, tree, work = sys.argv[1:5]
    if not os.path.isdir(tree):
        print(f"SKIPPED: no DeepSpeed source tree at {tree}")
        return SKIP
    major = subprocess.run([python, "-c", "import torch; print(torch.__version__.split('.')[0])"],
                           capture_output=True, text=True).stdout.strip()
    if major in ("0", "1"):
        print(f"SKIPPED: DeepSpeed master needs torch >= 2; {python} has torch {major}.x "
              f"(run it in the Debian 13 lane: ci/lane-debian13)")
        return SKIP
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    scenarios, exported = export(zerocheck, work)
    out = os.path.join(work, "master")
    run(zerocheck, ["--python", python, "--world", "2", "--scenario-timeout", "60",
                    "--deepspeed-tree", tree, "--scenarios", *scenarios, DEEP_CHAIN, "--out", out],
        expect=1)
    found = verdicts(out)
    check(sorted(found) == sorted(exported + EXTRA + ["deep_chain_256"]),
          "every scenario has a verdict")
    summary = read(os.path.join(out, "summary.json"))
    check(re.match(r"0\.(1[89]|[2-9]\d)", summary["adapter_version"] or "") is not None,
          f"DeepSpeed master imported ({summary['adapter_version']})")
    seed = signatures(found["seed-bug"])
    check(not any("attribute 'id'" in s or "by 'id'" in s for s in seed),
          "seed bug: the experts keep `id` on master")
    ds_id = signatures(found["ds_id_experts"])
    check(any(s.startswith("I1 ") and "'ds_id' on Expert module" in s for s in ds_id),
          "a user's `ds_id` on the experts is overwritten (I1): the counter moved there")
    zero = found["zero-size-param"]
    check(any(f["invariant"] == "op" and "NOT_AVAILABLE" in (f["exception"] or "")
              for f in zero["findings"]),
          "zero-size parameter: DeepSpeed's NOT_AVAILABLE assertion still reported on master")
    nondeterministic = check_numbers(summary, found, "master", replayer(
        zerocheck, ["--python", python, "--world", "2", "--scenario-timeout", "60",
                    "--deepspeed-tree", tree], scenarios, work), work)
    rates = {}
    for rate in nondeterministic:
        rates.setdefault(rate.finding, []).append(f"{rate.seen} of {rate.runs} in {rate.scenario}")
    deep = [lim for lim in summary["limits"] if "deep_chain_256" in lim["scenarios"]]
    check(any("RecursionError" in lim["signature"] for lim in deep)
          and not any("deep_chain_256" in c["scenarios"] for c in summary["root_causes"]),
          "the 256-deep chain's RecursionError fails on plain PyTorch too: a limit of the "
          "replay (the control), not a root cause")
    table = triaged()
    untriaged = []
    causes = summary["root_causes"]
    for cause in causes:
        verdict = table.get(cause["title"])
        rate = (f" (nondeterministic: seen in {', '.join(rates[cause['title']])} runs)"
                if cause["title"] in rates else "")
        print(f"  {len(cause['scenarios']):>3} scen {len(cause['signatures']):>3} sig  "
              f"{verdict or 'NOT TRIAGED':<24} {cause['title']}{rate}")
        if verdict is None:
            untriaged.append(cause["title"])
    for limit in summary["limits"]:
        print(f"  limit of the replay, not triaged upstream: {limit['signature']}: {limit['reason']}")
    print(f"  {len(causes)} root cause(s) of {len(summary['signatures']) - len(summary['limits'])} "
          f"upstream signature(s)")
    check(not untriaged, f"every root cause is triaged in KNOWN_UPSTREAM.md ({len(untriaged)} not)")
    print("upstream suite on", tree, ": all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
