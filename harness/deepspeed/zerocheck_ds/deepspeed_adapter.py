"""The adapter over an installed DeepSpeed, kept thin on purpose.

It drives the public API only (deepspeed.initialize, engine(x, route), engine.backward,
engine.step, engine.zero_grad, engine.destroy). Exceptions propagate to the replay, which
reports each as a finding with its text. To check the numbers and partitions (I3, I4, I9),
observe() reads raw state and nothing DeepSpeed concludes about itself: each stage-3 parameter's
shard (`ds_tensor`), `ds_status` and data; for stages 1 and 2 each rank's flat fp32 partition
and the optimizer state's sizes; the step counters. training() names the rules of twin.py the
engine's numbers follow, told apart by what the engine has (master's output-gradient hook).

`import deepspeed` happens in the constructor, so a missing DeepSpeed is a clear usage error
before any scenario runs, and the rest of the package never imports it.
"""

import copy
import os
import re
import sys

from . import twin
from .adapters import Adapter, AdapterUnavailable
from .engine_state import EngineState, ParamState, StateUnavailable
from .tree import TakesRoute


def deepspeed_config(config):
    """The config DeepSpeed gets for a scenario's effective `config` (the repro scripts' too)."""
    config = copy.deepcopy(config)  # DeepSpeed annotates the dict it is given
    # The scenario's optimizer may be SGD, which ZeRO only takes with this flag; it changes
    # nothing else.
    config.setdefault("zero_allow_untested_optimizer", True)
    # Master's default is 1.0: clipping rescales by its own norm order, which no twin follows.
    config.setdefault("gradient_clipping", 0.0)
    return config


# DeepSpeed's refusal of a repeated initialize: a ValueError or RuntimeError saying so. The repro
# scripts (repro_script.py) embed this same rule.
REFUSAL_TYPES = (ValueError, RuntimeError)
REFUSAL_PATTERN = r"already (been )?initiali[sz]ed"


class DeepSpeedAdapter(Adapter):
    name = "deepspeed"
    # DeepSpeed's training loop is forward, backward, step: a step with no backward since the
    # last one is outside its contract (ZeRO-3 raises KeyError), not a bug to report.
    step_needs_backward = True
    # Nor is a model without trainable parameters something DeepSpeed is for (IndexError).
    initialize_needs_parameters = True

    def __init__(self):
        try:
            import deepspeed
        except Exception as e:  # ImportError, or any error DeepSpeed raises while importing
            raise AdapterUnavailable(
                f"--adapter deepspeed needs DeepSpeed, but `import deepspeed` failed under "
                f"{sys.executable}: {type(e).__name__}: {e}. Install DeepSpeed for this Python, "
                f"or use --adapter passthrough or --adapter faulty.") from None
        self._deepspeed = deepspeed

    def version(self):
        return str(getattr(self._deepspeed, "__version__", "unknown"))

    def upstream_package(self):
        return os.path.dirname(os.path.abspath(self._deepspeed.__file__))

    def needs_process_group(self, world_size):
        # deepspeed.initialize wants torch.distributed even on one rank; without a group it
        # goes looking for MPI.
        return True

    def initialize(self, model, optimizer, config):
        engine, _, _, _ = self._deepspeed.initialize(model=model, optimizer=optimizer,
                                                     config=deepspeed_config(config))
        return engine

    def is_refusal(self, exception):
        # DeepSpeed's own refusal, as the guarded deepspeed.initialize proposed upstream raises
        # it. Anything else raised by a repeated initialize (KeyError, IndexError, ...) is a
        # crash, not a refusal: counting it as one would hide exactly the bug being hunted.
        return (isinstance(exception, REFUSAL_TYPES)
                and re.search(REFUSAL_PATTERN, str(exception), re.IGNORECASE) is not None)

    def forward(self, engine, x, route):
        device = getattr(engine, "device", None)
        if device is not None:
            x = x.to(device)
        module = getattr(engine, "module", None)
        return engine(x, route) if isinstance(module, TakesRoute) else engine(x)

    def backward(self, engine, loss):
        engine.backward(loss)

    def step(self, engine):
        engine.step()

    def zero_grad(self, engine):
        engine.zero_grad()

    def release(self, engine):
        # destroy() exists in recent releases only; an older engine is simply dropped.
        destroy = getattr(engine, "destroy", None)
        if callable(destroy):
            destroy()

    def training(self, config, engine):
        stage = config["zero_optimization"]["stage"]
        # Master divides the gradient arriving at the engine's outputs by the accumulation
        # steps (a hook); v0.14.5 divides the loss (engine.py `_scale_loss_by_gas`).
        scaling = "output_gradient" if hasattr(engine, "_backward_prologue_per_tensor") else "loss"
        return twin.deepspeed_training(stage, scaling)

    def observe(self, engine):
        module = getattr(engine, "module", None)
        stage_of = getattr(engine, "zero_optimization_stage", None)
        if module is None or not callable(stage_of):
            raise StateUnavailable("the engine has no `module` or `zero_optimization_stage()`")
        stage = int(stage_of())
        steps = {name: int(getattr(engine, name)) for name in ("global_steps", "micro_steps")
                 if isinstance(getattr(engine, name, None), int)}
        named = list(module.named_parameters())
        if stage == 3:
            params = []
            for name, p in named:
                shard = getattr(p, "ds_tensor", None)
                if shard is None:
                    raise StateUnavailable(f"parameter {name!r} has no ds_tensor: a DeepSpeed that "
                                           f"keeps its stage-3 shards elsewhere")
                status = getattr(p, "ds_status", None)
                params.append(ParamState(
                    name, tuple(getattr(p, "ds_shape", p.shape)), p.requires_grad, p.data,
                    shard=shard.detach().reshape(-1), status=getattr(status, "name", status),
                    grad_numel=None if p.grad is None else p.grad.numel()))
            return EngineState("partitioned", stage, params, steps=steps)
        optimizer = getattr(engine, "optimizer", None)
        partitions = getattr(optimizer, "single_partition_of_fp32_groups", None)
        groups = getattr(optimizer, "bit16_groups", None)
        if partitions is None or groups is None:
            raise StateUnavailable(f"stage {stage}: the optimizer has no flat fp32 partitions "
                                   f"(single_partition_of_fp32_groups, bit16_groups)")
        names = {id(p): name for name, p in named}
        inner = getattr(optimizer, "optimizer", None)
        state_numels = []
        for partition in partitions:
            state = getattr(inner, "state", {}).get(partition, {})
            state_numels.append({k: v.numel() for k, v in state.items() if hasattr(v, "numel")})
        params = [ParamState(name, tuple(p.shape), p.requires_grad, p.data,
                             grad_numel=None if p.grad is None else p.grad.numel())
                  for name, p in named]
        return EngineState("flat", stage, params,
                           flat_partitions=[t.detach().reshape(-1) for t in partitions],
                           flat_group_names=[[names.get(id(p), "?") for p in g] for g in groups],
                           optimizer_state_numels=state_numels, steps=steps)
