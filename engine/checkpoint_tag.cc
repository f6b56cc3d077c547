#include "engine/checkpoint_tag.h"

#include "engine/json_reader.h"

namespace zero3 {

const std::vector<std::string>& tag_forbidden_substrings() {
  static const std::vector<std::string> all = {"/", "\\", std::string(1, '\0'), ".."};
  return all;
}

const std::vector<std::string>& reserved_tags() {
  // "latest" is kLatestFile; DeepSpeed also writes "latest_universal" (ds_to_universal) and
  // "zero_to_fp32.py" beside its tags, and a replay shares the folder layout.
  static const std::vector<std::string> all = {".", kLatestFile, "latest_universal", "zero_to_fp32.py"};
  return all;
}

std::string tag_problem(std::string_view tag) {
  const std::string quoted = json_quoted(tag);
  const auto bytes = static_cast<int64_t>(tag.size());
  if (bytes < kMinTagBytes || bytes > kMaxTagBytes)
    return "tag " + quoted + " has " + std::to_string(bytes) + " bytes, expected " + std::to_string(kMinTagBytes) +
           ".." + std::to_string(kMaxTagBytes);
  for (const auto& part : tag_forbidden_substrings())
    if (tag.find(part) != std::string_view::npos) return "tag " + quoted + " contains " + json_quoted(part);
  for (const auto& name : reserved_tags())
    if (tag == name) return "tag " + quoted + " is reserved (the checkpoint folder, or a file beside the tags)";
  return "";
}

}  // namespace zero3
