"""The DeepSpeed config subset a scenario may carry, mirroring engine/config.h.

One table per section drives validation and defaults, so a key cannot be accepted here and
forgotten there. Anything outside the table is an error naming its JSON path, as in the C++
reader: a typo in a config must never be silently ignored. The effective config (every key,
defaults filled in, train_batch_size only when set) is what the adapters receive; zerocheck's
own "zerocheck" section (a placement policy, engine/placement.h) is validated and kept apart.
"""

from collections import namedtuple

from .placement import Placement, read_placement
from .strict_json import INT64_MAX, fail, key_path, read_int, read_object

INT32_MAX = 2**31 - 1

ConfigKey = namedtuple("ConfigKey", "name default lo hi doc")

TOP_LEVEL_INT_KEYS = (
    ConfigKey("train_micro_batch_size_per_gpu", 1, 1, INT32_MAX, "samples per rank per micro-step"),
    ConfigKey("gradient_accumulation_steps", 1, 1, INT32_MAX, "micro-steps per optimizer step"),
    ConfigKey("steps_per_print", 10, 1, INT32_MAX, "log every this many optimizer steps"),
    # Default 0 means "not set": DeepSpeed derives it.
    ConfigKey("train_batch_size", 0, 1, INT32_MAX,
              "if set: must equal micro batch * accumulation * world size"),
)

ZERO_INT_KEYS = (
    ConfigKey("stage", 3, 3, 3, "ZeRO stage; zerocheck implements stage 3 only"),
    ConfigKey("stage3_param_persistence_threshold", 100000, 0, INT64_MAX,
              "parameters with at most this many elements stay whole on every rank"),
    ConfigKey("reduce_bucket_size", 500000000, 1, INT64_MAX,
              "elements per gradient reduction bucket"),
)


def read_config(value, path, world_size):
    """Returns (effective DeepSpeed config, Placement from the "zerocheck" section) at `path`.

    Raises ScenarioError naming the culprit's path.
    """
    top_names = [k.name for k in TOP_LEVEL_INT_KEYS]
    read_object(value, path, optional=top_names + ["zero_optimization", "zerocheck"])
    config = {k.name: k.default for k in TOP_LEVEL_INT_KEYS}
    for key in TOP_LEVEL_INT_KEYS:
        if key.name in value:
            config[key.name] = read_int(value[key.name], key_path(path, key.name), key.lo, key.hi)

    zero_path = key_path(path, "zero_optimization")
    zero_in = value.get("zero_optimization", {})
    read_object(zero_in, zero_path, optional=[k.name for k in ZERO_INT_KEYS])
    zero = {k.name: k.default for k in ZERO_INT_KEYS}
    for key in ZERO_INT_KEYS:
        if key.name in zero_in:
            zero[key.name] = read_int(zero_in[key.name], key_path(zero_path, key.name), key.lo,
                                      key.hi)
    config["zero_optimization"] = zero

    # zerocheck's own section (engine/placement.h) is not DeepSpeed's: read it, never forward it.
    placement = Placement()
    if "zerocheck" in value:
        section_path = key_path(path, "zerocheck")
        read_object(value["zerocheck"], section_path, optional=("placement",))
        if "placement" in value["zerocheck"]:
            placement = read_placement(value["zerocheck"]["placement"],
                                       key_path(section_path, "placement"), world_size)

    if config["train_batch_size"] == 0:
        del config["train_batch_size"]
    else:
        implied = (config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"]
                   * world_size)
        if config["train_batch_size"] != implied:
            fail(key_path(path, "train_batch_size"),
                 f"{config['train_batch_size']} != train_micro_batch_size_per_gpu * "
                 f"gradient_accumulation_steps * world size = {implied}")
    return config, placement
