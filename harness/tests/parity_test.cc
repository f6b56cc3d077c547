// Sharded training equals dense training bit for bit, with exact accounting, for every world
// size 1..5 and models with odd shapes, tied weights, zero-size parameters and experts.
#include <gtest/gtest.h>

#include "engine/local_comm.h"
#include "engine/testing/fault_under_test.h"
#include "engine/testing/models.h"
#include "engine/testing/training.h"
#include "harness/interpreter/interpreter.h"
#include "harness/tools/train.h"
#include "harness/world/world.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <optional>
#include <unistd.h>

namespace zerocheck {
namespace {

TrainReport train(const TrainOptions& options, int world, CommKind comm = CommKind::local) {
  WorldOptions threads;
  threads.comm = comm;
  return run_training(options, *make_world(world, threads));
}

class Parity : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Parity, ShardedTrainingEqualsDenseTraining) {
  TrainOptions options;
  options.model = std::get<0>(GetParam());
  options.steps = 6;
  options.fault = fault_under_test();
  const TrainReport report = train(options, std::get<1>(GetParam()));
  for (const auto& p : report.problems) ADD_FAILURE() << p;
  ASSERT_EQ(report.losses.size(), 6u);
  for (size_t step = 0; step < report.losses.size(); ++step)  // as numbers: a NaN is no number
    EXPECT_TRUE(oracles::same_numbers(report.losses[step], report.dense_losses[step]) &&
                !std::isnan(report.losses[step]))
        << "step " << step << ": " << report.losses[step] << " vs " << report.dense_losses[step];
  EXPECT_EQ(report.max_param_abs_diff, 0.0);
  EXPECT_GT(report.expected_elements_per_step(), 0);
  EXPECT_EQ(report.elements_moved_per_step(), report.expected_elements_per_step());
  EXPECT_EQ(report.state_bytes_per_rank, report.expected_state_bytes_per_rank);
}

INSTANTIATE_TEST_SUITE_P(ModelsAndWorlds, Parity,
                         ::testing::Combine(::testing::Values("mlp", "odd", "moe", "moe-placed", "frozen"),
                                            ::testing::Values(1, 2, 3, 4, 5)),
                         [](const auto& info) {
                           std::string model = std::get<0>(info.param);
                           for (char& c : model)
                             if (c == '-') c = '_';
                           return model + "_world" + std::to_string(std::get<1>(info.param));
                         });

// A NaN on one side only is a difference: `diff > 0` and std::max used to drop it, and a run whose
// parameters had gone NaN on rank 0 passed. nan-after-step plants exactly that.
TEST(Parity, ANanOnOneSideIsCaughtAndReported) {
  TrainOptions options;
  options.model = "mlp";
  options.steps = 2;
  options.fault = zero3::Fault::nan_after_step;
  const TrainReport report = train(options, 2);
  ASSERT_FALSE(report.ok());
  bool i3 = false;
  for (const auto& p : report.problems) i3 |= p.find("I3 violated") != std::string::npos;
  EXPECT_TRUE(i3) << "no I3 violation among the problems";
  EXPECT_TRUE(std::isinf(report.max_param_abs_diff)) << report.max_param_abs_diff;
}

// Tolerance 0 rests on this construction (world.h): LibTorch 2.x splits reductions such as
// LayerNorm's weight gradient by the intra-op thread count, so the dense twin and the ranks
// must compute with the same count whichever runs first and whatever it was before.
TEST(Parity, RankThreadsAndTheDenseTwinRunKernelsOnOneThread) {
  const ModelSpec spec = model_spec("odd");
  at::set_num_threads(2);  // as a process starts on a machine with cores to spare
  model::Workload workload;
  workload.build = [&] { return spec.build(1); };
  workload.batch = [&](int64_t, int rank) { return make_batch(spec, 1, 0, rank, 4); };
  workload.route = [&](int64_t, int rank, const Op&) { return spec.route(0, rank); };
  workload.optimizer = adam_factory(1e-2);
  make_shared_twin(workload);
  EXPECT_EQ(at::get_num_threads(), 1) << "the dense twin would compute on several threads";

  at::set_num_threads(2);
  std::vector<int> per_rank(3, -1);
  make_world(3)->run([&](zero3::Comm& comm) { per_rank[comm.rank()] = at::get_num_threads(); });
  EXPECT_EQ(per_rank, std::vector<int>(3, 1)) << "a rank computed on several threads";
}

TEST(Parity, TheFormulaOfDesignHoldsWhenEveryModuleRunsOnce) {
  // mlp: 16x32+32, 32x32+32, 32x8+8 on 4 ranks; each c*N rounded up to a multiple of 4.
  TrainOptions options;
  options.model = "mlp";
  options.steps = 2;
  const TrainReport report = train(options, 4);
  const int64_t padded = 512 + 32 + 1024 + 32 + 256 + 8;
  EXPECT_EQ(report.elements_moved_per_step(), 3 * padded);
  EXPECT_EQ(report.state_bytes_per_rank.at(0), 16 * padded / 4);
}

TEST(Parity, FrozenPartitionedParametersAreGatheredAgainForBackwardButNeverReduced) {
  // frozen: Linear(8,8) frozen at the input (its output needs no gradient: no re-gather),
  // Linear(8,16), Tanh, Linear(16,16) frozen (its input needs a gradient: re-gathered), a
  // zero-size Offset, Linear(16,4). Every parameter is partitioned (threshold 0) except the
  // zero-size one, which is persistent and all-reduces nothing.
  TrainOptions options;
  options.model = "frozen";
  options.steps = 2;
  const TrainReport report = train(options, 2);
  for (const auto& p : report.problems) ADD_FAILURE() << p;
  const int64_t first = 64 + 8, trained = 128 + 16 + 64 + 4, frozen_inner = 256 + 16;  // c*N on 2 ranks
  EXPECT_EQ(report.traffic_last_step.all_gather, first + trained + frozen_inner + trained + frozen_inner);
  EXPECT_EQ(report.traffic_last_step.reduce_scatter, trained);
  // One all-gather per module fetch: the three re-gathered backward; forward, the last step's
  // has the first step's module trace, and DeepSpeed's default stage3_prefetch_bucket_size (5e7)
  // prefetches all four Linears at the root's step in one all-gather (the same elements).
  EXPECT_EQ(report.traffic_last_step.all_gathers, 1 + 3);
  EXPECT_EQ(report.traffic_last_step.all_reduce, 0);
  EXPECT_EQ(report.traffic_last_step.broadcast, 0);
  EXPECT_EQ(report.traffic_last_step.all_to_all, 0) << "an unplaced model without MoE uses no all-to-all";
  // Frozen parameters keep only their shard; trained ones add a gradient shard and Adam's two states.
  EXPECT_EQ(report.state_bytes_per_rank.at(0), 4 * (first + frozen_inner) / 2 + 16 * trained / 2);
}

TEST(Parity, GlooAndLocalCommsTrainBitIdentically) {
  TrainOptions options;
  options.model = "odd";
  options.steps = 4;
  const TrainReport local = train(options, 3);
  const TrainReport gloo = train(options, 3, CommKind::gloo);
  EXPECT_TRUE(local.ok());
  EXPECT_TRUE(gloo.ok());
  EXPECT_EQ(local.losses, gloo.losses);
  EXPECT_EQ(local.elements_moved_per_step(), gloo.elements_moved_per_step());
  EXPECT_EQ(local.state_bytes_per_rank, gloo.state_bytes_per_rank);
}

// A copy of every shard in a member nobody lists is invisible to the tensors the engine reports;
// the rank's allocations show it, after every step.
TEST(Parity, AHiddenShardCopyShowsInTheRanksAllocations) {
  TrainOptions options;
  options.model = "odd";
  options.steps = 1;
  options.fault = zero3::Fault::hidden_shard_copy;
  const TrainReport report = train(options, 2);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.state_bytes_per_rank, report.expected_state_bytes_per_rank);
}

TEST(Parity, PlantedPartitioningFaultsBreakParity) {
  // The parity check can fail: each of these faults must show up as a problem.
  for (auto fault : {zero3::Fault::wrong_gradient_divisor, zero3::Fault::shard_offset_off_by_one,
                     zero3::Fault::stale_optimizer_tensors, zero3::Fault::reduce_scatter_wrong_shard,
                     zero3::Fault::consolidated_from_rank0_shard, zero3::Fault::uninitialised_padding,
                     zero3::Fault::skip_release_after_forward}) {
    TrainOptions options;
    options.model = "odd";
    options.steps = 3;
    options.fault = fault;
    EXPECT_FALSE(train(options, 3).ok()) << zero3::fault_name(fault);
  }
}


// The ranks of a world share one dense twin (interpreter.h, SharedTwin) while their operations
// agree. A rank whose operations differ from the shared ones goes on with a twin of its own and
// sees exactly what a twin of its own from the start would have shown it; the others keep the
// shared one. Two worlds of one rank each stand in for two ranks whose calls diverge.
TEST(SharedTwin, ARankWhoseCallsDivergeSeesTheTwinItsOwnCallsImply) {
  Scenario s;
  s.world_size = 1;
  s.features = 3;
  s.batch = 2;
  NodeSpec root, linear;
  root.kind = "Sequential";
  root.children = {1, 2};
  linear.kind = "Linear";
  s.tree = {root, linear, linear};
  auto op = [](OpKind kind) {
    Op o;
    o.kind = kind;
    if (kind == OpKind::initialize) o.optimizer = "fresh";
    return o;
  };
  using Script = std::vector<std::pair<int64_t, Op>>;
  // Both agree on a training step; then one trains again and the other zeroes its gradients first.
  const Script agreeing = {{0, op(OpKind::initialize)}, {1, op(OpKind::forward)}, {2, op(OpKind::backward)},
                           {3, op(OpKind::step)},       {4, op(OpKind::forward)}, {5, op(OpKind::backward)},
                           {6, op(OpKind::step)},       {7, op(OpKind::release)}};
  const Script diverging = {{0, op(OpKind::initialize)}, {1, op(OpKind::forward)}, {2, op(OpKind::backward)},
                            {3, op(OpKind::step)},       {4, op(OpKind::zero_grad)}, {5, op(OpKind::forward)},
                            {6, op(OpKind::step)},       {7, op(OpKind::release)}};
  struct Rank {
    std::shared_ptr<zero3::LocalCommGroup> group = zero3::LocalCommGroup::create(1, zero3::CommOptions());
    std::unique_ptr<zero3::Comm> comm = group->comm_for(0);
    std::optional<RankInterpreter> interpreter;
    std::vector<std::string> history;
    std::vector<std::optional<double>> losses;
    void apply(int64_t index, const Op& op) {
      try {
        const OpOutcome outcome = interpreter->apply(index, op);
        history.push_back(outcome.to_text(index));
        losses.push_back(outcome.loss);
      } catch (const ViolationFound& v) {
        ADD_FAILURE() << v.violation.to_text();
      }
    }
  };
  const std::string dir = "/tmp/zerocheck_shared_twin_" + std::to_string(::getpid());
  const RunOptions options;
  auto alone = [&](const Script& script) {  // its own twin: what a rank must see
    Rank rank;
    rank.interpreter.emplace(s, *rank.comm, options, dir);
    for (const auto& [index, o] : script) rank.apply(index, o);
    return std::make_pair(rank.history, rank.losses);
  };
  const auto first_alone = alone(agreeing), second_alone = alone(diverging);

  const model::Workload workload = model::workload_of(s);
  const std::shared_ptr<SharedTwin> twin = make_shared_twin(workload);
  Rank first, second;
  first.interpreter.emplace(workload, *first.comm, options, dir, twin);
  second.interpreter.emplace(workload, *second.comm, options, dir, twin);
  for (size_t i = 0; i < agreeing.size(); ++i) {  // operation by operation, as a world runs
    first.apply(agreeing[i].first, agreeing[i].second);
    second.apply(diverging[i].first, diverging[i].second);
  }
  EXPECT_EQ(first.history, first_alone.first);
  EXPECT_EQ(first.losses, first_alone.second);
  EXPECT_EQ(second.history, second_alone.first);
  EXPECT_EQ(second.losses, second_alone.second);
  EXPECT_NE(first.losses, second.losses) << "the scripts should train differently";
}

}  // namespace
}  // namespace zerocheck
