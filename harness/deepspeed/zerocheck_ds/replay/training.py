"""The training operations of the replay: forward, backward, step, zero_grad, gather, inject.

Each takes the replay (replay.Replay) and the operation. Forward routing: through the engine
that manages the root if there is one, else through the user's model directly (engines on
submodules still see their part of the call). Backward goes through the engine the forward used
(or the first live engine); step and zero_grad go to every live engine. `run_forward` is the
forward the life cycle's probe runs too. An inject arms a non-finite value (injection.py) that
the next forward (input) or backward (loss, gradient) applies on its rank.
"""

import torch.nn.functional as F

from ..model import seeded
from ..model.tree import RouteCursor, build_tree, not_whole, run_module
from ..scenario import schema
from .checks import attempt, skip
from .injection import gradient_hook, replaced_first

# This family's operations, each the function of its name (replay.py dispatches to them).
OPERATIONS = schema.some("ops", "forward", "backward", "step", "zero_grad", "gather", "inject")


def inject(replay, op):
    """Arms the injection on its rank (every rank keeps the world's arming: the twin's)."""
    replay.injections.arm(op)


def forward(replay, op):
    x, target = _batch(replay)
    inputs = replay.injections.take_inputs()
    if replay.rank in inputs:
        x = replaced_first(x, inputs[replay.rank])
    cursor = RouteCursor(op.route)

    def forward_and_loss():
        out = run_forward(replay, x, cursor)
        # In fp32, as mixed-precision users compute losses (torch 1.13 has no bf16 mse_loss on
        # CPU); a no-op for an fp32 output.
        return F.mse_loss(out.float(), target.to(out.device))

    replay.loss = None
    ok, loss = attempt(replay, op.op, forward_and_loss, lambda: left_without_data(replay))
    engine_at_root = root_engine(replay)
    if ok:
        replay.loss = loss
        replay.loss_engine = engine_at_root or (replay.live[0] if replay.live else None)
    if replay.numerics is not None:
        replay.numerics.forward(replay.index, op.route, loss if ok else None,
                                through_engine=engine_at_root is not None, inputs=inputs)


def backward(replay, op):
    if replay.loss is None:
        return skip(replay, op.op, "backward", "no forward since the last backward")
    loss, live = replay.loss, replay.loss_engine
    replay.loss = None
    if not loss.requires_grad:  # every parameter it reached is frozen, or it reached none
        return skip(replay, op.op, "backward", "nothing trainable: the loss needs no gradient")
    through_engine = live is not None and live in replay.live
    losses, gradients = replay.injections.take_backward()
    if replay.rank in losses:
        loss = loss * losses[replay.rank]  # the user's loss, before the engine scales it
    hook = None
    if replay.rank in gradients:
        name, value = gradients[replay.rank]
        hook = gradient_hook(replay.root.get_parameter(name), value)
    try:
        if through_engine:
            ok, _ = attempt(replay, op.op, lambda: replay.adapter.backward(live.engine, loss))
        else:
            ok, _ = attempt(replay, op.op, loss.backward, lambda: left_without_data(replay))
    finally:
        if hook is not None:
            hook.remove()
    # A backward through no live engine (the user's model before any initialize) is none an
    # engine's step can use: DeepSpeed's step after it indexes gradients it never reduced.
    replay.backward_since_step = replay.backward_since_step or (ok and through_engine)
    if replay.numerics is not None:
        replay.numerics.backward(replay.index, ok, through_engine, losses=losses,
                                 gradients=gradients)


def step(replay, op):
    if not replay.live:
        return skip(replay, op.op, "step", "no engine")
    if replay.adapter.step_needs_backward and not replay.backward_since_step:
        return skip(replay, op.op, "step", f"no backward since the last step: "
                                           f"{replay.adapter.name}'s step needs one")
    replay.backward_since_step = False
    ok = True
    for live in list(replay.live):
        ok = attempt(replay, op.op, lambda: replay.adapter.step(live.engine))[0] and ok
    if replay.numerics is not None:
        replay.numerics.step(replay.index, ok)


def zero_grad(replay, op):
    if not replay.live:
        return skip(replay, op.op, "zero_grad", "no engine")
    ok = True
    for live in list(replay.live):
        ok = attempt(replay, op.op, lambda: replay.adapter.zero_grad(live.engine))[0] and ok
    if replay.numerics is not None:
        replay.numerics.zero_grad(replay.index, ok)


def gather(replay, op):
    """The user's edit inside DeepSpeed's GatheredParameters (SCENARIO_FORMAT.md, "Gather"):
    the twin makes the same edit at the same point when a modifier rank publishes it; I3
    after the operation and after the next step says whether the engine kept it."""
    live = replay.live[0] if replay.live else None
    try:
        module = replay.root.get_submodule(op.module)
    except Exception:
        return skip(replay, op.op, f"module {op.module!r}", "no module at this path")
    if live is None:
        return skip(replay, op.op, op.op, "no engine")
    if not any(m is module for m in live.target.modules()):
        return skip(replay, op.op, f"module {op.module!r}", "outside the live engine's target")
    replay.loss = None  # its parameters change in place: the pending graph would be stale
    if replay.numerics is not None:
        replay.numerics.forward_dropped()
    ok, _ = attempt(replay, op.op, lambda: replay.adapter.gather(
        live.engine, module, op.modifier_rank, op.scale))
    if replay.numerics is not None:
        if ok:
            replay.numerics.gathered(op.module, op.modifier_rank, op.scale)
        else:
            replay.numerics.stop("a gather raised")


def run_forward(replay, x, cursor):
    """The model's output for `x`: through the root's engine, else the user's own call."""
    engine_at_root = root_engine(replay)
    if engine_at_root is not None:
        return replay.adapter.forward(engine_at_root.engine, x, cursor)
    # The user's own call: the input goes where the model is and in its dtype, as its user feeds
    # it (an engine may have moved it, and a bf16 or fp16 engine casts the user's model in place
    # and leaves it so when it is released).
    first = next(replay.root.parameters(), None)
    if first is not None and (first.device != x.device or first.dtype != x.dtype):
        x = x.to(first.device, first.dtype if first.is_floating_point() else x.dtype)
    return run_module(replay.root, x, cursor)


def left_without_data(replay):
    """Why the user's own forward failed, when an engine's release left the model's parameters
    without their data (DeepSpeed's destroy() leaves them partitioned), or an initialize that
    raised midway did (after it partitioned them): that operation (the finding's `after`: its
    root cause is the release's own I4 one, or the initialize's own, root_causes.py), or None."""
    if root_engine(replay) is not None:
        return None
    earlier = [(i, action) for i, action in ((replay.last_release, "release"),
                                             (replay.last_failed_initialize, "failed initialize"))
               if i is not None]
    if not earlier:
        return None
    index, action = max(earlier)  # the later of the two left the model as it is
    empty = [n for n, p, numel in not_whole(replay.root, build_tree(replay.scenario).root)
             if p.data.numel() < numel]
    if not empty:
        return None
    what = "release" if action == "release" else "initialize that raised"
    return {"action": action, "op_index": index, "params": empty,
            "why": f"the {what} at op {index} left {len(empty)} parameter(s) "
                   f"without their data, e.g. {empty[0]!r}"}


def root_engine(replay):
    """The live engine that manages the root, or None."""
    for live in replay.live:
        if live.target is replay.root:
            return live
    return None


def _batch(replay):
    """Returns (input, target) of this operation on this rank: seeded.py's, as the C++ side's."""
    s = replay.scenario
    return seeded.micro_batch(s.seed, replay.index, replay.rank, s.batch, s.features)
