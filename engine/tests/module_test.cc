// zero3::Module keeps its children and parameters as they are registered, so walks need not copy
// LibTorch's dictionaries. What those lists say must be what LibTorch's own say.
#include <gtest/gtest.h>

#include "engine/layers.h"
#include "engine/module.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace zero3 {
namespace {

std::vector<const c10::TensorImpl*> impls(const std::vector<at::Tensor>& tensors) {
  std::vector<const c10::TensorImpl*> out;
  for (const auto& t : tensors) out.push_back(t.unsafeGetTensorImpl());
  return out;
}

// LibTorch's parameters() with repeats dropped: what unique_parameters promises.
std::vector<const c10::TensorImpl*> libtorch_unique(const torch::nn::Module& root) {
  std::vector<const c10::TensorImpl*> out;
  for (const auto& p : root.parameters(/*recurse=*/true))
    if (std::find(out.begin(), out.end(), p.unsafeGetTensorImpl()) == out.end()) out.push_back(p.unsafeGetTensorImpl());
  return out;
}

// A tree with a tied child (listed twice), an MoE, an Offset and a layer without bias.
std::shared_ptr<Sequential> tree() {
  auto root = std::make_shared<Sequential>();
  auto tied = std::make_shared<Linear>(3, 3);
  root->push_back(std::make_shared<LayerNorm>(3));
  root->push_back(tied);
  root->push_back(std::make_shared<MoE>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<Expert>(3, 3), std::make_shared<Expert>(3, 3)}));
  root->push_back(tied);
  root->push_back(std::make_shared<Offset>(std::vector<int64_t>{2, 2}));
  root->push_back(std::make_shared<Linear>(3, 3, /*with_bias=*/false));
  return root;
}

TEST(Module, KeptListsSayWhatLibTorchsSay) {
  const auto root = tree();
  for (const auto& entry : unique_modules(root)) {
    const Module& m = *entry.module;
    const auto theirs = m.named_parameters(/*recurse=*/false);
    ASSERT_EQ(m.own_parameters().size(), theirs.size()) << entry.path;
    for (size_t i = 0; i < theirs.size(); ++i) {
      EXPECT_EQ(m.own_parameters()[i].first, theirs[i].key()) << entry.path;
      EXPECT_TRUE(m.own_parameters()[i].second.is_same(theirs[i].value())) << entry.path;
    }
    const auto children = m.named_children();
    ASSERT_EQ(m.named_zero3_children().size(), children.size()) << entry.path;
    for (size_t i = 0; i < children.size(); ++i) {
      EXPECT_EQ(m.named_zero3_children()[i].first, children[i].key()) << entry.path;
      EXPECT_EQ(m.named_zero3_children()[i].second.get(), children[i].value().get()) << entry.path;
    }
    EXPECT_FALSE(m.has_foreign_children());
  }
  EXPECT_EQ(impls(unique_parameters(*root)), libtorch_unique(*root));
  EXPECT_EQ(unique_parameters(*root).size(), 2u + 2u + 2u * 2u + 1u + 1u);  // the tied Linear once
}

// A child that is not a zero3::Module is not in the kept lists: its parameters come from LibTorch's walk.
class WithForeignChild : public Module {
 public:
  WithForeignChild() : Module("WithForeignChild") {
    scale = register_parameter("scale", at::ones({3}));
    foreign = register_module("foreign", torch::nn::Linear(3, 3).ptr());
  }
  at::Tensor scale;
  std::shared_ptr<torch::nn::LinearImpl> foreign;

 protected:
  at::Tensor forward(const at::Tensor& input, Route&) override { return foreign->forward(input) * scale; }
};

TEST(Module, AForeignChildsParametersAreStillListed) {
  auto root = std::make_shared<Sequential>();
  root->push_back(std::make_shared<WithForeignChild>());
  const auto& child = *root->named_zero3_children().at(0).second;
  EXPECT_TRUE(child.has_foreign_children());
  EXPECT_TRUE(child.named_zero3_children().empty());
  EXPECT_EQ(impls(unique_parameters(*root)), libtorch_unique(*root));
  EXPECT_EQ(unique_parameters(*root).size(), 3u);  // scale, foreign.weight, foreign.bias
}

}  // namespace
}  // namespace zero3
