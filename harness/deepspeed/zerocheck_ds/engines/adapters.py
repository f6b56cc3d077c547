"""The engine interface the replay drives, and the two engines that need no DeepSpeed.

Adapter is the whole surface a training engine must offer: initialize, forward, backward,
step, zero_grad, release, version, is_refusal (which exceptions mean "I refuse this
initialize"), and for I3, I4 and I9 training (the rules its numbers follow, twin.py) and
observe (what it holds, engine_state.py). PassThroughAdapter is plain PyTorch data parallelism
and correct: every invariant holds.
FaultyAdapter reproduces DeepSpeed 0.15.4 on purpose (it numbers every module `id` in pre-order
with a process-global counter and accepts a repeated initialize) so the tests prove the oracles
can fail. The DeepSpeed adapter lives in deepspeed_adapter.py; make.py chooses by name.
"""

import os
import shutil
from dataclasses import dataclass

import torch

from ..model import twin
from ..model.tree import run_module
from ..oracles.engine_state import EngineState, ParamState, StateUnavailable
from ..scenario.config_errors import config_problem


class AdapterUnavailable(Exception):
    """The chosen adapter cannot run here (e.g. DeepSpeed is not importable)."""


class ConfigError(ValueError):
    """The config given to initialize is invalid (the pass-through engine's refusal)."""


class AlreadyInitialized(RuntimeError):
    """A live engine already manages the model, one of its modules, or the optimizer."""


class UniversalUnsupported(Exception):
    """The engine has no world-size-free checkpoint form here; the message says why (a load into
    another world is then "not checked" with it)."""


class Adapter:
    """A training engine as the replay sees it. `engine` is whatever initialize returned."""

    name = "adapter"
    # Whether step() is only defined after a backward since the last step (DeepSpeed's ZeRO-3
    # step raises KeyError otherwise); the replay then skips such a step, noting why.
    step_needs_backward = False
    # Whether initialize is only defined for a target with trainable parameters (DeepSpeed's
    # ZeRO-3 raises IndexError on a parameterless model); the replay then skips it, noting why.
    initialize_needs_parameters = False
    # The names (consolidated's keys) of the consolidations that read the checkpoint the save
    # wrote: after a save that raised, what they raise is that failure's consequence.
    CHECKPOINT_READERS = ()

    def version(self):
        raise NotImplementedError

    def inside(self, engine):
        """What the engine computed inside the operations since the last call, for I3's root
        causes (an oracles/inside.py Observed), or None when the adapter cannot read it."""
        return None

    def published_late(self, engine):
        """The parameters (names) whose shard, after the last load, is not this rank's part of
        the state dict the load wrote into their gathered copies: a copy changed between the
        write and its publication (I6's root cause). Empty where the adapter cannot tell."""
        return []

    def upstream_package(self):
        """The engine's code (a package folder or one file): provenance.py attributes writes and
        exceptions to its innermost frame inside it. Here: this file (the test adapters)."""
        return os.path.abspath(__file__)

    def needs_process_group(self, world_size):
        """Returns whether torch.distributed must be initialised before the first scenario."""
        return world_size > 1

    def initialize(self, model, optimizer, config):
        """Returns an engine managing `model` with `optimizer` (may be None)."""
        raise NotImplementedError

    def is_refusal(self, exception):
        """Returns whether an exception from initialize means a deliberate refusal."""
        return isinstance(exception, AlreadyInitialized)

    def is_config_error(self, exception):
        """Returns whether an exception from initialize means "this config is invalid"."""
        return isinstance(exception, ConfigError)

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

    def training(self, config, engine):
        """The twin.Training rules `engine` trains by under `config`, or None when unknown."""
        return None

    def observe(self, engine):
        """Returns what `engine` holds on this rank (EngineState).

        Raises engine_state.StateUnavailable when it cannot be read (the reason is reported).
        """
        raise NotImplementedError

    def save(self, engine, directory, tag):
        """Writes `engine`'s checkpoint under `directory` (the same folder on every rank), named
        `tag` (None: the engine's default name), and marks it the latest."""
        raise NotImplementedError

    def load(self, engine, directory, tag, optimizer_states=True, module_only=False):
        """Restores `engine` from the checkpoint `tag` under `directory` (None: the latest)."""
        raise NotImplementedError

    def construction(self, config):
        """How a `"construct": "zero_init"` scenario's modules are made under `config`: an object
        like tree.EagerConstruction, or None when this engine has no construction-time
        partitioning (it builds eagerly; SCENARIO_FORMAT.md: every invariant the same)."""
        return None

    def gather(self, engine, module, modifier_rank, scale):
        """Gathers `module`'s parameters whole on every rank; inside the scope the rank
        `modifier_rank` (None: every rank, on its own copy) multiplies them in place by `scale`;
        on exit the modifier rank's values are every rank's (None: nothing is kept)."""
        raise NotImplementedError

    def consolidated(self, engine, directory, tag):
        """Returns {what: the whole model's state dict, or the exception that reading it raised}
        for each way the engine consolidates its model (its checkpoint `tag` under `directory`,
        None: the latest; or its live state), on rank 0; {} on the other ranks. Every rank calls
        it (a consolidation may be a collective)."""
        raise NotImplementedError

    # A load into another world (reshard.py): the checkpoint converted to a form any world size
    # loads, and an engine made to load it.

    def universal(self, source, tag, destination):
        """Converts the checkpoint `tag` under `source` into `destination`/`tag`, loadable by any
        world size (one process: rank 0 of the loading world). Raises UniversalUnsupported when
        this engine has no such form; anything else raised is the conversion's failure."""
        raise UniversalUnsupported(f"the {self.name} engine has no universal checkpoint")

    def universal_config(self, config):
        """The config of an engine that loads a universal checkpoint (a copy of `config`)."""
        return config

    def load_universal(self, engine, directory, tag):
        """Restores `engine` from the converted checkpoint `tag` under `directory`."""
        raise UniversalUnsupported(f"the {self.name} engine has no universal checkpoint")

    def overflow_state(self, engine):
        """I11's view of this rank after a step (oracles/overflow.py): {"skipped_steps",
        "global_steps", "norm", "nonfinite": [kinds of state holding a NaN or inf]}. Raises when
        the engine does not skip steps (I11 is then not checked, with the reason)."""
        raise StateUnavailable(f"{self.name} does not report skipped steps")

    def checkpoint_state(self, engine):
        """Returns what a checkpoint must restore, as held on this rank (I6):
        {(parameter name, field): (tensor, whole numel or None)}. Fields: "value" (the
        parameter), "master" (an fp32 master copy), and each optimizer state field ("exp_avg",
        "step", "momentum_buffer", ...). A whole numel means the tensor is this rank's piece of
        a value partitioned over the ranks in rank order (cut to that many elements once
        assembled); None means this rank holds it whole.

        Raises engine_state.StateUnavailable when it cannot be read (the reason is reported).
        """
        raise NotImplementedError


@dataclass(eq=False)
class PassThroughEngine:
    module: torch.nn.Module
    optimizer: object
    accumulation_steps: int = 1  # the config's gradient_accumulation_steps
    micro_steps: int = 0


class PassThroughAdapter(Adapter):
    """Plain PyTorch: the engine is the model plus the optimizer. Refuses repeated initialize.

    On several ranks it is data parallel as torch's DistributedDataParallel is: each backward's
    gradients are summed over the ranks (all_reduce) and divided by the world size, then added
    to .grad; zero_grad sets them to None; the optimizer steps at each gradient accumulation
    boundary. The twin's TORCH rules.
    """

    name = "passthrough"
    # Its one consolidation reads the checkpoint (replay/checkpoints.py: after a failed save).
    CHECKPOINT_READERS = ("the saved module state dict",)

    def __init__(self):
        self._live = []  # engines not yet released

    def version(self):
        return f"torch {torch.__version__}"

    def initialize(self, model, optimizer, config):
        import torch.distributed as dist

        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        problem = config_problem(config, world)
        if problem:
            raise ConfigError(problem)
        clash = self._clash(model, optimizer)
        if clash:
            raise AlreadyInitialized(clash)
        engine = PassThroughEngine(model, optimizer, config.get("gradient_accumulation_steps", 1))
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
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            loss.backward()
            return
        params = [p for p in engine.module.parameters() if p.requires_grad]
        grads = self._local_gradients(loss, params)
        world = dist.get_world_size()
        for p, g in zip(params, grads):
            if g is None:
                continue  # every rank runs the same route: no rank has one
            dist.all_reduce(g)
            g = g.div(world)
            p.grad = g if p.grad is None else p.grad.add_(g)

    @staticmethod
    def _local_gradients(loss, params):
        """This rank's gradient of `loss` for each of `params` (None: unreached), .grad left as it
        was. backward(inputs=...) rather than autograd.grad: it runs the parameters' tensor hooks
        (an `inject` into a gradient is one), which autograd.grad skips for leaves on torch 1.13."""
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None
        if params:
            loss.backward(inputs=params)
        grads = [p.grad for p in params]
        for p, before in zip(params, saved):
            p.grad = before
        return grads

    def step(self, engine):
        # A step is a micro-step, as the config's gradient_accumulation_steps says (the twin's
        # rules): the optimizer steps at every accumulation boundary only.
        engine.micro_steps += 1
        if engine.optimizer is not None and engine.micro_steps % engine.accumulation_steps == 0:
            engine.optimizer.step()

    def zero_grad(self, engine):
        if engine.optimizer is not None:
            engine.optimizer.zero_grad(set_to_none=True)
        else:
            engine.module.zero_grad(set_to_none=True)

    def release(self, engine):
        self._live = [e for e in self._live if e is not engine]

    def training(self, config, engine):
        return twin.TORCH

    def observe(self, engine):
        return EngineState(layout="whole", stage=None, params=[
            ParamState(name, tuple(p.shape), p.requires_grad, p.detach(),
                       grad_numel=None if p.grad is None else p.grad.numel())
            for name, p in engine.module.named_parameters()])

    def gather(self, engine, module, modifier_rank, scale):
        import torch.distributed as dist

        if modifier_rank is None:  # every rank edits its own copy, none of it is kept
            return
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        with torch.no_grad():
            for p in module.parameters():
                if rank == modifier_rank:
                    p.mul_(scale)
                if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                    dist.broadcast(p.data, modifier_rank)

    # A checkpoint is each rank's torch.save of the module's and the optimizer's state dicts
    # (every rank holds the whole model), DIR/TAG/rank_R.pt, and DIR/latest names the last tag.

    def save(self, engine, directory, tag):
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        tag = tag or "checkpoint"
        os.makedirs(os.path.join(directory, tag), exist_ok=True)
        state = {"module": engine.module.state_dict(),
                 "optimizer": None if engine.optimizer is None else engine.optimizer.state_dict()}
        torch.save(state, os.path.join(directory, tag, f"rank_{rank}.pt"))
        with open(os.path.join(directory, "latest"), "w", encoding="utf-8") as f:
            f.write(tag)

    def load(self, engine, directory, tag, optimizer_states=True, module_only=False):
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if tag is None:
            with open(os.path.join(directory, "latest"), encoding="utf-8") as f:
                tag = f.read().strip()
        state = torch.load(os.path.join(directory, tag, f"rank_{rank}.pt"))
        engine.module.load_state_dict(state["module"])
        if optimizer_states and not module_only and engine.optimizer is not None:
            engine.optimizer.load_state_dict(state["optimizer"])

    # Every rank's checkpoint holds the whole state: rank 0's is already world-size free.

    def universal(self, source, tag, destination):
        os.makedirs(os.path.join(destination, tag), exist_ok=True)
        shutil.copyfile(os.path.join(source, tag, "rank_0.pt"),
                        os.path.join(destination, tag, "universal.pt"))

    def load_universal(self, engine, directory, tag):
        state = torch.load(os.path.join(directory, tag, "universal.pt"))
        engine.module.load_state_dict(state["module"])
        if engine.optimizer is not None:
            engine.optimizer.load_state_dict(state["optimizer"])

    def consolidated(self, engine, directory, tag):
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if rank != 0:
            return {}
        if tag is None:
            with open(os.path.join(directory, "latest"), encoding="utf-8") as f:
                tag = f.read().strip()
        return {"the saved module state dict":
                torch.load(os.path.join(directory, tag, "rank_0.pt"))["module"]}

    def checkpoint_state(self, engine):
        state = {}
        optimizer_state = getattr(engine.optimizer, "state", {})
        for name, p in engine.module.named_parameters():
            state[(name, "value")] = (p.detach(), None)
            for field_name, value in optimizer_state.get(p, {}).items():
                if isinstance(value, torch.Tensor):
                    state[(name, field_name)] = (value, None)
                else:  # torch 1.13's SGD keeps nothing else; a number is held whole
                    state[(name, field_name)] = (torch.tensor([float(value)]), None)
        return state


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
        return PassThroughEngine(model, optimizer, config.get("gradient_accumulation_steps", 1))

