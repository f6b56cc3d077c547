"""What DeepSpeed ZeRO promises about partitioned state, computed from the scenario alone.

The oracles (numerics.py) compare DeepSpeed's state with these predictions; nothing here reads
DeepSpeed's own description of itself (`ds_persist`, `ds_numel_aligned`, `partition_size`). Each
rule cites the code it follows, in ../shared/deepspeed/v0.14.5 (master-edaa722 keeps them):

Stage 3 (deepspeed/runtime/zero/):
- Partition size: a parameter of n elements is padded to a multiple of the world size W and cut
  into W equal partitions of ceil(n / W) (partition_parameters.py `_aligned_size`,
  `_padding_size`, `_partition_param`: `partition_size = tensor_size // self.num_partitions`).
- Persistence: walking the engine's module in named_parameters() order, a parameter is persistent
  when its numel is at most `stage3_param_persistence_threshold` and the persistent elements so
  far plus its own stay within `stage3_model_persistence_threshold` (default sys.maxsize)
  (parameter_offload.py `mark_persistent_parameters`).
- After initialize: every parameter is partitioned, persistent ones too (they stay partitioned
  until their first fetch): `ds_status` NOT_AVAILABLE and no data (partition_parameters.py
  `_zero_init_param` calls `param.partition()` for every parameter; `free_param` empties
  `param.data`).
- After an optimizer step (an accumulation boundary): every parameter is released first
  (stage3.py `step` -> `_partition_all_parameters`, which raises unless all are NOT_AVAILABLE),
  then the persistent ones are gathered whole (`_post_step`: `persistent_parameters[0].all_gather`).
- Always: a released parameter holds no data; an available one holds its whole shape
  (`free_param`, `_allgather_params`).
- Not promised, so not checked: what a forward or a backward leaves gathered. The parameter
  coordinator keeps parameters whose next use is near (`__params_to_release`,
  `stage3_max_reuse_distance`), releases persistent ones only while the trace is incomplete,
  and the parameters of a module whose inputs need no gradient stay gathered until the step
  (`partition_all_parameters`' docstring).

Stages 1 and 2 (stage_1_and_2.py, `__init__`): the trainable parameters of each optimizer group,
in the group's order, are flattened and padded at the end to a multiple of
`nccl_start_alignment_factor * W` = 2W; each rank holds partition `rank` of size flat / W as its
fp32 master copy (`single_partition_of_fp32_groups`), and the optimizer's state covers only that
partition. The module's parameters stay whole on every rank.
"""

import sys
from dataclasses import dataclass

# stage3_model_persistence_threshold: not a scenario config key, so DeepSpeed's default.
MODEL_PERSISTENCE_THRESHOLD = sys.maxsize
# stage_1_and_2.py: nccl_start_alignment_factor = 2 (4-byte alignment / sizeof(fp16)).
FLAT_ALIGNMENT_FACTOR = 2


def chunk(numel, world_size):
    """Stage 3's partition of a parameter of `numel` elements: ceil(numel / W)."""
    return -(-numel // world_size)


def persistent_names(named_numels, threshold, model_threshold=MODEL_PERSISTENCE_THRESHOLD):
    """The names DeepSpeed stage 3 makes persistent, from [(name, numel)] in named_parameters order."""
    persistent, total = set(), 0
    for name, numel in named_numels:
        if numel + total > model_threshold:
            continue
        if numel <= threshold:
            persistent.add(name)
            total += numel
    return persistent


@dataclass(frozen=True)
class FlatGroup:
    """Stages 1 and 2: one optimizer group's flat buffer."""

    names: tuple  # the trainable parameters, in the group's order
    numels: tuple
    padded: int  # the flat buffer's size: sum of numels padded to a multiple of 2W
    partition: int  # each rank's share: padded / W


def flat_group(named_numels, world_size):
    """The flat layout DeepSpeed stages 1 and 2 give one group of [(name, numel)]."""
    total = sum(n for _, n in named_numels)
    alignment = FLAT_ALIGNMENT_FACTOR * world_size
    padded = -(-total // alignment) * alignment
    return FlatGroup(tuple(n for n, _ in named_numels), tuple(n for _, n in named_numels), padded,
                     padded // world_size)
