// How a `zerocheck` subcommand plugs into the CLI: it registers its options on a CLI11
// subcommand and sets the process exit code when it runs.
#pragma once

#include <CLI/CLI.hpp>

namespace zerocheck::cli {

// X(name, code, meaning): the exit codes of every command (docs/commands.md's table, held to this one by the docs check). A
// failure must not read as a finding: only what the engine under test did is exit 1.
#define ZEROCHECK_EXIT_CODES(X)                                                                     \
  X(kExitOk, 0, "all invariants held")                                                             \
  X(kExitViolation, 1, "a violation was found, or a rank of the engine under test failed")          \
  X(kExitUsage, 2, "bad usage or input: an option, a scenario file, a checkpoint given as input")   \
  X(kExitHarness, 3, "zerocheck itself failed: a bug of the harness, or its environment (a file "   \
                     "it cannot write, a worker's malformed report)")

#define ZEROCHECK_EXIT_CODE(name, code, meaning) inline constexpr int name = code;
ZEROCHECK_EXIT_CODES(ZEROCHECK_EXIT_CODE)
#undef ZEROCHECK_EXIT_CODE

// X(name, registration function, one-line description): the table of subcommands.
#define ZEROCHECK_COMMANDS(X)                                                                    \
  X(train, register_train_command,                                                               \
    "train a model under ZeRO-3 next to dense training; check parity and exact accounting")       \
  X(repro, register_repro_command,                                                               \
    "replay a known bug report (`repro seed`: DeepSpeed 0.15.4 clobbering expert ids)")           \
  X(check, register_check_command,                                                               \
    "run random scenarios against an engine; shrink and save any violation")                    \
  X(replay, register_replay_command, "run one scenario file and print its history and verdict")  \
  X(mutants, register_mutants_command,                                                           \
    "run check against every planted fault: killed only by its own invariant; --ablate: matrix") \
  X(export, register_export_command,                                                             \
    "write scenarios (covering the collision dictionary) for the upstream DeepSpeed replay")     \
  X(upstream, register_upstream_command,                                                         \
    "replay exported scenarios on an installed DeepSpeed and group the findings")                \
  X(bench, register_bench_command,                                                               \
    "measure what one fuzzer execution costs (scenarios/s, ATen calls, checks on/off) as JSON")    \
  X(validate, register_validate_command,                                                         \
    "read scenario files only: one line per file, `FILE: ok` or `FILE: <path>: <error>`")         \
  X(worker, register_worker_command,                                                             \
    "one rank of a world of processes, from torchrun's environment (RANK, WORLD_SIZE, MASTER_*)")  \
  X(checkpoint, register_checkpoint_command,                                                     \
    "`checkpoint inspect DIR`: manifest, sizes, verification; `checkpoint export DIR --out FILE`") \
  X(schema, register_schema_command,                                                             \
    "print the scenario language's tables as JSON (the Python replay's schema.json); --check FILE")

#define ZEROCHECK_DECLARE_COMMAND(name, registrar, doc) \
  void registrar(CLI::App& command, int& exit_code);
ZEROCHECK_COMMANDS(ZEROCHECK_DECLARE_COMMAND)
#undef ZEROCHECK_DECLARE_COMMAND

}  // namespace zerocheck::cli
