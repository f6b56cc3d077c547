"""`--shrink`: one minimal scenario and one standalone script per finding signature.

For each signature, the first scenario that showed it is shrunk (shrink.py) by re-running
candidates on the same supervised ranks, keeping a candidate when its findings still carry that
signature. The minimal scenario goes to DIR/minimal/<slug>.json and a standalone script
(repro_script.py, torch and deepspeed only) to DIR/repro/<slug>.py. A signature the original
scenario no longer shows when run again on its own (it needed an earlier scenario, or it is
flaky) is reported as not reproducible instead of shrunk.
"""

import json
import os
import re
import subprocess
import time

from ..findings.outcomes import outcome_findings
from ..findings.signatures import signature, slug
from .repro_script import scripts_for, write_repro_script
from .shrink import shrink, size


class _Trials:
    """Runs candidate scenarios for one signature; remembers the last finding that showed it."""

    def __init__(self, supervisor, run, target, folder):
        self._supervisor, self._run, self._target = supervisor, run, target
        self._folder = folder
        self.count = 0
        self.finding = None
        os.makedirs(folder, exist_ok=True)

    def write(self, scenario, name):
        path = os.path.join(self._folder, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(scenario, f, indent=1)
        return path

    def still_fails(self, scenario):
        self.count += 1
        # A name per candidate: the ranks match replies by name, and names must not repeat.
        name = f"candidate-{self.count}"
        path = self.write(scenario, name)
        outcome, _ = self._supervisor.replay(name, path, scenario["world_size"])
        for finding in outcome_findings(outcome, self._run.args.scenario_timeout):
            if signature(finding, self._run.args.stage) == self._target:
                self.finding = finding
                return True
        return False


def _exception_type(text):
    match = re.match(r"\s*([A-Za-z_][\w.]*)(?::|$)", (text or "").strip().splitlines()[-1]
                     if text else "")
    return match.group(1) if match else None


def _i5_expected(finding):
    """How the script words what a correct engine does, for each kind of I5 finding."""
    if finding["invariant"] != "I5":
        return None
    if finding.get("attribute"):
        return "forward runs"
    if finding.get("actual") == "accepted":
        return "refused"
    return "an error saying" if finding.get("exception") else "nothing changed"


def _repro_target(sig, finding):
    return {"i5_expected": _i5_expected(finding),"signature": sig, "invariant": finding["invariant"],
            "op_index": finding.get("op_index"), "op": finding.get("op"),
            "module_path": finding.get("module_path"), "param": finding.get("param"),
            "attribute": finding.get("attribute"),
            "exception_type": _exception_type(finding.get("exception"))}


def produced_on(args, version):
    """What the suite replayed on, for a repro script's header: the adapter, its version, and
    the tree (with its git commit when it is a checkout)."""
    text = f"{args.adapter} {version or '(version unknown)'}"
    tree = getattr(args, "deepspeed_tree", None)
    if tree:
        commit = subprocess.run(["git", "-C", tree, "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, stdin=subprocess.DEVNULL)
        text += f" from {tree}" + (f", commit {commit.stdout.strip()}"
                                   if commit.returncode == 0 else "")
    return text


def script_command(args, cwd, script, world_size):
    """The shell line that runs a repro script on every rank, with the tree the suite used."""
    env = " ".join(f"{k}={v}" for k, v in sorted(args.script_environment.items()))
    python = "python3" if not env else "/usr/bin/python3"
    ranks = (f"for r in $(seq 0 {world_size - 1}); do {env} RANK=$r WORLD_SIZE={world_size} "
             f"LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 {python} {script} & done; "
             f"wait") if world_size > 1 else f"{env} {python} {script}".strip()
    return f"cd {cwd} && {ranks}" if cwd else ranks


def minimise_all(supervisor, run):
    """Shrinks one scenario per signature of `run` and records the results in run.minimal."""
    args, log = run.args, supervisor.log
    groups = run.groups()
    log(f"shrinking {len(groups)} signature(s), at most {args.shrink_seconds:g} s each")
    for i, group in enumerate(groups, 1):
        sig = group["signature"]
        name = slug(sig)
        with open(run.files[group["scenarios"][0]], encoding="utf-8") as f:
            original = json.load(f)
        trials = _Trials(supervisor, run, sig, os.path.join(args.out, "shrink", name))
        started = time.monotonic()
        if not trials.still_fails(original):
            run.minimal[sig] = {"scenario": None, "reproducible": False,
                                "seconds": round(time.monotonic() - started, 1)}
            log(f"  [{i}/{len(groups)}] not reproducible alone: {sig}")
            continue
        result = shrink(original, trials.still_fails, started + args.shrink_seconds)
        minimal_path = os.path.join(args.out, "minimal", f"{name}.json")
        os.makedirs(os.path.dirname(minimal_path), exist_ok=True)
        with open(minimal_path, "w", encoding="utf-8") as f:
            json.dump(result.scenario, f, indent=1)
        # The finding as the minimal scenario shows it (op index, path) is what the script checks.
        trials.still_fails(result.scenario)
        repro_path = os.path.join(args.out, "repro", f"{name}.py")
        target = _repro_target(sig, trials.finding)
        if scripts_for(minimal_path, target, args.stage):
            os.makedirs(os.path.dirname(repro_path), exist_ok=True)
            write_repro_script(minimal_path, target, repro_path, args.stage,
                               produced_on(args, supervisor.version))
            repro_command = script_command(args, supervisor.cwd, repro_path,
                                           result.scenario["world_size"])
        else:  # I4, I9, an I3 or I6 outside the twin form: the replay command reproduces it
            repro_path = repro_command = None
        run.minimal[sig] = {
            "scenario": minimal_path, "repro": repro_path, "reproducible": True,
            "repro_command": repro_command,
            "before": size(original), "after": size(result.scenario),
            "attempts": trials.count, "seconds": round(time.monotonic() - started, 1),
            "stopped": result.stopped,
        }
        m = run.minimal[sig]
        log(f"  [{i}/{len(groups)}] {m['before']['ops']}->{m['after']['ops']} ops, "
            f"{m['before']['modules']}->{m['after']['modules']} modules in {m['seconds']} s "
            f"({trials.count} runs, {result.stopped}): {sig}")
