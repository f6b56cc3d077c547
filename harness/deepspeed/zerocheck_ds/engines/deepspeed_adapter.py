"""The adapter over an installed DeepSpeed, kept thin on purpose.

It drives the public API only (deepspeed.initialize, engine(x, route), engine.backward,
engine.step, engine.zero_grad, engine.destroy). Exceptions propagate to the replay, which
reports each as a finding with its text. To check the numbers and partitions (I3, I4, I9),
observe() reads raw state and nothing DeepSpeed concludes about itself: each stage-3 parameter's
shard (`ds_tensor`), `ds_status` and data; for stages 1 and 2 each rank's flat fp32 partition
and the optimizer state's sizes; the step counters. training() names the rules of twin.py the
engine's numbers follow, told apart by what the engine has (master's output-gradient hook).
For I3's root causes, inside() hands over what ZeRO-3 computed inside the last operations
(zero3_inside.py: the gradients, the fp32 master, the copy back into the shards).

`import deepspeed` happens in the constructor, so a missing DeepSpeed is a clear usage error
before any scenario runs, and the rest of the package never imports it.
"""

import copy
import os
import sys

import torch

from ..model import twin
from ..model.tree import TakesRoute
from ..oracles import fingerprint
from ..oracles.engine_state import EngineState, ParamState, StateUnavailable
from ..scenario import schema
from ..scenario.config import DEEPSPEED_DEFAULTS, precision_column, precision_in_effect
from . import zero3_inside
from .adapters import Adapter, AdapterUnavailable, UniversalUnsupported


# The precision keys the adapter sets when a scenario leaves them out (scenario/config.py
# precision_in_effect reports them as "adapter"): master's default gradient_clipping is 1.0. The
# replay's twin follows ZeRO-3's clip, but the repro scripts' twin (repro_runtime.Twin) does not
# clip, nor does the replay's twin follow ZeRO-1/2's fp32 norm (--stage 1, 2): without the pin
# both would lose I3 on master.
PINNED_WHEN_ABSENT = {"gradient_clipping": 0.0}
ZERO_TO_FP32 = "zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint"


def deepspeed_config(config):
    """The config DeepSpeed gets for a scenario's effective `config` (the repro scripts' too): the
    precision keys the scenario writes (bf16, fp16, data_types, communication_data_type,
    gradient_clipping) pass as written; left out, each is the version's default but those of
    PINNED_WHEN_ABSENT."""
    config = copy.deepcopy(config)  # DeepSpeed annotates the dict it is given
    # The scenario's optimizer may be SGD, which ZeRO only takes with this flag; it changes
    # nothing else.
    config.setdefault("zero_allow_untested_optimizer", True)
    for key, value in PINNED_WHEN_ABSENT.items():
        config.setdefault(key, value)
    return config


# What a conversion may take (importing DeepSpeed, then a few small files), and the variables of
# the rank's process group the converter must not see.
CONVERT_TIMEOUT = 120
_RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                   "ZEROCHECK_DS_REPLY_FD")


# Tests only (the upstream overflow ctests): DeepSpeed's CPU accelerator refuses fp16 at
# initialize (v0.14.5: runtime/engine.py:1071-1072; master: runtime/engine.py:1679,
# accelerator/cpu_accelerator.py:228-239 where oneDNN lacks fp16); with this variable "1" the
# adapter says fp16 is supported, as harness/deepspeed/probes/precision/overflow_probe.py's
# --allow-cpu-fp16 does, so ZeRO's fp16 overflow skip can be judged (I11) on models torch can run
# in fp16 on CPU.
ALLOW_CPU_FP16 = "ZEROCHECK_DS_ALLOW_CPU_FP16"


def _allow_cpu_fp16():
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    accelerator.is_fp16_supported = lambda: True
    accelerator.supported_dtypes = lambda: [torch.float, torch.bfloat16, torch.float16]


SUB_GROUP = schema.some("config_keys", "zero_optimization", "sub_group_size")


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
        self._inside = {}  # id(engine) -> its ZeRO-3 capture (zero3_inside.py) or None
        if os.environ.get(ALLOW_CPU_FP16) == "1":
            _allow_cpu_fp16()

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
        try:  # I3's root causes read ZeRO-3's quantities inside each step; never at the run's cost
            self._inside[id(engine)] = zero3_inside.capture(engine)[0]
        except Exception:  # noqa: BLE001 - an engine it cannot read is left as it is
            self._inside[id(engine)] = None
        return engine

    def inside(self, engine):
        capture = self._inside.get(id(engine))
        return capture.take() if capture is not None else None

    def published_late(self, engine):
        capture = self._inside.get(id(engine))
        return list(capture.published_late) if capture is not None else []

    def is_refusal(self, exception):
        # DeepSpeed's own refusal, as the guarded deepspeed.initialize proposed upstream raises
        # it; the rule is I5's (oracles/fingerprint.py), the repro scripts' too.
        return fingerprint.is_refusal(exception)

    def construction(self, config):
        return ZeroInitConstruction(self._deepspeed, deepspeed_config(config))

    # zero_to_fp32 reads the checkpoint's fp32 masters, not the 16-bit values (checkpoints.py).
    FP32_MASTER_CONSOLIDATIONS = (ZERO_TO_FP32,)
    # The consolidations that read the checkpoint the save wrote: after a save that raised, what
    # they raise is the save's failure again (checkpoints.py joins it to the save's finding).
    CHECKPOINT_READERS = (ZERO_TO_FP32,)

    def gather(self, engine, module, modifier_rank, scale):
        import torch

        params = list(module.parameters())
        capture = self._inside.get(id(engine))
        publishes = modifier_rank is not None and _rank() == modifier_rank
        with self._deepspeed.zero.GatheredParameters(params, modifier_rank=modifier_rank):
            if capture is not None and publishes:  # I3's root cause: the copy the edit is made on
                capture.note_gathered(params, "gathered_copy")
            if modifier_rank is None or publishes:
                with torch.no_grad():
                    for p in params:
                        p.mul_(scale)
            if capture is not None and publishes:
                capture.note_gathered(params, "edited_copy")

    def is_config_error(self, exception):
        # What DeepSpeed raises for a config it cannot use, v0.14.5 and master alike: its config
        # module's AssertionErrors (_batch_assertion, ...), pydantic's ValidationError (the
        # config models, pydantic 1 and 2 alike by name), its DeepSpeedConfigError, and the
        # ZeRORuntimeException of a setting its ZeRO cannot run with the given optimizer
        # (_configure_optimizer: offload with a client torch optimizer; the message names the key).
        types = [AssertionError]
        for module, name in (("deepspeed.runtime.config", "DeepSpeedConfigError"),
                             ("deepspeed.runtime.zero.utils", "ZeRORuntimeException")):
            try:  # a DeepSpeed without it (the tests' stub) has fewer
                types.append(getattr(__import__(module, fromlist=[name]), name))
            except (ImportError, AttributeError):
                pass
        types = tuple(types)
        return isinstance(exception, types) or any(
            cls.__name__ == "ValidationError" and cls.__module__.startswith("pydantic")
            for cls in type(exception).__mro__)

    def forward(self, engine, x, route):
        device = getattr(engine, "device", None)
        if device is not None:
            x = x.to(device)
        # DeepSpeed casts the parameters to 16 bits, never the batch (its users cast it): a bf16
        # or fp16 engine gets the scenario's fp32 input in its own dtype.
        for enabled, dtype in (("bfloat16_enabled", torch.bfloat16), ("fp16_enabled", torch.float16)):
            if callable(getattr(engine, enabled, None)) and getattr(engine, enabled)():
                x = x.to(dtype)
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
        self._inside.pop(id(engine), None)
        destroy = getattr(engine, "destroy", None)
        if callable(destroy):
            destroy()

    def training(self, config, engine):
        stage = config["zero_optimization"]["stage"]
        # Master divides the gradient arriving at the engine's outputs by the accumulation
        # steps (a hook); v0.14.5 divides the loss (engine.py `_scale_loss_by_gas`).
        scaling = "output_gradient" if hasattr(engine, "_backward_prologue_per_tensor") else "loss"
        # The clip DeepSpeed gets (the scenario's, else the version's default or the pin), and
        # what a non-finite norm becomes on this version (twin.deepspeed_training).
        clipping = precision_in_effect(config, self.version(), PINNED_WHEN_ABSENT)["gradient_clipping"][0]
        column = precision_column(self.version())
        nonfinite = float("nan") if column == "v0.14.5" else -1.0
        sub_group_size = config["zero_optimization"].get(SUB_GROUP[1], DEEPSPEED_DEFAULTS[SUB_GROUP])
        return twin.deepspeed_training(stage, scaling, clipping, nonfinite,
                                       twin.deepspeed_precision(config, column), sub_group_size)

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

    def overflow_state(self, engine):
        """I11's view of this rank after a step (oracles/overflow.py): `skipped_steps`,
        `global_steps`, the reported norm, the optimizer's loss scale, and which of the weights, fp32 master and optimizer
        state fields hold a NaN or inf on this rank (a ZeRO-3 partition's padding left out:
        DeepSpeed allocates it uninitialised)."""
        rank, names = _rank(), {name for name, _ in engine.module.named_parameters()}
        kinds = set()
        for (name, field), (tensor, whole) in self.checkpoint_state(engine).items():
            t = tensor.detach().reshape(-1)
            if whole is not None and name in names:
                # This rank's elements of a partition of `whole`: the padding is the tail.
                t = t[:max(0, min(t.numel(), whole - rank * t.numel()))]
            if t.numel() and not bool(torch.isfinite(t.float()).all()):
                kinds.add({"value": "weights", "master": "fp32 master"}.get(field,
                                                                           f"optimizer {field}"))
        if int(engine.zero_optimization_stage()) != 3:
            for _, p in engine.module.named_parameters():
                if p.data.numel() and not bool(torch.isfinite(p.data.float()).all()):
                    kinds.add("weights")
        norm = engine.get_global_grad_norm()
        norm = None if norm is None else float(norm)
        scale = getattr(getattr(engine, "optimizer", None), "loss_scale", None)
        return {"skipped_steps": int(engine.skipped_steps), "global_steps": int(engine.global_steps),
                "norm": norm, "nonfinite": sorted(kinds),
                "loss_scale": None if scale is None else float(scale)}

    # ---- checkpoints (engine.save_checkpoint / engine.load_checkpoint) ------------------------

    def save(self, engine, directory, tag):
        engine.save_checkpoint(directory, tag=tag)

    def load(self, engine, directory, tag, optimizer_states=True, module_only=False):
        path, _ = engine.load_checkpoint(directory, tag=tag, load_optimizer_states=optimizer_states,
                                         load_module_only=module_only)
        if path is None:  # DeepSpeed says so in a log line only; the replay must not miss it
            raise FileNotFoundError(f"load_checkpoint({directory!r}, tag={tag!r}) found no "
                                    f"checkpoint (it returned None)")

    # A load into another world: DeepSpeed's own converter (deepspeed/checkpoint/ds_to_universal.py)
    # run as its command line is run, in a process of its own: it is a script with a main()
    # (argument parsing, worker pools of its own), it must not share this rank's state, and
    # its crash or hang must not take the rank with it. The engine loads the result with
    # "checkpoint": {"load_universal": true}.

    def universal(self, source, tag, destination):
        import importlib.util
        import subprocess

        if importlib.util.find_spec("deepspeed.checkpoint") is None or importlib.util.find_spec(
                "deepspeed.checkpoint.ds_to_universal") is None:
            raise UniversalUnsupported(f"DeepSpeed {self.version()} has no "
                                       f"deepspeed.checkpoint.ds_to_universal")
        command = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
                   "--input_folder", os.path.join(source, tag),
                   "--output_folder", os.path.join(destination, tag),
                   "--num_extract_workers", "1", "--num_merge_workers", "1"]
        env = {k: v for k, v in os.environ.items() if k not in _RANK_VARIABLES}
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=CONVERT_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ds_to_universal ran past {CONVERT_TIMEOUT} s: "
                               f"{' '.join(command)}") from None
        if done.returncode != 0:  # the exception it died of first (the signature's), then how
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"ds_to_universal exited with {done.returncode}: "
                               f"{lines[-1] if lines else 'no output'}\n" + "\n".join(lines[-8:]))

    def universal_config(self, config):
        config = copy.deepcopy(config)
        config.setdefault("checkpoint", {})["load_universal"] = True
        return config

    def load_universal(self, engine, directory, tag):
        self.load(engine, directory, tag)

    def consolidated(self, engine, directory, tag):
        """zero_to_fp32's reader of the checkpoint, and (stage 3) the engine's 16-bit consolidated
        state dict (a collective: every rank gathers, rank 0 gets the dict)."""
        # What a version does not offer (a DeepSpeed without either API) is not consolidated.
        out = {}
        stage_of = getattr(engine, "zero_optimization_stage", None)
        sixteen = getattr(engine, "_zero3_consolidated_16bit_state_dict", None)
        if callable(stage_of) and int(stage_of()) == 3 and callable(sixteen):
            try:
                out["the engine's 16-bit consolidated state dict"] = sixteen()
            except Exception as e:  # noqa: BLE001 - judged by the check
                out["the engine's 16-bit consolidated state dict"] = e
        if _rank() != 0:
            return {}
        try:
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
        except ImportError:
            return out
        try:
            out[ZERO_TO_FP32] = (
                get_fp32_state_dict_from_zero_checkpoint(directory, tag=tag))
        except Exception as e:  # noqa: BLE001 - a checkpoint it cannot read is a finding
            out[ZERO_TO_FP32] = e
        return out

    def checkpoint_state(self, engine):
        """Stage 3: each parameter's shard (ds_tensor), and its piece of its sub-group's flat fp32
        partition and of every optimizer state field over that partition (the partition is the
        sub-group's ds_tensors in order, stage3.py `_create_fp16_partitions_with_defragmentation`).
        Stages 1 and 2: the parameters whole, the flat fp32 partition and its state per group."""
        module, optimizer = getattr(engine, "module", None), getattr(engine, "optimizer", None)
        stage_of = getattr(engine, "zero_optimization_stage", None)
        if module is None or optimizer is None or not callable(stage_of):
            raise StateUnavailable("the engine has no `module`, `optimizer` or "
                                   "`zero_optimization_stage()`")
        names = {id(p): name for name, p in module.named_parameters()}
        inner = getattr(optimizer, "optimizer", None)
        state = {}
        if int(stage_of()) == 3:
            groups = getattr(optimizer, "fp16_groups", None)
            flats = getattr(optimizer, "fp32_partitioned_groups_flat", None)
            if groups is None or flats is None:
                raise StateUnavailable("stage 3: the optimizer has no fp16_groups or "
                                       "fp32_partitioned_groups_flat")
            for name, p in module.named_parameters():
                state[(name, "value")] = (p.ds_tensor.detach().reshape(-1), p.ds_numel)
            for params, flat in zip(groups, flats):
                fields = _state_fields(inner, flat)
                offset = 0
                for p in params:
                    name, size = names.get(id(p), f"?{id(p)}"), p.ds_tensor.numel()
                    state[(name, "master")] = (flat.detach().narrow(0, offset, size), p.ds_numel)
                    for field_name, value in fields.items():
                        # Adam's step is one 0-dim tensor per sub-group: one element, as a
                        # one-element partition (sub_group_size 1) has, but no elementwise field.
                        if value.dim() > 0 and value.numel() == flat.numel():
                            state[(name, field_name)] = (value.narrow(0, offset, size), p.ds_numel)
                        else:  # Adam's step: one per sub-group, the same on every rank
                            state[(name, field_name)] = (value.reshape(-1), None)
                    offset += size
            return state
        partitions = getattr(optimizer, "single_partition_of_fp32_groups", None)
        if partitions is None:
            raise StateUnavailable("the optimizer has no flat fp32 partitions "
                                   "(single_partition_of_fp32_groups)")
        for name, p in module.named_parameters():
            state[(name, "value")] = (p.detach(), None)
        world = max(1, _world_size())
        for i, flat in enumerate(partitions):
            group = f"flat group {i}"
            state[(group, "master")] = (flat.detach().reshape(-1), flat.numel() * world)
            for field_name, value in _state_fields(inner, flat).items():
                whole = (value.numel() * world if value.dim() > 0 and value.numel() == flat.numel()
                         else None)
                state[(group, field_name)] = (value.reshape(-1), whole)
        return state


class ZeroInitConstruction:
    """Modules made inside deepspeed.zero.Init with the scenario's config (each parameter
    partitioned as it is made); their values are written the way zero.Init allows, inside
    GatheredParameters with modifier rank 0 (every rank computes the same seeded values)."""

    def __init__(self, deepspeed, config):
        self._deepspeed, self._config = deepspeed, config

    def building(self):
        return self._deepspeed.zero.Init(config_dict_or_path=self._config)

    def writable(self, root):
        return self._deepspeed.zero.GatheredParameters(list(root.parameters()), modifier_rank=0)


def _state_fields(inner, flat):
    """{field: tensor} of the wrapped torch optimizer's state for the flat partition `flat`."""
    import torch

    out = {}
    for field_name, value in getattr(inner, "state", {}).get(flat, {}).items():
        if isinstance(value, torch.Tensor):
            out[field_name] = value.detach()
        elif isinstance(value, (int, float)):
            out[field_name] = torch.tensor([float(value)])
    return out


def _rank():
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _world_size():
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
