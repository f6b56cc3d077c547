// `zerocheck schema` prints the scenario language's tables as JSON (the Python replay's
// schema.json); `--check FILE` compares a checked-in copy with them. `zerocheck validate FILE...`
// runs the scenario reader only, one line per file, so other readers can be compared with it.
#include "harness/cli/command.h"

#include "engine/errors.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

namespace zerocheck::cli {
namespace {

std::string read_text(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw zero3::UsageError("cannot read '" + file + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void register_schema_command(CLI::App& command, int& exit_code) {
  auto check = std::make_shared<std::string>();
  command.add_option("--check", *check,
                     "compare this checked-in schema.json with the tables; exit 1 and say how to regenerate it "
                     "when they differ");
  command.callback([check, &exit_code] {
    const std::string current = schema::to_json().dump(2) + "\n";
    if (check->empty()) {
      std::cout << current;
      exit_code = kExitOk;
      return;
    }
    nlohmann::json stored;
    try {
      stored = nlohmann::json::parse(read_text(*check));
    } catch (const nlohmann::json::exception& e) {
      throw zero3::UsageError(*check + ": not JSON: " + e.what());
    }
    if (stored == schema::to_json()) {
      fmt::print("{} matches the tables\n", *check);
      exit_code = kExitOk;
      return;
    }
    const nlohmann::json patch = nlohmann::json::diff(stored, schema::to_json());
    fmt::print("{} differs from the tables ({} changes, first: {}); regenerate it:\n  zerocheck schema > {}\n",
               *check, patch.size(), patch.empty() ? "" : patch[0].dump(), *check);
    exit_code = kExitViolation;
  });
}

void register_validate_command(CLI::App& command, int& exit_code) {
  auto files = std::make_shared<std::vector<std::string>>();
  command.add_option("files", *files, "scenario JSON files")->required();
  command.callback([files, &exit_code] {
    exit_code = kExitOk;
    for (const auto& file : *files) {
      try {
        parse_scenario(read_text(file));
        fmt::print("{}: ok\n", file);
      } catch (const ScenarioError& e) {
        fmt::print("{}: {}\n", file, e.what());
        exit_code = kExitUsage;
      }
    }
  });
}

}  // namespace zerocheck::cli
