#include "engine/testing/models.h"

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/layers.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace zerocheck {
namespace {

using zero3::Module;

template <class M, class... Args>
std::shared_ptr<Module> make(Args&&... args) {
  return std::make_shared<M>(std::forward<Args>(args)...);
}

std::shared_ptr<Module> build_mlp(uint64_t seed) {
  auto root = std::make_shared<zero3::Sequential>();
  root->push_back(make<zero3::Linear>(16, 32));
  root->push_back(make<zero3::Tanh>());
  root->push_back(make<zero3::Linear>(32, 32));
  root->push_back(make<zero3::Tanh>());
  root->push_back(make<zero3::Linear>(32, 8));
  zero3::init_parameters(*root, seed);
  return root;
}

std::shared_ptr<Module> build_odd(uint64_t seed) {
  auto root = std::make_shared<zero3::Sequential>();
  root->push_back(make<zero3::Linear>(7, 15));
  root->push_back(make<zero3::Tanh>());
  root->push_back(make<zero3::Offset>(std::vector<int64_t>{13}));
  root->push_back(make<zero3::Offset>(std::vector<int64_t>{1}));
  root->push_back(make<zero3::Offset>(std::vector<int64_t>{0}));
  auto tied = make<zero3::Linear>(15, 15);
  root->push_back(tied);
  root->push_back(make<zero3::Tanh>());
  root->push_back(tied);
  root->push_back(make<zero3::LayerNorm>(15));
  root->push_back(make<zero3::Linear>(15, 3));
  zero3::init_parameters(*root, seed);
  return root;
}

// Expert ids chosen so that `id mod N` differs from the engine's module numbering.
constexpr int64_t kExpertIds[] = {2, 0, 3, 1};

std::shared_ptr<Module> build_moe(uint64_t seed) {
  auto root = std::make_shared<zero3::Sequential>();
  root->push_back(make<zero3::Linear>(8, 8));
  root->push_back(make<zero3::Tanh>());
  std::vector<std::shared_ptr<Module>> experts;
  for (int i = 0; i < 4; ++i) {
    experts.push_back(make<zero3::Expert>(8, 8));
    experts.back()->attrs().set("id", kExpertIds[i]);
  }
  root->push_back(std::make_shared<zero3::MoE>(std::move(experts)));
  root->push_back(make<zero3::Linear>(8, 4));
  zero3::init_parameters(*root, seed);
  return root;
}

std::shared_ptr<Module> build_seed(uint64_t seed) {
  auto root = std::make_shared<zero3::Sequential>();
  auto list = std::make_shared<zero3::ModuleList>();
  for (int i = 0; i < 60; ++i) {
    auto expert = std::make_shared<zero3::Expert>(128, 128);
    expert->attrs().set("id", int64_t{i});
    list->push_back(expert);
  }
  root->push_back(list);
  zero3::init_parameters(*root, seed);
  return root;
}

// Frozen parameters where they change the schedule, and a zero-size one.
std::shared_ptr<Module> build_frozen(uint64_t seed) {
  auto root = std::make_shared<zero3::Sequential>();
  auto frozen_input = make<zero3::Linear>(8, 8);
  auto frozen_inner = make<zero3::Linear>(16, 16);
  root->push_back(frozen_input);
  root->push_back(make<zero3::Linear>(8, 16));
  root->push_back(make<zero3::Tanh>());
  root->push_back(frozen_inner);
  root->push_back(make<zero3::Offset>(std::vector<int64_t>{0}));
  root->push_back(make<zero3::Linear>(16, 4));
  zero3::init_parameters(*root, seed);
  for (auto* frozen : {frozen_input.get(), frozen_inner.get()})
    for (auto& p : frozen->parameters()) p.requires_grad_(false);
  return root;
}

}  // namespace

ModelSpec model_spec(const std::string& name) {
  auto no_route = [](int64_t, int) { return zero3::Route(); };
  zero3::PlacementSpec by_id;
  by_id.kind = zero3::PlacementSpec::Kind::attr_mod;
  by_id.attr = "id";
  if (name == "mlp") return {name, 16, 8, build_mlp, no_route, {}};
  if (name == "odd") return {name, 7, 3, build_odd, no_route, {}};
  if (name == "moe")
    return {name, 8, 4, build_moe, [](int64_t step, int) { return zero3::Route({step % 4}); }, {}};
  if (name == "moe-placed")
    return {name, 8, 4, build_moe,
            [](int64_t step, int rank) { return zero3::Route({(step + rank) % 4}); }, by_id};
  if (name == "seed") return {name, 128, 128, build_seed, no_route, by_id};
  if (name == "frozen") return {name, 8, 4, build_frozen, no_route, {}};
  throw zero3::UsageError("unknown model '" + name + "' (expected one of: " + model_names() + ")");
}

std::string model_names() { return "mlp, odd, moe, moe-placed, seed, frozen"; }

double train_step(zero3::Engine& engine, const ModelSpec& spec, uint64_t seed, int64_t step, int rank) {
  const Batch batch = make_batch(spec, seed, step, rank, 4);
  at::Tensor loss = training_loss(engine.forward(batch.input, spec.route(step, rank)), batch.target);
  engine.backward(loss);
  engine.step();
  engine.zero_grad();
  return loss.item<double>();
}

Batch make_batch(const ModelSpec& spec, uint64_t seed, int64_t step, int rank, int64_t batch_size) {
  at::Generator generator =
      at::detail::createCPUGenerator(seed * 1000003ULL + static_cast<uint64_t>(step) * 1009ULL +
                                     static_cast<uint64_t>(rank) + 17);
  Batch batch;
  batch.input = at::empty({batch_size, spec.in_features}).uniform_(-1.0, 1.0, generator);
  batch.target = at::empty({batch_size, spec.out_features}).uniform_(-1.0, 1.0, generator);
  return batch;
}

std::vector<std::shared_ptr<zero3::Module>> seed_experts(const zero3::Module& seed_model) {
  auto children = seed_model.named_zero3_children();
  if (children.size() != 1 || children[0].second->kind() != "ModuleList")
    throw zero3::UsageError("not the seed model: its root must hold one ModuleList");
  std::vector<std::shared_ptr<zero3::Module>> experts;
  for (auto& [name, expert] : children[0].second->named_zero3_children()) experts.push_back(expert);
  return experts;
}

}  // namespace zerocheck
