"""The control of every signature: its scenario on the pass-through engine (plain PyTorch).

Before a signature is reported as the engine's, its minimal scenario (the first scenario that
showed it when it was not shrunk) is replayed once on the pass-through engine, the same way.
When plain PyTorch shows the same signature, the failure belongs to the replay or the scenario
(e.g. a module chain deeper than Python's recursion limit), not to the engine: the report lists
it apart with the control's message, and it counts for no exit code, root cause or triage. One
plain replay per distinct scenario, so signatures of one scenario share it.
"""

import copy
import json
import os
import time

from ..findings.outcomes import outcome_findings
from ..findings.signatures import signature, slug

CONTROL_ADAPTER = "passthrough"


def control_args(args):
    """The suite's arguments for the control's supervisor: the same, on the pass-through engine."""
    control = copy.copy(args)
    control.adapter = CONTROL_ADAPTER
    return control


def confirm_all(supervisor, run):
    """Fills run.controls: signature -> {"scenario", "adapter", "also_without_engine", "reason",
    "findings"}. `supervisor` replays on the pass-through engine."""
    args, log = run.args, supervisor.log
    groups = run.groups()
    if args.adapter == CONTROL_ADAPTER or not groups:
        return
    log(f"control: {len(groups)} signature(s) replayed on the {CONTROL_ADAPTER} engine")
    started = time.monotonic()
    replayed = {}  # scenario path -> its control's findings
    for group in groups:
        sig = group["signature"]
        minimal = run.minimal.get(sig) or {}
        if minimal.get("scenario"):
            path, name = minimal["scenario"], f"control-{slug(sig)}"
            world = None  # the minimal scenario's own world size
        else:
            name = group["scenarios"][0]
            path, world = run.files[name], args.world
        if path not in replayed:
            outcome, _ = supervisor.replay(name, os.path.abspath(path),
                                           world or _world_size(path))
            replayed[path] = outcome_findings(outcome, args.scenario_timeout)
        findings = replayed[path]
        same = [f for f in findings if signature(f, args.stage) == sig]
        run.controls[sig] = {
            "scenario": path, "adapter": CONTROL_ADAPTER, "also_without_engine": bool(same),
            "reason": (f"plain PyTorch ({CONTROL_ADAPTER} engine) fails the same way: "
                       f"{same[0]['message']}") if same else None,
            "findings": len(findings)}
        if same:
            log(f"  not the engine's (the control fails too): {sig}")
    run.control_cost = {"replays": len(replayed), "seconds": round(time.monotonic() - started, 2)}


def _world_size(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["world_size"]
