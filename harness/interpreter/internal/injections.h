// The `inject` operation of one rank's interpreter (injections.cc) and where its injections are
// taken: the next forward takes a rank's input injection, the next backward its loss and
// gradient injections (SCENARIO_FORMAT.md, "Injecting non-finite values"). Internal to
// harness/interpreter.
#pragma once

#include "harness/interpreter/internal/rank_state.h"

#include <optional>
#include <vector>

namespace zerocheck::interpreter {

// Arms op.value on op.rank: its next forward's input, its next backward's loss, or op.param's
// gradient in its next backward. A second inject of the same kind on that rank replaces the first.
OpOutcome inject(RankState& state, const Op& op);

// Takes every rank's armed input injection (by rank; none where nothing is armed): a forward
// that runs calls it.
std::vector<std::optional<float>> take_input_injections(RankState& state);
// Takes every rank's armed loss and gradient injections (by rank): a backward that runs calls
// it. A gradient injection on a parameter the expectation places on an owner is dropped: its
// gradient is its owner's sum of every sender's share, which no single rank's backward produces.
std::vector<model::BackwardInjection> take_backward_injections(RankState& state);

// While it lives, `injection`'s gradient poison (if any) is hooked on this rank's parameter of
// that path, so the engine's backward sees it before any reduction; the destructor unhooks it.
class GradientPoison {
 public:
  GradientPoison(RankState& state, const model::BackwardInjection& injection);
  ~GradientPoison();
  GradientPoison(const GradientPoison&) = delete;
  GradientPoison& operator=(const GradientPoison&) = delete;

 private:
  at::Tensor param_;
  std::optional<unsigned> hook_;
};

}  // namespace zerocheck::interpreter
