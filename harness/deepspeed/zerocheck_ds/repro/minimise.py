"""`--shrink`: one minimal scenario and one standalone script per finding signature.

For each signature, the first scenario that showed it is shrunk (shrink.py) by re-running
candidates on the same supervised ranks, keeping a candidate when its findings still carry that
signature. The minimal scenario goes to DIR/minimal/<slug>.json and a standalone script
(repro_script.py, torch and deepspeed only) to DIR/repro/<slug>.py. A signature the original
scenario no longer shows when run again on its own (it needed an earlier scenario, or it is
flaky) is reported as not reproducible instead of shrunk.

A script is run before it counts (script_check.py: REPRODUCED on the tree, NOT REPRODUCED with
--plain; the entry's script_check says whether it was verified, and why not), and a writer that
raises costs that one script (the entry's script_error), never the run's summary and report.
"""

import json
import os
import re
import time

from ..engines.checkout import checkout_commit
from ..findings.outcomes import outcome_findings
from ..findings.signatures import INVALID_CONFIG, signature, slug
from .repro_script import no_script_reason, write_repro_script
from .script_check import STARTUP_SECONDS, check_script
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
    if finding.get("attribute") == INVALID_CONFIG:  # refused / a configuration error / unchanged
        return finding.get("expected")
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
    """What the suite replayed on, for a repro script's header: the adapter, its version, and the
    tree's commit where the tree is a checkout of its own (checkout.checkout_commit). Never the
    tree's path: the script goes to people who do not have this machine."""
    text = f"{args.adapter} {version or '(version unknown)'}"
    tree = getattr(args, "deepspeed_tree", None)
    commit = checkout_commit(tree) if tree else None
    return text + (f", commit {commit}" if commit else "")


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
        script = _script(supervisor, run, minimal_path, sig, trials.finding,
                         result.scenario["world_size"])
        run.minimal[sig] = {
            "scenario": minimal_path, "reproducible": True, **script,
            "before": size(original), "after": size(result.scenario),
            "attempts": trials.count, "seconds": round(time.monotonic() - started, 1),
            "stopped": result.stopped,
        }
        m = run.minimal[sig]
        log(f"  [{i}/{len(groups)}] {m['before']['ops']}->{m['after']['ops']} ops, "
            f"{m['before']['modules']}->{m['after']['modules']} modules in {m['seconds']} s "
            f"({trials.count} runs, {result.stopped}): {sig}")
        if m["script_error"]:
            log(f"      script not written: {m['script_error']}")
        elif m["script_check"]:
            check = m["script_check"]
            log("      script verified: REPRODUCED on the tree, NOT REPRODUCED with --plain"
                if check["verified"] else f"      script not verified: {check['why']}")


def _script(supervisor, run, minimal_path, sig, finding, world_size):
    """Writes and runs the standalone script of one signature: {"repro", "repro_command",
    "script_error", "script_check"}. A writer that raises costs this script only (the error is
    recorded and the run goes on); a script written is run on the tree and with --plain before
    it counts (script_check.check_script)."""
    args = run.args
    entry = {"repro": None, "repro_command": None, "script_error": None, "script_check": None,
             "no_script": None}
    repro_path = os.path.join(args.out, "repro", f"{slug(sig)}.py")
    try:
        target = _repro_target(sig, finding)
        entry["no_script"] = no_script_reason(minimal_path, target, args.stage)
        if entry["no_script"]:
            return entry  # I4, I9, an I3 or I6 outside the twin form: the replay reproduces it
        os.makedirs(os.path.dirname(repro_path), exist_ok=True)
        write_repro_script(minimal_path, target, repro_path, args.stage,
                           produced_on(args, supervisor.version))
    except Exception as e:  # noqa: BLE001 - a writer's bug costs its one script, said in the report
        entry["script_error"] = f"{type(e).__name__}: {e}"
        if os.path.exists(repro_path):
            os.remove(repro_path)
        return entry
    entry["repro"] = repro_path
    entry["repro_command"] = script_command(args, supervisor.cwd, repro_path, world_size)
    try:
        entry["script_check"] = check_script(repro_path, sig, world_size,
                                             getattr(args, "script_environment", {}),
                                             supervisor.cwd, args.scenario_timeout + STARTUP_SECONDS)
    except Exception as e:  # noqa: BLE001 - e.g. no process could start: the script is unverified
        entry["script_check"] = {"tree": None, "plain": None, "verified": False,
                                 "why": f"running it failed: {type(e).__name__}: {e}"}
    return entry
