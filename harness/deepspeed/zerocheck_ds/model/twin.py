"""The dense twin: one copy of the model, trained as data parallelism trains N copies.

Every rank's micro-batch runs through the one copy and gets its own gradient; the gradients are
reduced over the ranks and accumulated over micro-steps the way the engine under test does it,
and the optimizer steps whole tensors at each accumulation boundary. With the right rules (a
`Training` row) the twin equals DeepSpeed ZeRO bit for bit at world 2 in fp32 (with ZeRO-3's gradient
clipping: `clip_gradients`) and with ZeRO-3's bf16 parameters (`Precision`), and equals zerocheck's
C++ dense twin bit for bit at any world size.

This module needs torch and nothing else (not this package): the replay uses it, and repro
scripts can carry a copy.

How DeepSpeed trains, as measured (harness/deepspeed/README.md, "Numerics", has the evidence):

| rule | zerocheck (C++ engine) | DeepSpeed stage 3 | stage 2 | stage 1 |
| --- | --- | --- | --- | --- |
| reduction over ranks | sum in rank order, then / N | each rank's gradient / N, then summed | as stage 3 | as stage 3 |
| when it reduces | every backward | every backward | every backward | in a backward at a boundary (the next step is one), what each rank accumulated since |
| accumulation scaling | none | v0.14.5: loss / GAS; master: the gradient arriving at the engine's output / GAS | as stage 3 | as stage 3 |
| gradients start afresh | at zero_grad (zeroed, still stepped) | after each optimizer step | after each optimizer step | after each optimizer step |
| engine.zero_grad() | zeroes the accumulated gradients | no effect on the reduced partitions | no effect on the reduced partitions | drops each rank's local accumulation (module .grad) |
| a parameter without a gradient | skipped until it first gets one | stepped with zeros (flat partitions) | stepped with zeros | stepped with zeros |
| gradient clipping at a boundary | `clip_gradients` | `clip_gradients`, norm sentinel per version | not followed (fp32 norm) | not followed (fp32 norm) |
| bf16 parameters | not built | `Precision`: bf16 values, fp32 master, reduce and accumulation dtypes, round back (world <= 2) | not followed | not followed |

A step counts as a micro-step; only every GAS-th one (the boundary) updates the parameters.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..scenario import schema
from . import partition_model


@dataclass(frozen=True)
class Precision:
    """The dtypes of a ZeRO-3 step (docs/deepspeed-precision.md, rules R1, R3, R4, R9): the
    parameters' and shards' (`param`), the reduce-scatter's (`comm`), the accumulated gradient's
    (`accum`), and whether the reduced gradient is rounded to `param` before it meets the
    accumulation (v0.14.5, runtime/zero/stage3.py:1350-1351) or cast straight to `accum` (master,
    :1825-1826). With 16-bit parameters the optimizer steps an fp32 master, the parameters
    widened at initialize (R1), and the step's result is rounded back to them (R9)."""

    param: torch.dtype = torch.float32
    comm: torch.dtype = torch.float32
    accum: torch.dtype = torch.float32
    reduced_to_param_first: bool = False

    @property
    def mixed(self):
        return self.param != torch.float32

    @property
    def plain(self):
        """fp32 throughout: the reduce is reduce_gradients', no cast anywhere."""
        return self.param == self.comm == self.accum == torch.float32


FP32 = Precision()
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def bf16_enabled(config):
    """Whether DeepSpeed's `config` makes the parameters bf16 (`bf16.enabled`)."""
    return bool(config.get("bf16", {}).get("enabled"))


def deepspeed_precision(config, column):
    """The Precision DeepSpeed ZeRO-3 trains `config` with on `column` ("v0.14.5" or "master",
    scenario/config.py precision_column): `bf16.enabled` makes the parameters bf16, and the
    communication and accumulation dtypes default to the parameters' (runtime/engine.py:857-869,
    923-938 (v0.14.5), :1404-1416, 1485-1496 (master)). precision_not_followed says which configs
    the twin cannot follow."""
    param = torch.bfloat16 if bf16_enabled(config) else torch.float32
    default = "bf16" if param == torch.bfloat16 else "fp32"
    comm = _DTYPES.get(config.get("communication_data_type") or default)
    accum = _DTYPES.get(config.get("data_types", {}).get("grad_accum_dtype") or default)
    return Precision(param, comm, accum, reduced_to_param_first=column == "v0.14.5")


@dataclass(frozen=True)
class Training:
    """How an engine turns per-rank micro-batch gradients into an optimizer step."""

    name: str
    divide_before_sum: bool  # sum_r fl(g_r / N) (DeepSpeed) or fl(sum_r g_r) / N (zerocheck)
    reduce_each_backward: bool  # False: each rank accumulates alone until a backward whose next
    # step is a boundary reduces it (DeepSpeed's engine.allreduce_gradients)
    gas_scaling: str  # "none", "loss" (loss / GAS), "output_gradient" (output's gradient / GAS)
    reset_after_step: bool  # gradients start afresh after an optimizer step
    zero_grad_effect: str  # "zeros" (zeroed, kept), "none" (dropped), "nothing", "local"
    step_without_gradient: bool  # a trainable parameter without gradient steps with zeros
    # The clip in effect (0: off) and whether the twin follows it (clip_gradients): DeepSpeed
    # ZeRO-1/2 reduce the norm in fp32 over partitions of the flat buffer, which it does not.
    gradient_clipping: float = 0.0
    clip_followed: bool = True
    # What a sub-group's non-finite norm becomes before the groups' norms are combined (None:
    # stays): DeepSpeed's sentinel. `sub_group_size`: ZeRO-3's sub-groups (None: one group).
    nonfinite_norm: float = None
    sub_group_size: int = None
    precision: Precision = FP32


ZEROCHECK = Training("zerocheck", divide_before_sum=False, reduce_each_backward=True,
                     gas_scaling="none", reset_after_step=False, zero_grad_effect="zeros",
                     step_without_gradient=False)
# Plain PyTorch on one rank, zero_grad(set_to_none=True): the pass-through adapters.
TORCH = Training("torch", divide_before_sum=False, reduce_each_backward=True, gas_scaling="none",
                 reset_after_step=False, zero_grad_effect="none", step_without_gradient=False)


def deepspeed_training(stage, gas_scaling, gradient_clipping=0.0, nonfinite_norm=None,
                       precision=FP32, sub_group_size=None):
    """DeepSpeed ZeRO `stage` (1, 2, 3) whose accumulation scaling is `gas_scaling`, clipping at
    `gradient_clipping` (0: off) with a sub-group's non-finite norm read as `nonfinite_norm`:
    v0.14.5's `inf_or_nan * -1 + ...` gives NaN (runtime/zero/stage3.py:1766-1771 (v0.14.5)),
    master's torch.where gives -1 (`:2304-2309` (master)), and the sub-groups' norms are combined
    by an L2 norm (`:2618`): one bad sub-group among good ones counts 1 there, not the whole
    norm (ZeRO-3's `sub_group_size` sub-groups, `sub_groups`); in `precision`'s dtypes
    (deepspeed_precision)."""
    return Training(f"deepspeed-stage{stage}-{gas_scaling}", divide_before_sum=True,
                    reduce_each_backward=stage >= 2, gas_scaling=gas_scaling,
                    reset_after_step=True, zero_grad_effect="local" if stage == 1 else "nothing",
                    step_without_gradient=True, gradient_clipping=gradient_clipping,
                    clip_followed=stage == 3, nonfinite_norm=nonfinite_norm, precision=precision,
                    sub_group_size=sub_group_size if stage == 3 else None)


def sub_groups(partition_numels, sub_group_size):
    """ZeRO-3's sub-groups of one parameter group (runtime/zero/stage3.py
    `_create_fp16_sub_groups`, :904-927 (v0.14.5), :1160-1183 (master)): the parameters in the
    optimizer's order, cut after the one whose partitions reach `sub_group_size` elements (and
    after the last); one group when the size reaches the total. Returns lists of indices."""
    if sub_group_size is None or sub_group_size >= sum(partition_numels):
        return [list(range(len(partition_numels)))]
    groups, group, size = [], [], 0
    for i, numel in enumerate(partition_numels):
        group.append(i)
        size += numel
        if size >= sub_group_size or i == len(partition_numels) - 1:
            groups.append(group)
            group, size = [], 0
    return groups


def precision_not_followed(config, world_size=1):
    """Returns the precision keys of DeepSpeed's `config` that change its numbers and that this
    twin does not compute ((): none). It follows fp32 with ZeRO-3's clip, and bf16 parameters at
    ZeRO stage 3 at world 1 or 2 with a bf16 or fp32 reduce and accumulation (Precision): there
    Gloo's bf16 SUM of two ranks is their fp32 sum rounded once (docs/deepspeed-precision.md,
    "Risks"), which the twin computes; at world >= 3 Gloo rounds after each addition in an
    order of its own. fp16 (a loss scaler on CPU) and ZeRO-1/2's bf16 paths are not followed."""
    keys = []
    if config.get("fp16", {}).get("enabled"):
        keys.append("fp16.enabled")
    bf16 = bf16_enabled(config)
    if bf16 and config.get("zero_optimization", {}).get("stage") != 3:
        keys.append("bf16.enabled below ZeRO stage 3")
    if bf16 and world_size > 2:
        keys.append("bf16.enabled at world >= 3")
    for key, value in (("communication_data_type", config.get("communication_data_type")),
                       ("data_types.grad_accum_dtype",
                        config.get("data_types", {}).get("grad_accum_dtype"))):
        if value not in (None, "fp32") and not (bf16 and value == "bf16"):
            keys.append(key)
    return tuple(keys)


def replaced_first(tensor, value):
    """A copy of `tensor` whose flat element 0 is `value` (an empty tensor stays as it is): what
    an injection does to an input batch or a gradient (replay/injection.py)."""
    out = tensor.clone()
    if out.numel():
        out.view(-1)[0] = value
    return out


def reduce_gradients(grads, world_size, divide_before_sum):
    """Reduces per-rank gradients (None: the rank had none) in rank order: sum_r fl(g_r / N)
    (DeepSpeed) or fl(sum_r g_r) / N (zerocheck, plain PyTorch); None where no rank had one. A
    repro script's one-engine twin carries this function (repro_runtime.Twin)."""
    total = None
    for g in grads:
        if g is None:
            continue
        part = g.div(world_size) if divide_before_sum else g
        total = part.clone() if total is None else total.add_(part)
    if total is not None and not divide_before_sum:
        total = total.div(world_size)
    return total


def reduce_in_dtypes(grads, world_size, precision):
    """DeepSpeed ZeRO-3's reduce of per-rank gradients in `precision`'s dtypes (R3): each cast to
    the communication dtype and divided by the world size in it (runtime/zero/stage3.py:1331-1333,
    runtime/comm/coalesced_collectives.py:124 (v0.14.5)), summed as Gloo sums two ranks (the fp32
    sum rounded once to the communication dtype: docs/deepspeed-precision.md, "Risks"; world 1
    or 2 only, precision_not_followed), then rounded to the parameter dtype first on v0.14.5
    (stage3.py:1350-1351) and cast to the accumulation dtype. None where no rank had one."""
    parts = [g.to(precision.comm).div(world_size) for g in grads if g is not None]
    if not parts:
        return None
    total = parts[0].float()
    for part in parts[1:]:
        total = total + part.float()
    total = total.to(precision.comm)
    if precision.reduced_to_param_first:
        total = total.to(precision.param)
    return total.to(precision.accum)


def clip_gradients(grads, max_norm, nonfinite_norm=None, groups=None):
    """Clips `grads` (the gradients a boundary steps with, in the twin's parameter order) in
    place to the global norm `max_norm` (0: off) by DeepSpeed's rule, the fp32 loss scale 1
    (runtime/fp16/loss_scaler.py:214 (v0.14.5), :309 (master)); returns (norm, combined).
    `groups` (indices into `grads`, `sub_groups`; None: one): each group's norm, a non-finite
    one read as `nonfinite_norm`, then their L2 norm (one group: its own norm, no rounding more).

    DeepSpeed ZeRO-3 (runtime/zero/stage3.py, v0.14.5 / master): each rank's partition of each
    gradient `.double().norm(2)`, the squares summed, all-reduced SUM over the ranks, square root
    (`:1747-1764` / `:2282-2302`), the groups combined by an L2 norm (`:2031` / `:2618`); then
    `clip = clamp(((N / S) + 1e-6) / C, min=1)`, `grad.mul_(1. / (clip * S))` on the fp32
    partition (`:2109-2118` / `:2696-2705`): a 0-dim double multiplier, rounded to fp32 as a
    Python float is here. Not torch's clip_grad_norm_ (max_norm / (norm + 1e-6)).

    The norm here is of whole tensors in double (the C++ engine's and twin's computation, which
    twin_cross_check holds bit for bit), not per partition: it differs from DeepSpeed's by a
    double ulp or two (measured at world 2 over 20000 random gradient sets: N differed in 37%,
    at most 5e-16 relative, and fp32(1 / combined) in none). The clip agrees unless 1 / combined
    lies within ~1e-15 relative of an fp32 rounding boundary (about 1e-8 of binding steps).
    """
    norms = []
    for group in groups or [range(len(grads))]:
        total = torch.zeros(1, dtype=torch.float64)
        for i in group:
            total += grads[i].to(torch.float64).norm(2).pow(2)
        norm = math.sqrt(total.item())
        norms.append(nonfinite_norm if nonfinite_norm is not None and not math.isfinite(norm)
                     else norm)
    norm = abs(norms[0]) if len(norms) == 1 else math.sqrt(sum(n * n for n in norms))
    if not max_norm > 0:
        return norm, 1.0
    factor = ((norm / 1.0) + 1e-6) / max_norm
    combined = factor if math.isnan(factor) else max(factor, 1.0)  # clamp keeps a NaN
    if combined != 1.0:
        for g in grads:
            g.mul_(1.0 / combined)  # a Python float: torch multiplies in fp32
    return norm, combined


class DenseTwin:
    """A single-copy model trained as `training` says, over `world_size` micro-batches per forward.

    `model` is the twin's own copy (its values are the engine's initial ones); `make_optimizer`
    builds the user's optimizer over a list of parameters; `run(module, x, route)` runs a forward
    (route: a fresh route for each rank, made by the `route` callable given to forward()).
    """

    def __init__(self, model, world_size, training, accumulation_steps, make_optimizer, run):
        self.model = model
        self.world_size = world_size
        self.training = training
        self.accumulation_steps = accumulation_steps
        self._make_optimizer = make_optimizer
        self._run = run
        self.target = None
        self.params = []  # [(name, parameter)] of the target, named_parameters() order
        # {name: the fp32 master the optimizer steps}: the parameters themselves in fp32, else
        # a widened copy (Precision).
        self._masters = {}
        self._optimizer = None
        self._reduced = {}  # name -> the gradient the next boundary steps with
        self._local = {}  # name -> [per-rank accumulated gradient] (reduced at the boundary)
        self._pending = []  # per-rank losses of the last forward, with their graphs
        self._magnitude = {}  # name -> sum of |each rank's term| reduced since the last step
        self._reductions = 0  # reductions since the last step
        # The last optimizer step: {name: (gradient it used, magnitude of its terms)} and the
        # reductions behind it, for bounding another engine's sum order (numerics.py).
        self.last_step = ({}, 0)
        # {name: the gradient the last optimizer step used after the clip}: what an engine's
        # unscale and clip must give (inside.py); the gradient before it is in last_step.
        self.last_clipped = {}
        # The last backward's gradients, {name: [each rank's gradient or None]}, before any
        # reduction: I3 locates where an engine's backward first parts from them (numerics.py).
        self.last_gradients = {}
        self.micro_steps = 0

    # ---- the engine's life ------------------------------------------------------------------

    def start(self, path):
        """A new engine over the module at `path`, with a fresh optimizer: nothing accumulated.
        With 16-bit parameters the engine casts them (R1: round to nearest even) and keeps them
        widened as the fp32 master."""
        self.target = self.model.get_submodule(path)
        self.params = list(self.target.named_parameters())
        precision = self.training.precision
        with torch.no_grad():
            for _, p in self.params:
                if p.dtype != precision.param:
                    p.data = p.data.to(precision.param)
        self._masters = {name: p if not precision.mixed
                         else p.detach().float().clone().requires_grad_(p.requires_grad)
                         for name, p in self.params}
        trainable = [self._masters[n] for n, p in self.params if p.requires_grad]
        self._optimizer = self._make_optimizer(trainable) if trainable else None
        self._reduced, self._local, self._pending = {}, {}, []
        self._magnitude, self._reductions, self.last_step = {}, 0, ({}, 0)
        self.last_clipped = {}
        self.micro_steps = 0

    def forward(self, batches, route):
        """Runs each rank's (input, target) on a fresh route(); returns the losses by rank."""
        self._pending = []
        losses = []
        for x, y in batches:
            # The engine's adapter hands a 16-bit engine its input in the parameters' dtype.
            out = self._run(self.target, x.to(self.training.precision.param), route())
            if self.training.gas_scaling == "output_gradient" and out.requires_grad:
                steps = self.accumulation_steps
                out.register_hook(lambda g: g / steps)
            loss = F.mse_loss(out.float(), y)  # as the replay's (replay/training.py)
            self._pending.append(loss)
            losses.append(loss.item())
        return losses

    def drop_pending(self):
        self._pending = []

    def pending_losses(self):
        """The losses of the last forward a backward would back-propagate, one per rank ([]: none)."""
        return list(self._pending)

    def backward(self, loss_factors=None, gradient_edits=None):
        """Back-propagates every rank's pending loss; returns the names that got a gradient.

        Injections (replay/injection.py): `loss_factors` {rank: value} multiplies that rank's
        loss before the engine's scaling (the user's loss); `gradient_edits` {rank: (name,
        value)} replaces element 0 of that rank's gradient of `name` before any reduction. Their
        non-finite values then flow as the engine's arithmetic carries them: no skip."""
        pending, self._pending = self._pending, []
        loss_factors, gradient_edits = loss_factors or {}, gradient_edits or {}
        names = [n for n, p in self.params if p.requires_grad]
        tensors = [p for _, p in self.params if p.requires_grad]
        if not pending or not tensors or not pending[0].requires_grad:
            return set()
        per_rank = []
        for rank, loss in enumerate(pending):
            if rank in loss_factors:
                loss = loss * loss_factors[rank]
            if self.training.gas_scaling == "loss" and self.accumulation_steps > 1:
                # v0.14.5 divides the loss in fp32 (runtime/engine.py:1986-1987): a bf16 loss's
                # gradient is fp32(1 / GAS) rounded to bf16, not 1 / GAS in bf16.
                loss = loss.float() / self.accumulation_steps
            grads = list(torch.autograd.grad(loss, tensors, allow_unused=True))
            edit = gradient_edits.get(rank)
            if edit is not None and edit[0] in names and grads[names.index(edit[0])] is not None:
                i = names.index(edit[0])
                grads[i] = replaced_first(grads[i], edit[1])
            per_rank.append(grads)
        reached = set()
        self.last_gradients = {}
        for i, name in enumerate(names):
            grads = [g[i] for g in per_rank]
            if all(g is None for g in grads):
                continue
            reached.add(name)
            self.last_gradients[name] = [None if g is None else g.detach().clone() for g in grads]
            if self.training.reduce_each_backward:
                self._add_reduction(name, grads)
            else:
                local = self._local.setdefault(name, [None] * len(grads))
                for r, g in enumerate(grads):
                    if g is not None:
                        local[r] = g.clone() if local[r] is None else local[r].add_(g)
        if not self.training.reduce_each_backward and self._next_step_is_boundary():
            for name, grads in self._local.items():
                self._add_reduction(name, grads)
            self._local = {}
        self._reductions += 1
        return reached

    def _next_step_is_boundary(self):
        return (self.micro_steps + 1) % self.accumulation_steps == 0

    def step(self):
        """A micro-step; at the boundary the optimizer steps. Returns whether it stepped."""
        self._pending = []
        self.micro_steps += 1
        if self.micro_steps % self.accumulation_steps != 0:
            return False
        # The optimizer's fp32 gradient (the accumulated one widened: stage3.py:1851-1858
        # (v0.14.5)); what the engine hands its clip (inside.py compares it before the clip).
        # In fp32 these are the accumulated tensors themselves, which zerocheck's engine keeps
        # clipped until zero_grad; a 16-bit accumulation stays in its dtype and the clip
        # multiplies the widened copy, as both engines do.
        handed = {name: g.float() for name, g in self._reduced.items()}
        used = {name: (g.clone(), self._magnitude.get(name, torch.zeros_like(g)).clone())
                for name, g in handed.items()}
        clipped = {}
        with torch.no_grad():
            self._clip(handed)
            for name, p in self.params:
                if not p.requires_grad:
                    continue
                master = self._masters[name]
                grad = handed.get(name)
                if grad is None and self.training.step_without_gradient:
                    grad = torch.zeros_like(master)
                    used[name] = (grad.clone(), torch.zeros_like(master))
                master.grad = None if grad is None else grad.clone()
                if grad is not None:
                    clipped[name] = grad.clone()
        self.last_step, self.last_clipped = (used, self._reductions), clipped
        if self._optimizer is not None:
            self._optimizer.step()
        with torch.no_grad():
            for name, p in self.params:
                self._masters[name].grad = None
                if p is not self._masters[name]:
                    p.copy_(self._masters[name])  # R9: rounded to nearest even
        if self.training.reset_after_step:
            self._reduced, self._magnitude, self._reductions = {}, {}, 0
        return True

    def _clip(self, gradients):
        """Clips `gradients` ({name: the fp32 gradient handed to the optimizer}) in place, as
        the engine clips its gradient partitions."""
        rules = self.training
        if rules.gradient_clipping > 0:
            stepped = [(n, p) for n, p in self.params if p.requires_grad and n in gradients]
            groups = sub_groups([partition_model.chunk(p.numel(), self.world_size)
                                 for _, p in stepped], rules.sub_group_size)
            clip_gradients([gradients[n] for n, _ in stepped], rules.gradient_clipping,
                           rules.nonfinite_norm, groups)

    def zero_grad(self):
        effect = self.training.zero_grad_effect
        if effect == "zeros":
            for tensors in (self._reduced, self._magnitude):
                for t in tensors.values():
                    t.zero_()
        elif effect == "none":
            self._reduced, self._magnitude = {}, {}
        elif effect == "local":
            self._local = {}

    # ---- checkpoints ----------------------------------------------------------------------

    def snapshot(self):
        """What a checkpoint of the twin holds: the target's parameters and the optimizer's
        state, by parameter name (copies)."""
        state = {}
        for name, _ in self.params:
            master = self._masters[name]
            if self._optimizer is not None and master in self._optimizer.state:
                state[name] = {k: v.clone() if torch.is_tensor(v) else v
                               for k, v in self._optimizer.state[master].items()}
        return {"values": {name: p.detach().clone() for name, p in self.params},
                "masters": self.masters(), "optimizer": state}

    def restore(self, snapshot, optimizer_states=True):
        """Loads `snapshot` (of this target): the parameters, and the optimizer's state unless
        `optimizer_states` is false (it then stays as it is). What was accumulated since the last
        step and the micro-step count stay: a load restores neither (DeepSpeed's engine keeps its
        micro_steps and gradient partitions).

        With 16-bit parameters (R10, docs/deepspeed-precision.md): a load with the optimizer's
        states restores the saved fp32 masters and rounds them into the parameters
        (stage3.py _rigid_load_state_dict); one without them loads no ZeRO checkpoint and rebuilds
        the masters from the 16-bit parameters (`_restore_from_bit16_weights`: engine.py:2814-2821
        (v0.14.5), :4331-4344 (master)), so the fp32 digits below bf16 are lost."""
        self._pending = []
        with torch.no_grad():
            for name, p in self.params:
                p.copy_(snapshot["values"][name])
                if p is not self._masters[name]:
                    self._masters[name].copy_(snapshot["masters"][name] if optimizer_states else p)
        if optimizer_states and self._optimizer is not None:
            self._optimizer.state.clear()
            for name, _ in self.params:
                if name in snapshot["optimizer"]:
                    self._optimizer.state[self._masters[name]] = {
                        k: v.clone() if torch.is_tensor(v) else v
                        for k, v in snapshot["optimizer"][name].items()}

    # ---- reading --------------------------------------------------------------------------

    def values(self):
        """{name: the parameter's current value (detached)} of the target."""
        return {name: p.detach() for name, p in self.params}

    def masters(self):
        """{name: the fp32 master the optimizer steps (a copy)}: the values in fp32."""
        return {name: m.detach().clone() for name, m in self._masters.items()}

    def edited(self):
        """The parameters were changed in place (a gather's published edit): a ZeRO engine that
        keeps the edit keeps it in its fp32 master too, as the user meant."""
        with torch.no_grad():
            for name, p in self.params:
                if p is not self._masters[name]:
                    self._masters[name].copy_(p)

    def accumulated(self):
        """{name: the reduced gradient accumulated for the next step (a copy)}; a name without
        one is absent."""
        return {name: g.clone() for name, g in self._reduced.items()}

    # ---- the arithmetic -------------------------------------------------------------------

    def _add_reduction(self, name, grads):
        self._add(self._reduced, name, self._reduce(grads))
        # What any sum order of these terms can differ by is bounded by their magnitudes.
        terms = [g.abs().float().div(self.world_size) for g in grads if g is not None]
        self._add(self._magnitude, name, torch.stack(terms).sum(0))

    def _reduce(self, grads):
        precision = self.training.precision
        if precision.plain:
            return reduce_gradients(grads, self.world_size, self.training.divide_before_sum)
        return reduce_in_dtypes(grads, self.world_size, precision)

    @staticmethod
    def _add(into, name, grad):
        into[name] = grad if name not in into else into[name].add_(grad)
