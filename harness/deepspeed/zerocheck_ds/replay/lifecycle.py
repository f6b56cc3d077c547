"""The life-cycle operations of the replay: initialize, release, destroy.

Each takes the replay (replay.Replay) and the operation. An initialize of a model or optimizer a
live engine already manages is a repeat: I5 judges what the engine did with it (refused, changed
nothing, training still runs), as it judges an initialize given an invalid config. `release_all`
is the teardown's release too.
"""

import torch

from ..findings.signatures import INVALID_CONFIG
from ..findings.verdict import Finding
from ..model import seeded
from ..model.tree import RouteCursor
from ..oracles import oracles
from ..oracles.fingerprint import fingerprint, fingerprint_changes
from ..scenario import config_errors, schema
from .checks import attempt, changed_by, raised_by, report, skip
from .state import LiveEngine, make_optimizer, trainable_parameters
from .training import left_without_data, run_forward

# This family's operations, each the function of its name (replay.py dispatches to them).
OPERATIONS = schema.some("ops", "initialize", "release", "destroy")


def initialize(replay, op):
    if op.config_error is not None:
        return _invalid_initialize(replay, op)
    target = _target(replay, op)
    if target is None:
        return
    if op.optimizer == "same":
        optimizer = replay.user_optimizer
    else:
        optimizer = _fresh_optimizer(replay, target)
        if optimizer is None:
            return skip(replay, op.op, f"fresh optimizer for {op.target!r}",
                        "the target has no trainable parameters")
    why_refused = replay.managed.refusal_reason(target, optimizer)
    if why_refused is None:
        _first_initialize(replay, op, target, optimizer)
    else:
        _repeated_initialize(replay, target, optimizer, why_refused)


def release(replay, op):
    if not replay.live and not replay.accepted_repeats:
        return skip(replay, op.op, op.op, "no engine")
    release_all(replay, op.op)


def destroy(replay, op):
    """Upstream has one way for a user to let go of an engine (the adapter's release): a destroy
    is a release, where the C++ engine has two."""
    release(replay, op)


def release_all(replay, label):
    """Releases every engine, live or accepted by mistake; the user's model is its own again."""
    engines = [live.engine for live in replay.live] + replay.accepted_repeats
    for engine in engines:
        attempt(replay, label, lambda: replay.adapter.release(engine))
    replay.live.clear()
    replay.accepted_repeats.clear()
    replay.managed.clear()
    replay.loss_engine = None
    replay.last_release = replay.index
    if replay.numerics is not None:
        replay.numerics.released()


def _target(replay, op):
    """The module an initialize wraps, or None after recording why it is skipped."""
    try:
        target = replay.root.get_submodule(op.target)
    except Exception:
        return skip(replay, op.op, f"target {op.target!r}", "no module at this path")
    if replay.adapter.initialize_needs_parameters and not trainable_parameters(target):
        return skip(replay, op.op, f"target {op.target!r}",
                    f"no trainable parameters: {replay.adapter.name} needs some")
    return target


def _fresh_optimizer(replay, target):
    s = replay.scenario
    return make_optimizer(s.optimizer, s.lr, trainable_parameters(target))


def _first_initialize(replay, op, target, optimizer):
    """An initialize no live engine stands in the way of: the engine goes live."""
    ok, engine = attempt(replay, op.op,
                         lambda: replay.adapter.initialize(target, optimizer, replay.config))
    if ok:
        replay.live.append(LiveEngine(engine, target, optimizer))
        replay.managed.add(target, optimizer)
        if replay.numerics is not None:
            replay.numerics.initialized(op.target, op.optimizer, len(replay.live),
                                        replay.adapter.training(replay.config, engine))
    else:
        # DeepSpeed partitions the parameters as it goes: one that raised midway may leave the
        # model without their data (training.left_without_data names it after).
        replay.last_failed_initialize = replay.index
        if replay.numerics is not None:
            replay.numerics.stop("an initialize raised")


def _repeated_initialize(replay, target, optimizer, why_refused):
    """I5: an initialize of what a live engine manages is refused and changes nothing."""
    optimizers = [replay.user_optimizer, optimizer] + [e.optimizer for e in replay.live]
    before = fingerprint(replay.root, optimizers)
    exception = None
    try:
        engine = replay.adapter.initialize(target, optimizer, replay.config)
        replay.accepted_repeats.append(engine)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # whatever it raised is judged by the oracle
        exception = e
    changes = fingerprint_changes(before, fingerprint(replay.root, optimizers))
    findings = oracles.judge_repeated_initialize(replay.adapter, replay.index, why_refused,
                                                 exception, changes)
    for finding in findings:
        if finding.exception:
            raised_by(replay, finding, exception)
        elif finding.expected == "nothing changed":
            changed_by(replay, finding, changes)
    report(replay, findings)
    if replay.numerics is not None:
        replay.numerics.repeated(accepted=exception is None,
                                 clean=exception is not None and not changes
                                 and replay.adapter.is_refusal(exception))
    _probe_training(replay, refused=exception is not None)


def _invalid_initialize(replay, op):
    """I5: an initialize given an invalid config is refused as a configuration error, leaves
    the model and the optimizers as they were (attributes, hooks, storage, values,
    requires_grad), and training still runs (the probe; a later valid initialize is the
    scenario's own)."""
    target = _target(replay, op)
    if target is None:
        return
    optimizer = (replay.user_optimizer if op.optimizer == "same"
                 else _fresh_optimizer(replay, target))
    config = config_errors.invalid_config(replay.config, op.config_error, replay.world_size)
    optimizers = [replay.user_optimizer, optimizer] + [e.optimizer for e in replay.live]
    before = fingerprint(replay.root, optimizers)
    values = {name: p.detach().clone() for name, p in replay.root.named_parameters()}
    exception = None
    try:
        replay.accepted_repeats.append(replay.adapter.initialize(target, optimizer, config))
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # whatever it raised is judged below
        exception = e
    changes = fingerprint_changes(before, fingerprint(replay.root, optimizers))
    changes += [f"parameter {name!r} values: changed"
                for name, p in replay.root.named_parameters()
                if name in values and (p.shape != values[name].shape
                                       or not torch.equal(p.detach(), values[name]))]
    report(replay, _invalid_config_findings(replay, op, exception, changes))
    if replay.numerics is not None and (exception is None or changes):
        replay.numerics.stop("an initialize with an invalid config was accepted or changed "
                             "the model")
    _probe_training(replay, refused=exception is not None)


def _invalid_config_findings(replay, op, exception, changes):
    """The I5 findings of an initialize with an invalid config that raised `exception` (None:
    accepted) and made `changes` to the model or optimizers."""
    what = f"an initialize with an invalid config ({op.config_error})"
    findings = []
    if exception is None:
        findings.append(Finding(
            invariant="I5", op_index=replay.index, op=op.op, attribute=INVALID_CONFIG,
            expected="refused", actual="accepted", message=f"{what} was accepted"))
    elif not replay.adapter.is_config_error(exception):
        findings.append(Finding(
            invariant="I5", op_index=replay.index, op=op.op, attribute=INVALID_CONFIG,
            expected="a configuration error", actual=type(exception).__name__,
            exception=f"{type(exception).__name__}: {exception}",
            message=f"{what} failed with {type(exception).__name__}: {exception}, not as a "
                    f"configuration error"))
    if changes:
        findings.append(Finding(
            invariant="I5", op_index=replay.index, op=op.op, attribute=INVALID_CONFIG,
            expected="nothing changed", actual=changes[:20],
            message=f"{what} changed the model or optimizers: {'; '.join(changes[:5])}"))
        changed_by(replay, findings[-1], changes)
    return findings


def _probe_training(replay, refused):
    """A forward without gradients: proves the first engine still runs, changes no state."""
    s = replay.scenario
    x = seeded.data(s.seed, "probe_input", replay.index, replay.rank, s.batch, s.features)
    try:
        with torch.no_grad():
            run_forward(replay, x, RouteCursor([]))
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        finding = raised_by(replay, oracles.training_still_runs_finding(replay.index, refused, e), e)
        if finding.origin is None:  # the forward failed on what an earlier operation left
            finding.after = left_without_data(replay)
        report(replay, [finding])
