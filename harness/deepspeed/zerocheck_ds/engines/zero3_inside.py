"""DeepSpeed ZeRO-3's quantities inside a backward and a step, read for I3's root causes.

The stage-3 optimizer computes a step in named methods, the same in v0.14.5 and master
(stage3.py `step`): per sub-group `_prepare_sub_group` hands the fp32 gradient over,
`unscale_and_clip_grads` scales it, `_optimizer_step` steps the fp32 master and
`_reassign_or_swap_out_partitioned_parameters` copies it back into the parameters' shards
(`ds_tensor`). A backward reduces each gradient in `reduce_ready_partitions_and_remove_grads`
(the hook's entry, the whole local gradient) and `partition_grads` (the reduced partition in,
the accumulated partition after). Each method is wrapped on the optimizer instance (never on
the class: other engines stay untouched) to record, per parameter, what it produced
(oracles/inside.py's Observed, this rank's partition sliced in `fp16_groups` order by
`partition_numel()`).

A load restores state in named methods too: the engine's `load_module_state_dict` (the
parameters from a module state dict), and the stage-3 optimizer's `_rigid_load_state_dict` (its
optimizer state, fp32 master and shards), `_restore_from_bit16_weights` (the master from the
shards), `_restore_from_fp32_weights` and `_restore_base_optimizer_state` (an elastic load),
`load_hp_checkpoint_state_from_checkpoint_dir_stage3` (a universal one). Each is wrapped where it
exists; the fields a method changed (values, fp32 master, each optimizer state field, per
parameter) were restored by it, and after a load the capture hands over every field as it ends
with the method that restored it (None: none did).

`load_module_state_dict` writes the state dict into copies that `GatheredParameters(...,
modifier_rank=0)` gathered and publishes rank 0's at its exit. After it returns each rank compares
its shard with its part of the state dict it was given: a shard that differs was changed between
the write and the publication (on Gloo, a gather of `__enter__` landing after the write), and its
values were last written by that gather, not by the load (`published_late`).

Reading is bounded: a method or field missing (another version, offload, swapping) leaves its
quantity unread, and a recording that raises switches the capture off for good, saying why;
the wrapped method always runs and its result or exception is the engine's own.
"""

import functools

import torch

from ..oracles.inside import ENGINE, GATHERED_LATE, STAGE3, Observed, this_ranks_part

# The methods wrapped, each with when it records (before, after or both).
_WRAPPED = ("reduce_ready_partitions_and_remove_grads", "partition_grads", "_prepare_sub_group",
            "unscale_and_clip_grads", "_optimizer_step",
            "_reassign_or_swap_out_partitioned_parameters")
_GROUP_FIELDS = ("fp16_groups", "fp32_partitioned_groups_flat")
# The methods that restore state at a load, on the optimizer and on the engine, each with the
# fields it restores ("state": every optimizer state field).
_LOAD_OPTIMIZER = {"_rigid_load_state_dict": ("values", "master", "state"),
                   "_restore_from_bit16_weights": ("master",),
                   "_restore_from_fp32_weights": ("master",),
                   "_restore_base_optimizer_state": ("state",),
                   "load_hp_checkpoint_state_from_checkpoint_dir_stage3": ("values", "master",
                                                                           "state")}
_LOAD_ENGINE = {"load_module_state_dict": ("values",)}


class Zero3Inside:
    """The capture on one stage-3 optimizer. `take()` returns what was read since the last call
    (an Observed), or None when the capture is off (`why` says why)."""

    def __init__(self, optimizer, names, engine=None):
        self._optimizer = optimizer
        self._names = names  # id(parameter) -> its name in the engine's module
        self._observed = Observed()
        self.why = None
        self._grad_partitions = None
        for key in vars(optimizer):  # the private (name-mangled) per-parameter gradient buffers
            if key.endswith("__param_id_to_grad_partition"):
                self._grad_partitions = key
        for method in _WRAPPED:
            setattr(optimizer, method, self._wrap(method, getattr(optimizer, method)))
        self._restored = None  # since the last take(): {field: {name: (file, function)}}
        self._restores = []  # (field, name) in the order restored (nested methods: the inner's)
        self._before_load = {}  # the fields before the load's first method
        self._ran = []  # the load methods run since the last take(): (file, method)
        # The parameters whose shard the last load_module_state_dict did not publish as written.
        self.published_late = []
        for owner, methods, file in ((optimizer, _LOAD_OPTIMIZER, STAGE3),
                                     (engine, _LOAD_ENGINE, ENGINE)):
            for method in methods:  # (a dict: the method -> the fields it restores)
                if owner is not None and callable(getattr(owner, method, None)):
                    setattr(owner, method, self._wrap_load(method, getattr(owner, method), file))

    def take(self):
        if self.why is not None:
            return None
        observed, self._observed = self._observed, Observed()
        if self._restored is not None:  # a load since: every field as it ends, and who restored it
            self._safely(lambda: self._hand_over_load(observed), ())
        return observed

    def note_gathered(self, params, quantity="gathered_copy"):
        """The whole copies a GatheredParameters context handed the user, read before the user's
        edit ("gathered_copy") and after it ("edited_copy"); the adapter calls it on the rank
        whose edit is published."""
        def record():
            for p in params:
                if self._name(p) is not None:
                    self._observed.add(quantity, self._name(p), p.data)
        self._safely(record, ())

    # ---- the wrapping -------------------------------------------------------------------------

    def _wrap(self, method, original):
        before = getattr(self, f"_before_{method.lstrip('_')}", None)
        after = getattr(self, f"_after_{method.lstrip('_')}", None)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            self._safely(before, args)
            result = original(*args, **kwargs)
            self._safely(after, args)
            return result
        return wrapper

    def _wrap_load(self, method, original, file):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            before, mark = [], len(self._restores)
            self._safely(lambda: before.append(self._load_fields()), ())
            if self._restored is None and before:  # the load's first method
                self._restored, self._before_load, self._ran = {}, before[0], []
            self._ran.append((file, method))
            given = _module_state_dict(method, args, kwargs)
            if method in _LOAD_ENGINE:  # a new load of the module: what the last one left goes
                self.published_late = []
            result = original(*args, **kwargs)
            self._safely(lambda: self._note_restored(before, mark, file, method), ())
            if given is not None:
                self._safely(lambda: self._note_published(given), ())
            return result
        return wrapper

    def _safely(self, record, args):
        if record is None or self.why is not None:
            return
        try:
            record(*args)
        except Exception as e:  # noqa: BLE001 - reading must never change the engine's run
            self.why = f"reading ZeRO-3's quantities raised {type(e).__name__}: {e}"

    def _name(self, param):
        return self._names.get(id(param))

    def _sub_group(self, sub_group_id):
        """[(name, parameter, its slice of the sub-group's flat fp32 partition)]."""
        params = self._optimizer.fp16_groups[sub_group_id]
        flat = self._optimizer.fp32_partitioned_groups_flat[sub_group_id]
        out, offset = [], 0
        for p in params:
            size = p.partition_numel()
            out.append((self._name(p), p, (flat, offset, size)))
            offset += size
        return out

    def _record_flat(self, quantity, sub_group_id, gradient):
        for name, _, (flat, offset, size) in self._sub_group(sub_group_id):
            tensor = flat.grad if gradient else flat
            if name is not None and tensor is not None:
                self._observed.add(quantity, name, tensor.detach().narrow(0, offset, size))

    # ---- what a load restored ------------------------------------------------------------------

    def _load_fields(self):
        """{field: {name: this rank's partition, a copy}}: "values" (the shard), "master" (the fp32
        master), "state:<key>" (each optimizer state field; a number as one element)."""
        optimizer = self._optimizer
        states = getattr(getattr(optimizer, "optimizer", None), "state", {})
        out = {"values": {}, "master": {}}
        for sub_group_id in range(len(optimizer.fp16_groups)):
            flat = optimizer.fp32_partitioned_groups_flat[sub_group_id]
            state = states.get(flat, {})
            for name, p, (_, offset, size) in self._sub_group(sub_group_id):
                if name is None:
                    continue
                out["values"][name] = p.ds_tensor.detach().reshape(-1).float().clone()
                out["master"][name] = flat.detach().narrow(0, offset, size).float().clone()
                for key, value in state.items():
                    tensor = torch.is_tensor(value)
                    if tensor and value.dim() > 0 and value.numel() == flat.numel():
                        part = value.detach().reshape(-1).narrow(0, offset, size).float().clone()
                    elif isinstance(value, (int, float)) or (tensor and value.numel() == 1):
                        part = torch.tensor([float(value)])
                    else:
                        continue
                    out.setdefault(f"state:{key}", {})[name] = part
        return out

    def _note_restored(self, before, mark, file, method):
        """The fields `method` changed (of those it restores) were restored by it."""
        if not before or self._restored is None:
            return
        after = self._load_fields()
        inner = set(self._restores[mark:])  # restored by a wrapped method this one called
        for field_name, tensors in after.items():
            if not _restores(method, field_name):
                continue
            for name, tensor in tensors.items():
                old = before[0].get(field_name, {}).get(name)
                if (field_name, name) in inner or (old is not None and _same(old, tensor)):
                    continue
                self._restored.setdefault(field_name, {})[name] = (file, method)
                self._restores.append((field_name, name))

    def _note_published(self, state_dict):
        """Each parameter whose shard is not this rank's part of what load_module_state_dict
        wrote into its gathered copy (cast to the parameter's dtype, as `copy_` casts): the
        published copy changed after the write. A value of another size (ZeRO-3's placeholders in
        a module-only checkpoint) was not written into a gathered copy and is not compared."""
        import torch.distributed as dist
        for group in self._optimizer.fp16_groups:
            for p in group:
                name, value = self._name(p), state_dict.get(self._name(p))
                if name is None or not torch.is_tensor(value) or value.numel() != p.ds_numel:
                    continue
                group_of = getattr(p, "ds_process_group", None)
                rank, size = ((dist.get_rank(group=group_of), dist.get_world_size(group=group_of))
                              if dist.is_initialized() else (0, 1))
                written = this_ranks_part(value.detach().to(p.dtype), rank, size)
                shard = p.ds_tensor.detach().reshape(-1).float()[:written.numel()]
                if not _same(written, shard):
                    self.published_late.append(name)

    def _hand_over_load(self, observed):
        """Every field as the load left it, and who restored it. A field that changed over the
        whole load though no method was seen changing it (on Gloo a collective's data can land
        after the method that started it returned) was restored by the last method run that
        restores such a field."""
        final = self._load_fields()
        restored = self._restored
        for field_name, tensors in final.items():
            for name, tensor in tensors.items():
                old = self._before_load.get(field_name, {}).get(name)
                if name in restored.get(field_name, {}) or (old is not None and _same(old, tensor)):
                    continue
                last = [run for run in self._ran if _restores(run[1], field_name)]
                if last:
                    restored.setdefault(field_name, {})[name] = last[-1]
        for name in self.published_late:  # the gather wrote them last, whatever the load did
            restored.setdefault("values", {})[name] = GATHERED_LATE
        observed.loaded, observed.restored_by = final, restored
        self._restored, self._restores, self._before_load, self._ran = None, [], {}, []

    # ---- what each method produced ---------------------------------------------------------------

    def _before_reduce_ready_partitions_and_remove_grads(self, param, *_):
        name = self._name(param)
        if name is not None and param.grad is not None:
            self._observed.add("local_gradient", name, param.grad)

    def _before_partition_grads(self, params, grad_partitions, *_):
        for param, partition in zip(params, grad_partitions):
            name = self._name(param)
            if name is not None:
                self._observed.add("reduced_partition", name, partition)

    def _after_partition_grads(self, params, *_):
        buffers = getattr(self._optimizer, self._grad_partitions) if self._grad_partitions else {}
        for param in params:
            name, buffer = self._name(param), buffers.get(param.ds_id)
            if name is not None and buffer is not None:
                self._observed.add("accumulated_partition", name, buffer)

    def _after_prepare_sub_group(self, sub_group_id, *_):
        self._record_flat("handed_gradient", sub_group_id, gradient=True)

    def _after_unscale_and_clip_grads(self, sub_group_id, *_):
        optimizer = self._optimizer
        self._observed.unit_loss_scale = float(getattr(optimizer, "loss_scale", 1.0)) == 1.0
        self._record_flat("unscaled_gradient", sub_group_id, gradient=True)

    def _before_optimizer_step(self, sub_group_id, *_):
        self._record_flat("master_before", sub_group_id, gradient=False)

    def _after_optimizer_step(self, sub_group_id, *_):
        self._record_flat("master_after", sub_group_id, gradient=False)

    def _after_reassign_or_swap_out_partitioned_parameters(self, sub_group_id, *_):
        for name, p, (flat, offset, size) in self._sub_group(sub_group_id):
            if name is not None:
                self._observed.add("shard_after_copy", name, p.ds_tensor)
                master = flat.detach().narrow(0, offset, size)
                self._observed.add("master_at_copy", name, master)
                self._observed.add("copy_of_master", name, master.to(p.ds_tensor.dtype))


def capture(engine):
    """A Zero3Inside on `engine`'s optimizer, or (None, why) when it is not a stage-3 optimizer
    this module can read. Returns (capture or None, why or None)."""
    optimizer = getattr(engine, "optimizer", None)
    module = getattr(engine, "module", None)
    stage_of = getattr(engine, "zero_optimization_stage", None)
    if optimizer is None or module is None or not callable(stage_of) or int(stage_of()) != 3:
        return None, "not a ZeRO-3 engine"
    missing = [m for m in _WRAPPED + _GROUP_FIELDS if not hasattr(optimizer, m)]
    if missing:
        return None, f"the stage-3 optimizer has no {', '.join(missing)}"
    if getattr(optimizer, "offload_optimizer", False) or getattr(optimizer, "swap_optimizer", False):
        return None, "an offloaded optimizer keeps its gradients elsewhere"
    names = {id(p): name for name, p in module.named_parameters()}
    return Zero3Inside(optimizer, names, engine), None


def _module_state_dict(method, args, kwargs):
    """The module state dict a load_module_state_dict call writes into gathered copies (None:
    another method, a call that gathers nothing, fetch_z3_params false as with optimizer states,
    or a custom_load_fn that writes it its own way)."""
    if method != "load_module_state_dict" or kwargs.get("custom_load_fn") is not None:
        return None
    fetch = kwargs.get("fetch_z3_params", args[3] if len(args) > 3 else False)
    if not fetch and kwargs.get("z3_params_to_fetch") is None:
        return None
    checkpoint = args[0] if args else kwargs.get("checkpoint")
    state = checkpoint.get("module") if isinstance(checkpoint, dict) else None
    return state if isinstance(state, dict) else None


def _restores(method, field_name):
    """Whether load method `method` restores field `field_name` ("values", "master", "state:...")."""
    roles = _LOAD_OPTIMIZER.get(method) or _LOAD_ENGINE.get(method) or ()
    return field_name.partition(":")[0] in roles


def _same(a, b):
    """Equal as numbers, NaN matching NaN."""
    return a.numel() == b.numel() and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
