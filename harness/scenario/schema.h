// The scenario language, defined once: format, limits, node kinds, operations and their keys.
//
// Everything that lists kinds, operations, keys or limits reads these tables: the JSON reader and
// writer and validate() (harness/scenario/read.cc, write.cc, validate.cc), build_tree and
// describe, the random draw (harness/scenario/draw/), the fuzz dictionary
// (fuzz/write_dictionary.cc), the Python replay's schema.json (schema_json.cc, printed by
// `zerocheck schema`) and the format docs. A new node kind is one row of node_kinds() plus its
// builder; a new operation is one row of ZEROCHECK_OPS plus its interpreter case. The DeepSpeed
// config keys (engine/config.h), placement kinds (engine/placement.h) and error kinds
// (engine/errors.h) are the engine's own tables; the invariants are harness/scenario/invariants.h.
//
// Thread-safety: the tables are immutable after first use.
#pragma once

#include "engine/checkpoint_tag.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zero3 {
class Module;
}

namespace zerocheck {
struct NodeSpec;
}

namespace zerocheck::schema {

// The format a writer writes. A reader also reads the earlier formats of kReadFormats: each
// version only adds keys and operations, so an earlier file means the same under this one.
inline constexpr const char* kFormat = "zerocheck-scenario/2";
inline constexpr const char* kReadFormats[] = {"zerocheck-scenario/2", "zerocheck-scenario/1"};

// X(name, lo, hi, doc): inclusive bounds a scenario must respect (the draw stays inside them).
#define ZEROCHECK_LIMITS(X)                                                                        \
  X(world_size, 1, 8, "ranks")                                                                     \
  X(seed, 0, std::numeric_limits<int64_t>::max(), "parameters and data are pure functions of it") \
  X(features, 1, 64, "every module maps features -> features")                                     \
  X(batch, 1, 16, "samples per rank per forward")                                                  \
  X(nodes, 1, 256, "nodes in the tree")                                                            \
  X(ops, 0, 1024, "operations")                                                                    \
  X(offset_dims, 0, 16, "dimensions of an Offset's shape")                                         \
  X(param_numel, 0, 65536, "elements of an Offset's parameter (each dimension too)")               \
  X(attr_entries, 0, 256, "attributes in one list")                                                \
  X(value_depth, 0, 8, "lists nested inside an attribute value")                                   \
  X(value_list_items, 0, 256, "items of a list attribute value")                                   \
  X(tensor_dims, 0, 8, "dimensions of a tensor attribute value")                                   \
  X(tensor_numel, 0, 4096, "numbers of a tensor attribute value (each dimension too)")             \
  X(frozen, 0, 4, "frozen parameter names of one node")                                            \
  X(route_length, 0, 64, "expert choices of one forward")                                          \
  X(route_choice, 0, 1 << 20, "one expert choice (taken modulo the layer's expert count)")          \
  X(tag_bytes, zero3::kMinTagBytes, zero3::kMaxTagBytes, "bytes of a checkpoint tag (engine/checkpoint_tag.h)")

struct Limit {
  const char* name;
  int64_t lo;
  int64_t hi;
  const char* doc;
};

namespace limits {
#define ZEROCHECK_DECLARE_LIMIT(name, lo, hi, doc) inline constexpr Limit name{#name, lo, hi, doc};
ZEROCHECK_LIMITS(ZEROCHECK_DECLARE_LIMIT)
#undef ZEROCHECK_DECLARE_LIMIT
}  // namespace limits

// The learning rate is a number in the open interval (lo, hi).
inline constexpr double kLearningRateAbove = 0;
inline constexpr double kLearningRateBelow = 10;

// A gather's scale is a number in the closed interval [lo, hi].
inline constexpr double kScaleMin = -8;
inline constexpr double kScaleMax = 8;

const std::vector<Limit>& all_limits();

// X(key): the keys an operation may carry, each a field of Op.
#define ZEROCHECK_OP_KEYS(X)                                                                      \
  X(optimizer) X(target) X(route) X(module) X(param) X(name) X(value) X(world_size) X(tag)        \
  X(optimizer_states) X(module_only) X(modifier_rank) X(scale) X(config_error) X(rank) X(into)

enum OpKeyBit : unsigned {
#define ZEROCHECK_OP_KEY_BIT(key) key##_bit,
  ZEROCHECK_OP_KEYS(ZEROCHECK_OP_KEY_BIT)
#undef ZEROCHECK_OP_KEY_BIT
};
namespace key {
#define ZEROCHECK_OP_KEY_MASK(k) inline constexpr unsigned k = 1u << k##_bit;
ZEROCHECK_OP_KEYS(ZEROCHECK_OP_KEY_MASK)
#undef ZEROCHECK_OP_KEY_MASK
}  // namespace key

// X(op, required keys, optional keys, draw weight, attributes weight, doc): the operations. The
// draw weight is the whole language's (DrawProfile::training); the attributes weight is the
// attributes profile's, which never trains or checkpoints (0: never drawn there) and leans on
// initialize and attribute writes, the project's own property. The first row is the draw's
// smallest choice (an exhausted fuzz input picks it).
#define ZEROCHECK_OPS(X)                                                                                \
  X(forward, 0u, key::route, 6, 2, "every rank runs its micro-batch; MoE layers follow the route")     \
  X(initialize, 0u, key::optimizer | key::target | key::config_error, 3, 4,                              \
    "wrap the target in an engine; with a config_error, an invalid config the engine must refuse")     \
  X(backward, 0u, 0u, 5, 0, "back-propagate the last forward's loss")                                  \
  X(step, 0u, 0u, 5, 0, "optimizer step")                                                              \
  X(zero_grad, 0u, 0u, 1, 0, "zero the gradients")                                                     \
  X(set_attr, key::name | key::value, key::module | key::param, 3, 4, "the user writes an attribute")  \
  X(del_attr, key::name, key::module | key::param, 1, 2, "the user deletes an attribute")              \
  X(release, 0u, 0u, 1, 1, "the engine lets go of the model")                                          \
  X(save, 0u, key::tag, 1, 0, "sharded checkpoint of the live engine, under a tag when given")          \
  X(load, 0u, key::world_size | key::tag | key::optimizer_states | key::module_only, 1, 0,             \
    "restore the save of the tag (absent: the last save) of the same target, with or without the "     \
    "optimizer's state; with world_size M, a world of M ranks loads it too")                           \
  X(destroy, 0u, 0u, 1, 1, "the engine is destroyed")                                                  \
  X(gather, key::modifier_rank | key::scale, key::module, 1, 0,                                        \
    "gather a module's parameters; the modifier rank (null: every rank) scales them in place")          \
  X(inject, key::rank | key::into | key::value, key::param, 0, 0,                                      \
    "arm a one-shot NaN or infinity on one rank: its next forward's input, its next backward's loss "   \
    "or one parameter's gradient in its next backward")

struct OpRow {
  const char* name;
  unsigned required;
  unsigned optional;
  int draw_weight;
  int attributes_weight;
  const char* doc;
};
const std::vector<OpRow>& op_rows();  // in ZEROCHECK_OPS order
const std::vector<std::string>& op_names();
// Returns the names of the keys in `mask`, in ZEROCHECK_OP_KEYS order.
std::vector<std::string> op_key_names(unsigned mask);

// What `initialize` may hand the engine: the user's existing optimizer or a new one.
inline const std::vector<std::string>& initialize_optimizers() {
  static const std::vector<std::string> all = {"same", "fresh"};
  return all;
}

// The draw weights of `inject` are 0: the draw adds injections after everything else
// (draw_scenario.h), so a zero row here leaves every earlier choice's meaning as it was.

// What an `inject` puts its value into, and the values it may put (Op::into, Op::value).
inline const std::vector<std::string>& inject_targets() {
  static const std::vector<std::string> all = {"input", "loss", "gradient"};
  return all;
}
inline const std::vector<std::string>& non_finite_values() {
  static const std::vector<std::string> all = {"nan", "inf", "-inf"};
  return all;
}

// X(name, is_integer, default, lo, hi, doc): the keys of the zerocheck-only top-level
// "overflow_protection" object (every key optional, DeepSpeed's fp16 default when absent). Its
// presence asks the engine for overflow protection (zero3::PrecisionOptions::check_overflow) with
// this loss scale; the DeepSpeed replay ignores it (its config cannot ask ZeRO-3 for protection
// without fp16).
#define ZEROCHECK_OVERFLOW_KEYS(X)                                                                        \
  X(loss_scale, false, 0, 0, 4294967296.0, "0: a dynamic scale starting at 2^initial_scale_power; > 0: " \
    "that static scale")                                                                                 \
  X(initial_scale_power, true, 16, 0, 32, "a dynamic scale starts at 2^initial_scale_power")             \
  X(loss_scale_window, true, 1000, 1, 1000000, "clean steps after which a dynamic scale doubles "         \
    "(DeepSpeed v0.14.5's rule)")                                                                        \
  X(hysteresis, true, 2, 1, 1000, "overflows a dynamic scale absorbs before it halves")                 \
  X(min_loss_scale, false, 1, 0.0000152587890625, 4294967296.0, "a dynamic scale never halves below it " \
    "(kept there: DeepSpeed's raise_error_at_min_scale is off)")

struct OverflowKeyRow {
  const char* name;
  bool is_integer;
  double default_value, lo, hi;
  const char* doc;
};
const std::vector<OverflowKeyRow>& overflow_keys();  // in ZEROCHECK_OVERFLOW_KEYS order
std::vector<std::string> overflow_key_names();

// X(name, doc): the invalid configs an `initialize` may be given (its config_error). Each is the
// scenario's own config with one thing wrong, which every engine must refuse and leave the model
// exactly as it was (SCENARIO_FORMAT.md).
#define ZEROCHECK_CONFIG_ERRORS(X)                                                                    \
  X(train_batch_size, "train_batch_size is one more than micro batch * accumulation * world size") \
  X(zero_stage, "zero_optimization.stage is 4, a stage that does not exist")                        \
  X(micro_batch, "train_micro_batch_size_per_gpu is 0")                                             \
  X(offload_optimizer,                                                                              \
    "zero_optimization.offload_optimizer.device is cpu with the client's torch optimizer; refused "  \
    "after the engine is built over the model")

enum class ConfigErrorKind {
  none,  // a valid initialize: the op has no config_error
#define ZEROCHECK_CONFIG_ERROR_ENUM(name, doc) name,
  ZEROCHECK_CONFIG_ERRORS(ZEROCHECK_CONFIG_ERROR_ENUM)
#undef ZEROCHECK_CONFIG_ERROR_ENUM
};
struct ConfigErrorRow {
  const char* name;
  ConfigErrorKind kind;
  const char* doc;
};
const std::vector<ConfigErrorRow>& config_errors();  // in ZEROCHECK_CONFIG_ERRORS order
const std::vector<std::string>& config_error_names();
// Returns the name of `kind` ("" for none).
const char* to_string(ConfigErrorKind kind);

// How the scenario's tree is built: eagerly, or (upstream) inside deepspeed.zero.Init.
inline const std::vector<std::string>& constructions() {
  static const std::vector<std::string> all = {"eager", "zero_init"};
  return all;
}

// The optimizers a scenario names, with the hyperparameters both replays must use.
struct OptimizerRow {
  const char* kind;
  double momentum;  // SGD only; Adam keeps torch's defaults
  int draw_weight;
};
const std::vector<OptimizerRow>& optimizers();
const OptimizerRow* find_optimizer(std::string_view kind);
const std::vector<std::string>& optimizer_kinds();

// How many children a node kind takes.
enum class Children { none, any, at_least_one };
const char* to_string(Children rule);

struct ParamSlot {
  const char* name;     // as named_parameters() names it from the node's module
  bool only_with_bias;  // present only when the node's "bias" is true
};

// Builds the module of `node` (features -> features) over its already built children.
using Builder = std::shared_ptr<zero3::Module> (*)(const NodeSpec& node, int64_t features,
                                                   const std::vector<std::shared_ptr<zero3::Module>>& children);

struct NodeKind {
  const char* name;
  Children children;
  std::vector<std::string> keys;  // node keys only this kind takes ("bias", "shape")
  std::vector<ParamSlot> parameters;
  // Draw weights: as a leaf of an ordinary container, as an MoE's child, as a container.
  int leaf_weight;
  int expert_weight;
  int container_weight;
  Builder build;
};

// Node keys every kind takes ("kind" is required).
const std::vector<std::string>& common_node_keys();
const std::vector<NodeKind>& node_kinds();
// Returns the row of `name`, or nullptr.
const NodeKind* find_node_kind(std::string_view name);
const std::vector<std::string>& node_kind_names();
// Returns the local parameter names of `node` (its kind's slots, bias-dependent ones filtered).
std::vector<std::string> parameter_names(const NodeSpec& node);

// The top-level keys of a scenario file ("construct" is optional, default "eager").
const std::vector<std::string>& required_top_keys();
const std::vector<std::string>& optional_top_keys();

}  // namespace zerocheck::schema

namespace zerocheck::schema {

// Returns every table as one JSON document: the scenario language above plus the engine's
// config keys, placement kinds and error kinds and the invariants. `zerocheck schema`
// prints it; the Python replay reads the checked-in copy (harness/deepspeed/zerocheck_ds/
// scenario/schema.json), which a test compares with this.
nlohmann::json to_json();

}  // namespace zerocheck::schema
