"""The checkpoint operations of the replay: save, load.

Each takes the replay (replay.Replay) and the operation, and acts on the one live engine (none,
or several, and the operation is skipped). With an exchange, I6 reads the state at the save and
after the load (oracles/checkpoints.py) and the dense twin saves and loads alongside. A load with
a world_size is handed over to a second world (handover.py, reshard.py) with --reshard.
"""

from ..oracles import checkpoints as checkpoint_checks
from ..scenario import schema
from . import handover
from .checks import attempt, report, skip

# This family's operations, each the function of its name (replay.py dispatches to them).
OPERATIONS = schema.some("ops", "save", "load")


def save(replay, op):
    live = _checkpointed_engine(replay, op)
    if live is None:
        return
    tag = getattr(op, "tag", None)
    # Whether it raised or not, every rank goes on alike (the checks' collectives): a save
    # that failed is its own finding, and the load of it fails again, as a user's would; what
    # fails on the save's failure says so (its `after`: the save's root cause, root_causes.py).
    ok, _ = attempt(replay, op.op,
                    lambda: replay.adapter.save(live.engine, replay.checkpoint_dir, tag))
    failed = None if ok else _failed_save(replay)
    replay.failed_saves.pop(tag, None)
    if failed is not None:
        replay.failed_saves[tag] = failed
    path = path_of(replay, live.target)
    replay.saved[tag] = path
    replay.latest_save = tag
    if replay.checkpoints is not None:
        report(replay, replay.checkpoints.saved(replay.index, op.op, tag, live.engine,
                                                replay.adapter))
        numerics = replay.numerics
        expected = numerics.consolidation_expectation() if numerics is not None else None
        masters = (numerics.consolidation_expectation(masters=True) if numerics is not None
                   else None)
        consolidated = replay.checkpoints.consolidated(
            replay.index, op.op, tag, replay.checkpoint_dir, live.engine, replay.adapter,
            expected, masters, numerics is not None and numerics.after_gathered_edit)
        if failed is not None:
            _after_failed_save(consolidated, failed, replay.adapter)
        report(replay, consolidated)
    if replay.numerics is not None:
        replay.numerics.saved(tag, path)


def load(replay, op):
    live = _checkpointed_engine(replay, op)
    if live is None:
        return
    tag = getattr(op, "tag", None)
    optimizer_states = getattr(op, "optimizer_states", True)
    module_only = getattr(op, "module_only", False)
    key = replay.latest_save if tag is None else tag
    if key not in replay.saved:
        return skip(replay, op.op, op.op, "no save before it" if tag is None else
                    f"no save with the tag {tag!r} before it")
    if replay.saved[key] != path_of(replay, live.target):
        return skip(replay, op.op, op.op, "no checkpoint of this engine's model")
    replay.loss = None  # as with step: the pending graph would be stale
    if replay.numerics is not None:
        replay.numerics.forward_dropped()
    before = None
    if replay.checkpoints is not None:  # what the options keep, and what a wrong value may be
        before, _ = replay.checkpoints.before_load(live.engine, replay.adapter)
    if replay.universal is not None:
        ok, _ = attempt(replay, op.op, lambda: replay.adapter.load_universal(
            live.engine, replay.checkpoint_dir, tag))
    else:
        ok, _ = attempt(replay, op.op, lambda: replay.adapter.load(
            live.engine, replay.checkpoint_dir, tag, optimizer_states, module_only),
            cause=lambda: replay.failed_saves.get(key))
    _check_load(replay, op, live, before)
    if replay.numerics is not None:
        if ok:
            replay.numerics.loaded(tag, path_of(replay, live.target), optimizer_states,
                                   module_only)
        else:
            replay.numerics.stop("a load raised")
    if op.world_size:
        _hand_over(replay, op, key, optimizer_states and not module_only)


def _failed_save(replay):
    """The `after` of what fails on the save that just raised (its finding the last reported)."""
    raised = replay.result.findings[-1]
    return {"action": "failed save", "op_index": replay.index, "exception": raised.exception,
            "why": f"the save at op {replay.index} raised {raised.exception}"}


def _after_failed_save(findings, failed, adapter):
    """Marks the consolidations that raised on what the failed save left: one that reads the
    checkpoint (there is none to read), or one that raised the save's own exception (the same
    state broke both). Any other finding stays a cause of its own."""
    for finding in findings:
        if finding.exception and (finding.attribute in adapter.CHECKPOINT_READERS
                                  or finding.exception == failed["exception"]):
            finding.after = failed
            finding.message += f" ({failed['why']})"


def path_of(replay, module):
    """The path of `module` in the replay's model, or None."""
    for path, candidate in replay.root.named_modules():
        if candidate is module:
            return path
    return None


def _checkpointed_engine(replay, op):
    """The one live engine a save or load acts on, or None after recording the skip."""
    if not replay.live:
        skip(replay, op.op, op.op, "no engine")
    elif replay.checkpoint_dir is None:
        skip(replay, op.op, op.op, "no checkpoint folder (the runner was given none)")
    elif len(replay.live) > 1 or replay.accepted_repeats:
        skip(replay, op.op, op.op, "several live engines: the checkpoint's engine is ambiguous")
    else:
        return replay.live[0]
    return None


def _check_load(replay, op, live, before):
    """I6 after a load: the state is the save's, as the load's options say (`before`: the state
    before the load, what the options keep)."""
    if replay.checkpoints is None:
        return
    tag = getattr(op, "tag", None)
    snapshot = replay.checkpoints.snapshot_of(tag)
    if snapshot is None:
        replay.tally.skip("I6", "the state could not be read at the save")
        replay.checkpoints.before_load(live.engine, replay.adapter)  # the ranks' collectives
        return
    expected = checkpoint_checks.expected_after_load(
        snapshot, before, getattr(op, "optimizer_states", True), getattr(op, "module_only", False))
    report(replay, replay.checkpoints.loaded(replay.index, op.op, expected, live.engine,
                                             replay.adapter, before))


def _hand_over(replay, op, tag, restores_optimizer):
    """A load with `world_size`: with --reshard, rank 0 stages what the second world loads
    and must find (reshard.py); otherwise, or when it cannot, "not checked" with why."""
    snapshot = replay.checkpoints.snapshot_of(tag) if replay.checkpoints is not None else None
    if not replay.reshard:
        reason = "resharding is checked on demand (--reshard), not in every scenario"
    elif not restores_optimizer:
        reason = "a load without the optimizer's state: a fresh optimizer has none to keep"
    elif snapshot is None:
        reason = ("I6 is switched off" if replay.checkpoints is None
                  else "the state could not be read at the save")
    else:
        reason = _stage_hand_over(replay, op, tag, snapshot)
    if reason is not None:
        skip(replay, op.op, f"load into a world of {op.world_size}", reason)
        replay.tally.skip("I6", f"a load into a world of {op.world_size}: {reason}")


def _stage_hand_over(replay, op, tag, snapshot):
    """Rank 0 stages the checkpoint for the second world; returns why it could not, or None."""
    if replay.rank != 0:
        return None
    resolved = handover.resolve_tag(replay.checkpoint_dir, tag)
    try:
        if resolved is None:
            raise OSError("no 'latest' file names the checkpoint")
        twin = replay.numerics.twin_snapshot(tag) if replay.numerics else None
        folder = handover.stage(replay.checkpoint_dir, replay.index, resolved, snapshot, twin)
        replay.result.reshard.append({"op_index": replay.index, "world_size": op.world_size,
                                      "target": replay.saved[tag], "folder": folder})
    except OSError as e:
        return f"the checkpoint could not be handed over: {e}"
    return None
