// The oracles: one function per invariant, expectation + observation -> violation or nothing.
//
// The expectation comes from harness/model (the scenario and the world size only); the
// observation is measured from the engine's tensors and from what the rank allocated
// (observation.h). Every oracle walks every parameter of both sides and fails on anything it
// cannot match: a parameter the engine does not report, one it reports that the model does not
// have, a report that disagrees with the spec. The invariants themselves are one table
// (harness/scenario/invariants.h).
//
// A new oracle: a function here (and its .cc), its row in that table, and a call at its place in
// the interpreter's check order (harness/interpreter/rank_interpreter.cc).
#pragma once

#include "harness/model/model.h"
#include "harness/oracles/observation.h"
#include "harness/oracles/violation.h"
#include "harness/scenario/invariants.h"

#include <ATen/Tensor.h>

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace zerocheck::oracles {

using Result = std::optional<Violation>;
// A violation without operation index and rank (the interpreter stamps those).
Violation violation(const std::string& invariant, const std::string& module_path, const std::string& attribute,
                    const std::string& expected, const std::string& actual, const std::string& message);
// "tensor[3] max diff 0.5" or "shape [2] vs [3]", for messages.
std::string difference(const at::Tensor& expected, const at::Tensor& actual);

// Whether two tensors hold the same numbers: the same shape and, element by element, equal or
// both NaN. For comparing two computations (the engine against the dense twin): at::equal calls
// NaN unequal to itself, but a model that diverges does so on both sides alike.
bool same_numbers(const at::Tensor& a, const at::Tensor& b);
// The same for two losses.
bool same_numbers(double a, double b);
// Whether two tensors are the same bit for bit: dtype, shape and every byte (a NaN's payload and
// a zero's sign included). For what must be a copy: a checkpoint round trip, a refused call.
bool same_bits(const at::Tensor& a, const at::Tensor& b);

// I1 (or `invariant`, when a refused initialize is checked for changes): every ledger entry
// equals the live attributes, nothing added, removed or reordered.
Result attributes(const model::AttributeLedger& ledger, const char* invariant = "I1");

// I2: owners and residency of every parameter against the expectation.
Result placement(const model::Expectation& expected, const std::vector<ObservedParam>& observed, int rank,
                 const std::string& target);

// I9: what a rank holds, as a few digests the ranks exchange in one small collective after every
// operation (run_ops). Only what must be the same on every rank goes in: a placed parameter's
// residency and a shard's numbers differ by rank by design. A rank without a live engine
// digests to zeros.
inline constexpr size_t kAgreementFields = 7;
using AgreementDigest = std::array<int64_t, kAgreementFields>;
// The fields' names, in digest order: "live engine", "parameter list", "shapes", ...
const std::array<const char*, kAgreementFields>& agreement_fields();
AgreementDigest agreement_digest(const zero3::Engine* engine);
// I9: every rank's digest equals rank 0's; otherwise the first field that differs and the ranks
// whose value of it is not rank 0's (the violation's rank is the first of them).
Result agreement(const std::vector<AgreementDigest>& by_rank, const std::string& target);

// I4: shards and persistent parameters hold exactly what the spec says, measured from storage,
// in the dtypes `precision` (the engine's, precision_in_effect) gives them.
Result memory(const model::Expectation& expected, const std::vector<ObservedParam>& observed,
              const std::string& target, const zero3::PrecisionOptions& precision = zero3::PrecisionOptions());
// I4 without anybody's list: the bytes the rank's allocations still hold (`held`, RankMemory)
// against the bytes behind every tensor it is known to hold (`accounted`, accounted_bytes). More
// held than accounted for is a copy that no list shows; less, a listed tensor the rank did not
// allocate.
Result unlisted_memory(int64_t held, int64_t accounted, const std::string& target);
// I4 during a forward: the most gathered-parameter elements the rank held at once (`measured`,
// from storage each time an all-gather began) against what the knobs' schedule gives (`expected`,
// TrafficTrace::gathered_peak): a prefetch past stage3_max_live_parameters, or a release the
// rules did not make, shows here. `largest_module_fetch` and `knobs` only explain the message.
Result gathered_peak(int64_t expected, int64_t largest_module_fetch, int64_t measured, const std::string& knobs,
                     const std::string& target);

// I3: every parameter equals the twin's (this rank's shard of it, zero-padded).
Result parity(const model::Expectation& expected, const model::DenseTwin& twin,
              const std::vector<ObservedParam>& observed, int rank, int world_size, const std::string& target);
Result loss_parity(double dense, double engine, const std::string& target);
// I3 after release: the model's parameters are whole and equal the twin's.
Result released_parity(const std::vector<std::pair<std::string, at::Tensor>>& model_params,
                       const model::DenseTwin& twin, const std::string& target);

// I5 / I2 / I7: initialize did what the model predicted (refused with the predicted error, or
// succeeded). `raised` is the error's kind ("" when none was raised), `raised_message` its text.
Result initialize_outcome(const std::optional<std::string>& predicted, bool created, const std::string& raised,
                          const std::string& raised_message, const std::string& target);
// I5: a refused initialize left the live engine's shards as they were.
Result refused_changed_nothing(const std::vector<at::Tensor>& masters_before,
                               const std::vector<ObservedParam>& observed_after);

// The model's parameters as its user sees them: each distinct parameter by path, a copy of its
// value, and requires_grad.
struct ParameterSnapshot {
  std::string path;
  at::Tensor value;
  bool requires_grad = false;
};
std::vector<ParameterSnapshot> snapshot_parameters(const std::shared_ptr<zero3::Module>& root);
// I5: a refused initialize left the model's parameters as they were (values bit for bit, shapes,
// requires_grad), so the user can go on with it.
Result model_unchanged(const std::vector<ParameterSnapshot>& before, const std::vector<ParameterSnapshot>& after,
                       const std::string& target);

// I6: load restored every shard and the optimizer state bit for bit.
Result round_trip(const std::vector<at::Tensor>& saved_masters, const at::Tensor& saved_optimizer_state,
                  const std::vector<ObservedParam>& observed_after, const at::Tensor& optimizer_state_after,
                  const std::string& target);
// I6: after a load the engine's step counter (its step() calls) is what the load options say:
// the checkpoint's, or as it was (module_only).
Result step_counter(int64_t expected_micro_steps, int64_t micro_steps_after, const std::string& target);
// I6: a world of `to` ranks that loaded the checkpoint saved by this world of `from` ranks holds
// what this world holds after loading it: every parameter and optimizer state field, bit for bit.
Result resharded(const std::vector<WholeParam>& here, const std::vector<WholeParam>& there, int from, int to,
                 const std::string& target);
// I6: the consolidated state dict (rank 0's) holds every key of the model's state dict (a module
// used at several places under each), each equal to the dense twin's parameter (as numbers, like
// I3), and nothing else.
Result consolidated(const model::Expectation& expected, const std::map<std::string, at::Tensor>& consolidated,
                    const model::DenseTwin& twin, const std::string& target);

// The largest |a - b| over the elements of two tensors of the same shape, positions where both
// are NaN counted as equal and a NaN on one side only as an infinite difference: for reports
// that print how far apart two computations are. Shapes that differ give infinity.
double max_abs_difference(const at::Tensor& a, const at::Tensor& b);

// What a rank's engine says about the overflow contract, and the state it must keep finite: its
// weights (the model tensors it holds data in), fp32 masters, bf16 shards and optimizer state.
struct OverflowReport {
  int64_t optimizer_steps = 0, skipped_steps = 0;
  double loss_scale = 1, reported_norm = 0;
  std::vector<std::pair<std::string, at::Tensor>> state;  // "<path> <role>" -> tensor
};
OverflowReport observe_overflow(zero3::Engine& engine);
// I11, with overflow protection: the steps applied and skipped and the loss scale are the twin's
// (which decides each skip from its own gradients: any non-finite one in the accumulation
// window), the reported gradient norm is finite exactly when the twin's is, and nothing in
// `report.state` is NaN or infinite. Checked before I3: a skip on the wrong ranks also moves
// the parameters, but the contract is what it breaks.
Result overflow_contract(const model::DenseTwin& twin, const OverflowReport& report, const std::string& target);
// I11's second half, checked after I3: a finite reported norm equals the twin's within 1e-9
// relative (the twin sums whole tensors, the engine its shards). After I3, so that wrong
// gradients (which move the norm too) are named by the numbers they change, and a norm that
// alone is wrong, the report a schedule or a log reads, by I11.
Result reported_norm(const model::DenseTwin& twin, const OverflowReport& report, const std::string& target);

// I8: the elements moved by `operation` equal the prediction, kind by kind.
Result traffic(const std::string& operation, const model::Traffic& expected, const model::Traffic& measured,
               const std::string& target);

}  // namespace zerocheck::oracles
