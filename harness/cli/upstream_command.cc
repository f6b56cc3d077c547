// `zerocheck export` and `zerocheck upstream`: zerocheck's scenarios against upstream DeepSpeed.
#include "engine/errors.h"
#include "harness/cli/command.h"
#include "harness/export.h"
#include "harness/upstream.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <map>

namespace zerocheck::cli {

void register_export_command(CLI::App& command, int& exit_code) {
  auto options = std::make_shared<ExportOptions>();
  command.add_option("--cases", options->cases, "random scenarios on top of the dictionary and seed ones")
      ->check(CLI::Range(0, 100000));
  command.add_option("--seed", options->seed, "seed of the random scenarios");
  command.add_option("--world", options->world_size, "world size written into every scenario")->check(CLI::Range(1, 8));
  command.add_option("--out", options->out_dir, "where the scenarios and manifest.json go")->required();
  command.callback([options, &exit_code] {
    const auto manifest = export_scenarios(*options);
    const auto& coverage = manifest["coverage"];
    fmt::print("zerocheck export: {} scenarios in {}\n", manifest["scenarios"].size(), options->out_dir);
    fmt::print("dictionary names: {}; missing on modules: {}; missing on parameters: {}\n",
               coverage["dictionary_names"].get<int>(), coverage["names_on_modules_missing"].size(),
               coverage["names_on_parameters_missing"].size());
    fmt::print("repeated initialize: {} with the same optimizer, {} with a fresh one\n",
               coverage["repeated_initialize_same_optimizer"].get<int>(),
               coverage["repeated_initialize_fresh_optimizer"].get<int>());
    exit_code = kExitOk;
  });
}

void register_upstream_command(CLI::App& command, int& exit_code) {
  auto options = std::make_shared<UpstreamOptions>();
  auto json = std::make_shared<bool>(false);
  command.add_option("--python", options->python, "the Python that has torch and deepspeed")->required();
  command.add_option("--cases", options->cases, "random scenarios on top of the dictionary and seed ones")
      ->check(CLI::Range(0, 100000));
  command.add_option("--world", options->world_size, "ranks (processes on loopback)")->check(CLI::Range(1, 8));
  command.add_option("--seed", options->seed, "seed of the random scenarios");
  command.add_option("--out", options->out_dir, "where scenarios, verdicts and logs go");
  command.add_option("--adapter", options->adapter, "deepspeed, or passthrough/faulty to check the runner")
      ->check(CLI::IsMember({"deepspeed", "passthrough", "faulty"}));
  command.add_option("--timeout", options->timeout_s, "seconds before the ranks are stopped")->check(CLI::Range(1, 86400));
  command.add_flag("--json", *json, "print one JSON object");
  command.callback([options, json, &exit_code] {
    const UpstreamResult result = run_upstream(*options);
    if (result.runner_exit == 2) {
      std::cerr << "zerocheck upstream: the runner could not run (" << options->adapter << " adapter, "
                << options->python << "):\n"
                << result.runner_error;
      exit_code = kExitUsage;
      return;
    }
    nlohmann::json findings = nlohmann::json::array();
    std::map<std::pair<std::string, std::string>, int> groups;
    for (const auto& f : result.summary.value("findings", nlohmann::json::array())) {
      const std::string attribute = f.value("attribute", nlohmann::json()).is_string() ? f["attribute"].get<std::string>() : "";
      findings.push_back({{"invariant", f.value("invariant", "")},
                          {"attribute", attribute},
                          {"module_path", f.value("module_path", nlohmann::json())},
                          {"scenario", f.value("scenario", "")},
                          {"expected", f.value("expected", nlohmann::json())},
                          {"actual", f.value("actual", nlohmann::json())},
                          {"exception", f.value("exception", nlohmann::json())}});
      ++groups[{f.value("invariant", ""), attribute}];
    }
    if (*json) {
      std::cout << nlohmann::json{{"deepspeed_version", result.summary.value("adapter_version", nlohmann::json())},
                                  {"adapter", options->adapter},
                                  {"scenarios_run", result.summary.value("scenarios_run", 0)},
                                  {"findings", findings}}
                       .dump()
                << std::endl;
    } else {
      fmt::print("zerocheck upstream: adapter {} ({}), {} scenarios, {} findings\n", options->adapter,
                 result.summary.value("adapter_version", nlohmann::json()).dump(),
                 result.summary.value("scenarios_run", 0), findings.size());
      fmt::print("{:<10} {:<32} {:>8}\n", "invariant", "attribute", "findings");
      for (const auto& [key, count] : groups) fmt::print("{:<10} {:<32} {:>8}\n", key.first, key.second, count);
      fmt::print("verdicts under {}/verdicts\n", options->out_dir);
    }
    exit_code = findings.empty() ? kExitOk : kExitViolation;
  });
}

}  // namespace zerocheck::cli
