"""The feature of DeepSpeed's ZeRO code a function belongs to, and why a CPU replay misses it.

The coverage report (coverage.py) groups the unreached lines by function; this table maps each
function, by its file under the package and its qualified name, to a feature and the reason the
suite does not reach it. A row matches when its file pattern (or None: any file) matches the file
and its name pattern (or None: any name) matches the qualified name (regular expressions,
searched, case-insensitive); the first row that matches wins, so specific rows come before
general ones. A function no row names is "other": mostly branches of the functions ZeRO-3's
training path enters (a config key not drawn, an error path). The rows follow the names
DeepSpeed v0.14.5 and master use; a renamed function falls through to a later row or to "other",
never out of the report. Names are only names: a GPU-only or offload branch inside a function the
replay enters counts under that function's row, usually "other".
"""

import re

NEEDS_GPU = "needs a GPU (CUDA kernels, streams, NCCL or pinned memory)"
NEEDS_NVME = "needs NVMe (async I/O swapping)"
NOT_DRAWN = "not drawn: no scenario sets it"
DRAWN_NOT_TAKEN = ("drawn (the draw sets its config keys): branches the drawn values and the CPU "
                   "path do not take")
PATHS_NOT_DRAWN = ("partly drawn: saves and loads run, not these paths (universal checkpoints, MoE, "
                   "16-bit model files, some load options)")
NOT_REPLAYED = "not replayed: the suite runs stage 3 unless --stage says otherwise"
WORLD_OF_ONE = "not replayed: only a world of one rank takes it (the figure is at world 2)"
NOT_ZERO3 = "not ZeRO-3's path: the engine's own reduction when ZeRO is off or below stage 2"
NOT_CALLED = "not called: nothing on DeepSpeed's ZeRO-3 path calls it (public API or legacy)"
NOT_TRAINING = "not on a training path (estimators, debugging, profiling, tests)"
OTHER = "other: branches and helpers of the ZeRO-3 path the scenarios take"

ENGINE = r"^runtime/engine\.py$"
PARTITION_PARAMETERS = r"^runtime/zero/partition_parameters\.py$"

# (feature, reason, file pattern or None, name pattern or None); the first match wins.
FEATURES = (
    ("offload to NVMe (swapping)", NEEDS_NVME, None,
     r"swap|nvme|\baio|_aio_|async_io"),
    ("ZeRO++ quantized weights and gradients", NEEDS_GPU, None,
     r"quantiz|\bqwz|\bqgz|CUDAQuantizer|zero_quantized"),
    ("GPU streams, pinned memory, CUDA graphs", NEEDS_GPU, None,
     r"cuda|stream|pin_memory|_pinned|graph_harvesting|nccl|from_gpu"),
    ("ZeRO stages 1 and 2", NOT_REPLAYED, r"^runtime/zero/stage_1_and_2\.py$", None),
    ("MiCS and hierarchical partitioning (hpZ)", NOT_DRAWN, r"^runtime/zero/mics", None),
    ("MiCS and hierarchical partitioning (hpZ)", NOT_DRAWN, None,
     r"_mics|hpz|secondary|hierarchical|_sec$|_sec\b"),
    ("offload to CPU (offload_param, offload_optimizer)", NOT_DRAWN,
     r"^runtime/zero/offload_", None),
    ("offload to CPU (offload_param, offload_optimizer)", NOT_DRAWN, None,
     r"(?<!DeepSpeedZeRo)offload|cpu_adam|reload_states|move_to_cpu"),  # that class: ZeRO-3's hooks
    ("fp16/bf16 mixed precision and loss scaling", NOT_DRAWN, None,
     r"overflow|loss_scale|fp16|bf16|bfloat16|half|unscale|inf_or_nan|_scaler"),
    ("parameter and optimizer-state accessors (safe_get_full_fp32_param & co.)", NOT_DRAWN,
     None, r"hp_param|fp32_grad|fp32_param|lean_|_lean|_fp32_state|opt_state_partition|"
           r"groups_without_padding"),
    ("checkpointing (save, load, consolidation, universal)", PATHS_NOT_DRAWN, None,
     r"checkpoint|state_dict|_save|save_|_load|load_|universal|zero_to_fp32|recovery_script|"
     r"restore|ckpt"),
    ("the engine's own gradient all-reduce", NOT_ZERO3, None,
     r"allreduce|all_gather_scalar|_get_gradients_for_reduction|buffered_"),
    ("buckets, overlap_comm and contiguous gradients", DRAWN_NOT_TAKEN, None,
     r"bucket|ipg|overlap|contiguous|reduce_ready|grad_partitions_flat|flatten|_flat"),
    ("tiled and memory-efficient linear layers", NOT_DRAWN, r"^runtime/zero/(tiling|linear)\.py$",
     None),
    ("prefetch, module trace and live-parameter limits", DRAWN_NOT_TAKEN, None,
     r"prefetch|trace|InflightParamRegistry|max_live|reuse"),
    ("leaf modules, external parameters, zero.Init internals", NOT_DRAWN, None,
     r"leaf|wrapper_pre_hook|wrapper_post_hook|external_param|InsertPostInitMethodToModuleSub|"
     r"get_all_subclasses|_init_subclass|tensor_constructor|new_tensor_fn|_post_init_method"),
    ("one rank: nothing to gather", WORLD_OF_ONE, PARTITION_PARAMETERS,
     r"NoGather|_no_gather"),
    ("a parameter's own gradient methods (reduce at its owner, partition)", NOT_CALLED,
     PARTITION_PARAMETERS,
     r"_reduce_scatter_gradient|_partition_gradient|reduce_gradients_at_owner|"
     r"partition_gradients"),
    ("ZeRO-3 helpers nothing calls", NOT_CALLED, r"^runtime/zero/stage3\.py$",
     r"get_grads_to_reduce|zero_reduced_gradients|set_none_gradients_to_zero"),
    ("model and sequence parallelism (mpu, parameter-parallel groups)", NOT_DRAWN, None,
     r"parallel_groups|\bmpu\b|_mpu\b|mpu_|sequence_parallel|model_parallel|elastic"),
    ("activation checkpointing (recompute)", NOT_DRAWN, None, r"recompute"),
    ("the Muon optimizer", NOT_DRAWN, None, r"muon"),
    ("engine API the operations never call (batch sizes, lr, caches, ...)", NOT_DRAWN, ENGINE,
     r"set_train|get_batch_info|empty_partition_cache|set_lr|get_lr|get_mom|set_mom|"
     r"get_global_grad_norm|\beval\b|\.train$|module_state_dict|get_type"),
    ("gradient clipping and norms", DRAWN_NOT_TAKEN, None, r"clip|norm"),
    ("engine features outside ZeRO (MoE, pipeline, tensor parallelism, data efficiency, "
     "compression, monitors, compile, schedulers, sparse gradients, 1-bit optimizers)", NOT_DRAWN, ENGINE,
     r"moe|expert|pipe|curriculum|data_efficiency|data_sampl|random_ltd|compression|monitor|"
     r"tensorboard|wandb|csv|eigenvalue|progressive|pld|dataloader|deepspeed_io|compile|"
     r"scheduler|sparse|onebit|zero_one|lamb|autotuning|flops|timers|_timer|\bamp\b|_amp\b|"
     r"amp_|quantizer|autotp|tensor_parallel|_tp_|"
     r"hybrid_engine|nebula|autocast|domino|dump_state|was_step_applied|tput"),
    ("memory estimators, debugging, profiling and tests", NOT_TRAINING,
     r"^runtime/zero/(test|partitioned_param_profiler)\.py$", None),
    ("memory estimators, debugging, profiling and tests", NOT_TRAINING, None,
     r"estimate_|model_to_params|debug|print|_dump|dump_|profil|see_memory|report_|_log|log_|"
     r"summary|memory_usage|get_memory"),
    ("configuration and its deprecated forms", NOT_DRAWN, r"^runtime/zero/config\.py$", None),
    ("configuration and its deprecated forms", NOT_DRAWN, None,
     r"config|deprecated|_validate|validator|assert_|sanity_check"),
)

_COMPILED = tuple(
    (feature, reason, files and re.compile(files, re.IGNORECASE),
     names and re.compile(names, re.IGNORECASE))
    for feature, reason, files, names in FEATURES)


def feature_of(path, qualname):
    """(feature, reason) of the function `qualname` in the file `path` under the package."""
    for feature, reason, files, names in _COMPILED:
        if (files is None or files.search(path)) and (names is None or names.search(qualname)):
            return feature, reason
    return "other", OTHER
