// The invariants a run checks, I1..I11: one table, part of the scenario language. The oracles
// implement them (harness/oracles), `--disable` names them, `zerocheck mutants` scores faults by
// them, schema.json exports them to the Python replay, and a scenario's verdict cites them.
//
// A new invariant is one row here plus its oracle and its place in the interpreter's check order
// (harness/interpreter/rank_interpreter.cc).
#pragma once

#include <set>
#include <string>
#include <vector>

namespace zerocheck {

// X(name, statement): every invariant.
#define ZEROCHECK_INVARIANTS(X)                                                                      \
  X(I1, "user attributes equal the user's last write on every module and parameter")               \
  X(I2, "a placed module's parameters live whole on exactly the owner the user's attributes give, " \
        "and nothing is placed that the policy does not place")                                    \
  X(I3, "losses and every parameter (this rank's shard, padding zero) equal the dense twin's")     \
  X(I4, "outside forward/backward a partitioned parameter holds exactly its shard (storage of "    \
        "ceil(n/N) elements) and no full data or gradient; a persistent one is whole; and the "     \
        "rank holds no byte that the tensors of the parameters do not account for")                \
  X(I5, "a repeated initialize is refused with AlreadyInitialized and changes nothing; an "        \
        "initialize with an invalid config leaves the model's parameters as they were")            \
  X(I6, "a load restores the tagged checkpoint's shards, and its optimizer state and step counter " \
        "as its options say, bit-exactly; a world of another size that loads the checkpoint holds " \
        "the same parameters and optimizer state; the consolidated state dict equals the dense "    \
        "twin's parameters")                                                                        \
  X(I7, "no unexpected error: the engine raises exactly the errors the model predicts")            \
  X(I8, "every forward, backward and gather moves exactly the elements the schedule predicts, "   \
        "for every collective kind, and a backward reduce-scatters once per gradient bucket; "     \
        "step moves only the clip's norm, zero_grad nothing")                                      \
  X(I9, "after every operation all ranks agree on the parameter list, shapes, partition sizes, "    \
        "statuses, the step counters and the parameters they hold")                                \
  X(I10, "a scenario replayed with its inert ZeRO knobs drawn again (buckets, prefetch, live and "  \
         "reuse limits, sub-groups, overlap) gives bit-identical losses, parameters, optimizer "    \
         "state and step counters")                                                                 \
  X(I11, "with overflow protection, a step whose gradients hold a NaN or an infinity on any rank is " \
         "skipped on every rank and no other is: the applied and skipped steps, the loss scale and " \
         "the reported gradient norm (not finite exactly when the twin's is) are the dense twin's, "  \
         "and no weight, fp32 master or optimizer state is NaN or infinite")

// X(name): the invariants only the upstream replay judges (none now: I10 has its oracle on both
// engines, harness/interpreter/internal/inert_knobs.h and harness/deepspeed/zerocheck_ds/oracles/
// inert_knobs.py). `--disable` takes them and changes nothing here; `mutants --ablate` has no
// column for them.
#define ZEROCHECK_UPSTREAM_ONLY_INVARIANTS(X)

struct InvariantRow {
  const char* name;
  const char* statement;
};
const std::vector<InvariantRow>& invariant_rows();
// Every invariant's name, in table order (the interpreter's check order is its own).
const std::vector<std::string>& invariants();
// The invariants this engine's oracles judge: every one less ZEROCHECK_UPSTREAM_ONLY_INVARIANTS.
const std::vector<std::string>& reference_invariants();
// Returns the invariants named in `list` ("I3,I8"). Throws zero3::UsageError naming an unknown one.
std::set<std::string> parse_invariants(const std::string& list);

}  // namespace zerocheck
