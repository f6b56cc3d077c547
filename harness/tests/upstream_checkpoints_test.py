"""ctests `upstream_checkpoints` (label upstream) and `upstream_checkpoints_master` (label
upstream-master): checkpoints and the life cycle on a real DeepSpeed.

    upstream_checkpoints_test.py ZEROCHECK PYTHON TREE WORKDIR

TREE is DeepSpeed's own source (../shared/deepspeed/v0.14.5, or master-* in the Debian 13 lane).
One run at world 2 over scenarios/upstream_checkpoints and scenarios/upstream_lifecycle, checked
from the files it writes:
  1. every scenario has a verdict, none crashed or hung, no save or load was skipped, I6 made
     checks, and every checkpoint folder was measured (bounded) and removed;
  2. what holds holds: round trips (Adam, SGD, after destroy + initialize, two saves, tag t1,
     latest without optimizer states), the named invalid configs, a gather right after it, an
     edit without a modifier rank, zero.Init;
  3. what upstream gets wrong shows by its own invariant: the tag ignored without optimizer
     states (#8499, I6 naming the other save), module_only loading nothing (I6, the value before
     the load), a module used twice missing from both consolidations (I6), a gathered edit undone
     by the next step (I3);
  4. every I3/I4/I6/I9 root cause is triaged in KNOWN_UPSTREAM.md.
A scenario of 2. that shows findings is replayed again, alone, up to RERUNS times: DeepSpeed's Gloo
all_gather race (KNOWN_UPSTREAM.md) strikes a few per cent of gathers on a loaded machine, and
one save's consolidation or one step's persistent gather can read a shard early. It holds when a
replay holds; a deterministic failure fails every replay. What such a first run showed is printed,
and its root causes are judged by 4. only when no replay held.
Exit 77 (skipped) when TREE does not exist, or for master where the Python's torch is older than 2.
"""

import os
import sys

from upstream_support import (NEW_INVARIANTS, SKIP, check, read, run, signatures,
                              triaged, verdicts, versioned_arguments)

# Replays of a scenario of HOLDS that showed findings (the race, about one run in six of this
# suite on 2 loaded cores; three in a row: well under one in a hundred).
RERUNS = 2
HERE = os.path.dirname(os.path.abspath(__file__))
FOLDERS = [os.path.join(HERE, "scenarios", name)
           for name in ("upstream_checkpoints", "upstream_lifecycle")]
# A scenario's checkpoints: 2 ranks' model and optimizer files of a few tiny layers, at most
# three tags, DeepSpeed's zero_to_fp32.py beside them.
MAX_BYTES = 256 * 1024

HOLDS = ["adam_save_train_load", "sgd_save_destroy_initialize_load", "adam_two_saves_load_latest",
         "tags_load_t1", "tags_load_latest_without_optimizer_states",
         "config_error_train_batch_size", "config_error_zero_stage", "config_error_micro_batch",
         "gather_no_modifier_rank", "zero_init_adam_save_load"]
# scenario -> (invariant, a text its signature holds), each a triaged upstream behaviour.
SHOWS = {
    "tags_load_t1_without_optimizer_states": ("I6", "value: differs: it is another save's value"),
    "tags_sgd_load_t1_without_optimizer_states": ("I6", "value: differs: it is another save's value"),
    "tags_load_t1_module_only": ("I6", "value: differs: it is the value before the load"),
    "tags_fresh_engine_load_t1_module_only": ("I6", "value: differs: it is the value before the load"),
    "tied_adam_save_load": ("I6", "a key of the model's state dict is missing"),
    "zero_init_tied": ("I6", "a key of the model's state dict is missing"),
    "gather_modifier_rank_0": ("I3", "I3 step: value after a gathered edit differs"),
    "gather_modifier_rank_1_submodule": ("I3", "I3 step: value after a gathered edit differs"),
}


def suite(zerocheck, python, tree, out, scenarios, expect=None):
    run(zerocheck, ["--python", python, "--world", "2", "--scenario-timeout", "90",
                    "--deepspeed-tree", tree, "--scenarios", *scenarios, "--out", out],
        expect=expect, timeout=540)
    return verdicts(out), read(os.path.join(out, "summary.json"))


def replayed_until_held(zerocheck, python, tree, out, found):
    """The names of HOLDS that showed findings and held on a replay (each replayed alone, up to
    RERUNS times); their first verdicts are printed. A scenario that never held keeps its first
    verdict in `found` for the check to fail on."""
    held = set()
    for name in (n for n in HOLDS if found[n]["outcome"] != "ok"):
        path = next(os.path.join(f, name + ".json") for f in FOLDERS
                    if os.path.exists(os.path.join(f, name + ".json")))
        print(f"replay: {name} showed {sorted(signatures(found[name])) or found[name]['outcome']}")
        for attempt in range(1, RERUNS + 1):
            again, _ = suite(zerocheck, python, tree, f"{out}-replay-{name}-{attempt}", [path])
            print(f"replay {attempt} of {name}: {again[name]['outcome']} "
                  f"{sorted(signatures(again[name]))}")
            if again[name]["outcome"] == "ok":
                held.add(name)
                break
    return held


def main():
    args = versioned_arguments()
    if args is None:
        return SKIP
    zerocheck, python, tree, work, version = args
    out = os.path.join(work, "run")
    found, summary = suite(zerocheck, python, tree, out, FOLDERS, expect=1)
    names = sorted(n[:-len(".json")] for folder in FOLDERS for n in os.listdir(folder)
                   if n.endswith(".json"))
    # 1. Verdicts, nothing skipped, disk bounded and given back.
    check(sorted(found) == names, f"every scenario has a verdict ({len(found)} of {len(names)})")
    check(all(v["outcome"] in ("ok", "findings") for v in found.values()),
          f"no crash or hang: {sorted(n for n, v in found.items() if v['outcome'] not in ('ok', 'findings'))}")
    skipped = sorted({(n, s["op"]) for n, v in found.items() for s in v["skipped"]
                      if s["op"] in ("save", "load")})
    check(not skipped, f"no save or load skipped ({skipped})")
    check(summary["checks"]["I6"]["checked"] > 0, f"I6: {summary['checks']['I6']}")
    disk = summary["checkpoints"]
    check(0 < disk["max_bytes_per_scenario"] <= MAX_BYTES,
          f"disk per scenario bounded: at most {disk['max_bytes_per_scenario']} bytes "
          f"(bound {MAX_BYTES}), {disk['total_bytes']} in all over {disk['scenarios_saving']} "
          f"scenarios")
    check(not os.path.exists(os.path.join(out, "checkpoints")), "every checkpoint folder removed")
    # 2. What holds (a scenario that showed findings, on a replay).
    held_on_replay = replayed_until_held(zerocheck, python, tree, out, found)
    for name in HOLDS:
        check(found[name]["outcome"] == "ok" or name in held_on_replay,
              f"{version}: {name} holds"
              + (f" on a replay (first run: {sorted(signatures(found[name]))})"
                 if name in held_on_replay else f" ({signatures(found[name])})"))
    # 3. What upstream gets wrong, each by its own invariant.
    for name, (invariant, text) in SHOWS.items():
        check(any(s.startswith(invariant) and text in s for s in signatures(found[name])),
              f"{version}: {name} shows {invariant} '{text}' ({signatures(found[name])})")
    # 4. Triaged.
    table = triaged()
    causes = [c for c in summary["root_causes"] if c.get("invariant") in NEW_INVARIANTS]
    passing = sorted({c["title"] for c in causes if set(c["scenarios"]) <= held_on_replay})
    if passing:
        print(f"seen in a first run only, gone on its replay (nondeterministic): {passing}")
    new = sorted({c["title"] for c in causes if not set(c["scenarios"]) <= held_on_replay}
                 - set(table))
    check(not new, f"{version}: every I3, I4, I6 and I9 root cause is triaged (not: {new})")
    print(f"checkpoints and life cycle ({version}): {summary['scenarios_per_minute']} scenarios/min, "
          f"I6 {summary['checks']['I6']['checked']} checks, disk at most "
          f"{disk['max_bytes_per_scenario']} bytes per scenario; all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
