// The one interpreter: runs a Scenario on a world of ranks and checks invariants I1..I7 of
// shared/DESIGN.md after every operation. Properties, fuzzers, `zerocheck check/replay` and
// the mutants matrix all run scenarios through here.
//
//   I1 user attributes equal the user's last write on every module and parameter;
//   I2 every placed module lives whole on exactly the owner the policy gives from the user's
//      attributes at initialize, measured from residency;
//   I3 losses and parameters (shards, padding included) equal a dense twin trained on the
//      same data, bit for bit;
//   I4 outside forward/backward no partitioned parameter holds full data or a full gradient;
//   I5 a repeated initialize is refused with AlreadyInitialized and changes nothing;
//   I6 save then load restores shards and optimizer state bit-exactly, and a consolidated state
//      dict equals the gathered parameters;
//   I7 no unexpected error: every error the engine raises is one the model predicted.
//
// All ranks agree after every operation on whether and where an invariant broke (the lowest
// rank's finding wins), so a replay reports the same violation every time.
#pragma once

#include "engine/faults.h"
#include "engine/comm.h"
#include "harness/scenario.h"
#include "harness/verdict.h"
#include "harness/world.h"

#include <chrono>
#include <memory>
#include <string>

namespace zerocheck {

struct RunOptions {
  zero3::Fault fault = zero3::Fault::none;
  CommKind comm = CommKind::local;
  std::chrono::milliseconds timeout{30000};
  // false skips the sweeps after every operation (I1 attributes, I4 memory, I2 placement, I3
  // parity); the checks an operation makes itself (I5, I6, I7) stay. Only `zerocheck bench`
  // turns them off, to measure what they cost.
  bool checks_after_every_op = true;
};

// Runs `scenario` and returns what it found. Throws ScenarioError for a scenario that fails
// validation (I7 is about the engine, not about the harness's input).
Verdict run_scenario(const Scenario& scenario, const RunOptions& options);

class ScenarioRunner;

// One rank's interpreter, usable step by step (the stateful property drives it directly).
class RankInterpreter {
 public:
  RankInterpreter(const Scenario& scenario, zero3::Comm& comm, const RunOptions& options,
                  const std::string& checkpoint_dir);
  ~RankInterpreter();

  // Applies operation `index` and checks the invariants. Returns the history line.
  // Throws ViolationFound when an invariant broke; other exceptions are unexpected (I7).
  std::string apply(int64_t index, const Op& op);

 private:
  std::unique_ptr<ScenarioRunner> impl_;
};

}  // namespace zerocheck
