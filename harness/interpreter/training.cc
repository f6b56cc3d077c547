// The training operations of one rank's interpreter (internal/training.h).
#include "harness/interpreter/internal/training.h"

#include "engine/testing/training.h"
#include "harness/interpreter/internal/checks.h"
#include "harness/interpreter/internal/injections.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace zerocheck::interpreter {
namespace {

// The twin's side of a gather: the pending graph dropped, and a published edit made there too.
void gather_on_twin(RankState& state, const Op& op, const std::vector<const model::ExpectedParam*>& reached,
                    bool publish) {
  state.twin_call(TwinCall(TwinCall::Kind::drop_pending));
  if (!publish) return;
  TwinCall call(TwinCall::Kind::scale);
  for (const model::ExpectedParam* p : reached) call.paths.push_back(p->path);
  call.scale = op.scale;
  state.twin_call(std::move(call));
}

// The most gathered-parameter elements this rank's model holds at once during a forward,
// measured from the storage of the engine target's partitioned parameters (the user's tensors,
// the spec's list) each time an all-gather begins, plus what that all-gather brings: a gather
// is the only way that number grows.
class GatheredPeak {
 public:
  explicit GatheredPeak(RankState& state) : comm_(state.comm) {
    const NotChargedToTheRank harness;
    for (const auto& [path, tensor] : unique_named_parameters(state.modules.at(state.engine_target)))
      if (const model::ExpectedParam* p = state.expectation->find(path); p != nullptr && p->partitioned())
        partitioned_.push_back(tensor);
    comm_.set_all_gather_observer([this](int64_t elements) {
      int64_t held = 0;
      for (const at::Tensor& t : partitioned_)
        if (t.has_storage()) held += static_cast<int64_t>(t.storage().nbytes()) / static_cast<int64_t>(t.element_size());
      peak_ = std::max(peak_, held + elements);
    });
  }
  ~GatheredPeak() { comm_.set_all_gather_observer(nullptr); }
  GatheredPeak(const GatheredPeak&) = delete;
  GatheredPeak& operator=(const GatheredPeak&) = delete;
  int64_t measured() const { return peak_; }

 private:
  zero3::Comm& comm_;
  std::vector<at::Tensor> partitioned_;
  int64_t peak_ = 0;
};

std::string FetchKnobsText(const zero3::Config& config) {
  const auto& z = config.zero_optimization;
  return fmt::format("stage3_prefetch_bucket_size {}, stage3_max_live_parameters {}, stage3_max_reuse_distance {}",
                     z.stage3_prefetch_bucket_size, z.stage3_max_live_parameters, z.stage3_max_reuse_distance);
}

}  // namespace

OpOutcome forward(RankState& state, const Op& op) {
  if (!state.engine) return skipped("no live engine");
  Batch batch;
  const std::vector<std::optional<float>> poison = take_input_injections(state);
  {
    const NotChargedToTheRank harness;  // the data is the harness's
    batch = state.workload.batch(state.index, state.comm.rank());
    if (const auto& mine = poison.at(static_cast<size_t>(state.comm.rank()))) model::poison_input(batch, *mine);
  }
  const auto before = state.stats();
  const GatheredPeak peak(state);
  at::Tensor out = state.engine->forward(batch.input, state.workload.route(state.index, state.comm.rank(), op));
  const model::Traffic measured = model::traffic_between(before, state.stats());
  state.pending = training_loss(out, batch.target);
  const double mine = state.pending.item<double>();
  OpOutcome outcome = applied(fmt::format("loss {:.6g}", mine));
  outcome.loss = mine;
  state.deferred_traffic = MeasuredTraffic{"forward", std::nullopt, measured};
  if (state.twin) {
    TwinCall call = TwinCall::forward_of(state.workload, state.index, op, state.comm.world_size(), state.expectation,
                                         state.fetch_memory);
    call.input_poison = poison;
    TwinOutcome dense_run = state.twin_call(std::move(call));
    state.traces = std::move(dense_run.traces);
    state.dense_losses = dense_run.losses;
    outcome.twin_loss = dense_run.losses[static_cast<size_t>(state.comm.rank())];
    require(state, oracles::loss_parity(*outcome.twin_loss, mine, state.engine_target));
    state.fetch_memory = state.trace()->memory_after();
    if (state.enabled("I4"))
      require(state, oracles::gathered_peak(state.trace()->gathered_peak(), state.trace()->largest_module_fetch(),
                                            peak.measured(), FetchKnobsText(state.workload.config), state.engine_target));
    state.deferred_traffic->expected = state.trace()->forward();
  }
  return outcome;
}

OpOutcome backward(RankState& state, const Op& op) {
  if (!state.engine || !state.pending.defined()) return skipped("no forward to back-propagate");
  if (!state.pending.requires_grad()) {
    state.pending = at::Tensor();
    if (state.twin) state.twin_call(TwinCall(TwinCall::Kind::drop_pending));
    return skipped("nothing trainable");
  }
  const std::vector<model::BackwardInjection> injections = take_backward_injections(state);
  const model::BackwardInjection& mine = injections.at(static_cast<size_t>(state.comm.rank()));
  at::Tensor loss = state.pending;
  if (mine.loss) loss = loss * *mine.loss;  // the loss this backward differentiates
  const auto before = state.stats();
  {
    const GradientPoison poison(state, mine);
    state.engine->backward(loss);
  }
  const model::Traffic measured = model::traffic_between(before, state.stats());
  state.pending = at::Tensor();
  OpOutcome outcome = applied("ok");
  state.deferred_traffic = MeasuredTraffic{"backward", std::nullopt, measured};
  if (state.twin) {
    TwinCall call(TwinCall::Kind::backward);
    call.injections = injections;
    const TwinOutcome twin = state.twin_call(std::move(call));
    const std::set<std::string>& with_gradient = twin.with_gradient;
    outcome.reached.assign(with_gradient.begin(), with_gradient.end());
    if (!state.traces.empty())
      state.deferred_traffic->expected =
          state.trace()->backward(with_gradient, twin.ready_order.at(static_cast<size_t>(state.comm.rank())),
                                  state.workload.config.zero_optimization.reduce_bucket_size);
  }
  return outcome;
}

OpOutcome step(RankState& state, const Op& op) {
  if (!state.engine) return skipped("no live engine");
  // A step changes parameters in place, so a pending forward's graph is stale: PyTorch would
  // refuse to back-propagate it. The step consumes it.
  state.pending = at::Tensor();
  const auto before = state.stats();
  state.engine->step();
  ++state.micro_steps;
  const bool boundary = state.micro_steps % state.workload.config.gradient_accumulation_steps == 0;
  state.deferred_traffic =
      MeasuredTraffic{"step", model::step_traffic(state.workload.config, state.workload.precision.check_overflow,
                                                         boundary, state.comm.world_size()),
                      model::traffic_between(before, state.stats())};
  if (state.twin) state.twin_call(TwinCall(TwinCall::Kind::step));
  if (!state.workload.precision.check_overflow) return applied("ok");
  return applied(fmt::format("ok; {} skipped, loss scale {:g}, norm {:g}", state.engine->skipped_steps(),
                             state.engine->loss_scale(), state.engine->global_grad_norm()));
}

OpOutcome zero_grad(RankState& state, const Op& op) {
  if (!state.engine) return skipped("no live engine");
  const auto before = state.stats();
  state.engine->zero_grad();
  state.deferred_traffic =
      MeasuredTraffic{"zero_grad", model::Traffic{}, model::traffic_between(before, state.stats())};
  if (state.twin) state.twin_call(TwinCall(TwinCall::Kind::zero_grad));
  return applied("ok");
}

OpOutcome gather(RankState& state, const Op& op) {
  if (!state.engine) return skipped("no live engine");
  const auto found = state.modules.find(op.module);
  if (found == state.modules.end()) return skipped(fmt::format("no module '{}'", op.module));
  const Subtree& engine_subtree = *state.subtree_at(state.engine_target);
  if (!engine_subtree.modules.count(found->second.get()))
    return skipped(fmt::format("module '{}' is outside the engine's model '{}'", op.module, state.engine_target));
  const std::shared_ptr<zero3::Module>& target = engine_subtree.root;
  const std::vector<const model::ExpectedParam*> reached =
      model::gathered_params(*state.expectation, *found->second, target);
  const bool publish = op.modifier_rank.has_value();
  std::map<std::string, at::Tensor> by_path;
  for (auto& [path, tensor] : unique_named_parameters(target)) by_path.emplace(path, tensor);
  const auto before = state.stats();
  {
    zero3::GatheredParameters gathered(*state.engine, *found->second, op.modifier_rank);
    if (!publish || state.comm.rank() == *op.modifier_rank) {  // the user's edit, in place
      at::NoGradGuard no_grad;
      for (const model::ExpectedParam* p : reached) by_path.at(p->path).mul_(op.scale);
    }
    if (publish) gathered.publish_edits();
  }
  state.pending = at::Tensor();  // parameters changed in place: a pending graph is stale
  std::optional<model::Traffic> expected;
  if (state.twin) expected = model::gather_traffic(reached, publish, state.comm.world_size());
  state.deferred_traffic = MeasuredTraffic{"gather", expected, model::traffic_between(before, state.stats())};
  if (state.twin) gather_on_twin(state, op, reached, publish);
  return applied(fmt::format("ok; {} parameters gathered, {}", reached.size(),
                             publish ? fmt::format("rank {}'s edit kept", *op.modifier_rank) : "no edit kept"));
}

}  // namespace zerocheck::interpreter
