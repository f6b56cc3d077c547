"""What an engine holds on this rank, as the checks read it (adapters fill it in, observe()).

Only raw state: the parameters' data as held now, each rank's shard or flat partition, the
statuses and step counters the engine keeps, the optimizer state's sizes. What any of it must be
is the model's business (partition_model.py, twin.py), never the engine's own description.
"""

from dataclasses import dataclass, field


class StateUnavailable(Exception):
    """The engine's state cannot be read this way; the message says why (a "not checked" reason)."""


@dataclass
class ParamState:
    name: str  # the parameter's path in the engine's module
    reported_shape: tuple  # the shape the engine reports (DeepSpeed's ds_shape): I9 only
    requires_grad: bool
    data: object  # the tensor param.data holds now (0 elements when released)
    shard: object = None  # stage 3: this rank's partition (ds_tensor), 1-D
    status: object = None  # stage 3: ds_status's name ("AVAILABLE", "NOT_AVAILABLE", ...)
    grad_numel: object = None  # elements of the module parameter's .grad (None: no .grad)


@dataclass
class EngineState:
    layout: str  # "partitioned" (ZeRO-3 shards), "flat" (stages 1, 2), "whole" (a copy per rank)
    stage: object  # the ZeRO stage the engine runs, or None
    params: list  # [ParamState], in the engine module's named_parameters() order
    flat_partitions: list = field(default_factory=list)  # flat: this rank's partition per group
    flat_group_names: list = field(default_factory=list)  # flat: the parameters of each group
    optimizer_state_numels: list = field(default_factory=list)  # per group: {field: elements}
    steps: dict = field(default_factory=dict)  # {"global_steps": n, "micro_steps": n}
