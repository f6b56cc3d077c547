// What initialize must do, from the scenario and the world size: owners from the user's
// attributes by the rules of engine/placement.h written out again here, persistence from the
// threshold, shard sizes from ceil(n/N). The engine's own policy and layout code is not called.
#include "harness/model/model.h"

#include "engine/errors.h"

#include <ATen/ATen.h>

#include <functional>
#include <unordered_set>

namespace zerocheck::model {
namespace {

std::string join(const std::string& path, const std::string& name) { return path.empty() ? name : path + "." + name; }
std::string where(const std::string& path) { return path.empty() ? "<root>" : path; }

// The owner the policy gives the module itself (before inheritance), or -1; or a refusal.
std::variant<int, PlacementRefusal> decide(const zero3::PlacementSpec& spec, const std::string& path,
                                           const zero3::Module& module, int world) {
  using Kind = zero3::PlacementSpec::Kind;
  if (spec.kind == Kind::attr_mod) {
    if (module.kind() != "Expert") return -1;
    const zero3::AttrDict& attrs = module.attrs();
    if (!attrs.has(spec.attr)) return PlacementRefusal{where(path) + ": expert without '" + spec.attr + "'"};
    const auto* value = std::get_if<int64_t>(&attrs.get(spec.attr).storage());
    if (value == nullptr) return PlacementRefusal{where(path) + ": '" + spec.attr + "' is not an integer"};
    return owner_by_attr_mod(*value, world);
  }
  if (spec.kind == Kind::map) {
    auto it = spec.owners.find(path);
    if (it == spec.owners.end()) return -1;
    if (it->second < 0 || it->second >= world)
      return PlacementRefusal{where(path) + ": rank " + std::to_string(it->second) + " is outside the world"};
    return static_cast<int>(it->second);
  }
  return -1;
}

}  // namespace

int owner_by_attr_mod(int64_t value, int world_size) {
  const int64_t mod = value % world_size;
  return static_cast<int>(mod < 0 ? mod + world_size : mod);  // Python's %: never negative
}

int64_t chunk_of(int64_t numel, int world_size) { return (numel + world_size - 1) / world_size; }

at::Tensor expected_shard(const at::Tensor& full, int world_size, int rank) {
  const int64_t c = chunk_of(full.numel(), world_size);
  at::Tensor padded = at::zeros({c * world_size}, full.options());
  if (full.numel() > 0) padded.narrow(0, 0, full.numel()).copy_(full.reshape({-1}));
  return padded.narrow(0, rank * c, c).clone();
}

const ExpectedParam* Expectation::find(const std::string& path) const {
  for (const auto& p : params)
    if (p.path == path) return &p;
  return nullptr;
}

const ExpectedParam* Expectation::find_state_dict_key(const std::string& key) const {
  for (const auto& p : params)
    if (p.state_dict_keys.count(key)) return &p;
  return nullptr;
}

std::vector<const ExpectedParam*> Expectation::own_params(const std::string& module_path) const {
  std::vector<const ExpectedParam*> out;
  for (const auto& p : params)
    if (p.module_paths.count(module_path)) out.push_back(&p);
  return out;
}

std::variant<Expectation, PlacementRefusal> expect(const std::shared_ptr<zero3::Module>& target,
                                                   const zero3::PlacementSpec& spec, int64_t threshold,
                                                   int world_size) {
  Expectation out;
  // Owners: pre-order; a placed module takes its whole subtree; a module reachable on several
  // paths is decided where it first appears.
  std::unordered_map<const zero3::Module*, int> owner_of;
  std::optional<PlacementRefusal> refusal;
  std::function<void(const std::string&, const std::shared_ptr<zero3::Module>&, int)> visit =
      [&](const std::string& path, const std::shared_ptr<zero3::Module>& module, int inherited) {
        if (refusal || owner_of.count(module.get())) return;
        int owner = inherited;
        if (owner < 0) {
          auto decided = decide(spec, path, *module, world_size);
          if (auto* r = std::get_if<PlacementRefusal>(&decided)) {
            refusal = *r;
            return;
          }
          owner = std::get<int>(decided);
          if (owner >= 0)  // routes do not travel with inputs: a placed MoE could not choose
            for (const auto& inner : zero3::unique_modules(module))
              if (inner.module->kind() == "MoE") {
                refusal = PlacementRefusal{where(path) + ": placed module contains an MoE"};
                return;
              }
        }
        owner_of[module.get()] = owner;
        for (const auto& [name, child] : module->named_zero3_children()) visit(join(path, name), child, owner);
      };
  visit("", target, -1);
  if (refusal) return *refusal;

  std::unordered_map<const c10::TensorImpl*, size_t> index_of;
  for (const auto& [path, module] : zero3::unique_modules(target)) {
    const int owner = owner_of.at(module.get());
    out.module_owner[path] = owner;
    for (const auto& item : module->own_parameters()) {
      const at::Tensor& t = item.second;
      auto [it, fresh] = index_of.emplace(t.unsafeGetTensorImpl(), out.params.size());
      if (fresh) {
        ExpectedParam p;
        p.path = join(path, item.first);
        p.module_path = path;
        p.shape = t.sizes().vec();
        p.numel = t.numel();
        p.trainable = t.requires_grad();
        p.owner = owner;
        p.persistent = owner < 0 && p.numel <= threshold;
        p.chunk = chunk_of(p.numel, world_size);
        out.params.push_back(std::move(p));
      }
      out.params[it->second].module_paths.insert(path);
    }
  }
  // Children come after their parent in a scenario's tree, so this walk ends.
  std::function<void(const std::string&, const zero3::Module&)> list_keys = [&](const std::string& path,
                                                                               const zero3::Module& module) {
    for (const auto& [name, tensor] : module.own_parameters())
      out.params[index_of.at(tensor.unsafeGetTensorImpl())].state_dict_keys.insert(join(path, name));
    for (const auto& [name, child] : module.named_zero3_children()) list_keys(join(path, name), *child);
  };
  list_keys("", *target);
  return out;
}

std::optional<std::string> predict_initialize(const InitializeFacts& facts) {
  using zero3::kind_name;
  if (facts.engine_live && (facts.overlaps_live_engine || facts.optimizer_held_by_live_engine))
    return kind_name<zero3::AlreadyInitialized>();
  if (!facts.placement_evaluates) return kind_name<zero3::PlacementError>();
  if (!facts.optimizer_covers_target) return kind_name<zero3::OptimizerMismatch>();
  if (!facts.config_valid) return kind_name<zero3::ConfigError>();
  return std::nullopt;
}

bool is_predicted_refusal(const std::string& kind) {
  using zero3::kind_name;
  for (const char* refusal : {kind_name<zero3::AlreadyInitialized>(), kind_name<zero3::ConfigError>(),
                              kind_name<zero3::PlacementError>(), kind_name<zero3::OptimizerMismatch>()})
    if (kind == refusal) return true;
  return false;
}

}  // namespace zerocheck::model

namespace zerocheck::model {

zero3::Config config_with_error(const zero3::Config& config, schema::ConfigErrorKind error, int world_size) {
  zero3::Config bad = config;
  switch (error) {
    case schema::ConfigErrorKind::none: break;
    case schema::ConfigErrorKind::train_batch_size:
      bad.train_batch_size = config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps * world_size + 1;
      break;
    case schema::ConfigErrorKind::zero_stage: bad.zero_optimization.stage = 4; break;
    case schema::ConfigErrorKind::micro_batch:
      bad.train_micro_batch_size_per_gpu = 0;
      bad.train_batch_size = 0;  // one thing wrong: a set batch size would disagree as well
      break;
    case schema::ConfigErrorKind::offload_optimizer: bad.zero_optimization.offload_optimizer_device = "cpu"; break;
  }
  return bad;
}

}  // namespace zerocheck::model
