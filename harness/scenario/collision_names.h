// The collision dictionary: attribute names that engines write or users commonly pick.
//
// One table, drawn from with high weight by the generators, written out as the libFuzzer
// dictionary (fuzz/), exported for the upstream replay, and listed in the docs. The upstream
// DeepSpeed names come from engine/upstream_names.h, the single list of what upstream writes.
#pragma once

#include "engine/upstream_names.h"

#include <string>
#include <vector>

namespace zerocheck {

// X(name): names users commonly give attributes, and names that clash with nn.Module or
// zerocheck internals.
#define ZEROCHECK_COMMON_NAMES(X)                                                              \
  X("id") X("rank") X("world_size") X("process_group") X("training") X("weight") X("bias")      \
  X("forward") X("data") X("grad") X("expert_id") X("device") X("name") X("zero3-engine")      \
  X("zero3_id") X("owner") X("status") X("shard")

// X(name): near misses of engine names, and names outside ASCII.
#define ZEROCHECK_NEAR_MISS_NAMES(X)                                                           \
  X("_id") X("ID") X("Id") X("ds_id_") X("_ds_id") X("ds_ID") X("id ") X("\xc3\xad" "d")       \
  X("\xe5\xb0\x82\xe9\x96\x80\xe5\xae\xb6") X("\xf0\x9f\x98\x80")

struct CollisionName {
  std::string name;
  const char* source;  // "upstream-module", "upstream-param", "common", "near-miss"
};

// Returns every dictionary name once, with where it comes from. All obey AttrDict's name rule.
const std::vector<CollisionName>& collision_names();

// Names that break AttrDict's name rule (the empty name, a 4 KiB name, invalid UTF-8, NUL):
// every reader and writer must reject them with an error that names the rule.
const std::vector<std::string>& rejected_names();

}  // namespace zerocheck
