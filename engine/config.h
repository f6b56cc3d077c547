// Config: the DeepSpeed-compatible JSON subset zerocheck's engine understands.
//
// The keys live in one X-macro table (below) that drives parsing, validation, serialisation and
// the docs, so a key cannot be accepted in one place and forgotten in another. Anything outside
// the table is an error: a typo in a config must never be silently ignored.
//
// DeepSpeed's ZeRO knobs (buckets, prefetch, live and reuse limits, sub-groups, overlap,
// contiguous and reduce-scatter flags) carry DeepSpeed's names, ranges and defaults so that one
// scenario configures both engines. They trade memory and speed upstream and must not change a
// bit of the result (invariant I10). This engine reduce-scatters partitioned gradients in buckets
// of reduce_bucket_size elements by DeepSpeed's rule (engine/gradient_bucket.h): the bucket size
// decides how many reduce-scatters a backward issues, never a bit of the result. It gathers each
// module fetch in one coalesced all-gather, as DeepSpeed's ZeRO-3 does whatever
// allgather_bucket_size says (engine/coalesced_gather.h). Its forward prefetches the next
// modules' parameters and keeps or releases gathered ones by DeepSpeed's coordinator rules
// (stage3_prefetch_bucket_size, stage3_max_live_parameters, stage3_max_reuse_distance:
// engine/fetch_coordinator.h), and its optimizer steps the flat partition a sub-group at a time
// (sub_group_size: engine/sub_groups.h); each decides when a gather happens or what a step
// covers, never a bit. The flags are validated and inert here by construction.
//
// Read with JsonAt (engine/json_reader.h): throws ConfigError whose message starts with the JSON
// path of the culprit ("$.zero_optimization.stage: ..."), and refuses a key written twice.
#pragma once

#include "engine/json_reader.h"
#include "engine/placement.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero3 {

inline constexpr int64_t kConfigIntMax = std::numeric_limits<int32_t>::max();

// X(key, default, min, max, description): integer keys at the top level.
#define ZERO3_TOP_LEVEL_INT_KEYS(X)                                                              \
  X(train_micro_batch_size_per_gpu, 1, 1, kConfigIntMax, "samples per rank per micro-step")    \
  X(gradient_accumulation_steps, 1, 1, kConfigIntMax, "micro-steps per optimizer step")        \
  X(steps_per_print, 10, 1, kConfigIntMax, "log every this many optimizer steps")              \
  X(train_batch_size, 0, 1, kConfigIntMax,                                                     \
    "if set: must equal micro batch * accumulation * world size")

// X(key, default, min, max, description): integer keys inside "zero_optimization".
#define ZERO3_ZERO_INT_KEYS(X)                                                                   \
  X(stage, 3, 3, 3, "ZeRO stage; zerocheck implements stage 3 only")                            \
  X(stage3_param_persistence_threshold, 100000, 0, std::numeric_limits<int64_t>::max(),        \
    "parameters with at most this many elements stay whole on every rank")                      \
  X(reduce_bucket_size, 500000000, 0, std::numeric_limits<int64_t>::max(),                     \
    "elements of partitioned gradients reduce-scattered together: a gradient that would overflow a non-empty bucket flushes it first, the backward's end flushes the rest (DeepSpeed's rule; 0: each alone; persistent gradients, all-reduced, join none)") \
  X(allgather_bucket_size, 500000000, 0, std::numeric_limits<int64_t>::max(),                  \
    "elements per all-gather bucket, stages 1-2 (validated; inert at stage 3, as in DeepSpeed: a module fetch is one coalesced all-gather)") \
  X(stage3_prefetch_bucket_size, 50000000, 0, std::numeric_limits<int64_t>::max(),             \
    "elements (numel) of the next modules' parameters a forward gathers ahead, from the previous forward's module trace (0: no prefetch; engine/fetch_coordinator.h)") \
  X(stage3_max_live_parameters, 1000000000, 0, std::numeric_limits<int64_t>::max(),            \
    "gathered elements (numel) a forward's prefetch stays under: it takes nothing once a rank holds this many (a module's own fetch is never held back)") \
  X(stage3_max_reuse_distance, 1000000000, 0, std::numeric_limits<int64_t>::max(),             \
    "a forward keeps a parameter gathered when a module within this many elements (numel) ahead in the trace uses it again (0: always release)")    \
  X(sub_group_size, 1000000000, 0, std::numeric_limits<int64_t>::max(),                        \
    "partition elements per optimizer sub-group: the step covers one sub-group at a time, each closed after the parameter that fills it (engine/sub_groups.h)")

// X(key, default, description): boolean keys inside "zero_optimization". DeepSpeed's names and
// defaults (deepspeed/runtime/zero/config.py; overlap_comm's default there is "stage == 3").
#define ZERO3_ZERO_BOOL_KEYS(X)                                                                  \
  X(overlap_comm, true, "overlap reduction with backward (validated; inert here: collectives are blocking)") \
  X(contiguous_gradients, true, "copy gradients into a contiguous bucket before reducing (validated; inert here)") \
  X(reduce_scatter, true, "reduce gradients by reduce-scatter, else all-reduce (validated; inert here: reduce-scatter)") \
  X(round_robin_gradients, false, "stages 1-2: round-robin gradient partition copies (validated; inert here)")

// X(member, section, key, Kind, lo, hi, default on v0.14.5, default on master, description):
// DeepSpeed's precision keys by DeepSpeed's names; section "" is the top level. Kind is Bool, Int,
// Number or Dtype (precision_dtypes()); lo and hi bound an Int or a Number. The defaults are JSON
// text per DeepSpeed version replayed, "null" where DeepSpeed derives the value or ignores the
// key (docs/deepspeed-precision.md section 1 cites each line). A config keeps only the keys
// written: an absent key means the replayed version's default (they differ: gradient_clipping).
// validate() refuses fp16.enabled and bf16.enabled both true; bf16.enabled, fp16.enabled with
// its scaler keys, grad_accum_dtype, communication_data_type (the last two under bf16 or fp16
// only) and gradient_clipping take effect (precision_in_effect in engine/precision.h; initialize
// refuses fp16 where LibTorch has no fp16 Linear on CPU); the other keys are validated and inert.
#define ZERO3_PRECISION_KEYS(X)                                                                  \
  X(bf16_enabled, "bf16", "enabled", Bool, 0, 0, "false", "false",                             \
    "bf16 parameters, gradients and communication over an fp32 master partition")              \
  X(bf16_check_grad_overflow, "bf16", "check_grad_overflow", Bool, 0, 0, "null", "true",       \
    "master: skip a step with non-finite gradients, ZeRO-1/2 only (ZeRO-3 never reads it); v0.14.5 ignores the key") \
  X(fp16_enabled, "fp16", "enabled", Bool, 0, 0, "false", "false",                             \
    "fp16 parameters and gradients with a loss scaler over an fp32 master partition")          \
  X(fp16_loss_scale, "fp16", "loss_scale", Number, 0, std::numeric_limits<double>::max(), "0", "0", \
    "0: dynamic loss scaling; > 0: that fixed scale (bf16 and fp32 always scale by 1)")        \
  X(fp16_initial_scale_power, "fp16", "initial_scale_power", Int, 0, 127, "16", "16",          \
    "the dynamic scale starts at 2^this (v0.14.5: only when one of the five dynamic keys is written, else 2^32)") \
  X(fp16_loss_scale_window, "fp16", "loss_scale_window", Int, 1, kConfigIntMax, "1000", "1000", \
    "clean steps before the dynamic scale doubles (master: one more)")                          \
  X(fp16_hysteresis, "fp16", "hysteresis", Int, 1, kConfigIntMax, "2", "2",                     \
    "overflows before the scale halves (v0.14.5: 1 unless a dynamic key is written)")          \
  X(fp16_consecutive_hysteresis, "fp16", "consecutive_hysteresis", Bool, 0, 0, "false", "false", \
    "any clean step refills the hysteresis")                                                   \
  X(fp16_min_loss_scale, "fp16", "min_loss_scale", Int, 1, kConfigIntMax, "1", "1",             \
    "the dynamic scale never halves below this; an overflow at it raises")                     \
  X(grad_accum_dtype, "data_types", "grad_accum_dtype", Dtype, 0, 0, "null", "null",           \
    "dtype gradients accumulate in; absent: the parameters' dtype under ZeRO")                 \
  X(communication_data_type, "", "communication_data_type", Dtype, 0, 0, "null", "null",       \
    "dtype of the gradient reduce-scatter; absent: fp16 with fp16, bf16 with bf16, else fp32")  \
  X(gradient_clipping, "", "gradient_clipping", Number, 0, std::numeric_limits<double>::max(), "0.0", "1.0", \
    "clip the global gradient norm to this; 0 turns clipping off")

// The dtype names of data_types.grad_accum_dtype and communication_data_type (DeepSpeed's DtypeEnum).
inline const std::vector<std::string>& precision_dtypes() {
  static const std::vector<std::string> all = {"fp32", "fp16", "bf16"};
  return all;
}

// The sections of the precision keys, in the table's order ("" is the top level).
inline const std::vector<std::string>& precision_sections() {
  static const std::vector<std::string> all = {"bf16", "fp16", "data_types"};
  return all;
}

// The precision keys written in a config; std::nullopt is "absent: the version's default".
struct PrecisionConfig {
  using Bool = std::optional<bool>;
  using Int = std::optional<int64_t>;
  using Number = std::optional<double>;
  using Dtype = std::optional<std::string>;
#define ZERO3_DECLARE_PRECISION(member, section, key, kind, lo, hi, v0145, master, doc) kind member;
  ZERO3_PRECISION_KEYS(ZERO3_DECLARE_PRECISION)
#undef ZERO3_DECLARE_PRECISION
};

// DeepSpeed's names for where zero_optimization.offload_optimizer.device puts the optimizer's
// state. The reader takes each (a DeepSpeed config reads); the engine offloads nothing, so
// initialize refuses all but "none", once it has built its state over the model (a refusal
// that must undo something: DeepSpeed refuses a client torch optimizer there just as late).
inline const std::vector<std::string>& offload_devices() {
  static const std::vector<std::string> all = {"none", "cpu", "nvme"};
  return all;
}

struct ZeroOptimizationConfig {
#define ZERO3_DECLARE_MEMBER(key, def, lo, hi, doc) int64_t key = def;
  ZERO3_ZERO_INT_KEYS(ZERO3_DECLARE_MEMBER)
#define ZERO3_DECLARE_FLAG(key, def, doc) bool key = def;
  ZERO3_ZERO_BOOL_KEYS(ZERO3_DECLARE_FLAG)
#undef ZERO3_DECLARE_FLAG
  std::string offload_optimizer_device = "none";  // "offload_optimizer": {"device": ...}
};

struct Config {
  ZERO3_TOP_LEVEL_INT_KEYS(ZERO3_DECLARE_MEMBER)
#undef ZERO3_DECLARE_MEMBER
  ZeroOptimizationConfig zero_optimization;
  PrecisionConfig precision;  // "bf16", "fp16", "data_types" and two top-level keys
  // zerocheck's own section, kept apart from DeepSpeed's keys:
  //   "zerocheck": {"placement": {"kind": "attr_mod", "attr": "id"}}
  PlacementSpec placement;

  // Returns the config parsed from JSON text. Throws ConfigError naming the JSON path.
  static Config parse(std::string_view json_text);
  // Returns the config read from a parsed JSON value found at `path` of its document.
  // Throws ConfigError naming the JSON path.
  static Config from_json(const nlohmann::json& json, const std::string& path = "$");
  // Returns the config at `at`; errors go through at's thrower (a scenario's reader passes its own).
  static Config read(const JsonAt& at);
  // The sections besides the integer keys, in the order the reader lists them.
  static const std::vector<std::string>& sections();
  // Returns the JSON form: every key with its value (train_batch_size only when set; DeepSpeed's
  // knobs besides reduce_bucket_size only when not their default).
  nlohmann::json to_json() const;

  // Throws ConfigError at `path`.train_batch_size when it is set and disagrees with the world size.
  void check_world_size(int world_size, const std::string& path = "$") const;
  // Throws ConfigError naming the key when a key is outside its table range (a config built in
  // memory, not read: the reader checks as it reads), or as check_world_size.
  void validate(int world_size, const std::string& path = "$") const;

  // Returns one line per key with its default and description, for `--help` and docs/formats.md.
  static std::string describe_keys();
};

}  // namespace zero3
