// The rules of the scenario format, each written once. validate() applies all of them to a
// Scenario in memory; the JSON reader applies the few it needs before it can build the types
// (a range before narrowing to int, a tensor's shape before reshaping, the nesting depth before
// recursing), with the same message. Every rule throws ScenarioError "<JSON path>: <text>" in the
// catalogue of engine/json_reader.h.
#pragma once

#include "engine/attr_dict.h"
#include "engine/placement.h"
#include "harness/scenario/scenario.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zerocheck::rules {

// Throws ScenarioError(message): the Thrower every scenario JsonAt carries.
[[noreturn]] void throw_scenario_error(const std::string& message);
[[noreturn]] void fail(const std::string& path, const std::string& what);

void within(const std::string& path, int64_t value, const schema::Limit& limit);
void count_within(const std::string& path, size_t count, const schema::Limit& limit);
void one_of(const std::string& path, const std::string& value, const std::vector<std::string>& choices);
// Where a key the object may not carry shows up (a field set that its kind or operation lacks).
void unknown_key(const std::string& path, const std::vector<std::string>& allowed);

void attribute_name(const std::string& path, const std::string& name);
// Nesting: an attribute value is depth 0, the items of a list at depth d are at depth d + 1.
void value_depth(const std::string& path, int depth);
// Each dimension at path[i] in [0, limit.hi], then the product at most limit.hi.
void shape(const std::string& path, const std::vector<int64_t>& dims, const schema::Limit& dims_limit,
           const schema::Limit& numel_limit);
void tensor_numbers(const std::string& path, size_t numbers, int64_t numel);
void float32_fits(const std::string& path, double value);
void learning_rate(const std::string& path, double lr);
// A checkpoint tag (zero3::tag_problem).
void tag(const std::string& path, const std::string& tag);
// A gather's scale: finite, in [schema::kScaleMin, schema::kScaleMax].
void scale(const std::string& path, double scale);
// A child of node `index` in a tree of `nodes` nodes comes after it.
void child_index(const std::string& path, int64_t child, size_t index, size_t nodes);
void children_count(const std::string& path, const schema::NodeKind& kind, size_t children);
void parameter_name(const std::string& path, const NodeSpec& node, const std::string& name);
// attr_mod's attribute follows the name rule; map ranks lie in [0, world_size).
void placement(const std::string& path, const zero3::PlacementSpec& spec, int world_size);
void train_batch_size(const std::string& config_path, const zero3::Config& config, int world_size);

// An attribute value: depth, list lengths, tensor shape and numbers, finite floats.
void attr_value(const std::string& path, const zero3::AttrValue& value, int depth = 0);
void attr_list(const std::string& path, const std::vector<AttrEntry>& entries);

}  // namespace zerocheck::rules
