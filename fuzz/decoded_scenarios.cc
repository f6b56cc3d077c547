#include "fuzz/decoded_scenarios.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace zerocheck::fuzz {
namespace {

namespace fs = std::filesystem;

// The first JSON path where `stored` and `decoded` differ ("" when equal).
std::string first_difference(const nlohmann::json& stored, const nlohmann::json& decoded) {
  const nlohmann::json patch = nlohmann::json::diff(stored, decoded);
  return patch.empty() ? "" : patch.front().value("path", std::string("/"));
}

bool writing_decoded() {
  const char* value = std::getenv("ZEROCHECK_WRITE_DECODED");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace

std::string decoded_json_path(const std::string& input_path) {
  for (const char* folder : {"/fuzz/corpus/", "/fuzz/regressions/"}) {
    const auto at = input_path.rfind(folder);
    if (at != std::string::npos)
      return input_path.substr(0, at) + "/fuzz/decoded/" + input_path.substr(at + 6) + ".json";
  }
  throw std::invalid_argument(input_path + " is under neither fuzz/corpus/ nor fuzz/regressions/");
}

std::string decoded_json_problem(const ScenarioTarget& target, const std::string& input_path,
                                 const std::string& bytes) {
  const Scenario decoded = scenario_from_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                               DecodeLimits(target.profile));
  const nlohmann::json json = to_json(decoded);
  const std::string stored_path = decoded_json_path(input_path);
  const std::string rewrite = "if the draw or the language changed on purpose, rewrite the stored scenarios: "
                              "ZEROCHECK_WRITE_DECODED=1 build/dev/bin/fuzz_" +
                              std::string(target.name) + "_replay_tests";
  if (writing_decoded()) {
    fs::create_directories(fs::path(stored_path).parent_path());
    std::ofstream(stored_path) << json.dump() << "\n";  // one line: the attrs corpus has hundreds
    return "";
  }
  std::ifstream in(stored_path);
  if (!in) return input_path + ": no decoded scenario stored at " + stored_path + " (" + rewrite + ")";
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json stored = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (stored.is_discarded()) return stored_path + ": not JSON (" + rewrite + ")";
  const std::string where = first_difference(stored, json);
  if (where.empty()) return "";
  return input_path + " no longer decodes to " + stored_path + ": they first differ at " + where +
         " (the same bytes now mean another scenario, and the corpus another search; " + rewrite + ")";
}

std::vector<std::string> orphan_decoded_files(const std::vector<std::string>& inputs) {
  std::set<std::string> expected, folders;
  for (const auto& input : inputs) {
    expected.insert(decoded_json_path(input));
    folders.insert(fs::path(decoded_json_path(input)).parent_path().string());
  }
  std::vector<std::string> orphans;
  for (const auto& folder : folders)
    if (fs::is_directory(folder))
      for (const auto& entry : fs::directory_iterator(folder))
        if (!expected.count(entry.path().string())) orphans.push_back(entry.path().string());
  return orphans;
}

}  // namespace zerocheck::fuzz
