"""Where an engine and the dense twin first part inside a backward, a step, a load or a gather (I3's root cause).

I3 compares what a rank holds after each operation; a wrong number after a step can come from
the gradient, the reduction, the accumulation, the unscale and clip, the optimizer or the copy
back into the shards. An adapter that can read its engine's quantities while an operation runs
(engines/zero3_inside.py for DeepSpeed ZeRO-3) hands them over as an `Observed`; `locate_backward`
and `locate_step` compare them, in the order the engine computes them, with what the twin says
each must be, and return the first that differs: that quantity and the function producing it key
the root cause, so a wrong reduction and a wrong copy back are two causes, not one "value
differs". After a load, `locate_load` compares each restored field (the values, the fp32
master, each optimizer state field) with what the twin restored, in that order: the first that
differs, and the load function that restored it as the adapter saw it (or none: the load left it
as it was), key the cause, so a load that restores the wrong values and one that restores wrong
moments are two causes. At a gather with a modifier rank, `locate_gather` compares the whole copy
that rank edited with the twin's value before the edit, and after it: a copy handed over wrong
or changed under the edit (a gather that returned before its data arrived) is a cause of its
own, not the edit's fate.

Comparisons are exact (equal as numbers, NaN matching NaN) and cover this rank's real elements of
each partition (padding aside): the caller asks only where the twin's numbers are the engine's
bits (world 2 at most: at world >= 3 Gloo sums in an order of its own). Nothing here raises on
an engine's odd shapes: a quantity that does not fit is reported as differing.
"""

from dataclasses import dataclass, field

import torch

from ..model import partition_model
from ..model.twin import reduce_gradients, reduce_in_dtypes

STAGE3 = "deepspeed/runtime/zero/stage3.py"
ENGINE = "deepspeed/runtime/engine.py"
PARTITION = "deepspeed/runtime/zero/partition_parameters.py"
GATHER_FUNCTION = "GatheredParameters.__enter__"  # where the user's whole copy comes from
# Who last wrote a shard that a load did not publish as it wrote it into the gathered copy
# (engines/zero3_inside.py): on Gloo, the gather of GatheredParameters' entry landing late.
GATHERED_LATE = (PARTITION, GATHER_FUNCTION)


@dataclass(frozen=True)
class Quantity:
    """One quantity an operation computes, in the words of a root cause."""

    key: str  # the Observed field an adapter fills
    phase: str  # "backward" or "step"
    words: str
    file: str
    function: str


# In the order the engine computes them: the first one that differs is where the bug is.
QUANTITIES = (
    Quantity("local_gradient", "backward", "the gradient of this rank's micro-batch before reduction",
             ENGINE, "backward"),
    Quantity("reduced_partition", "backward", "the reduced gradient partition",
             STAGE3, "__reduce_and_partition_ipg_grads"),
    Quantity("accumulated_partition", "backward", "the accumulated gradient partition",
             STAGE3, "partition_grads"),
    Quantity("handed_gradient", "step", "the gradient handed to the optimizer",
             STAGE3, "_prepare_sub_group"),
    Quantity("unscaled_gradient", "step", "the gradient after unscale and clip",
             STAGE3, "unscale_and_clip_grads"),
    Quantity("master_before", "step", "the fp32 master before the optimizer step",
             STAGE3, "_optimizer_step"),
    Quantity("master_after", "step", "the fp32 master after the optimizer step",
             STAGE3, "_optimizer_step"),
    Quantity("copy_back", "step", "the copy of the fp32 master into the parameter's shard",
             STAGE3, "_reassign_or_swap_out_partitioned_parameters"),
    Quantity("copied_early", "step",
             "the parameter's shard copied back before the optimizer step",
             STAGE3, "_reassign_or_swap_out_partitioned_parameters"),
    # A load's fields, in the order a step would use them; the function is the one the adapter saw
    # restore the field (locate_load), else the load itself.
    Quantity("restored_values", "load", "the parameter's value", ENGINE, "load_checkpoint"),
    Quantity("restored_master", "load", "the fp32 master", ENGINE, "load_checkpoint"),
    Quantity("restored_state", "load", "the optimizer's state", ENGINE, "load_checkpoint"),
    # A gather with a modifier rank: the whole copy that rank's edit was made on, then that copy
    # as the edit left it (the value after the gather is it, published): a copy handed over
    # wrong, or changed under the edit, is where it went wrong.
    Quantity("gathered_copy", "gather", "the gathered copy the edit was made on", PARTITION,
             GATHER_FUNCTION),
    Quantity("edited_copy", "gather", "the gathered copy as the edit left it", PARTITION,
             GATHER_FUNCTION),
)
_BY_KEY = {q.key: q for q in QUANTITIES}
ORDER = {q.key: i for i, q in enumerate(QUANTITIES)}


@dataclass
class Observed:
    """What an adapter read inside the operations since it was last asked, on this rank.

    Each field maps a parameter name to its tensors in call order: `local_gradient` whole, the
    others this rank's partition (flat, padding included). `shard_after_copy` and
    `master_at_copy` are the shard and the fp32 master right after the copy back, and
    `copy_of_master` that master in the shard's dtype (what the copy must give: the master
    itself in fp32, rounded to nearest even for bf16 shards; absent: the master).
    `unit_loss_scale`: the loss scale is 1, so the gradient after the unscale and clip must equal
    the twin's after its clip (the one handed over when nothing clips). After a load: `loaded`, {field: {name: this
    rank's partition}} for "values", "master" and "state:<key>" as the load left them, and
    `restored_by`, {field: {name: (file, function)}} for the fields a load function changed.
    `gathered_copy` and `edited_copy`: at a gather, on the rank whose edit is published, each
    parameter's whole copy as the gather handed it over, then as the edit left it."""

    local_gradient: dict = field(default_factory=dict)
    reduced_partition: dict = field(default_factory=dict)
    accumulated_partition: dict = field(default_factory=dict)
    handed_gradient: dict = field(default_factory=dict)
    unscaled_gradient: dict = field(default_factory=dict)
    master_before: dict = field(default_factory=dict)
    master_after: dict = field(default_factory=dict)
    shard_after_copy: dict = field(default_factory=dict)
    master_at_copy: dict = field(default_factory=dict)
    copy_of_master: dict = field(default_factory=dict)
    unit_loss_scale: bool = True
    loaded: dict = field(default_factory=dict)
    restored_by: dict = field(default_factory=dict)
    gathered_copy: dict = field(default_factory=dict)
    edited_copy: dict = field(default_factory=dict)

    def add(self, quantity, name, tensor):
        getattr(self, quantity).setdefault(name, []).append(
            tensor.detach().reshape(-1).float().cpu().clone())

    def empty(self):
        return not any(getattr(self, q) for q in (
            "local_gradient", "reduced_partition", "accumulated_partition", "handed_gradient",
            "unscaled_gradient", "master_before", "master_after", "shard_after_copy", "loaded",
            "gathered_copy", "edited_copy"))


def this_ranks_part(whole, rank, world_size):
    """The real elements (padding aside) of rank `rank`'s partition of `whole`, flat."""
    flat = whole.detach().reshape(-1).float()
    c = partition_model.chunk(flat.numel(), world_size)
    start = min(rank * c, flat.numel())
    return flat[start:min(start + c, flat.numel())]


def _equal(expected, actual):
    """`actual` starts with `expected`'s elements, equal as numbers (NaN matching NaN)."""
    if actual.numel() < expected.numel():
        return False
    a = actual[:expected.numel()]
    return bool(((expected == a) | (torch.isnan(expected) & torch.isnan(a))).all())


def _found(key, name):
    return {"quantity": key, "param": name}


def locate_backward(observed, gradients, accumulated, rank, world_size, divide_before_sum, params,
                    precision=None):
    """The first quantity of a backward that differs from the twin's, as {"quantity", "param"},
    or None. `gradients`: the twin's last backward ({name: [each rank's gradient or None]});
    `accumulated`: the twin's reduced gradients accumulated since the last step; `params`:
    [(name, numel)] in the engine's order; `precision`: the twin's Precision when the reduce is
    not fp32 (None: fp32). A quantity read more than once for a parameter in one backward (a
    parameter reduced in two parts) is left out, but for the accumulation."""
    def local(name):
        grads = gradients.get(name)
        return None if grads is None else grads[rank]

    checks = (
        ("local_gradient", local, False),
        ("reduced_partition", lambda name: _reduced(gradients.get(name), world_size,
                                                    divide_before_sum, precision), True),
        ("accumulated_partition", lambda name: accumulated.get(name), True),
    )
    for key, expected_of, partitioned in checks:
        seen = getattr(observed, key)
        for name, numel in params:
            tensors = seen.get(name)
            if not tensors or (len(tensors) > 1 and key != "accumulated_partition"):
                continue
            expected = expected_of(name)
            if expected is None:  # the twin has no gradient there: the engine's must be zeros
                expected = torch.zeros(numel)
            expected = (this_ranks_part(expected, rank, world_size) if partitioned
                        else expected.detach().reshape(-1).float())
            if not _equal(expected, tensors[-1]):
                return _found(key, name)
    return None


def _reduced(grads, world_size, divide_before_sum, precision=None):
    if grads is None:
        return None
    if precision is not None:
        return reduce_in_dtypes(grads, world_size, precision)
    return reduce_gradients(grads, world_size, divide_before_sum)


def locate_step(observed, used, clipped, before, after, rank, world_size, params):
    """The first quantity of an optimizer step that differs, as {"quantity", "param"}, or None.
    `used`: {name: the gradient the twin handed its clip}; `clipped`: {name: that gradient after
    the clip} (the same numbers when nothing clips); `before`, `after`: the twin's values around
    its step; `params`: [(name, numel)] in the engine's order."""
    names = [name for name, _ in params]
    def part(values, name):
        value = values.get(name)
        return None if value is None else this_ranks_part(value, rank, world_size)

    against_twin = [("handed_gradient", lambda n: part(used, n)),
                    ("master_before", lambda n: part(before, n)),
                    ("master_after", lambda n: part(after, n))]
    if observed.unit_loss_scale:
        # A loss scale is not followed by the twin (I3 stops there), a clip is: its result is
        # compared, so a wrong clip is located at the clip, not at the optimizer step after it.
        against_twin.insert(1, ("unscaled_gradient", lambda n: part(clipped, n)))
    for key, expected_of in against_twin:
        seen = getattr(observed, key)
        for name in names:
            expected = expected_of(name)
            if seen.get(name) and expected is not None and not _equal(expected, seen[name][-1]):
                return _found(key, name)
    # The copy back: the shard must hold the master it copies, and that master must be the one
    # the optimizer step left (a copy made before the step holds the old values).
    for name, numel in params:
        shards = observed.shard_after_copy.get(name)
        masters = observed.copy_of_master.get(name) or observed.master_at_copy.get(name)
        if shards and masters and not _equal(_real(masters[-1], numel, rank, world_size), shards[-1]):
            return _found("copy_back", name)
    for name, numel in params:
        masters, finals = observed.master_at_copy.get(name), observed.master_after.get(name)
        if masters and finals and not _equal(_real(finals[-1], numel, rank, world_size), masters[-1]):
            return _found("copied_early", name)
    return None


def masters_that_differ(observed, after, rank, world_size, params):
    """The parameters whose fp32 master on this rank, as the optimizer step left it, differs
    from the twin's (`after`: {name: the twin's master after its step}), in the engine's order.
    With 16-bit parameters the values round the master away: a master one bf16 ulp off in its
    low digits shows in no value until later steps, or never."""
    return [name for name, _ in params
            if observed.master_after.get(name) and after.get(name) is not None
            and not _equal(this_ranks_part(after[name], rank, world_size),
                           observed.master_after[name][-1])]


def locate_load(observed, values, optimizer_state, rank, world_size, params):
    """The first restored field that differs from the twin's after a load, as {"quantity",
    "param", "field", "file", "function", "restored"}, or None. `values`: {name: the twin's value
    after its load}; `optimizer_state`: {name: {key: the twin's optimizer state field}};
    `params`: [(name, numel)] in the engine's order. A field the twin has no counterpart for (an
    optimizer state it never made) is not compared."""
    loaded = observed.loaded
    fields = ["values", "master"] + sorted(k for k in loaded if k.startswith("state:"))
    for field_name in fields:
        for name, _ in params:
            actual = loaded.get(field_name, {}).get(name)
            if field_name in ("values", "master"):
                whole = values.get(name)
            else:
                whole = (optimizer_state.get(name) or {}).get(field_name[len("state:"):])
            if actual is None or whole is None:
                continue
            if torch.is_tensor(whole) and whole.dim() > 0:
                expected = this_ranks_part(whole, rank, world_size)
            else:
                expected = torch.tensor([float(whole)])
            if _equal(expected, actual):
                continue
            by = observed.restored_by.get(field_name, {}).get(name)
            quantity = "restored_" + field_name.partition(":")[0]
            q = _BY_KEY[quantity]
            return {"quantity": quantity, "param": name, "field": field_name,
                    "file": by[0] if by else q.file, "function": by[1] if by else q.function,
                    "restored": by is not None}
    return None


def locate_gather(observed, before, after, params):
    """The first of a gather's copies that differs from the twin's, as {"quantity", "param"}, or
    None: the copy the modifier rank edited against the twin's value before its edit (`before`,
    {name: value}), then that copy after the edit against the twin's after it (`after`); a copy
    changed under the edit (a gather's data landing late) differs there. `params`: [(name,
    numel)] in the engine's order. Only the modifier rank reads the copies: another rank's is
    overwritten by the broadcast."""
    for key, values in (("gathered_copy", before), ("edited_copy", after)):
        seen = getattr(observed, key)
        for name, _ in params:
            copies, expected = seen.get(name), values.get(name)
            if copies and expected is not None and not _equal(
                    expected.detach().reshape(-1).float(), copies[-1]):
                return _found(key, name)
    return None


def _real(partition, numel, rank, world_size):
    """`partition`'s real elements (this rank's share of a parameter of `numel`)."""
    c = partition_model.chunk(numel, world_size)
    return partition[:max(0, min(c, numel - rank * c))]


def earliest(found):
    """The earliest in the engine's order of several ranks' results (None: nothing differs);
    ties go to the lowest rank, so every rank picks the same one."""
    candidates = [f for f in found if f]
    return min(candidates, key=lambda f: ORDER[f["quantity"]]) if candidates else None


def described(found):
    """The root cause's words for a located result: {"quantity" (words), "file", "function",
    "phase", and for a load "restored": whether a load function changed the field}."""
    q = _BY_KEY[found["quantity"]]
    if q.phase == "load":
        key = found.get("field", "").partition(":")[2]
        words = f"the optimizer's {key}" if key else q.words
        return {"quantity": words, "file": found.get("file", q.file),
                "function": found.get("function", q.function), "phase": q.phase,
                "restored": found.get("restored")}
    return {"quantity": q.words, "file": q.file, "function": q.function, "phase": q.phase}
