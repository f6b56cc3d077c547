"""The DeepSpeed config subset a scenario may carry: engine/config.h's keys, via schema.json.

The key table drives validation and defaults, so a key cannot be accepted here and forgotten
there. Anything outside it is an error naming its JSON path, as in the C++ reader: a typo in a
config must never be silently ignored. The effective config (every key, defaults filled in,
train_batch_size only when set) is what the adapters receive; zerocheck's own "zerocheck"
section (a placement policy, engine/placement.h) is validated and kept apart.
"""

from . import schema
from .placement import Placement, read_placement
from .strict_json import (fail, key_path, read_bool, read_enum, read_int, read_number,
                          read_object)

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


PRECISION_KEYS = schema.PRECISION_KEYS


def _read_precision_value(key, value, path):
    if key.type == "bool":
        return read_bool(value, path)
    if key.type == "int":
        return read_int(value, path, key.lo, key.hi)
    if key.type == "dtype":
        return read_enum(value, path, schema.PRECISION_DTYPES)
    number = read_number(value, path)
    if not key.lo <= number <= key.hi:
        fail(path, f"value {float(number)!r} is out of range [{float(key.lo)!r}, {float(key.hi)!r}]")
    return number


def _read_precision(value, path, config):
    """Copies into `config` the precision keys `value` writes, as written: an absent key is the
    replayed DeepSpeed version's default (precision_in_effect), so DeepSpeed gets none of them."""
    for section in schema.PRECISION_SECTIONS:
        if section in value:
            read_object(value[section], key_path(path, section),
                        optional=tuple(k.name for k in PRECISION_KEYS if k.section == section))
    for key in PRECISION_KEYS:
        holder = value.get(key.section, {}) if key.section else value
        if key.name not in holder:
            continue
        where = key_path(key_path(path, key.section), key.name) if key.section else key_path(path, key.name)
        read = _read_precision_value(key, holder[key.name], where)
        if key.section:
            config.setdefault(key.section, {})[key.name] = read
        else:
            config[key.name] = read


# What DeepSpeed itself holds where a config leaves a key out, the same in the two versions the
# project runs (v0.14.5; master at edaa722): a script's CONFIG leaves out a key holding it, and
# DeepSpeed reads the config as the replay's (which passes the scenario's effective config
# whole). Read by repro_straight.py (a script's CONFIG) and the adapters (a default the twin
# follows); tests/test_repro_script.py asks v0.14.5 itself (../shared/deepspeed). Keyed by the
# key's path in the config.
DEEPSPEED_DEFAULTS = {
    # deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig: `reduce_bucket_size: int =
    # Field(pp_int(5e8), ge=0)` (v0.14.5 line 106, master line 113).
    schema.some("config_keys", "zero_optimization", "reduce_bucket_size"): 500000000,
    # The same class: `param_persistence_threshold: int = Field(pp_int(1e5), ge=0,
    # alias="stage3_param_persistence_threshold")` (v0.14.5 line 201, master line 221).
    schema.some("config_keys", "zero_optimization", "stage3_param_persistence_threshold"): 100000,
    # The same class's ZeRO knobs (v0.14.5 lines; master's in brackets): allgather_bucket_size
    # 5e8 (125 [132]), sub_group_size 1e9 (165 [175]), prefetch_bucket_size alias
    # stage3_prefetch_bucket_size 5e7 (195 [215]), max_live_parameters alias
    # stage3_max_live_parameters 1e9 (218 [238]), max_reuse_distance alias
    # stage3_max_reuse_distance 1e9 (224 [244]), contiguous_gradients True (95 [102]),
    # reduce_scatter True (101 [108]), round_robin_gradients False (264 [302]). overlap_comm's
    # default is the stage's (stage == 3, its validator): settings_section drops it at stage 3.
    schema.some("config_keys", "zero_optimization", "allgather_bucket_size"): 500000000,
    schema.some("config_keys", "zero_optimization", "sub_group_size"): 1000000000,
    schema.some("config_keys", "zero_optimization", "stage3_prefetch_bucket_size"): 50000000,
    schema.some("config_keys", "zero_optimization", "stage3_max_live_parameters"): 1000000000,
    schema.some("config_keys", "zero_optimization", "stage3_max_reuse_distance"): 1000000000,
    schema.some("config_keys", "zero_optimization", "contiguous_gradients"): True,
    schema.some("config_keys", "zero_optimization", "reduce_scatter"): True,
    schema.some("config_keys", "zero_optimization", "round_robin_gradients"): False,
    # deepspeed/runtime/config.py, DeepSpeedConfig._set_batch_related_parameters: a micro batch
    # size without train_batch_size or these makes them 1 (v0.14.5 lines 968-970, master lines
    # 978-980); with a train_batch_size it derives them from it instead, so they stay there.
    schema.some("config_keys", "gradient_accumulation_steps"): 1,
}


def precision_column(version):
    """Returns the schema's defaults column for DeepSpeed `version` ("0.14.5" -> "v0.14.5", any
    other version -> "master": the two trees the upstream replay runs)."""
    return "v0.14.5" if str(version).split("+")[0] == "0.14.5" else "master"


def precision_in_effect(config, version, pinned=None):
    """Returns {dotted key: (value, source)} for every precision key in `config` as DeepSpeed
    `version` reads it; source is "written", "adapter" (`pinned`: what the adapter sets when the
    scenario leaves a key out) or "default (<column>)". None is DeepSpeed's derived value."""
    column = precision_column(version)
    pinned = pinned or {}
    out = {}
    for key in PRECISION_KEYS:
        name = schema.precision_key_name(key)
        holder = config.get(key.section, {}) if key.section else config
        if key.name in holder:
            out[name] = (holder[key.name], "written")
        elif name in pinned:
            out[name] = (pinned[name], "adapter")
        else:
            out[name] = (key.defaults[column], f"default ({column})")
    return out


def read_config(value, path, world_size):
    """Returns (effective DeepSpeed config, Placement from the "zerocheck" section) at `path`.

    `path` is "$.config" in a scenario, "$" for a standalone config. Raises ScenarioError
    naming the culprit's path.
    """
    precision_top = tuple(k.name for k in PRECISION_KEYS if not k.section)
    config = _read_int_keys(value, path, TOP_LEVEL_INT_KEYS,
                            schema.CONFIG_SECTIONS + schema.PRECISION_SECTIONS + precision_top)
    _read_precision(value, path, config)
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
