"""The DeepSpeed config subset a scenario may carry: engine/config.h's keys, via schema.json.

The key table drives validation and defaults, so a key cannot be accepted here and forgotten
there. Anything outside it is an error naming its JSON path, as in the C++ reader: a typo in a
config must never be silently ignored. The effective config (every key, defaults filled in,
train_batch_size only when set) is what the adapters receive; zerocheck's own "zerocheck"
section (a placement policy, engine/placement.h) is validated and kept apart.
"""

from . import schema
from .placement import Placement, read_placement
from .strict_json import fail, key_path, read_bool, read_enum, read_int, read_object

# The keys as the engine's table lists them: name, default, lo, hi, doc; the flags: name,
# default, doc.
TOP_LEVEL_INT_KEYS = schema.CONFIG_TOP_KEYS
ZERO_INT_KEYS = schema.CONFIG_ZERO_KEYS
ZERO_FLAGS = schema.CONFIG_ZERO_FLAGS


def _read_int_keys(value, path, keys, sections=()):
    """Returns {name: value or default} for `keys` of the object at `path` (may hold `sections`)."""
    read_object(value, path, optional=tuple(k.name for k in keys) + sections)
    return {k.name: read_int(value[k.name], key_path(path, k.name), k.lo, k.hi)
            if k.name in value else k.default for k in keys}


def _read_no_offload(value, path):
    """An offload section is read as C++ reads it, and refused unless its device is "none" (as
    the C++ scenario reader does): a scenario's config is one every engine takes, and zerocheck's
    engine offloads nothing. DeepSpeed is given an offload only by the config_error
    "offload_optimizer" of an initialize."""
    read_object(value, path, optional=("device",))
    if "device" in value:
        device_path = key_path(path, "device")
        device = read_enum(value["device"], device_path, schema.OFFLOAD_DEVICES)
        if device != "none":
            fail(device_path, f'"{device}": a scenario\'s config must be valid on every engine; '
                              f'give an initialize "config_error": "offload_optimizer" instead')


def read_config(value, path, world_size):
    """Returns (effective DeepSpeed config, Placement from the "zerocheck" section) at `path`.

    `path` is "$.config" in a scenario, "$" for a standalone config. Raises ScenarioError
    naming the culprit's path.
    """
    config = _read_int_keys(value, path, TOP_LEVEL_INT_KEYS, schema.CONFIG_SECTIONS)
    zero = value.get("zero_optimization", {})
    zero_path = key_path(path, "zero_optimization")
    flags = tuple(f.name for f in ZERO_FLAGS)
    config["zero_optimization"] = _read_int_keys(zero, zero_path, ZERO_INT_KEYS,
                                                 flags + ("offload_optimizer",))
    for flag in ZERO_FLAGS:
        config["zero_optimization"][flag.name] = (
            read_bool(zero[flag.name], key_path(zero_path, flag.name)) if flag.name in zero
            else flag.default)
    if isinstance(zero, dict) and "offload_optimizer" in zero:
        _read_no_offload(zero["offload_optimizer"], key_path(zero_path, "offload_optimizer"))

    # zerocheck's own section (engine/placement.h) is not DeepSpeed's: read it, never forward it.
    placement = Placement()
    if "zerocheck" in value:
        section_path = key_path(path, "zerocheck")
        read_object(value["zerocheck"], section_path, optional=schema.ZEROCHECK_SECTION_KEYS)
        if "placement" in value["zerocheck"]:
            placement = read_placement(value["zerocheck"]["placement"],
                                       key_path(section_path, "placement"), world_size)

    # Default 0 means "not set": DeepSpeed derives it.
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
