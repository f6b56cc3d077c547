"""The feature of DeepSpeed's ZeRO code a function belongs to, and why a CPU replay misses it.

The coverage report (coverage.py) groups the unreached lines by function; this table maps each
function, by its file under the package and its qualified name, to a feature and the reason the
suite does not reach it. The first row whose pattern matches "path:qualified name" (a regular
expression, searched, case-insensitive) wins, so specific rows come before general ones. A
function no row names is "other", not drawn. The rows follow the names DeepSpeed v0.14.5 and
master use; a renamed function falls through to a later row or to "other", never out of the report.
"""

import re

NEEDS_GPU = "needs a GPU (CUDA kernels, streams, NCCL or pinned memory)"
NEEDS_NVME = "needs NVMe (async I/O swapping)"
NOT_DRAWN = "not drawn: no scenario sets it"
NOT_REPLAYED = "not replayed: the suite runs stage 3 unless --stage says otherwise"
NOT_TRAINING = "not on a training path (estimators, debugging, profiling, tests)"

# (feature, reason, pattern over "path:qualified name"), the first match wins.
FEATURES = (
    ("offload to NVMe (swapping)", NEEDS_NVME,
     r"swap|nvme|\baio|_aio_|async_io"),
    ("ZeRO++ quantized weights and gradients", NEEDS_GPU,
     r"quantiz|\bqwz|\bqgz|CUDAQuantizer|zero_quantized"),
    ("GPU streams, pinned memory, CUDA graphs", NEEDS_GPU,
     r"cuda|stream|pin_memory|_pinned|graph_harvesting|nccl"),
    ("ZeRO stages 1 and 2", NOT_REPLAYED,
     r"^runtime/zero/stage_1_and_2\.py:"),
    ("MiCS and hierarchical partitioning (hpZ)", NOT_DRAWN,
     r"^runtime/zero/mics|hpz|secondary|hierarchical|zero_hpz"),
    ("offload to CPU (offload_param, offload_optimizer)", NOT_DRAWN,
     r"offload|cpu_adam|reload_states|_release_"),
    ("fp16/bf16 mixed precision and loss scaling", NOT_DRAWN,
     r"overflow|loss_scale|fp16|bf16|bfloat16|half|unscale|inf_or_nan|_scaler"),
    ("checkpointing (save, load, consolidation, universal)", NOT_DRAWN,
     r"checkpoint|state_dict|_save|save_|_load|load_|universal|zero_to_fp32|recovery_script"),
    ("buckets, overlap_comm and contiguous gradients", NOT_DRAWN,
     r"bucket|ipg|overlap|contiguous|reduce_ready|grad_partitions_flat|flatten|_flat"),
    ("tiled and memory-efficient linear layers", NOT_DRAWN,
     r"^runtime/zero/(tiling|linear)\.py:"),
    ("prefetch, module trace and live-parameter limits", NOT_DRAWN,
     r"prefetch|trace|InflightParamRegistry|max_live|reuse"),
    ("leaf modules, external parameters, zero.Init internals", NOT_DRAWN,
     r"leaf|external_param|InsertPostInitMethodToModuleSubClasses|get_all_subclasses|"
     r"_init_subclass|tensor_constructor|new_tensor_fn"),
    ("gradient clipping and norms", NOT_DRAWN,
     r"clip|norm"),
    ("engine features outside ZeRO (MoE, pipeline, data efficiency, compression, monitors, "
     "compile, schedulers, sparse gradients, 1-bit optimizers)", NOT_DRAWN,
     r"^runtime/engine\.py:.*(moe|expert|pipe|curriculum|data_efficiency|data_sampl|random_ltd|"
     r"compression|monitor|tensorboard|wandb|csv|eigenvalue|progressive|pld|dataloader|"
     r"deepspeed_io|compile|lr_scheduler|scheduler|sparse|onebit|zero_one|lamb|autotuning|"
     r"flops|timers|_timer|elasticity|amp|quantizer|hybrid_engine|swap_tensor|nebula|"
     r"torch_autocast|autocast|domino|dump_state|was_step_applied|tput)"),
    ("memory estimators, debugging, profiling and tests", NOT_TRAINING,
     r"estimate_|debug|print|_dump|dump_|profil|see_memory|report_|_log|log_|"
     r"^runtime/zero/test\.py:|summary|memory_usage|get_memory"),
    ("configuration and its deprecated forms", NOT_DRAWN,
     r"config|deprecated|_validate|validator|assert_"),
)

_COMPILED = tuple((feature, reason, re.compile(pattern, re.IGNORECASE))
                  for feature, reason, pattern in FEATURES)


def feature_of(path, qualname):
    """(feature, reason) of the function `qualname` in the file `path` under the package."""
    key = f"{path}:{qualname}"
    for feature, reason, pattern in _COMPILED:
        if pattern.search(key):
            return feature, reason
    return "other", NOT_DRAWN
