// The checkpoint operations of one rank's interpreter (internal/checkpoints.h).
#include "harness/interpreter/internal/checkpoints.h"

#include "engine/optimizer_rebuild.h"
#include "engine/testing/training.h"
#include "harness/interpreter/internal/checks.h"
#include "harness/world/failure_text.h"

#include <fmt/format.h>

#include <limits>
#include <utility>

namespace zerocheck::interpreter {
namespace {

// A cheap, exact summary of the engine optimizer's state: every state tensor, in parameter
// order, concatenated.
at::Tensor optimizer_state_fingerprint(RankState& state) {
  const NotChargedToTheRank harness;
  std::vector<at::Tensor> parts;
  for (const auto& p : state.engine->params()) {
    at::Tensor snapshot = zero3::state_tensors_of(state.engine->optimizer(), p.master);
    if (snapshot.defined()) parts.push_back(snapshot);
  }
  return parts.empty() ? at::zeros({0}) : at::cat(parts);
}

// A world of `m` ranks, threads of this process, loads the checkpoint: the model built afresh
// (other initial values are overwritten by the load), the same target initialized with a new
// optimizer of the workload's kind. Its rank 0 puts what it holds whole in `there`.
// Throws what that world throws.
void load_in_world_of(RankState& state, int m, const std::string& tag, std::vector<oracles::WholeParam>& there) {
  zero3::Config config = state.workload.config;
  // The batch per step is the new world's: micro batch * accumulation * its ranks.
  if (config.train_batch_size != 0)
    config.train_batch_size = config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps * m;
  WorldOptions threads;
  threads.timeout = state.options.world.timeout;
  // Threads of this process whatever this world is made of: the side world is this rank's own
  // (a fiber's small stack gets a thread of its own: thread_world.cc).
  make_world(m, threads)->run([&](zero3::Comm& comm) {
    const std::shared_ptr<zero3::Module> model = modules_by_path(state.workload.build()).at(state.engine_target);
    auto optimizer = state.workload.optimizer(trainable_parameters(*model));
    auto engine = zero3::initialize(model, *optimizer, config, comm, engine_options(state));
    engine->load_checkpoint_tagged(state.dir, tag);
    const NotChargedToTheRank harness;
    auto whole = oracles::gather_whole_state(*engine);
    if (comm.rank() == 0) there = std::move(whole);
  });
}

// Rank 0 loads the checkpoint into a second world of `m` ranks, as a user resuming on another
// cluster would. What that world holds whole must equal `here` (I6).
OpOutcome load_in_side_world(RankState& state, int m, const std::string& tag,
                             const std::vector<oracles::WholeParam>& here) {
  OpOutcome outcome;
  outcome.side_world = m;
  const std::shared_ptr<zero3::Module> fresh = modules_by_path(state.workload.build()).at(state.engine_target);
  const int64_t threshold = state.workload.config.zero_optimization.stage3_param_persistence_threshold;
  if (std::holds_alternative<model::PlacementRefusal>(
          model::expect(fresh, state.workload.config.placement, threshold, m))) {
    outcome.detail = fmt::format("ok; a world of {} cannot place the experts as the policy says, so it was not made", m);
    return outcome;
  }
  std::vector<oracles::WholeParam> there;
  std::string failure;
  try {
    load_in_world_of(state, m, tag, there);
  } catch (const std::exception& e) {
    failure = failure_text(e);
  }
  if (!failure.empty())
    require(state, oracles::violation("I6", state.engine_target, "", fmt::format("a world of {} loads the checkpoint", m),
                                      failure, fmt::format("the checkpoint of {} ranks does not load into {}",
                                                           state.comm.world_size(), m)));
  require(state, oracles::resharded(here, there, state.comm.world_size(), m, state.engine_target));
  outcome.side_world_made = failure.empty();
  outcome.detail = fmt::format("ok; a world of {} loaded it too and holds the same", m);
  return outcome;
}

// A load with op.world_size: this world now holds exactly what it saved (I6), so what it holds
// whole is what any world must hold after loading the same checkpoint; rank 0 loads it there.
OpOutcome load_in_world_size(RankState& state, const Op& op, const std::string& tag, const model::LoadEffect& effect,
                             const std::string& what) {
  // A second world starts with a fresh optimizer: it could keep no state of its own, so only a
  // load that restores everything is resumed there.
  if (!effect.optimizer_state || !effect.step_counters)
    return applied(what + fmt::format("; no world of {} made (a partial load resumes nothing)", op.world_size));
  std::vector<oracles::WholeParam> here;
  {
    const NotChargedToTheRank harness;
    here = oracles::gather_whole_state(*state.engine);
  }
  if (state.comm.rank() != 0) {
    OpOutcome outcome = applied(what + fmt::format("; rank 0 loads it into a world of {} too", op.world_size));
    outcome.side_world = op.world_size;
    return outcome;
  }
  return load_in_side_world(state, op.world_size, tag, here);
}

}  // namespace

OpOutcome save(RankState& state, const Op& op) {
  if (!state.engine) return skipped("no live engine");
  // An untagged save writes DeepSpeed's default tag, from the model's count of step() calls.
  const std::string tag =
      op.tag ? *op.tag : model::default_tag(state.micro_steps, state.workload.config.gradient_accumulation_steps);
  state.engine->save_checkpoint_tagged(state.dir, tag);
  state.latest_tag = tag;
  SavedCheckpoint& saved = state.saved[tag];
  saved.target = state.engine_target;
  saved.micro_steps = state.micro_steps;
  {
    const NotChargedToTheRank harness;
    saved.masters.clear();
    for (const auto& p : state.observe()) saved.masters.push_back(p.master.detach().clone());
    saved.optimizer_state = optimizer_state_fingerprint(state);
  }
  if (state.twin) {
    TwinCall call(TwinCall::Kind::save);
    call.tag = tag;
    state.twin_call(std::move(call));
  }
  if (state.twin && state.enabled("I6")) require(state, check_consolidated(state).violation);
  return applied(fmt::format("ok; tag '{}'", tag));
}

OpOutcome load(RankState& state, const Op& op) {
  if (!state.engine) return skipped("no live engine");
  if (!op.tag && !state.latest_tag) return skipped("no checkpoint saved");
  const std::string tag = op.tag ? *op.tag : *state.latest_tag;
  const auto saved = state.saved.find(tag);
  if (saved == state.saved.end()) return skipped(fmt::format("no checkpoint saved under tag '{}'", tag));
  if (saved->second.target != state.engine_target)
    return skipped(fmt::format("the checkpoint of tag '{}' is of another model", tag));
  state.pending = at::Tensor();  // as with step: the graph would be stale
  const model::LoadEffect effect = model::load_effect(op.optimizer_states, op.module_only);
  // Per the option matrix: the parameters and masters are the checkpoint's; the optimizer state
  // and the step counter the checkpoint's or as they are now.
  const at::Tensor state_expected =
      effect.optimizer_state ? saved->second.optimizer_state : optimizer_state_fingerprint(state);
  const int64_t steps_expected = effect.step_counters ? saved->second.micro_steps : state.micro_steps;
  state.engine->load_checkpoint_tagged(state.dir, op.tag.value_or(""),
                                       zero3::LoadOptions{op.optimizer_states, op.module_only});
  require(state, oracles::round_trip(saved->second.masters, state_expected, state.observe(),
                                     optimizer_state_fingerprint(state), state.engine_target));
  require(state, oracles::step_counter(steps_expected, state.engine->micro_steps(), state.engine_target));
  state.micro_steps = steps_expected;
  if (state.twin) {
    TwinCall call(TwinCall::Kind::load);
    call.tag = tag;
    call.effect = effect;
    state.twin_call(std::move(call));
  }
  const std::string what = fmt::format("ok; tag '{}'{}", tag,
                                       op.module_only           ? ", module only"
                                       : !op.optimizer_states ? ", without optimizer states"
                                                              : "");
  if (op.world_size == 0) return applied(what);
  return load_in_world_size(state, op, tag, effect, what);
}

RankInterpreter::Consolidated check_consolidated(RankState& state) {
  RankInterpreter::Consolidated out;
  if (!state.engine) return out;
  auto consolidated = state.engine->consolidated_state_dict();
  if (state.comm.rank() != 0 || !state.twin) return out;
  const NotChargedToTheRank harness;
  state.twin->read([&](const model::DenseTwin& twin) {
    out.violation = oracles::consolidated(*state.expectation, consolidated, twin, state.engine_target);
    for (const auto& [key, tensor] : consolidated) {
      const model::ExpectedParam* expected = state.expectation->find_state_dict_key(key);
      const at::Tensor dense = expected ? twin.param(expected->path) : at::Tensor();
      out.max_abs_difference[key] =
          dense.defined() ? oracles::max_abs_difference(tensor, dense) : std::numeric_limits<double>::infinity();
    }
    return 0;
  });
  if (out.violation) {
    out.violation->op_index = state.index;
    out.violation->rank = state.comm.rank();
  }
  return out;
}

}  // namespace zerocheck::interpreter
