"""ctest `upstream_suite_deepspeed` (label upstream): the regression suite on a real DeepSpeed.

    upstream_suite_test.py ZEROCHECK PYTHON TREE WORKDIR [baseline|survival]

TREE is DeepSpeed's own source (../shared/deepspeed/v0.14.5). Runs of `zerocheck upstream` at
world 2, each checked from the files it writes, in two parts that ctest runs side by side
(`upstream_suite_deepspeed`: 1 and 2, `upstream_suite_deepspeed_survival`: 3 to 5; no part given:
all of them):
  1. the unmodified tree on a fixed-seed export (the seed bug and a zero-size parameter among
     them): every scenario has a verdict; the seed bug shows I1 on `id` and I2; the zero-size
     parameter's failure is reported;
  2. a patched copy (DeepSpeed's module counter written as `ds_id` instead of `id`, and read
     back from there) with --baseline run 1: the `id` findings are fixed, the `ds_id` ones are
     new, and the exit code is 1 because something is new; then a copy with the stale gradient
     fixed (every gradient partition cleared after a step): neither stale-gradient cause is left
     in its two scenarios, so the checks asserting that bug see DeepSpeed's buffer, not the twin;
  3. three scenarios with a rank crash (SIGSEGV) and a hang planted: each gets its finding,
     and the scenario after them still gets an ordinary verdict;
  4. --shrink on the zero-size parameter's scenario and the stale gradient's: every signature
     gets a minimal scenario and a script the suite verified (REPRODUCED on the tree, NOT
     REPRODUCED on plain PyTorch); the stale gradient's (the dense-twin form) is run again here;
  5. --stage 1 and --stage 2 on two plain training scenarios: no finding, I3 and I4 checked.
Run 1 also checks I3, I4 and I9: checks made, the expert a route skips stepped with its old
gradient (I3), every other I3/I4/I6/I9 root cause triaged in KNOWN_UPSTREAM.md; a scenario with an
untriaged or nondeterministic cause is replayed apart and each cause judged by its rate
(upstream_rates.py: nondeterministic only where its row says so; rates in WORKDIR/finding_rates.json).
Exit 77 (ctest: skipped) only when TREE does not exist; a tree that fails to import fails.
"""

import os
import subprocess
import sys

from upstream_support import (EXPERT_SKIPPED, EXTRA, SKIP, STALE_ACCUMULATED, STALE_ACCUMULATED_CAUSE,
                              TWIN_SCENARIOS, Edit, arguments, check, check_numbers, export,
                              patched_tree, read, replayer, run, signatures, verdicts)

# DeepSpeed with its module counter moved from `id` to `ds_id`, as master has it.
DS_ID_EDITS = [Edit(relative, r"(?<=[\w\]])\.id\b", ".ds_id", regex=True, count=None)
               for relative in ("deepspeed/runtime/zero/parameter_offload.py",
                                "deepspeed/runtime/zero/partitioned_param_coordinator.py",
                                "deepspeed/utils/debug.py")]


PARTS = ("baseline", "survival")


def main():
    part = sys.argv[5] if len(sys.argv) > 5 else None
    if part not in PARTS + (None,):
        print(f"usage: upstream_suite_test.py ZEROCHECK PYTHON TREE WORKDIR [{'|'.join(PARTS)}]; "
              f"got part {part!r}")
        return 2
    args = arguments()
    if args is None:
        return SKIP
    zerocheck, python, tree, work = args
    common = ["--python", python, "--world", "2", "--scenario-timeout", "60"]
    scenarios, exported = export(zerocheck, work)
    if part in ("baseline", None):
        check_baseline(zerocheck, python, tree, work, common, scenarios, exported)
    if part in ("survival", None):
        check_survival(zerocheck, python, tree, work, common, scenarios, exported)
    print("upstream suite on", tree, f"({part or 'all parts'}): all checks passed")
    return 0
# DeepSpeed with the stale gradient fixed, planted: every parameter's gradient partition cleared
# after each step. Both stale-gradient checks (check_numbers) must then find nothing.
STALE_FIX = [Edit("deepspeed/runtime/zero/stage3.py", "    def _post_step(self, timer_names):\n",
                  "    def _post_step(self, timer_names):\n"
                  "        for _zc_buffer in self.__param_id_to_grad_partition.values():\n"
                  "            _zc_buffer.zero_()\n")]
STALE_CAUSE = "I3 step: the gradient handed to the optimizer first differs from the dense twin, for a parameter without"


def check_baseline(zerocheck, python, tree, work, common, scenarios, exported):
    """Parts 1 and 2: the unmodified tree's verdicts, then a patch judged against them."""
    # 1. The unmodified tree, on the export plus a user who placed experts by their own `ds_id`.
    base = os.path.join(work, "base")
    run(zerocheck, common + ["--deepspeed-tree", tree, "--scenarios", *scenarios, "--out", base],
        expect=1)
    found = verdicts(base)
    check(len(exported) >= 12, f"{len(exported)} scenarios exported")
    check(sorted(found) == sorted(exported + EXTRA), "every scenario has a verdict")
    check(not any("'ds_id' on Expert module" in s for s in signatures(found["ds_id_experts"])),
          "0.14.5 leaves a user's module attribute `ds_id` alone")
    check(all(v["outcome"] in ("ok", "findings") for v in found.values()),
          "no crash or hang on the unmodified tree")
    seed = signatures(found["seed-bug"])
    check(any(s.startswith("I1 ") and "'id' on Expert module" in s for s in seed),
          "seed bug: I1 on the experts' `id`")
    check(any(s.startswith("I2 ") and "by 'id'" in s for s in seed),
          "seed bug: I2, experts moved by `id`")
    zero = found["zero-size-param"]
    check(any(f["invariant"] == "op" and "NOT_AVAILABLE" in (f["exception"] or "")
              for f in zero["findings"]),
          "zero-size parameter: DeepSpeed's NOT_AVAILABLE assertion reported")
    summary = read(os.path.join(base, "summary.json"))
    check(summary["adapter_version"] == "0.14.5", "DeepSpeed 0.14.5 imported from the tree")
    check_numbers(summary, found, "v0.14.5",
                  replayer(zerocheck, common + ["--deepspeed-tree", tree], scenarios, work), work)
    check(os.path.exists(os.path.join(base, "report.md")), "report.md written")

    # 2. A patch that moves the counter to `ds_id`, judged against run 1.
    # Beside a copy of the shims, where the suite looks for them (TREE/../shims).
    patched = patched_tree(tree, os.path.join(work, "patched-tree", "deepspeed-ds-id"), DS_ID_EDITS,
                           "module counter as ds_id")
    patched_out = os.path.join(work, "patched")
    run(zerocheck, common + ["--deepspeed-tree", patched, "--out", patched_out,
                             "--scenarios", *scenarios, "--baseline", base], expect=1)
    comparison = read(os.path.join(patched_out, "summary.json"))["baseline"]
    fixed = [e["signature"] for e in comparison["fixed"]]
    new = [e["signature"] for e in comparison["new"]]
    check(any("attribute 'id' on Expert module" in s for s in fixed), "the `id` findings are fixed")
    check(any(s.startswith("I2 ") for s in fixed), "the placement finding is fixed")
    check(any("attribute 'ds_id' on Expert module" in s for s in new),
          "the user's `ds_id` on the experts overwritten: new")
    left = new + [e["signature"] for e in comparison["unchanged"]]
    check(not any("attribute 'id'" in s or "by 'id'" in s for s in left), "no `id` finding left")

    # 2b. The stale gradient fixed in a copy: both of its scenarios hold there, so the checks
    # that assert the bug (check_numbers) see the bug, not the twin.
    fixed_tree = patched_tree(tree, os.path.join(work, "stale-fix-tree", "deepspeed-stale-fix"), STALE_FIX,
                              "gradient partitions cleared after each step")
    fixed_out = os.path.join(work, "stale-fix")
    run(zerocheck, common + ["--deepspeed-tree", fixed_tree, "--out", fixed_out,
                             "--scenarios", EXPERT_SKIPPED, STALE_ACCUMULATED], expect=None)
    causes = sorted(c["title"] for c in read(os.path.join(fixed_out, "summary.json"))["root_causes"])
    check(sorted(verdicts(fixed_out)) == ["expert_skipped_by_route", "stale_gradient_accumulated"]
          and not [t for t in causes if t.startswith((STALE_ACCUMULATED_CAUSE, STALE_CAUSE))],
          f"with the gradient partitions cleared after each step, neither stale-gradient cause: {causes}")


def check_survival(zerocheck, python, tree, work, common, scenarios, exported):
    """Parts 3 to 5: crashes and hangs survived, shrinking to scripts, ZeRO stages 1 and 2."""

    # 3. A rank that crashes and a scenario that hangs: verdicts for both, and the run goes on.
    chosen = [os.path.join(scenarios[0], f"{n}.json") for n in exported[:3]]
    injected = os.path.join(work, "injected")
    env = dict(os.environ, ZEROCHECK_DS_INJECT=f"crash:{exported[0]}:1,hang:{exported[1]}:0")
    run(zerocheck, ["--python", python, "--world", "2", "--scenario-timeout", "20",
                    "--deepspeed-tree", tree, "--out", injected, "--scenarios", *chosen],
        expect=1, env=env)
    found = verdicts(injected)
    crash, hang, after = (found[n] for n in exported[:3])
    check(crash["outcome"] == "crash" and "rank 1 died (SIGSEGV)" in crash["findings"][0]["message"],
          f"planted SIGSEGV: {crash['findings'][0]['message']}")
    check(hang["outcome"] == "hang" and "rank 0: op 0" in hang["findings"][0]["message"],
          f"planted hang: {hang['findings'][0]['message']}")
    check(after["outcome"] in ("ok", "findings"), "the scenario after them got its own verdict")
    check(read(os.path.join(injected, "summary.json"))["rank_starts"] >= 3,
          "the ranks were restarted after the crash and after the hang")
    # 4. Shrinking the zero-size parameter's scenario and the stale gradient's (I3: its script
    #    carries the dense twin) to standalone scripts that reproduce on DeepSpeed and not on
    #    plain PyTorch.
    shrunk = os.path.join(work, "shrunk")
    run(zerocheck, common + ["--deepspeed-tree", tree, "--out", shrunk, "--shrink",
                             "--shrink-seconds", "40", "--scenarios",
                             os.path.join(scenarios[0], "zero-size-param.json"), EXPERT_SKIPPED],
        expect=1)
    groups = read(os.path.join(shrunk, "summary.json"))["signatures"]
    # DeepSpeed's Gloo all_gather race (KNOWN_UPSTREAM.md) can add a signature to the MoE's
    # run (its parameters are persistent, gathered after each step) that does not come back
    # when the scenario runs alone: "not reproducible", said and not shrunk. Every signature of
    # the zero-size parameter and the stale gradient's must be.
    stale = [g for g in groups if g["signature"].startswith("I3 step: value differs")]
    wanted = [g for g in groups if "zero-size-param" in g["scenarios"]] + stale
    check(wanted and all(g["minimal"]["reproducible"] for g in wanted),
          f"{len(groups)} signature(s) shrunk; not reproducible alone: "
          f"{[g['signature'] for g in groups if not g['minimal']['reproducible']]}")
    check(stale and stale[0]["minimal"]["repro"],
          f"the stale gradient (I3) got a script with the dense twin: {[g['signature'] for g in groups]}")
    for g in groups:
        m = g["minimal"]
        if not m["reproducible"]:
            continue
        if not m["repro"]:  # an I3 outside the twin form: its replay command
            print(f"no script (replay command): {g['signature']}")
            continue
        bound = 2 if "zero-size-param" in g["scenarios"] else 5
        check(m["after"]["ops"] <= m["before"]["ops"] and m["after"]["modules"] <= bound,
              f"{g['signature'][:60]}: {m['before']} -> {m['after']} in {m['seconds']} s")
        # The suite ran every script before writing it (REPRODUCED on the tree, NOT REPRODUCED
        # with --plain). Run again here only the stale gradient's, the one with the dense twin,
        # so the suite's own verification is held to what a script prints; each run is ~10 s.
        check(m["script_check"] and m["script_check"]["verified"],
              f"the suite verified its script: {m['script_check']}")
        if g not in stale:
            continue
        script = subprocess.run(["bash", "-c", m["repro_command"]], capture_output=True,
                                text=True, timeout=120)
        check("REPRODUCED " + g["signature"] in script.stdout and
              "NOT REPRODUCED" not in script.stdout,
              f"its script reproduces it on DeepSpeed: {script.stdout.strip()[-200:]}")
        plain = subprocess.run([python, m["repro"], "--plain"], capture_output=True, text=True,
                               timeout=120)
        check(plain.returncode == 0 and "NOT REPRODUCED" in plain.stdout,
              "and passes on plain PyTorch (--plain)")
    # 5. ZeRO stages 1 and 2 on the scenarios both dense twins agree on: DeepSpeed's numbers
    #    equal the twin's under each stage's rules, and the stage is recorded.
    for stage in (1, 2):
        staged = os.path.join(work, f"stage{stage}")
        run(zerocheck, common + ["--deepspeed-tree", tree, "--stage", str(stage), "--out", staged,
                                 "--scenarios", *(os.path.join(TWIN_SCENARIOS, n) for n in
                                                  ("mlp_sgd_world2.json", "tied_adam_world2.json"))],
            expect=0)
        summary = read(os.path.join(staged, "summary.json"))
        check(summary["stage"] == stage and summary["checks"]["I3"]["checked"] > 0
              and summary["checks"]["I4"]["checked"] > 0,
              f"stage {stage}: {summary['checks']['I3']['checked']} I3 and "
              f"{summary['checks']['I4']['checked']} I4 checks, no finding")


if __name__ == "__main__":
    sys.exit(main())
