// Checkpoint tags: the names of checkpoints inside one checkpoint folder (DeepSpeed's `tag`).
//
// A tag is one path component of that folder: Engine::save_checkpoint_tagged writes the
// checkpoint to <folder>/<tag> and names it in <folder>/latest. The rule below keeps a tag from
// leaving the folder or clobbering a file written beside the tags; the scenario readers
// (C++ and Python, through schema.json) enforce the same rule with the same messages.
//
// Thread-safety: the tables are immutable after first use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zero3 {

inline constexpr int64_t kMinTagBytes = 1;
inline constexpr int64_t kMaxTagBytes = 64;
// The file in a checkpoint folder that names its last saved tag.
inline constexpr const char* kLatestFile = "latest";

// Substrings no tag may contain: a separator (either system's), NUL, a parent reference.
const std::vector<std::string>& tag_forbidden_substrings();
// Names no tag may be: the folder itself, and the files DeepSpeed writes beside the tags.
const std::vector<std::string>& reserved_tags();
// Returns what is wrong with `tag` (`tag "a/b" contains "/"`), or "" when it is a valid tag.
std::string tag_problem(std::string_view tag);

}  // namespace zero3
