#!/usr/bin/env bash
# Bad arguments to the campaign scripts exit 2 with a message naming the problem, before any
# build or fuzzing starts (so this needs neither clang nor a fuzz build).
set -uo pipefail
cd "$(dirname "$0")/../.."
failures=0
expect_usage() {  # expected-message-fragment command...
  local fragment=$1; shift
  local output status
  output=$("$@" 2>&1); status=$?
  if [ "$status" -ne 2 ] || [[ "$output" != *"$fragment"* ]]; then
    echo "FAIL: '$*' exited $status, expected 2 with '$fragment'; it printed:"
    echo "$output" | tail -n 5
    failures=$((failures + 1))
  else
    echo "ok: $*"
  fi
}
expect_usage "--target is required" ci/fuzz-campaign --minutes 1
expect_usage "unknown target 'nope'" ci/fuzz-campaign --target nope --minutes 1
expect_usage "--minutes needs a positive number" ci/fuzz-campaign --target config_json --minutes x
expect_usage "--engine applies to scenario_ops and attrs only" ci/fuzz-campaign --target config_json --minutes 1 --engine legacy-0.15.4
expect_usage "--world applies to scenario_ops and attrs only" ci/fuzz-campaign --target scenario_json --minutes 1 --world 2
# attrs is a scenario target: it takes --engine and the limits (the check after them refuses the
# non-empty --out, before any build).
expect_usage "--out 'ci' exists and is not empty" ci/fuzz-campaign --target attrs --minutes 1 --engine legacy-0.15.4 --world 8 --max-nodes 64 --max-ops 3 --out ci
expect_usage "--max-nodes needs a whole number, got 'lots'" ci/fuzz-campaign --target attrs --minutes 1 --max-nodes lots
# The targets are read from fuzz/CMakeLists.txt's zerocheck_fuzz_target(<name> lines.
declared=$(grep -oE '^zerocheck_fuzz_target\([A-Za-z0-9_]+' fuzz/CMakeLists.txt | cut -d'(' -f2 | paste -sd'|')
expect_usage "--target {$declared}" ci/fuzz-campaign --help
expect_usage "--max-ops needs a whole number, got 'many'" ci/fuzz-campaign --target scenario_ops --minutes 1 --max-ops many
expect_usage "unknown argument '--bogus'" ci/fuzz-campaign --target scenario_ops --minutes 1 --bogus
expect_usage "unknown argument '--bogus'" ci/fuzz-fault-hunt --bogus
expect_usage "--minutes needs a value" ci/fuzz-fault-hunt --minutes
expect_usage "--target needs a value" ci/fuzz-fault-hunt --target
expect_usage "--target must be scenario_ops or attrs" ci/fuzz-fault-hunt --target config_json
expect_usage "unknown fault 'nope'" ci/fuzz-fault-hunt --target attrs --faults "legacy-0.15.4 nope"
# --all's options: refused without --all, checked before any build.
expect_usage "--reps applies to --all only" ci/fuzz-fault-hunt --reps 2
expect_usage "--cap-minutes applies to --all only" ci/fuzz-fault-hunt --cap-minutes 60
expect_usage "--random applies to --all only" ci/fuzz-fault-hunt --random
expect_usage "--zerocheck applies to --all --random only" ci/fuzz-fault-hunt --zerocheck ci/tests/fakes/zerocheck
expect_usage "--zerocheck applies to --random only" ci/fuzz-fault-hunt --all --zerocheck ci/tests/fakes/zerocheck
expect_usage "--choice-mutator applies to --all only" ci/fuzz-fault-hunt --choice-mutator off
expect_usage "--choice-mutator must be on or off, got 'maybe'" ci/fuzz-fault-hunt --all --choice-mutator maybe
expect_usage "--reps needs a whole number of at least 1, got '0'" ci/fuzz-fault-hunt --all --reps 0
expect_usage "--reps needs a value" ci/fuzz-fault-hunt --all --reps
expect_usage "--cap-minutes needs a positive number, got 'x'" ci/fuzz-fault-hunt --all --cap-minutes x
expect_usage "--cap-minutes 5 is less than one hunt's --minutes 10" ci/fuzz-fault-hunt --all --cap-minutes 5
expect_usage "--minutes needs a positive number" ci/fuzz-fault-hunt --all --minutes soon
expect_usage "--all picks each fault's target" ci/fuzz-fault-hunt --all --target attrs
expect_usage "--world does not apply to --all" ci/fuzz-fault-hunt --all --world 2
expect_usage "--zerocheck 'no-such-binary' is not an executable file" ci/fuzz-fault-hunt --all --random --zerocheck no-such-binary
expect_usage "unknown fault 'nope'" ci/fuzz-fault-hunt --all --faults "legacy-0.15.4 nope"
expect_usage "--out 'ci' exists and is not empty" ci/fuzz-fault-hunt --all --random --zerocheck ci/tests/fakes/zerocheck --out ci
expect_usage "--seed needs a whole number from 1 to 4294967295 (libFuzzer's -seed), got '0'" ci/fuzz-campaign --target scenario_ops --minutes 1 --seed 0
expect_usage "--seed needs a whole number from 1 to 4294967295 (libFuzzer's -seed), got 'x'" ci/fuzz-campaign --target scenario_ops --minutes 1 --seed x
expect_usage "--seed needs a value" ci/fuzz-campaign --target scenario_ops --minutes 1 --seed
expect_usage "[--no-seeds] [--seed K]" ci/fuzz-campaign --help
expect_usage "ci/fuzz-fault-hunt --all [--reps N] [--minutes M] [--cap-minutes C]" ci/fuzz-fault-hunt --bogus
expect_usage "unknown argument '--bogus'" ci/fuzz-speed --bogus
expect_usage "--seconds needs a whole number, got 'x'" ci/fuzz-speed --seconds x
expect_usage "--base 'no-such-commit' is not a commit" ci/fuzz-speed --base no-such-commit
expect_usage "--targets: 'config_json' is not a scenario fuzzer (scenario_ops, attrs)" ci/fuzz-speed --targets "attrs config_json"
expect_usage "--targets names no fuzzer" ci/fuzz-speed --targets " "
expect_usage "--corpus must be empty or tree, got 'full'" ci/fuzz-speed --corpus full
expect_usage "needs a mode (campaign, hunt or time-to-find)" ci/fuzz-report
expect_usage "is not a folder" ci/fuzz-report campaign no-such-folder
expect_usage "needs the page and the PNG" ci/fuzz-report-screenshot
expect_usage "--target is required" ci/fuzz-merge --from fuzz/corpus/config_json
expect_usage "unknown target 'nope'" ci/fuzz-merge --target nope --from fuzz/corpus/config_json
expect_usage "--from is required" ci/fuzz-merge --target config_json
expect_usage "--from needs a value" ci/fuzz-merge --target config_json --from
expect_usage "--from 'no-such-folder' is not a folder" ci/fuzz-merge --target config_json --from no-such-folder
expect_usage "unknown argument '--bogus'" ci/fuzz-merge --target config_json --from fuzz/corpus/config_json --bogus
expect_usage "--build-dir needs a value" ci/test-sanitizers --build-dir
expect_usage "--build-dir 'no-such-folder' holds no configured build" ci/test-sanitizers --build-dir no-such-folder
plain_build=$(mktemp -d "${TMPDIR:-/tmp}/zerocheck-plain-build.XXXXXX")
touch "$plain_build/build.ninja"
echo "CMAKE_CXX_FLAGS:STRING=-O2" > "$plain_build/CMakeCache.txt"
expect_usage "is not built with -fsanitize=address" ci/test-sanitizers --build-dir "$plain_build"
rm -rf "$plain_build"
# --list-faults: the attrs hunt's default faults are the catalogue's rows for I1, I2 and I5
# (engine/faults.h's third column), scenario_ops's are all of them.
expect_faults() {  # expected-list command...
  local expected=$1; shift
  local output
  output=$("$@" 2>&1)
  if [ "$output" != "$expected" ]; then
    echo "FAIL: '$*' listed:"; echo "$output" | head -n 5; echo "expected:"; echo "$expected" | head -n 5
    failures=$((failures + 1))
  else
    echo "ok: $*"
  fi
}
catalogue=$(grep -E '^ *X\(' engine/faults.h | awk -F'"' '{ print $2 " " $4 }')
expect_faults "$(awk '$2 == "I1" || $2 == "I2" || $2 == "I5"' <<<"$catalogue")" ci/fuzz-fault-hunt --target attrs --list-faults
expect_faults "$catalogue" ci/fuzz-fault-hunt --list-faults
# --all hunts both tables; a ZERO3_DEEP_FAULTS row is deep. Its target: attrs for a single fault
# of I1, I2 or I5, scenario_ops for the others and every deep fault.
plan=$(awk '/^#define / { deep = ($0 ~ /^#define ZERO3_DEEP_FAULTS\(/) }
  /^ *X\(/ { split($0, q, "\""); kind = deep ? "deep" : "single"
    print q[2], q[4], kind, (kind == "single" && (q[4] == "I1" || q[4] == "I2" || q[4] == "I5")) ? "attrs" : "scenario_ops" }' engine/faults.h)
expect_faults "$plan" ci/fuzz-fault-hunt --all --list-faults
expect_faults "$(grep '^shard-offset-off-by-one ' <<<"$plan"; grep '^legacy-0.15.4 ' <<<"$plan")" \
  ci/fuzz-fault-hunt --all --list-faults --faults "shard-offset-off-by-one legacy-0.15.4"
# The smoke's knobs are checked before its build (it exits 0 at once where clang++-14 is missing).
if command -v clang++-14 >/dev/null 2>&1; then
  expect_usage "FUZZ_SMOKE_SEED_STRIDE needs a positive whole number, got 'x'" env FUZZ_SMOKE_SEED_STRIDE=x ci/fuzz-smoke
  expect_usage "FUZZ_SMOKE_SECONDS needs a positive whole number, got '0'" env FUZZ_SMOKE_SECONDS=0 ci/fuzz-smoke
fi
[ "$failures" -eq 0 ]
