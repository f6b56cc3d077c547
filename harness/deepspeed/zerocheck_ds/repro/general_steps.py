"""The general repro script's operations (repro_script.py's form with a dispatcher): what the
replay does, one function per kind, over the engines a correct engine would have live.

Real code that repro_script.py copies into a script with repro_runtime.source, only the functions
the scenario's operations call and what they use; a general function's simpler form under the
general name where it does the same job there (FORMS). Like repro_runtime.py, the functions read
the script's globals, declared here with neutral values so that this module imports (STEP_GLOBALS:
`model`, `CONFIG`, `PLAIN`, `deepspeed`, `user_optimizer`, never copied); failures, the seeded
batches and I5 are repro_runtime.py's, RouteCursor tree.py's, copied from there.
"""

import copy
import os
import socket
import sys

import torch.nn.functional as F

from ..model.tree import RouteCursor
from .repro_runtime import ERRORS, micro_batch, op_failed, repeat_initialize, skipped

# The script's own globals (it defines them: the settings, the engine and the build sections).
model = None
CONFIG = {}
PLAIN = False
deepspeed = None
user_optimizer = None
WORLD_SIZE = 1
STEP_GLOBALS = {"model", "CONFIG", "PLAIN", "deepspeed", "user_optimizer", "WORLD_SIZE"}

# The engines: (engine, target, optimizer) for every initialize a correct engine accepts, and the
# engines of repeats a correct engine would have refused; the pending forward's loss and the engine
# that ran it; whether a backward ran since the last step (DeepSpeed's step needs one).
live = []
accepted_repeats = []
loss = None
loss_engine = None
backward_since_step = False


class StandInEngine:
    """Under --plain: the model itself and the user's optimizer, what a correct engine must look
    like (a script carries only the methods its operations call)."""

    def __init__(self, module, optimizer, registry):
        self.module, self.optimizer, self._registry = module, optimizer, registry

    def __call__(self, *inputs):
        return self.module(*inputs)

    def backward(self, loss):
        loss.backward()

    def step(self):
        if self.optimizer is not None:
            self.optimizer.step()

    def zero_grad(self):
        if self.optimizer is not None:
            self.optimizer.zero_grad()
        else:
            self.module.zero_grad()

    def destroy(self):
        self._registry[:] = [e for e in self._registry if e is not self]


class StandInDeepSpeed:
    """Stands in for `deepspeed` under --plain (a repeat a correct engine refuses is never asked
    of it: repeat_initialize)."""

    def __init__(self):
        self.live = []

    def initialize(self, model, optimizer, config):
        engine = StandInEngine(model, optimizer, self.live)
        self.live.append(engine)
        return engine, optimizer, None, None


def import_deepspeed():
    """deepspeed, with the environment deepspeed.initialize wants on one rank (without it, it
    goes looking for MPI); exit 2 where it does not import: that is no reproduction."""
    try:
        import deepspeed
    except Exception as e:
        print(f"cannot import deepspeed: {type(e).__name__}: {e} (try --plain)", file=sys.stderr)
        sys.exit(2)
    if WORLD_SIZE == 1:
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                            ("MASTER_ADDR", "127.0.0.1")):
            os.environ.setdefault(name, value)
    return deepspeed


def root_engine():
    return next((engine for engine, target, _ in live if target is model), None)


def run_forward(x, route):
    """Through the engine that manages the root, else through the user's own model."""
    engine = root_engine()
    if engine is None:
        first = next(model.parameters(), None)
        if first is not None:
            x = x.to(first.device)  # an engine may have moved the model
        return model(*forward_inputs(x, route))
    device = getattr(engine, "device", None)
    if device is not None:
        x = x.to(device)
    return engine(*forward_inputs(x, route))


def forward_inputs(x, route):
    """The root's forward arguments: the batch and the route through the MoE layers."""
    return x, route


def forward_inputs_without_route(x, route):
    """forward_inputs() where the root takes no route (a module, not a container)."""
    return (x,)


def refusal_reason(target, optimizer):
    """Why a correct engine must refuse to initialize `target` with `optimizer`, or None."""
    managed = {id(m) for _, managed_target, _ in live for m in managed_target.modules()}
    if any(id(m) in managed for m in target.modules()):
        return "a live engine already manages the target or one of its modules"
    if optimizer is not None and any(optimizer is o for _, _, o in live):
        return "the optimizer already belongs to a live engine"
    return None


def initialize(op_index, target, optimizer):
    """deepspeed.initialize; a repeat over a managed module or optimizer must be refused (I5)."""
    why = refusal_reason(target, optimizer)
    if why is not None:
        return repeat_initialize(
            op_index, why, [user_optimizer, optimizer] + [o for _, _, o in live],
            lambda: accepted_repeats.append(deepspeed.initialize(
                model=target, optimizer=optimizer, config=copy.deepcopy(CONFIG))[0]),
            lambda x: run_forward(x, RouteCursor([])))
    try:
        engine, _, _, _ = deepspeed.initialize(model=target, optimizer=optimizer,
                                               config=copy.deepcopy(CONFIG))
    except ERRORS as e:
        return op_failed(op_index, "initialize", e)
    live.append((engine, target, optimizer))


def initialize_once(op_index, target, optimizer):
    """deepspeed.initialize (the scenario's only one: nothing to refuse)."""
    try:
        engine, _, _, _ = deepspeed.initialize(model=target, optimizer=optimizer, config=CONFIG)
    except ERRORS as e:
        return op_failed(op_index, "initialize", e)
    live.append((engine, target, optimizer))


def forward(op_index, route):
    """A training forward, and its mse loss against a fixed random target."""
    global loss, loss_engine
    x, y = micro_batch(op_index)
    loss = None
    try:
        out = run_forward(x, RouteCursor(route))
        loss = F.mse_loss(out, y.to(out.device))
    except ERRORS as e:
        return op_failed(op_index, "forward", e)
    engine = root_engine()
    loss_engine = engine if engine is not None else (live[0][0] if live else None)


def backward(op_index):
    """Back-propagates the pending loss through the engine that ran the forward."""
    global loss, backward_since_step
    if loss is None:
        return skipped(op_index, "no forward since the last backward")
    pending, loss = loss, None
    try:
        if any(loss_engine is engine for engine, _, _ in live):
            loss_engine.backward(pending)
        else:
            pending.backward()
        backward_since_step = True
    except ERRORS as e:
        op_failed(op_index, "backward", e)


def step(op_index):
    """engine.step() on every live engine, after a backward: DeepSpeed's loop (KeyError else)."""
    global backward_since_step
    if not live:
        return skipped(op_index, "no engine")
    if not PLAIN and not backward_since_step:
        return skipped(op_index, "no backward since the last step: DeepSpeed's step needs one")
    backward_since_step = False
    for engine, _, _ in list(live):
        try:
            engine.step()
        except ERRORS as e:
            op_failed(op_index, "step", e)


def zero_grad(op_index):
    """engine.zero_grad() on every live engine."""
    if not live:
        return skipped(op_index, "no engine")
    for engine, _, _ in list(live):
        try:
            engine.zero_grad()
        except ERRORS as e:
            op_failed(op_index, "zero_grad", e)


def release(op_index, op):
    """Drops every engine: engine.destroy(), where this DeepSpeed has it."""
    global loss_engine
    if not live and not accepted_repeats:
        return skipped(op_index, "no engine")
    for engine in [e for e, _, _ in live] + accepted_repeats:
        try:
            destroy = getattr(engine, "destroy", None)
            if callable(destroy):
                destroy()
        except ERRORS as e:
            op_failed(op_index, op, e)
    live.clear()
    accepted_repeats.clear()
    loss_engine = None


# A general function -> its simpler form, copied under the general name where it does the job:
FORMS = {"without_route": {"forward_inputs": "forward_inputs_without_route"},  # a plain root
         "initialized_once": {"initialize": "initialize_once"}}  # no repeat to refuse: no I5
