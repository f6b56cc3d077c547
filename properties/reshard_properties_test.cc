// The reshard property: for any model of the train set, optimizer, persistence threshold and
// world sizes N, M in 1..8, training K steps at N, saving, loading at M and training on is
// bit-identical to the dense twin (harness/tools/reshard_check.h). The case table in
// harness/tests/reshard_test.cc pins the pairs CI must always see; this explores the rest.
#include <gtest/gtest.h>

#include "harness/tools/reshard_check.h"

#include <string>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

namespace zerocheck {
namespace {

RC_GTEST_PROP(ReshardProperty, ResumedTrainingAtAnyWorldSizeEqualsTheDenseTwin, ()) {
  ReshardCase c;
  c.model = *rc::gen::element(std::string("mlp"), std::string("odd"), std::string("frozen"), std::string("moe"),
                              std::string("moe-placed"));
  // element(), not inRange(): inRange scales with rapidcheck's size, which keeps early cases at 1.
  c.from = *rc::gen::element(1, 2, 3, 4, 5, 6, 7, 8);
  c.to = *rc::gen::element(1, 2, 3, 4, 5, 6, 7, 8);
  c.optimizer = *rc::gen::element(std::string("adam"), std::string("sgd"));
  c.persistence_threshold = *rc::gen::element(int64_t{0}, int64_t{0}, int64_t{20});
  c.steps_before = *rc::gen::inRange<int64_t>(1, 3);
  c.steps_after = *rc::gen::inRange<int64_t>(1, 3);
  RC_TAG(c.model, c.optimizer, std::to_string(c.from) + " -> " + std::to_string(c.to));
  const auto problems = reshard_problems(c);
  for (const auto& p : problems) RC_LOG() << p << "\n";
  RC_ASSERT(problems.empty());
}

}  // namespace
}  // namespace zerocheck
