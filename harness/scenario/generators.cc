#include "harness/scenario/generators.h"

#include "harness/scenario/draw/rc_chooser.h"

#include <algorithm>

namespace zerocheck {

rc::Gen<Scenario> gen_scenario(const GeneratorOptions& options) {
  DrawLimits limits;
  limits.world = options.fixed_world;
  limits.max_ops = static_cast<size_t>(std::max(options.max_ops, 0));
  limits.max_depth = options.max_depth;
  limits.fp16 = options.fp16;
  return rc::gen::exec([limits] {
    RcChooser chooser(limits.max_ops);  // a unit is at least one operation: the budget can reach max_ops
    return draw_scenario(chooser, limits);
  });
}

}  // namespace zerocheck
