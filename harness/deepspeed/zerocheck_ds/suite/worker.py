"""One rank of a supervised batch: `python3 -m zerocheck_ds worker --adapter NAME`.

Started by the supervisor (pool.py) with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, stdout and
stderr going to this rank's log file. It imports the adapter (DeepSpeed) and joins the process
group once, then replays the scenarios the supervisor sends, one JSON line each on stdin, until
stdin closes. Everything it tells the supervisor goes through the file descriptor named by
ZEROCHECK_DS_REPLY_FD, one JSON object per line, never through stdout (which DeepSpeed's logs
share):

    {"ready": true, "version": "...", "pid": N,     joined the group, waiting for work
     "versions": {"engine", "torch", "python", "commit"?}}
    {"error": "..."}                                could not start (the process then exits 2)
    {"at": NAME, "op_index": I, "op": "forward"}    heartbeat: about to run this step
    {"done": NAME, "findings": [...], "skipped": [...], "checks": {...}}

A job is {"name": NAME, "path": SCENARIO} and may carry "disable": [invariants], which replaces
--disable for that scenario (the suite's --ablate), and "checkpoints": FOLDER, where that
scenario's saves go (the supervisor makes it empty beforehand and removes it afterwards), or
"resume": {"op_index", "world_size", "target", "folder"}: the second world of a load with a
world_size (reshard.py), which `done` of the saving world listed under "reshard" (--reshard).
With "trace": true, `done` carries I10's "trace" (replay/trace.py); with "knob_seed": S, the
knobs that promise not to change the numbers are drawn again with seed S first and `done`'s
"knobs" lists what changed (oracles/inert_knobs.py).

A rank of a suite run with --coverage starts traced (coverage_trace.py, through the environment):
after each scenario, before `done`, it saves the lines of the engine's code it executed so far.

ZEROCHECK_DS_INJECT (tests only) makes a rank die or hang on purpose, to prove the supervisor
survives both: "crash:SCENARIO:RANK" (SIGSEGV) or "hang:SCENARIO:RANK", at the scenario's
first operation. ZEROCHECK_DS_PLANT (tests only) "SCENARIO:FAULT,..." sets ZEROCHECK_PLANTED_FAULT
to FAULT while that scenario (its file's name) replays, for a DeepSpeed copy patched with switchable faults
(harness/tests/upstream_faults_test.py).
"""

import argparse
import json
import os
import re
import signal
import sys
import time
import traceback

from ..engines import ADAPTER_NAMES
from ..scenario.scenario import load_scenario
from . import coverage_trace

REPLY_FD_VARIABLE = "ZEROCHECK_DS_REPLY_FD"
INJECT_VARIABLE = "ZEROCHECK_DS_INJECT"
PLANT_VARIABLE = "ZEROCHECK_DS_PLANT"
PLANTED_FAULT_VARIABLE = "ZEROCHECK_PLANTED_FAULT"


class _Replies:
    def __init__(self, fd):
        self._out = os.fdopen(fd, "w", buffering=1, encoding="utf-8")

    def send(self, **message):
        self._out.write(json.dumps(message, default=str) + "\n")


def _injection(rank):
    """Returns {scenario name: "crash" or "hang"} planted for this rank."""
    planted = {}
    for item in filter(None, os.environ.get(INJECT_VARIABLE, "").split(",")):
        what, _, rest = item.partition(":")
        name, _, target_rank = rest.rpartition(":")
        if what in ("crash", "hang") and name and target_rank == str(rank):
            planted[name] = what
    return planted


def _plants():
    """{scenario name: fault name} planted for the patched DeepSpeed (every rank alike)."""
    plants = {}
    for item in filter(None, os.environ.get(PLANT_VARIABLE, "").split(",")):
        name, _, fault = item.rpartition(":")
        if name and fault:
            plants[name] = fault
    return plants


def _observer(replies, name, planted):
    def observe(index, op):
        replies.send(at=name, op_index=index, op=op)
        if index is not None and planted.get(name) == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if index is not None and planted.get(name) == "hang":
            while True:
                time.sleep(3600)
    return observe


def _versions(adapter):
    """What an issue draft names: the engine's version (and commit when it says), torch, Python."""
    import platform

    import torch
    versions = {"engine": adapter.version(), "torch": torch.__version__,
                "python": platform.python_version()}
    commit = getattr(sys.modules.get("deepspeed"), "__git_hash__", None)
    if commit and re.fullmatch(r"[0-9a-f]{7,40}", str(commit)):  # not "[none]", "unknown"
        versions["commit"] = str(commit)
    return versions


def main(argv):
    parser = argparse.ArgumentParser(prog="zerocheck_ds worker")
    parser.add_argument("--adapter", choices=ADAPTER_NAMES, required=True)
    parser.add_argument("--stage", type=int, choices=(1, 2, 3), default=None)
    parser.add_argument("--disable", default="", help="invariants not to check, e.g. I3,I9")
    parser.add_argument("--collective-timeout", type=float, default=60.0)
    parser.add_argument("--reshard", action="store_true",
                        help="hand each load with a world_size over to a second world (reshard.py)")
    parser.add_argument("--no-audit", action="store_true",
                        help="do not audit attribute writes (to measure what the audit costs)")
    args = parser.parse_args(argv)
    disabled = tuple(filter(None, args.disable.split(",")))
    replies = _Replies(int(os.environ[REPLY_FD_VARIABLE]))

    from ..world import world as world_module
    from ..engines.adapters import AdapterUnavailable
    from ..engines.make import make_adapter
    try:
        world = world_module.from_environment()
        adapter = make_adapter(args.adapter)
        world_module.start(world, adapter.needs_process_group(world.world_size),
                           args.collective_timeout)
        from ..world.exchange import Exchange
        exchange = Exchange(world.rank, world.world_size, args.collective_timeout)
    except (world_module.WorldError, AdapterUnavailable) as e:
        replies.send(error=str(e))
        return 2
    except Exception as e:  # noqa: BLE001 - joining the group failed (port taken, peer gone)
        replies.send(error=f"cannot start torch.distributed: {type(e).__name__}: {e}")
        return 2
    from .heap import freeze_what_is_imported
    print(f"zerocheck_ds worker: {freeze_what_is_imported()} objects of the imports frozen "
          f"(out of the garbage collector's scans)", flush=True)
    audit = None
    if not args.no_audit:
        from ..engines.provenance import Audit
        audit = Audit(adapter.upstream_package())
        audit.install()
    replies.send(ready=True, version=adapter.version(), pid=os.getpid(),
                 versions=_versions(adapter))
    planted = _injection(world.rank)
    plants = _plants()

    from ..replay.replay import Replay
    from ..replay.state import ReplayResult
    from ..findings.verdict import Finding
    for line in sys.stdin:
        job = json.loads(line)
        name = job["name"]
        try:
            scenario = load_scenario(job["path"])
            os.environ[PLANTED_FAULT_VARIABLE] = plants.get(scenario.name, "")
            if "resume" in job:  # the second world of a load with a world_size
                from ..replay.reshard import OP, Resume
                replies.send(at=name, op_index=job["resume"]["op_index"], op=OP)
                result = Resume(scenario, adapter, world.rank, world.world_size, exchange,
                                job["resume"], stage_override=args.stage,
                                disabled=job.get("disable", disabled), audit=audit).run()
            else:
                result = Replay(scenario, adapter, world.rank, world.world_size,
                                observer=_observer(replies, name, planted), exchange=exchange,
                                stage=args.stage, disabled=job.get("disable", disabled),
                                audit=audit, checkpoint_dir=job.get("checkpoints"),
                                reshard=args.reshard, trace=job.get("trace", False),
                                knob_seed=job.get("knob_seed")).run()
        except Exception as e:  # noqa: BLE001 - the replay's own failure is a finding too
            result = ReplayResult(findings=[Finding(
                invariant="op", op_index=None, op="replay", exception=traceback.format_exc(),
                message=f"the replay stopped: {type(e).__name__}: {e}")])
        coverage_trace.save()  # before `done`: the supervisor may merge or kill right after
        replies.send(done=name, findings=[vars(f) for f in result.findings],
                     skipped=result.skipped, checks=result.checks, written=result.written,
                     reshard=result.reshard, trace=result.trace, knobs=result.knobs)
        sys.stdout.flush()
        sys.stderr.flush()
    world_module.stop(world)
    return 0
