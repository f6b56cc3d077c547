"""The engine interface the replay drives, and the two engines that need no DeepSpeed.

Adapter is the whole surface a training engine must offer: initialize, forward, backward,
step, zero_grad, release, version, and is_refusal (which exceptions mean "I refuse this
initialize"). PassThroughAdapter is plain PyTorch and correct: every invariant holds.
FaultyAdapter reproduces DeepSpeed 0.15.4 on purpose (it numbers every module `id` in pre-order
with a process-global counter and accepts a repeated initialize) so the tests prove the oracles
can fail. The DeepSpeed adapter lives in deepspeed_adapter.py and is imported only on request.
"""

from dataclasses import dataclass

import torch

from . import ADAPTER_NAMES
from .tree import run_module


class AdapterUnavailable(Exception):
    """The chosen adapter cannot run here (e.g. DeepSpeed is not importable)."""


class AlreadyInitialized(RuntimeError):
    """A live engine already manages the model, one of its modules, or the optimizer."""


class Adapter:
    """A training engine as the replay sees it. `engine` is whatever initialize returned."""

    name = "adapter"
    # Whether step() is only defined after a backward since the last step (DeepSpeed's ZeRO-3
    # step raises KeyError otherwise); the replay then skips such a step, noting why.
    step_needs_backward = False
    # Whether initialize is only defined for a target with trainable parameters (DeepSpeed's
    # ZeRO-3 raises IndexError on a parameterless model); the replay then skips it, noting why.
    initialize_needs_parameters = False

    def version(self):
        raise NotImplementedError

    def needs_process_group(self, world_size):
        """Returns whether torch.distributed must be initialised before the first scenario."""
        return world_size > 1

    def initialize(self, model, optimizer, config):
        """Returns an engine managing `model` with `optimizer` (may be None)."""
        raise NotImplementedError

    def is_refusal(self, exception):
        """Returns whether an exception from initialize means a deliberate refusal."""
        return isinstance(exception, AlreadyInitialized)

    def forward(self, engine, x, route):
        raise NotImplementedError

    def backward(self, engine, loss):
        raise NotImplementedError

    def step(self, engine):
        raise NotImplementedError

    def zero_grad(self, engine):
        raise NotImplementedError

    def release(self, engine):
        """The engine lets go of the model; it is not used again."""
        raise NotImplementedError


@dataclass(eq=False)
class PassThroughEngine:
    module: torch.nn.Module
    optimizer: object


class PassThroughAdapter(Adapter):
    """Plain PyTorch: the engine is the model plus the optimizer. Refuses repeated initialize."""

    name = "passthrough"

    def __init__(self):
        self._live = []  # engines not yet released

    def version(self):
        return f"torch {torch.__version__}"

    def initialize(self, model, optimizer, config):
        clash = self._clash(model, optimizer)
        if clash:
            raise AlreadyInitialized(clash)
        engine = PassThroughEngine(model, optimizer)
        self._live.append(engine)
        return engine

    def _clash(self, model, optimizer):
        for engine in self._live:
            managed = {id(m) for m in engine.module.modules()}
            for module in model.modules():
                if id(module) in managed:
                    return (f"{type(module).__name__} module is already managed by a live engine "
                            f"(over a {type(engine.module).__name__})")
            if optimizer is not None and optimizer is engine.optimizer:
                return f"the {type(optimizer).__name__} optimizer already belongs to a live engine"
        return None

    def forward(self, engine, x, route):
        return run_module(engine.module, x, route)

    def backward(self, engine, loss):
        loss.backward()

    def step(self, engine):
        if engine.optimizer is not None:
            engine.optimizer.step()

    def zero_grad(self, engine):
        if engine.optimizer is not None:
            engine.optimizer.zero_grad()
        else:
            engine.module.zero_grad()

    def release(self, engine):
        self._live = [e for e in self._live if e is not engine]


def _number_modules_like_0_15_4(module, counter=[0]):  # noqa: B006 - the bug is this default
    # DeepSpeed 0.15.4's hook installer: pre-order over children(), one shared counter for the
    # whole process, so a second initialize continues where the first stopped.
    module.id = counter[0]
    counter[0] += 1
    for child in module.children():
        _number_modules_like_0_15_4(child)


class FaultyAdapter(PassThroughAdapter):
    """Deliberately wrong, for tests: clobbers `module.id` and accepts repeated initialize."""

    name = "faulty"

    def version(self):
        return f"faulty-0.15.4-emulation (torch {torch.__version__})"

    def initialize(self, model, optimizer, config):
        _number_modules_like_0_15_4(model)
        return PassThroughEngine(model, optimizer)


def make_adapter(name):
    """Returns the adapter called `name`. Raises AdapterUnavailable when it cannot run here."""
    if name == "passthrough":
        return PassThroughAdapter()
    if name == "faulty":
        return FaultyAdapter()
    if name == "deepspeed":
        from .deepspeed_adapter import DeepSpeedAdapter  # imports deepspeed lazily
        return DeepSpeedAdapter()
    raise AdapterUnavailable(
        f"unknown adapter {name!r} (expected one of: {', '.join(ADAPTER_NAMES)})")
