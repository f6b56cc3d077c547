"""The named invalid configs of `initialize` with a `config_error` (SCENARIO_FORMAT.md's table):
the scenario's config with that one thing wrong, for the world the replay runs on.

The first three are rejected by DeepSpeed while it parses the config, before it touches the model
(v0.14.5 and master alike, with the replay's own arguments: a client optimizer, the model): an
inconsistent `train_batch_size` and a zero micro batch raise AssertionError (runtime/config.py
`_batch_assertion`), stage 4 a pydantic ValidationError (zero/config.py `DeepSpeedZeroConfig.stage`).
`offload_optimizer` is rejected late: `DeepSpeedEngine._configure_optimizer` raises
ZeRORuntimeException for a client optimizer that is not DeepSpeed's CPU Adam under optimizer
offload (`zero_force_ds_cpu_optimizer`, true by default), after master's engine has put its
forward hooks on the model (v0.14.5 has none there yet).
"""

import copy

from . import schema


def _train_batch_size(config, world_size):
    micro = config.get("train_micro_batch_size_per_gpu", 1)
    config["train_batch_size"] = micro * config.get("gradient_accumulation_steps", 1) * world_size + 1


def _zero_stage(config, world_size):
    config.setdefault("zero_optimization", {})["stage"] = 4


def _micro_batch(config, world_size):
    config["train_micro_batch_size_per_gpu"] = 0
    config.pop("train_batch_size", None)  # else the two disagree: the error would be the other one


def _offload_optimizer(config, world_size):
    config.setdefault("zero_optimization", {})["offload_optimizer"] = {"device": "cpu"}


_BREAK = schema.every("config_errors", {
    "train_batch_size": _train_batch_size, "zero_stage": _zero_stage, "micro_batch": _micro_batch,
    "offload_optimizer": _offload_optimizer,
})


def invalid_config(config, name, world_size):
    """`config` (not changed) with the invalid setting `name` on `world_size` ranks."""
    broken = copy.deepcopy(config)
    _BREAK[name](broken, world_size)
    return broken


def config_problem(config, world_size):
    """What is wrong with `config` by DeepSpeed's batch and stage rules, or "" (the pass-through
    engine's own validation: plain PyTorch takes no config, but a correct engine refuses one
    that cannot be right)."""
    micro = config.get("train_micro_batch_size_per_gpu", 1)
    steps = config.get("gradient_accumulation_steps", 1)
    stage = config.get("zero_optimization", {}).get("stage", 0)
    offload = config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
    if not isinstance(micro, int) or micro < 1:
        return f"train_micro_batch_size_per_gpu {micro!r} is not a positive integer"
    if "train_batch_size" in config and config["train_batch_size"] != micro * steps * world_size:
        return (f"train_batch_size {config['train_batch_size']} is not {micro} * {steps} * "
                f"{world_size}")
    if stage not in (0, 1, 2, 3):
        return f"zero_optimization.stage {stage!r} is not 0..3"
    if offload != "none":
        return (f"zero_optimization.offload_optimizer.device {offload!r}: the client's torch "
                f"optimizer does not run offloaded")
    return ""
