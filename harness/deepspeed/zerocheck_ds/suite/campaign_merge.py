"""`python3 -m zerocheck_ds merge`: the campaigns of several shards combined into one folder.

    zerocheck-ds merge --out DIR CAMPAIGN_DIR...

The shards of one campaign (`campaign --shard I/N` on N machines, campaign.py) draw apart, so
their scenarios never repeat. Merged, DIR/campaign.json (format MERGE_FORMAT) holds the shards it
came from (folder, shard, scenarios, seconds, next draw), the scenarios and seconds added up, and
each root cause once: counts added up, signatures joined, its first scenario and time to find
those of the shard that found it first by seconds (named in the cause's "shard"), a limit of the
replay when a shard's control showed it. Triage is KNOWN_UPSTREAM.md's of now, as on resume.
DIR/scenarios/ and DIR/verdicts/ hold the shards' files; DIR/campaign.md is the campaign's page.
The shards' findings/ (the write-ups) stay in their folders. A campaign replays with --coverage
refused, so there is no coverage to combine.

The shards must share the DeepSpeed version, seed, world, stage, adapter and shard count, each
shard appear once and no file name come from two shards: else a usage error naming the folder
and the key (or the file). DIR is new, empty or an earlier merge (replaced); a campaign run on it
is a usage error (campaign.read_state), since a merge has no draw of its own to go on with.
Exit codes: 0 no untriaged root cause, 1 an untriaged one, 2 bad usage, 3 the merge failed.
"""

import argparse
import json
import os
import shutil
import sys

from ..findings import root_causes
from . import campaign
from .runner import UsageError

PROG = "zerocheck_ds merge"
# What the shards must share: one draw (seed, shard count) replayed alike.
SAME = ("version", "seed", "world", "stage", "adapter", "shard count")
KEPT = ("scenarios", "verdicts")  # the folders of files copied from each shard


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG, description="Combine the campaign folders of a campaign's shards into one: "
                               "root causes once each, with the time to find of the shard "
                               "that found them first.",
        epilog="Exit codes: 0 no untriaged root cause, 1 an untriaged one, 2 bad usage, "
               "3 the merge failed.")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the merged folder (new, empty, or an earlier merge: replaced)")
    p.add_argument("folders", nargs="+", metavar="CAMPAIGN_DIR", help="the shards' folders")
    args = p.parse_args(argv)
    args.out = os.path.abspath(args.out)
    args.folders = [os.path.abspath(f) for f in args.folders]
    return args


def main(argv):
    return campaign.run_guarded(PROG, merge, parse_args(argv))


def merge(args):
    """Checks every shard before DIR is touched, then writes it; returns the campaign's exit code
    for the merged root causes."""
    shards = [(folder, campaign.read_state(folder)) for folder in args.folders]
    check_alike(shards)
    files = kept_files(shards)
    prepare_out(args.out, args.folders)
    for kept in KEPT:
        os.makedirs(os.path.join(args.out, kept))
    for target, source in files.items():
        shutil.copyfile(source, os.path.join(args.out, target))
    state = merged_state(shards)
    campaign.triage(state["causes"], root_causes.known_upstream())
    campaign.save_state(args.out, state)
    campaign.write_page(os.path.join(args.out, "campaign.md"), state)
    print(f"{PROG}: {len(shards)} shards, {state['scenarios']} scenarios, "
          f"{len(state['causes'])} root cause(s) in {args.out}", file=sys.stderr)
    return campaign.exit_code(state)


def setting(state, key):
    """A shard's value of a SAME key; "shard count" is N of its "I/N"."""
    return state["shard"].split("/")[1] if key == "shard count" else state.get(key)


def check_alike(shards):
    """Throws UsageError naming the folder and key when a shard differs from the first, or the
    folder when its shard came before."""
    first_folder, first = shards[0]
    seen = {}
    for folder, state in shards:
        for key in SAME:
            if setting(state, key) != setting(first, key):
                raise UsageError(f"{folder} is a campaign with {key} {setting(state, key)!r}, "
                                 f"but {first_folder} has {setting(first, key)!r}: only the "
                                 "shards of one campaign merge")
        if state["shard"] in seen:
            raise UsageError(f"{folder}: duplicate shard {state['shard']} (also "
                             f"{seen[state['shard']]}): each shard merges once")
        seen[state["shard"]] = folder


def kept_files(shards):
    """{path under DIR: the shard's file} for every kept scenario and verdict. Throws UsageError
    when two shards hold the same name (shards draw apart: they should not)."""
    files = {}
    for folder, _ in shards:
        for kept in KEPT:
            here = os.path.join(folder, kept)
            for name in sorted(os.listdir(here)) if os.path.isdir(here) else []:
                target = os.path.join(kept, name)
                if target in files:
                    raise UsageError(f"{target} is in both {files[target]} and {folder}: the "
                                     "shards drew the same scenario")
                files[target] = os.path.join(here, name)
    return files


def prepare_out(out, folders):
    """Empties DIR's kept files when it holds an earlier merge. Throws UsageError when DIR is one
    of the shards or holds anything else."""
    if out in folders:
        raise UsageError(f"--out {out} is one of the folders merged")
    if not os.path.isdir(out) or not os.listdir(out):
        return
    try:
        with open(os.path.join(out, "campaign.json"), encoding="utf-8") as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        earlier = None
    if not isinstance(earlier, dict) or earlier.get("format") != campaign.MERGE_FORMAT:
        raise UsageError(f"--out {out} is neither empty nor an earlier merge")
    for kept in KEPT:
        shutil.rmtree(os.path.join(out, kept), ignore_errors=True)


def merged_state(shards):
    """The merge's campaign.json of [(folder, a shard's state)] (the module's opening block)."""
    first = shards[0][1]
    state = {"format": campaign.MERGE_FORMAT,
             **{key: first.get(key) for key in SAME if key != "shard count"},
             "shards": [{"folder": folder, **{key: s[key] for key in
                                              ("shard", "scenarios", "seconds", "next")}}
                        for folder, s in shards],
             "causes": {}}
    for key in ("scenarios", "scenarios_with_findings", "seconds"):
        state[key] = round(sum(s[key] for _, s in shards), 1)
    found = {}
    for _, shard in shards:
        for title, cause in shard["causes"].items():
            found.setdefault(title, []).append((shard["shard"], cause))
    for title, seen in found.items():
        # The shard that found it first by seconds gives its first scenario and time to find.
        shard, first = min(seen, key=lambda item: item[1]["found_after_seconds"])
        cause = state["causes"][title] = {
            **first, "shard": shard, "scenarios": sum(c["scenarios"] for _, c in seen),
            "signatures": sorted(set().union(*(c["signatures"] for _, c in seen)))}
        # A limit of the replay when any shard's control showed it; unjudged when none wrote up.
        judged = [c["limit"] for _, c in seen if "limit" in c]
        cause.pop("limit", None)
        if judged:
            cause["limit"] = any(judged)
    return state
