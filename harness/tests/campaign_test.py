"""ctest `upstream_campaign`: `zerocheck upstream campaign` on the faulty adapter (plain PyTorch
emulating DeepSpeed 0.15.4's module numbering, no DeepSpeed needed).

    campaign_test.py ZEROCHECK PYTHON WORKDIR

1. A time-boxed campaign at world 2 draws and replays scenarios, finds the faulty adapter's
   numbering as an untriaged root cause (exit 1), records when and after how many scenarios each
   root cause was first seen, keeps the first scenario of each and the verdicts of scenarios with
   findings only, and writes campaign.md.
2. Run again on its folder it resumes: the draw goes on where it stopped (no scenario replayed
   twice), the time to find of the causes already found stays.
3. Another seed on that folder is a usage error (exit 2) naming the seed; shard 1 of 2 draws from
   10^9 on, apart from shard 0.
4. Interrupted (SIGINT) it exits 130 with its state saved and resumable.
5. At the end the first scenarios are replayed by the suite into findings/ (control, shrinking,
   reports): a root cause the control shows on plain PyTorch too is marked a limit of the replay
   and does not count as untriaged.
6. The two shards (the written-up 0/2, and 1/2 of step 3) merged by `zerocheck upstream merge`:
   the root causes are the union of theirs, with the counts and scenarios added up and each
   cause's time to find the earlier shard's; a campaign on the merge, shards of another seed or
   shard count, and a shard given twice are usage errors (exit 2) naming what is wrong.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

NUMBERING = "I1: written by zerocheck_ds/engines/adapters.py _number_modules_like_0_15_4()"


def check(condition, what):
    print(("ok: " if condition else "FAILED: ") + what, flush=True)
    if not condition:
        sys.exit(1)


def campaign(zerocheck, python, out, *extra, minutes="0.2"):
    command = [zerocheck, "upstream", "campaign", "--python", python, "--adapter", "faulty",
               "--world", "2", "--per-draw", "3", "--minutes", minutes, "--out", out, *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    print(f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stderr[-1500:]}", flush=True)
    return done


def merge(zerocheck, python, out, *folders):
    command = [zerocheck, "upstream", "merge", "--python", python, "--out", out, *folders]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    print(f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stderr[-1500:]}", flush=True)
    return done


def state_of(out):
    with open(os.path.join(out, "campaign.json"), encoding="utf-8") as f:
        return json.load(f)


def main():
    zerocheck, python, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "campaign")

    # 1. A campaign finds the numbering, with its time to find.
    done = campaign(zerocheck, python, out, "--no-shrink")
    check(done.returncode == 1, "a campaign with an untriaged root cause exits 1")
    first = state_of(out)
    check(first["scenarios"] >= 3 and first["next"] == first["scenarios"],
          f"{first['scenarios']} scenarios replayed, the next draw is {first['next']}")
    cause = first["causes"].get(NUMBERING)
    check(cause is not None and not cause["triaged"], "the faulty numbering is an untriaged root cause")
    check(1 <= cause["found_after_scenarios"] <= first["scenarios"]
          and 0 < cause["found_after_seconds"] <= first["seconds"],
          f"found after {cause['found_after_scenarios']} scenarios, {cause['found_after_seconds']} s")
    check(os.path.exists(os.path.join(out, "scenarios", cause["first_scenario"] + ".json")),
          "its first scenario is kept")
    verdicts = os.listdir(os.path.join(out, "verdicts"))
    check(len(verdicts) == first["scenarios_with_findings"] > 0,
          f"verdicts kept only for the {first['scenarios_with_findings']} scenarios with findings")
    with open(os.path.join(out, "campaign.md"), encoding="utf-8") as f:
        page = f.read()
    check(f"`{NUMBERING}`" in page and "**no**" in page, "campaign.md lists it, untriaged")
    check(f"untriaged root cause: {NUMBERING}" in done.stderr, "stderr names it")

    # 2. Resumed: the draw goes on, nothing replayed twice, the time to find stays, and the
    # triage is KNOWN_UPSTREAM.md's of now, not what the state file says.
    stale = state_of(out)
    stale["causes"][NUMBERING]["triaged"] = True
    with open(os.path.join(out, "campaign.json"), "w", encoding="utf-8") as f:
        json.dump(stale, f)
    done = campaign(zerocheck, python, out, "--no-shrink", minutes="0.1")
    second = state_of(out)
    check(second["scenarios"] > first["scenarios"] and second["next"] == second["scenarios"],
          f"resumed from draw {first['next']}: {second['scenarios']} scenarios in all")
    check(second["causes"][NUMBERING]["found_after_scenarios"] == cause["found_after_scenarios"],
          "a cause found before keeps its time to find")
    check(f"from draw {first['next']} of seed 1" in done.stderr, "the resumed run says where it starts")
    check(not second["causes"][NUMBERING]["triaged"] and done.returncode == 1,
          "a cause's triage is read again from KNOWN_UPSTREAM.md on resume")

    # 3. Another seed is refused; shard 1 of 2 draws apart.
    done = campaign(zerocheck, python, out, "--no-shrink", "--seed", "2", minutes="0.1")
    check(done.returncode == 2 and "seed 1, not 2" in done.stderr, "another seed on the folder: exit 2")
    sharded = os.path.join(work, "shard")
    campaign(zerocheck, python, sharded, "--no-shrink", "--shard", "1/2", minutes="0.05")
    check(state_of(sharded)["next"] > 10 ** 9, "shard 1 of 2 draws from 10^9 on")

    # 4. Interrupted, it keeps its state.
    stopped = os.path.join(work, "interrupted")
    command = [zerocheck, "upstream", "campaign", "--python", python, "--adapter", "faulty",
               "--world", "2", "--per-draw", "3", "--minutes", "5", "--out", stopped, "--no-shrink"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(os.path.join(stopped, "campaign.json")) and time.monotonic() < deadline:
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    check(process.returncode == 130 and "run it again to resume" in stderr,
          f"SIGINT: exit {process.returncode}, the state saved")
    check(state_of(stopped)["scenarios"] >= 1, "the interrupted campaign's scenarios are counted")

    # 5. The write-up: control, shrinking, reports; the control's limits excused. Shard 0 of 2,
    # merged with step 3's shard 1 in 6.
    ended = os.path.join(work, "written-up")
    done = campaign(zerocheck, python, ended, "--shrink-seconds", "3", "--shard", "0/2",
                    minutes="0.15")
    state = state_of(ended)
    check(os.path.exists(os.path.join(ended, "findings", "summary.json"))
          and os.listdir(os.path.join(ended, "findings", "issues")),
          "findings/ holds the suite's summary and the issue drafts")
    check(all("limit" in c for c in state["causes"].values()),
          "every root cause is judged against the control")
    untriaged = [t for t, c in state["causes"].items() if not c["triaged"] and not c["limit"]]
    check(done.returncode == (1 if untriaged else 0)
          and all(f"untriaged root cause: {t}" in done.stderr for t in untriaged),
          f"the exit and stderr name the {len(untriaged)} untriaged root cause(s), limits aside")

    # 6. The shards merged: the union of their root causes, each with its earliest time to find.
    merged = os.path.join(work, "merged")
    shards = [state_of(ended), state_of(sharded)]
    done = merge(zerocheck, python, merged, ended, sharded)
    whole = state_of(merged)
    check(set(whole["causes"]) == set(shards[0]["causes"]) | set(shards[1]["causes"])
          and whole["causes"],
          f"the merge's {len(whole['causes'])} root causes are the union of the shards'")
    check(whole["scenarios"] == shards[0]["scenarios"] + shards[1]["scenarios"]
          and [s["shard"] for s in whole["shards"]] == ["0/2", "1/2"],
          f"its {whole['scenarios']} scenarios are the two shards' added up")
    for title, cause in whole["causes"].items():
        found = sorted((s["causes"][title]["found_after_seconds"], s["shard"])
                       for s in shards if title in s["causes"])
        check(cause["scenarios"] == sum(s["causes"].get(title, {"scenarios": 0})["scenarios"]
                                        for s in shards)
              and (cause["found_after_seconds"], cause["shard"]) == found[0],
              f"{title}: seen in {cause['scenarios']}, found first by shard {cause['shard']} "
              f"after {cause['found_after_seconds']} s (of {found})")
    kept = [set(os.listdir(os.path.join(folder, "scenarios"))) for folder in (ended, sharded)]
    check(set(os.listdir(os.path.join(merged, "scenarios"))) == kept[0] | kept[1],
          "the shards' kept scenarios are all in the merge")
    untriaged = [t for t, c in whole["causes"].items() if not c["triaged"] and not c.get("limit")]
    check(done.returncode == (1 if untriaged else 0), "the merge exits as a campaign would")
    with open(os.path.join(merged, "campaign.md"), encoding="utf-8") as f:
        page = f.read()
    check(all(f"`{title}`" in page for title in whole["causes"]) and "shards 0/2, 1/2" in page,
          "campaign.md lists them")
    done = campaign(zerocheck, python, merged, "--no-shrink", "--shard", "0/2", minutes="0.05")
    check(done.returncode == 2 and "is a merge" in done.stderr, "a campaign on the merge: exit 2")
    reseeded = os.path.join(work, "seed-2")
    shutil.copytree(sharded, reseeded)
    state = state_of(reseeded)
    state["seed"] = 2
    with open(os.path.join(reseeded, "campaign.json"), "w", encoding="utf-8") as f:
        json.dump(state, f)
    refused = os.path.join(work, "refused")
    done = merge(zerocheck, python, refused, ended, reseeded)
    check(done.returncode == 2 and f"{reseeded} is a campaign with seed 2" in done.stderr,
          "shards of another seed: exit 2, the folder and the seed named")
    done = merge(zerocheck, python, refused, out, sharded)
    check(done.returncode == 2 and "shard count '2'" in done.stderr,
          "shards of another split: exit 2, the shard count named")
    done = merge(zerocheck, python, refused, ended, sharded, sharded)
    check(done.returncode == 2 and "duplicate shard 1/2" in done.stderr, "a shard twice: exit 2")
    print("upstream campaign: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
