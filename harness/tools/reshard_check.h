// The reshard check shared by the case table (harness/tests/reshard_test.cc) and the rapidcheck
// property (properties/reshard_properties_test.cc): train at N, save, load at M, train on, and
// compare with the dense twin trained on the same batches. Two `zerocheck train` runs
// (harness/tools/train.h), the second resuming the first's checkpoint: every oracle after every
// operation of both, on the engine ZEROCHECK_FAULT names.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace zerocheck {

struct ReshardCase {
  std::string model;      // a zerocheck::model_spec name
  int from = 1;           // world size that trains and saves
  int to = 1;             // world size that loads and trains on
  std::string optimizer;  // "adam" or "sgd"
  int64_t persistence_threshold = 0;
  int64_t steps_before = 2;
  int64_t steps_after = 2;
};

std::string describe(const ReshardCase& c);
// Returns "<model>_<optimizer>_<from>_to_<to>[_persist<t>]" (a GoogleTest-safe name).
std::string test_name(const ReshardCase& c);
inline void PrintTo(const ReshardCase& c, std::ostream* out) { *out << describe(c); }

// Returns every difference from the dense twin ("rank 1 step 3: loss 0.52 differs from the
// dense twin's 0.51", "'3.weight' differ from the dense twin by 1e-7"); empty when the resumed
// training is bit-identical. The model that loads starts from other initial values than the
// one that saved, so a parameter the load missed shows. Throws what the world throws.
std::vector<std::string> reshard_problems(const ReshardCase& c);

}  // namespace zerocheck
