#include "harness/tools/bench.h"

#include "engine/errors.h"
#include "harness/interpreter/interpreter.h"
#include "harness/interpreter/profile_options.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>
#include <chrono>
#include <random>
#include <vector>

namespace zerocheck {
namespace {

std::atomic<int64_t> g_aten_calls{0};
std::mutex g_names_mutex;
std::unordered_map<std::string, int64_t> g_calls_by_name;

// Counts every ATen operator call on every thread while it lives.
class AtenCallCounter {
 public:
  AtenCallCounter() {
    g_aten_calls = 0;
    g_calls_by_name.clear();
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          g_aten_calls.fetch_add(1, std::memory_order_relaxed);
          std::lock_guard<std::mutex> lock(g_names_mutex);
          ++g_calls_by_name[fn.name()];
          return nullptr;
        }).scopes({at::RecordScope::FUNCTION}));
  }
  ~AtenCallCounter() { at::removeCallback(handle_); }
  AtenCallCounter(const AtenCallCounter&) = delete;
  AtenCallCounter& operator=(const AtenCallCounter&) = delete;

 private:
  at::CallbackHandle handle_;
};

struct Pass {
  double seconds = 0;
  int64_t aten_calls = 0, violations = 0;
};

void run_one(const Scenario& s, DrawProfile profile, bool checks, Pass& pass) {
  RunOptions options = profile_run_options(profile);
  options.checks_after_every_op = checks;
  const int64_t calls_before = g_aten_calls.load();
  const auto start = std::chrono::steady_clock::now();
  pass.violations += run_scenario(s, options).ok() ? 0 : 1;
  pass.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  pass.aten_calls += g_aten_calls.load() - calls_before;
}

}  // namespace

std::vector<std::vector<uint8_t>> read_corpus(const std::string& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error))
    throw zero3::UsageError("bench --corpus: '" + dir + "' is not a folder");
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    if (entry.is_regular_file()) files.push_back(entry.path());
  if (error) throw zero3::UsageError("bench --corpus: cannot read the folder '" + dir + "': " + error.message());
  if (files.empty()) throw zero3::UsageError("bench --corpus: the folder '" + dir + "' holds no file");
  std::sort(files.begin(), files.end());
  std::vector<std::vector<uint8_t>> out;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw zero3::UsageError("bench --corpus: cannot open '" + path.string() + "'");
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw zero3::UsageError("bench --corpus: cannot read '" + path.string() + "'");
    out.push_back(std::move(bytes));
  }
  return out;
}

BenchReport run_bench(const BenchOptions& options) {
  if (options.inputs < 1) throw zero3::UsageError("bench needs at least one input, got " + std::to_string(options.inputs));
  options.limits.validate();
  std::vector<Scenario> scenarios;
  BenchReport report;
  auto decode = [&](const std::vector<uint8_t>& bytes) {
    scenarios.push_back(scenario_from_bytes(bytes.data(), bytes.size(), options.limits));
    report.operations += static_cast<int64_t>(scenarios.back().ops.size());
    for (const Op& op : scenarios.back().ops) ++report.operations_by_kind[to_string(op.kind)];
    report.nodes += static_cast<int64_t>(scenarios.back().tree.size());
    report.ranks += scenarios.back().world_size;
  };
  if (!options.corpus.empty()) {
    for (const auto& bytes : options.corpus) decode(bytes);
  } else {
    std::mt19937_64 random(options.seed);
    for (int64_t i = 0; i < options.inputs; ++i) {
      std::vector<uint8_t> bytes(std::uniform_int_distribution<size_t>(0, options.max_input_bytes)(random));
      for (auto& b : bytes) b = static_cast<uint8_t>(random());
      decode(bytes);
    }
  }
  report.scenarios = static_cast<int64_t>(scenarios.size());
  AtenCallCounter counter;
  Pass warm_up, checked, unchecked;
  run_one(scenarios.front(), options.limits.profile, true, warm_up);  // first-call costs inside LibTorch
  // Interleaved, alternating which goes first, so drift in machine load hits both sides alike.
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const bool checks_first = i % 2 == 0;
    run_one(scenarios[i], options.limits.profile, checks_first, checks_first ? checked : unchecked);
    run_one(scenarios[i], options.limits.profile, !checks_first, checks_first ? unchecked : checked);
  }
  report.seconds_checked = checked.seconds;
  report.seconds_unchecked = unchecked.seconds;
  report.aten_calls_checked = checked.aten_calls;
  report.aten_calls_unchecked = unchecked.aten_calls;
  report.violations = checked.violations + unchecked.violations;
  {
    std::lock_guard<std::mutex> lock(g_names_mutex);
    report.top_aten_calls.assign(g_calls_by_name.begin(), g_calls_by_name.end());
  }
  std::sort(report.top_aten_calls.begin(), report.top_aten_calls.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  if (report.top_aten_calls.size() > 12) report.top_aten_calls.resize(12);
  return report;
}

nlohmann::json BenchReport::to_json(const BenchOptions& options) const {
  const double n = static_cast<double>(scenarios);
  // Both passes and the warm-up: each scenario ran twice, plus one.
  nlohmann::json top = nlohmann::json::array();
  for (const auto& [name, calls] : top_aten_calls)
    top.push_back({{"op", name}, {"calls_per_scenario", static_cast<double>(calls) / (2 * n + 1)}});
  nlohmann::json by_kind = nlohmann::json::object();
  for (const auto& [kind, count] : operations_by_kind) by_kind[kind] = static_cast<double>(count) / n;
  const std::string drawn_world = "1.." + std::to_string(bounds_of(options.limits.profile).max_world);
  nlohmann::json limits = {{"profile", to_string(options.limits.profile)},
                           {"world", options.limits.world == 0 ? nlohmann::json(drawn_world) : nlohmann::json(options.limits.world)},
                           {"max_nodes", options.limits.max_nodes},
                           {"max_ops", options.limits.max_ops}};
  return {
      {"inputs", scenarios},
      {"seed", options.corpus.empty() ? nlohmann::json(options.seed) : nlohmann::json(nullptr)},
      {"corpus", options.corpus.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.corpus_name)},
      {"limits", limits},
      {"operations_per_scenario", static_cast<double>(operations) / n},
      {"operations_by_kind_per_scenario", by_kind},
      {"nodes_per_scenario", static_cast<double>(nodes) / n},
      {"ranks_per_scenario", static_cast<double>(ranks) / n},
      {"scenarios_per_second", n / seconds_checked},
      {"aten_calls_per_scenario", static_cast<double>(aten_calls_checked) / n},
      {"microseconds_per_aten_call", 1e6 * seconds_checked / static_cast<double>(std::max<int64_t>(aten_calls_checked, 1))},
      {"without_per_op_checks",
       {{"scenarios_per_second", n / seconds_unchecked},
        {"aten_calls_per_scenario", static_cast<double>(aten_calls_unchecked) / n}}},
      {"ratios",
       {{"time_with_over_without_checks", seconds_checked / seconds_unchecked},
        {"aten_calls_with_over_without_checks",
         static_cast<double>(aten_calls_checked) / static_cast<double>(std::max<int64_t>(aten_calls_unchecked, 1))}}},
      {"violations", violations},
      {"top_aten_calls_per_scenario", top},
  };
}

}  // namespace zerocheck
