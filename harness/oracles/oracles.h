// The oracles: one function per invariant, expectation + observation -> violation or nothing.
//
// The expectation comes from harness/model (the scenario and the world size only); the
// observation is measured from the engine's tensors by the interpreter. Every oracle walks every
// parameter of both sides and fails on anything it cannot match: a parameter the engine does not
// report, one it reports that the model does not have, a report that disagrees with the spec.
// The invariants are one table (ZEROCHECK_INVARIANTS), also exported to the Python replay.
#pragma once

#include "harness/model/model.h"
#include "harness/verdict.h"

#include <ATen/Tensor.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace zerocheck::oracles {

// X(name, statement): every invariant.
#define ZEROCHECK_INVARIANTS(X)                                                                      \
  X(I1, "user attributes equal the user's last write on every module and parameter")               \
  X(I2, "a placed module's parameters live whole on exactly the owner the user's attributes give, " \
        "and nothing is placed that the policy does not place")                                    \
  X(I3, "losses and every parameter (this rank's shard, padding zero) equal the dense twin's")     \
  X(I4, "outside forward/backward a partitioned parameter holds exactly its shard (storage of "    \
        "ceil(n/N) elements) and no full data or gradient; a persistent one is whole")             \
  X(I5, "a repeated initialize is refused with AlreadyInitialized and changes nothing")            \
  X(I6, "save then load restores shards and optimizer state bit-exactly, and a world of another "  \
        "size that loads the checkpoint holds the same parameters and optimizer state; the "       \
        "consolidated state dict equals the gathered parameters")                                  \
  X(I7, "no unexpected error: the engine raises exactly the errors the model predicts")            \
  X(I8, "every forward and backward moves exactly the elements the schedule predicts, for every "  \
        "collective kind; step and zero_grad move nothing")

struct InvariantRow {
  const char* name;
  const char* statement;
};
const std::vector<InvariantRow>& invariant_rows();
// Every invariant's name, in table order (the interpreter's check order is its own).
const std::vector<std::string>& invariants();
// Returns the invariants named in `list` ("I3,I8"). Throws zero3::UsageError naming an unknown one.
std::set<std::string> parse_invariants(const std::string& list);

// What this rank holds for one parameter the engine reports, measured from the tensors.
struct ObservedParam {
  std::string path;
  int reported_owner = -1;
  bool reported_persistent = false;
  int64_t param_elements = 0;     // the model tensor's elements
  int64_t param_bytes = 0;        // storage behind the model tensor
  int64_t master_bytes = 0;       // storage behind the fp32 copy, unless it is the model tensor's
  int64_t grad_shard_bytes = 0;   // storage behind the shard gradient
  int64_t full_grad_bytes = 0;    // storage behind the model tensor's .grad
  int64_t optimizer_elements = 0; // optimizer state for this parameter
  at::Tensor master;
};

// What a world holds for one parameter, gathered whole from its shards (or from the rank it is
// placed on): two worlds of different sizes that loaded one checkpoint must hold the same.
struct WholeParam {
  std::string path;
  at::Tensor value;               // every element, flattened, CPU
  bool has_state = false;         // the optimizer holds state for it
  std::vector<at::Tensor> state;  // the state's fields in the kind's order, each whole; a number
                                  // (Adam's step) as one element, an absent field undefined
  std::string problem;            // why it could not be gathered whole ("" when it could)
};

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

// I4: shards and persistent parameters hold exactly what the spec says, measured from storage.
Result memory(const model::Expectation& expected, const std::vector<ObservedParam>& observed,
              const std::string& target);

// I3: every parameter equals the twin's (this rank's shard of it, zero-padded).
Result parity(const model::Expectation& expected, const model::DenseTwin& twin,
              const std::vector<ObservedParam>& observed, int rank, int world_size, const std::string& target);
Result loss_parity(double dense, double engine, const std::string& target);
// I3 after release: the model's parameters are whole and equal the twin's.
Result released_parity(const std::vector<std::pair<std::string, at::Tensor>>& model_params,
                       const model::DenseTwin& twin, const std::string& target);

// I5 / I2 / I7: initialize did what the model predicted (refused with the predicted error, or
// succeeded). `raised` is the error's kind ("" when none was raised).
Result initialize_outcome(const std::optional<std::string>& predicted, bool created, const std::string& raised,
                          const std::string& target);
// I5: a refused initialize left the live engine's shards as they were.
Result refused_changed_nothing(const std::vector<at::Tensor>& masters_before,
                               const std::vector<ObservedParam>& observed_after);

// I6: load restored every shard and the optimizer state bit for bit.
Result round_trip(const std::vector<at::Tensor>& saved_masters, const at::Tensor& saved_optimizer_state,
                  const std::vector<ObservedParam>& observed_after, const at::Tensor& optimizer_state_after,
                  const std::string& target);
// I6: a world of `to` ranks that loaded the checkpoint saved by this world of `from` ranks holds
// what this world holds after loading it: every parameter and optimizer state field, bit for bit.
Result resharded(const std::vector<WholeParam>& here, const std::vector<WholeParam>& there, int from, int to,
                 const std::string& target);
// I6: the consolidated state dict (rank 0) equals the gathered parameters, for every parameter
// that is not placed on another rank.
Result consolidated(const model::Expectation& expected, const std::map<std::string, at::Tensor>& consolidated,
                    const std::vector<std::pair<std::string, at::Tensor>>& gathered, const std::string& target);

// I8: the elements moved by `operation` equal the prediction, kind by kind.
Result traffic(const std::string& operation, const model::Traffic& expected, const model::Traffic& measured,
               const std::string& target);

}  // namespace zerocheck::oracles
