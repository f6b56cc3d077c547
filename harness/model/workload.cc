// A scenario as a workload: the tree it builds, the data batch_of feeds, the routes its forward
// operations name, its optimizer and its config with its placement policy.
#include "harness/model/model.h"

namespace zerocheck::model {

Workload workload_of(const Scenario& scenario) {
  Workload w;
  const Scenario* s = &scenario;
  // "construct": "zero_init" builds eagerly here too: our engine partitions at initialize, never
  // while modules are constructed (it has no zero.Init), so both constructions give the engine
  // the same model and every invariant the same expectation. Only the upstream replay builds
  // under deepspeed.zero.Init.
  w.build = [s] { return build_tree(*s); };
  w.batch = [s](int64_t index, int rank) { return batch_of(*s, index, rank); };
  w.route = [](int64_t, int, const Op& op) { return route_of(op); };  // every rank takes the op's route
  w.optimizer = [s](std::vector<at::Tensor> params) { return make_optimizer(*s, std::move(params)); };
  w.optimizer_states = scenario.optimizer == "sgd" ? 1 : 2;
  w.config = scenario.config;
  w.config.placement = scenario.placement;  // handed over as the user would
  w.precision = precision_of(scenario.overflow_protection);
  // fp16 always checks for overflow (precision_in_effect turns it on in the engine; written here
  // too, so that the interpreter's I11 and the traffic model see it), and its scaler comes from
  // the config's fp16 section. As with overflow_protection, a scenario keeps the floor instead of
  // DeepSpeed's exception at the minimum scale, so it runs to its end (a code option, not a key).
  if (scenario.config.precision.fp16_enabled.value_or(false)) {
    w.precision.check_overflow = true;
    w.precision.scaler.raise_at_min_scale = false;
  }
  return w;
}

zero3::PrecisionOptions precision_of(const std::optional<OverflowProtection>& protection) {
  zero3::PrecisionOptions out;
  if (!protection) return out;
  out.check_overflow = true;
  zero3::LossScalerOptions& scaler = out.scaler;
  scaler.loss_scale = protection->loss_scale;
  scaler.initial_scale_power = static_cast<int>(protection->initial_scale_power);
  scaler.loss_scale_window = static_cast<int64_t>(protection->loss_scale_window);
  scaler.hysteresis = static_cast<int>(protection->hysteresis);
  scaler.min_loss_scale = protection->min_loss_scale;
  // A scenario keeps the floor instead of ending in DeepSpeed's exception at the minimum scale,
  // so every scenario runs to its end (SCENARIO_FORMAT.md).
  scaler.raise_at_min_scale = false;
  return out;
}

}  // namespace zerocheck::model
