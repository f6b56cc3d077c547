// What the oracles observe of an engine: measured from the tensors themselves and from what the
// rank allocated (harness/world/rank_memory.h), never read from the engine's description of
// itself. The engine's list of parameters says which tensors to look at; how much storage they
// hold, whom they are placed on and what nobody lists are measured.
#pragma once

#include "engine/engine.h"

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zerocheck::oracles {

// What this rank holds for one parameter the engine reports, measured from the tensors.
struct ObservedParam {
  std::string path;
  int reported_owner = -1;
  bool reported_persistent = false;
  int64_t param_elements = 0;     // the model tensor's elements
  int64_t param_bytes = 0;        // storage behind the model tensor
  int64_t master_bytes = 0;       // storage behind the fp32 copy, unless it is the model tensor's
  int64_t shard_bytes = 0;        // storage behind the bf16 shard, unless it is the master's or the model tensor's
  int64_t grad_shard_bytes = 0;   // storage behind the shard gradient
  int64_t full_grad_bytes = 0;    // storage behind the model tensor's .grad
  int64_t optimizer_elements = 0; // optimizer state for this parameter
  at::Tensor master;
  // Every tensor behind it (model tensor, copy, gradients, optimizer state), for accounted_bytes;
  // filled only when observe() is asked for them.
  std::vector<at::Tensor> held;
};

// Returns what this rank holds for each parameter the engine reports (params() order); with
// `held_tensors`, each one's tensors too (for the whole-rank check).
std::vector<ObservedParam> observe(zero3::Engine& engine, bool held_tensors = false);

// Returns the bytes of CPU storage behind `observed`'s held tensors and `also` (the user's
// parameters no engine manages), each storage counted once: everything a rank is known to hold
// outside forward and backward.
int64_t accounted_bytes(const std::vector<ObservedParam>& observed, const std::vector<at::Tensor>& also);

// Returns the bytes this rank holds for model state, measured from the storage behind the
// engine's tensors (model tensors, fp32 copies, gradients; each storage once) plus optimizer
// state. Only the memory I4 checks knows more: what the rank allocated (held_bytes).
int64_t measured_state_bytes(zero3::Engine& engine);

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

// Returns what the engine's world holds, parameter by parameter (params() order), joined whole
// from the ranks: values and optimizer state. Collective: every rank of the engine's comm calls it.
std::vector<WholeParam> gather_whole_state(zero3::Engine& engine);

}  // namespace zerocheck::oracles
