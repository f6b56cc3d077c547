"""`python3 -m zerocheck_ds campaign`: scenarios drawn and replayed on DeepSpeed for a set time.

    zerocheck-ds campaign --out DIR --minutes M --zerocheck PATH [--seed S] [--shard I/N]
                          [--per-draw K] [--no-shrink] [any option of `suite` but its inputs]

The scenarios come from the one random draw, the C++ CLI's (`PATH export --random-only`): draw k
of seed S is the same scenario whichever call writes it, so a campaign drawing K at a time repeats
none, and shard I of N draws k = I * 10^9, I * 10^9 + 1, ...: N campaigns on N machines (or N jobs
of a scheduler) never replay the same scenario. Each is replayed on the suite's supervised ranks
(crashes and hangs survived), judged by every invariant, and its findings grouped by root cause
(findings/root_causes.py). A root cause seen for the first time is recorded with its first
scenario, how long and how many scenarios it took (the time to find it), and whether
KNOWN_UPSTREAM.md triages it; the scenario file is kept in DIR/scenarios/ (a scenario without
findings is not: `zerocheck export --seed S --first k --cases 1 --random-only` writes it again).

DIR/campaign.json holds the state after every scenario: run again on DIR, a campaign goes on where
it stopped (the same seed, shard and world, or a usage error) for another --minutes. When the time
is up, the first scenario of each root cause is replayed once more by the suite, confirmed against
the plain-PyTorch control, shrunk and written up (DIR/findings/: report.md, issues/, repro/),
unless --no-shrink. DIR/campaign.md is the page a maintainer reads: root causes in the order they
were found, with the time and scenarios each took. The control runs only there: a root cause the
control reproduces (a limit of the replay, not DeepSpeed's) stays in campaign.json, and
findings/report.md says so. `zerocheck-ds merge` (campaign_merge.py) combines the shards' folders
into one (MERGE_FORMAT), which is not a campaign to resume: a usage error here.

Progress on stderr, a line per scenario: minutes, scenarios, per minute, root causes, untriaged.
Exit codes: 0 no untriaged root cause, 1 an untriaged one, 2 bad usage, 3 the campaign itself
failed, 130 interrupted (the state is saved: run it again to resume).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

from ..findings import report, root_causes
from . import suite
from .runner import UsageError, load_all

PROG = "zerocheck_ds campaign"
FORMAT = "zerocheck-campaign/1"
MERGE_FORMAT = "zerocheck-campaign-merge/1"  # campaign_merge.py's: several shards' campaigns in one
SHARD_STRIDE = 10 ** 9  # draws per shard: a campaign of more would reach the next shard's
EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# Suite options that name the suite's inputs or outputs, which the campaign makes itself.
_NOT_IN_A_CAMPAIGN = ("--scenarios", "--corpus", "--only", "--ablate", "--baseline", "--json",
                      "--json-fd", "--coverage", "--coverage-of", "--shrink", "--out")


class CampaignError(Exception):
    """Something the campaign needs failed (the draw): exit 3, said plainly."""


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG, description="Draw scenarios and replay them on DeepSpeed for --minutes; "
                               "group findings by root cause, with the time to find each.",
        epilog="Any other option is the suite's (zerocheck-ds suite --help: --world, "
               "--deepspeed-tree, --adapter, --disable, ...). Exit codes: 0 no untriaged root "
               "cause, 1 an untriaged one, 2 bad usage, 3 the campaign failed, 130 interrupted.")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the campaign's folder (campaign.json there: resumed)")
    p.add_argument("--minutes", type=float, required=True, help="how long to draw and replay")
    p.add_argument("--zerocheck", required=True, metavar="PATH",
                   help="the zerocheck command that draws the scenarios (its `export`)")
    p.add_argument("--seed", type=int, default=1, help="seed of the draw (default 1)")
    p.add_argument("--shard", default="0/1", metavar="I/N",
                   help="this campaign is shard I of N (0 <= I < N): the shards draw apart")
    p.add_argument("--per-draw", type=int, default=10, metavar="K",
                   help="scenarios drawn per call of the draw (default 10)")
    p.add_argument("--no-shrink", action="store_true",
                   help="do not replay, shrink and write up each root cause's first scenario "
                        "at the end")
    args, rest = p.parse_known_args(argv)
    for option in rest:
        if option.split("=")[0] in _NOT_IN_A_CAMPAIGN:
            p.error(f"{option}: the campaign makes its own scenarios and output")
    if not args.minutes > 0 or not 1 <= args.per_draw <= 1000 or args.seed < 0:
        p.error("--minutes must be positive, --per-draw in 1..1000, --seed not negative")
    try:
        index, count = (int(x) for x in args.shard.split("/"))
    except ValueError:
        p.error(f"--shard {args.shard}: not I/N")
    if not 0 <= index < count:
        p.error(f"--shard {args.shard}: I must be in 0..N-1")
    args.shard_index, args.shard_count = index, count
    args.out = os.path.abspath(args.out)
    args.rest = rest
    args.suite = suite.parse_args(["--scenarios", "-", "--out", args.out] + rest)
    return args


def main(argv):
    args = parse_args(argv)
    return run_guarded(PROG, _campaign, args)


def run_guarded(prog, body, args):
    """body(args)'s exit code; a UsageError is exit 2, a CampaignError or a bug of `prog` itself
    exit 3, each said on stderr (a crash must not look like a finding)."""
    try:
        return body(args)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except CampaignError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - a bug of the campaign itself: exit 3, said clearly
        traceback.print_exc()
        print(f"{prog}: error: the command itself failed: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED


def _log(text):
    print(text, file=sys.stderr, flush=True)


def _campaign(args):
    state = load_state(args)
    os.makedirs(os.path.join(args.out, "verdicts"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "scenarios"), exist_ok=True)
    env, cwd = suite.replay_environment(args.suite)
    supervisor = suite.Supervisor(args.suite, env, cwd, _log)
    run = report.Run(args=args.suite, files={})
    table = root_causes.known_upstream()
    triage(state["causes"], table)
    started, before = time.monotonic(), state["seconds"]
    budget = args.minutes * 60
    interrupted = False
    _log(f"{PROG}: {args.minutes:g} min from draw {state['next']} of seed {args.seed} (shard "
         f"{args.shard}), world {args.suite.world}, {state['scenarios']} scenarios before")
    try:
        while time.monotonic() - started < budget:
            for path in draw(args, state["next"]):
                if time.monotonic() - started >= budget:
                    break
                scenario = load_all([path])[0]
                run.files = {scenario.name: path}
                result = suite.replay_scenario(supervisor, scenario, run)
                if result is None:
                    return EXIT_USAGE  # the ranks never started: said on stderr
                del run.verdicts[:-1]  # one is enough to know the ranks once started
                state["version"] = state.get("version") or supervisor.version
                record(state, result, path, before + time.monotonic() - started, table,
                       args.out)
                save_state(args.out, state)
                _log(progress_line(state))
    except KeyboardInterrupt:
        interrupted = True
        _log(f"{PROG}: interrupted; the state is saved, run it again to resume")
    finally:
        supervisor.stop()
        state["seconds"] = round(before + time.monotonic() - started, 1)
        save_state(args.out, state)
        shutil.rmtree(os.path.join(args.out, "drawing"), ignore_errors=True)
        if not args.suite.keep_checkpoints:
            shutil.rmtree(os.path.join(args.out, "checkpoints"), ignore_errors=True)
    if not interrupted and state["causes"] and not args.no_shrink:
        write_up(args, state)
        save_state(args.out, state)
    write_page(os.path.join(args.out, "campaign.md"), state)
    if interrupted:
        return EXIT_INTERRUPTED
    return exit_code(state)


def triage(causes, table):
    """Each cause triaged by KNOWN_UPSTREAM.md's `table` of now: a row added since a cause was
    found triages it on resume (or merge) too."""
    for title, cause in causes.items():
        cause["triaged"] = title in table
        cause["bug"] = (table.get(title) or {}).get("verdict")


def exit_code(state):
    """EXIT_FINDING when a root cause is untriaged (and not the control's limit), each named on
    stderr; else EXIT_OK."""
    untriaged = [t for t, c in state["causes"].items() if not c["triaged"] and not c.get("limit")]
    for title in untriaged:
        _log(f"untriaged root cause: {title}")
    return EXIT_FINDING if untriaged else EXIT_OK


def write_up(args, state):
    """The first scenario of each root cause replayed by the suite into DIR/findings/: confirmed
    against the control, shrunk, written up. A root cause whose signatures the control shows on
    plain PyTorch too is the replay's limit, not DeepSpeed's: marked so in `state`."""
    findings = os.path.join(args.out, "findings")
    firsts = sorted({os.path.join(args.out, "scenarios", c["first_scenario"] + ".json")
                     for c in state["causes"].values()})
    _log(f"{PROG}: the first scenario of each of {len(state['causes'])} root cause(s) replayed, "
         f"confirmed, shrunk and written up in {findings}")
    suite.main(["--scenarios", *firsts, "--out", findings, "--shrink"] + args.rest)
    try:
        with open(os.path.join(findings, "summary.json"), encoding="utf-8") as f:
            limits = {limit["signature"] for limit in json.load(f).get("limits", [])}
    except (OSError, ValueError):
        return  # the suite said why on stderr; no cause is excused
    for cause in state["causes"].values():
        cause["limit"] = bool(cause["signatures"]) and set(cause["signatures"]) <= limits


def load_state(args):
    """The campaign's state: DIR/campaign.json when it exists (a resumed campaign, which must
    have this one's seed, shard and world), else a fresh one."""
    fresh = {"format": FORMAT, "seed": args.seed, "shard": args.shard, "world": args.suite.world,
             "stage": args.suite.stage, "adapter": args.suite.adapter,
             "next": args.shard_index * SHARD_STRIDE, "scenarios": 0,
             "scenarios_with_findings": 0, "seconds": 0.0, "version": None, "causes": {}}
    path = os.path.join(args.out, "campaign.json")
    if not os.path.exists(path):
        return fresh
    state = read_state(args.out)
    for key in ("seed", "shard", "world", "stage", "adapter"):
        if state.get(key) != fresh[key]:
            raise UsageError(f"{path} is a campaign with {key} {state.get(key)!r}, not "
                             f"{fresh[key]!r}: resume it with the same, or give another --out")
    return state


def read_state(folder):
    """DIR/campaign.json of one campaign. Throws UsageError when it is missing, unreadable, not a
    campaign's, or a merge of several (which has no draw of its own to go on with)."""
    path = os.path.join(folder, "campaign.json")
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a campaign's state ({e})") from e
    if isinstance(state, dict) and state.get("format") == MERGE_FORMAT:
        shards = ", ".join(s["shard"] for s in state.get("shards", []))
        raise UsageError(f"{path} is a merge of the campaigns of shards {shards}, not a campaign: "
                         "go on with each shard's own folder, then merge them again")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UsageError(f"{path}: not a campaign's state (format {FORMAT} expected)")
    return state


def save_state(out, state):
    """Writes DIR/campaign.json whole or not at all (a kill mid-write keeps the last state)."""
    path = os.path.join(out, "campaign.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def draw(args, first):
    """The scenario files of draws first .. first + K - 1 (DIR/drawing/, replaced each call)."""
    folder = os.path.join(args.out, "drawing")
    shutil.rmtree(folder, ignore_errors=True)
    command = [args.zerocheck, "export", "--seed", str(args.seed), "--first", str(first),
               "--cases", str(args.per_draw), "--random-only", "--world", str(args.suite.world),
               "--out", folder]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CampaignError(f"the draw could not run ({' '.join(command)}): {e}") from e
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["nothing"]
        raise CampaignError(f"the draw failed with exit {done.returncode} "
                            f"({' '.join(command)}): {said[0]}")
    with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return [os.path.join(folder, e["file"]) for e in manifest["scenarios"]
            if e["source"] == "random"]


def record(state, result, path, elapsed, table, out):
    """Counts one judged scenario into `state`: its root causes, each new one with its time to
    find; keeps its file (DIR/scenarios/) when it has findings, else drops its verdict."""
    name = result["scenario"]
    causes = {}
    for title, finding in root_causes.scenario_causes(result):
        causes.setdefault(title, []).append(finding)
    state["next"] += 1
    state["scenarios"] += 1
    state["seconds"] = round(elapsed, 1)
    if not causes:
        os.remove(os.path.join(out, "verdicts", f"{name}.verdict.json"))
        return
    shutil.copyfile(path, os.path.join(out, "scenarios", f"{name}.json"))
    state["scenarios_with_findings"] += 1
    for title, found in causes.items():
        cause = state["causes"].get(title)
        if cause is None:
            cause = state["causes"][title] = {
                "invariant": found[0].get("invariant"), "first_scenario": name,
                "found_after_seconds": round(elapsed, 1),
                "found_after_scenarios": state["scenarios"], "scenarios": 0,
                "signatures": [], "triaged": title in table,
                "bug": (table.get(title) or {}).get("verdict")}
            _log(f"new root cause after {elapsed / 60:.1f} min and {state['scenarios']} "
                 f"scenario(s){'' if cause['triaged'] else ' (untriaged)'}: {title}")
        cause["scenarios"] += 1
        cause["signatures"] = sorted(set(cause["signatures"]) | {f["signature"] for f in found})


def progress_line(state):
    minutes = state["seconds"] / 60
    rate = state["scenarios"] / minutes if minutes > 0 else 0.0
    untriaged = sum(not c["triaged"] for c in state["causes"].values())
    return (f"{PROG}: {minutes:.1f} min, {state['scenarios']} scenarios ({rate:.1f}/min), "
            f"{state['scenarios_with_findings']} with findings, {len(state['causes'])} root "
            f"cause(s), {untriaged} untriaged")


def write_page(path, state):
    """DIR/campaign.md: the campaign (or a merge of shards' campaigns) in numbers, its root causes
    in the order found."""
    minutes = state["seconds"] / 60
    rate = state["scenarios"] / minutes if minutes > 0 else 0.0
    merged = "shards" in state  # its minutes are the shards' added up, a cause's its finder's
    added = "the shards' added up, " if merged else ""
    numbers = (f"{state['scenarios']} scenarios in {minutes:.1f} minutes ({added}{rate:.1f} per "
               f"minute), {state['scenarios_with_findings']} with findings")
    if merged:
        summary = (f"Seed {state['seed']}, shards {', '.join(s['shard'] for s in state['shards'])} "
                   f"merged: {numbers}. A root cause's time to find is that of the shard that "
                   "found it first, named beside its first scenario; the control, the shrinking "
                   "and the reports are in each shard's findings/ (unless --no-shrink).")
    else:
        summary = (f"Seed {state['seed']}, shard {state['shard']}: {numbers}; the next draw is "
                   f"{state['next']}. Root causes are the replay's; the control, the shrinking "
                   "and the reports are in findings/ (unless --no-shrink).")
    lines = [f"# Campaign: {state['adapter']} {state.get('version') or ''} at world "
             f"{state['world']}, ZeRO stage {state['stage']}", "", summary,
             "", "| found after | scenarios before | root cause | invariant | triaged | seen in | "
             "first scenario |", "|---|---|---|---|---|---|---|"]
    for title, c in sorted(state["causes"].items(),
                           key=lambda item: (item[1]["found_after_seconds"],
                                             item[1]["found_after_scenarios"])):
        triaged = (f"yes: {c['bug']}" if c["triaged"] and c.get("bug") else
                   "yes" if c["triaged"] else
                   "a limit of the replay: the control shows it too" if c.get("limit") else
                   "**no**")
        lines.append(f"| {c['found_after_seconds'] / 60:.1f} min | {c['found_after_scenarios']} | "
                     f"`{title}` | {c['invariant']} | {triaged} | {c['scenarios']} | "
                     f"scenarios/{c['first_scenario']}.json"
                     f"{' (shard ' + c['shard'] + ')' if 'shard' in c else ''} |")
    if not state["causes"]:
        lines.append("| | | none | | | | |")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
