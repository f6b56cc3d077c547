#include "harness/tools/export.h"

#include "engine/errors.h"
#include "harness/scenario/collision_names.h"
#include "harness/scenario/generators.h"
#include "harness/tools/repro_seed.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace zerocheck {
namespace {

NodeSpec node(std::string kind, std::vector<int> children = {}) {
  NodeSpec n;
  n.kind = std::move(kind);
  n.children = std::move(children);
  return n;
}

Op op(OpKind kind, std::string optimizer = "same") {
  Op o{kind};
  o.optimizer = std::move(optimizer);
  return o;
}

// Training, then a repeated initialize with the same optimizer, training, a repeated initialize
// with a fresh optimizer, training: the sequence that crashed or corrupted upstream.
std::vector<Op> repeated_initialize_ops() {
  std::vector<Op> ops{op(OpKind::initialize)};
  auto train = [&] { ops.insert(ops.end(), {op(OpKind::forward), op(OpKind::backward), op(OpKind::step)}); };
  train();
  ops.push_back(op(OpKind::initialize, "same"));
  train();
  ops.push_back(op(OpKind::initialize, "fresh"));
  train();
  return ops;
}

// A small MoE tree whose expert (module) and linear weight (parameter) carry `names`.
Scenario dictionary_scenario(const std::vector<std::string>& names, int world, uint64_t seed) {
  Scenario s;
  s.world_size = world;
  s.seed = seed;
  s.features = 4;
  s.config.zero_optimization.stage3_param_persistence_threshold = 0;
  s.placement.kind = zero3::PlacementSpec::Kind::attr_mod;
  s.placement.attr = "id";
  s.tree = {node("Sequential", {1, 2}), node("Linear"), node("MoE", {3, 4}), node("Expert"), node("Expert")};
  s.tree[3].attrs.push_back({"id", zero3::AttrValue(int64_t{0})});
  s.tree[4].attrs.push_back({"id", zero3::AttrValue(int64_t{1})});
  int64_t value = 100;
  for (const auto& name : names) {
    if (name != "id") s.tree[3].attrs.push_back({name, zero3::AttrValue(value)});
    s.tree[1].param_attrs["weight"].push_back({name, zero3::AttrValue(value)});
    ++value;
  }
  s.ops = repeated_initialize_ops();
  return s;
}

// The bug report: 60 experts with user ids, placement by id, initialize twice.
Scenario seed_scenario(int world) {
  Scenario s;
  s.world_size = world;
  s.features = 8;  // the report's experts are 128 wide; 8 keeps the replay quick, ids are what matter
  s.batch = 1;
  s.lr = 3e-5;
  s.config = zero3::Config::parse(kSeedConfig);
  s.placement.kind = zero3::PlacementSpec::Kind::attr_mod;
  s.placement.attr = "id";
  s.tree = {node("Sequential", {1}), node("ModuleList")};
  for (int i = 0; i < 60; ++i) {
    s.tree[1].children.push_back(static_cast<int>(s.tree.size()));
    s.tree.push_back(node("Expert"));
    s.tree.back().attrs.push_back({"id", zero3::AttrValue(int64_t{i})});
  }
  s.ops = {op(OpKind::initialize), op(OpKind::initialize, "same"), op(OpKind::forward)};
  return s;
}

// A parameter with no elements next to ordinary ones, trained: upstream ZeRO-3 has failed on it
// (a zero-size partition), and real models have such parameters (empty heads, pruned layers).
Scenario zero_size_scenario(int world, uint64_t seed) {
  Scenario s;
  s.world_size = world;
  s.seed = seed;
  s.features = 4;
  s.config.zero_optimization.stage3_param_persistence_threshold = 0;
  s.tree = {node("Sequential", {1, 2, 3}), node("Linear"), node("Offset"), node("Linear")};
  s.tree[2].shape = {0};
  s.ops = {op(OpKind::initialize), op(OpKind::forward), op(OpKind::backward), op(OpKind::step)};
  return s;
}

}  // namespace

nlohmann::json export_scenarios(const ExportOptions& options) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path scenario_dir = fs::path(options.out_dir) / "scenarios";  // the runner reads every file here
  fs::remove_all(scenario_dir, error);  // a stale scenario from an earlier export would be replayed too
  fs::create_directories(scenario_dir, error);
  if (error) throw zero3::UsageError("cannot create '" + options.out_dir + "': " + error.message());
  nlohmann::json entries = nlohmann::json::array();
  auto write = [&](const std::string& name, const Scenario& s, const std::string& source) {
    const fs::path file = scenario_dir / (name + ".json");
    std::ofstream out(file);
    out << to_json(s).dump(2) << "\n";
    if (!out) throw zero3::UsageError("cannot write '" + file.string() + "'");
    entries.push_back({{"file", "scenarios/" + file.filename().string()}, {"source", source}});
  };

  std::vector<std::string> names;
  for (const auto& entry : collision_names()) names.push_back(entry.name);
  const size_t group = 12;
  for (size_t i = 0; i < names.size() && !options.random_only; i += group) {
    std::vector<std::string> part(names.begin() + static_cast<long>(i),
                                  names.begin() + static_cast<long>(std::min(names.size(), i + group)));
    write(fmt::format("dictionary-{:02}", i / group), dictionary_scenario(part, options.world_size, options.seed),
          "dictionary");
  }
  if (!options.random_only) {
    write("seed-bug", seed_scenario(options.world_size), "seed");
    write("zero-size-param", zero_size_scenario(options.world_size, options.seed), "zero-size");
  }
  GeneratorOptions generator;
  generator.fixed_world = options.world_size;
  const auto gen = gen_scenario(generator);
  for (int64_t i = options.first; i < options.first + options.cases; ++i)
    write(fmt::format("random-{:04}", i),
          gen(rc::Random(options.seed * 7777ULL + static_cast<uint64_t>(i)), static_cast<int>(20 + i % 60)).value(),
          "random");

  // Coverage, read back from what was written: names on modules and on parameters, and the
  // repeated initialize forms (an initialize while an earlier one is in force, by optimizer).
  std::set<std::string> on_modules, on_params;
  int64_t repeated_same = 0, repeated_fresh = 0;
  for (const auto& entry : entries) {
    std::ifstream in(fs::path(options.out_dir) / entry["file"].get<std::string>(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const Scenario s = parse_scenario(text.str());  // the one reader, as the replays will read it
    for (const auto& n : s.tree) {
      for (const auto& a : n.attrs) on_modules.insert(a.name);
      for (const auto& [param, attrs] : n.param_attrs)
        for (const auto& a : attrs) on_params.insert(a.name);
    }
    bool initialized = false;
    for (const auto& o : s.ops) {
      if (o.kind != OpKind::initialize) continue;
      if (initialized) (o.optimizer == "same" ? repeated_same : repeated_fresh)++;
      initialized = true;
    }
  }
  std::vector<std::string> missing_modules, missing_params;
  for (const auto& n : names) {
    if (!on_modules.count(n)) missing_modules.push_back(n);
    if (!on_params.count(n)) missing_params.push_back(n);
  }
  nlohmann::json manifest{
      {"format", "zerocheck-export/1"},
      {"world_size", options.world_size},
      {"seed", options.seed},
      {"scenarios", entries},
      {"coverage",
       {{"dictionary_names", names.size()},
        {"names_on_modules_missing", missing_modules},
        {"names_on_parameters_missing", missing_params},
        {"repeated_initialize_same_optimizer", repeated_same},
        {"repeated_initialize_fresh_optimizer", repeated_fresh}}}};
  std::ofstream(fs::path(options.out_dir) / "manifest.json") << manifest.dump(2) << "\n";
  return manifest;
}

}  // namespace zerocheck
