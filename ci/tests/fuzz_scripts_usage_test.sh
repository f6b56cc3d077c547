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
expect_usage "unknown argument '--bogus'" ci/fuzz-speed --bogus
expect_usage "--seconds needs a whole number, got 'x'" ci/fuzz-speed --seconds x
expect_usage "--base 'no-such-commit' is not a commit" ci/fuzz-speed --base no-such-commit
expect_usage "needs a mode (campaign or hunt)" ci/fuzz-report
expect_usage "is not a folder" ci/fuzz-report campaign no-such-folder
expect_usage "needs the page and the PNG" ci/fuzz-report-screenshot
expect_usage "--target is required" ci/fuzz-merge --from fuzz/corpus/config_json
expect_usage "unknown target 'nope'" ci/fuzz-merge --target nope --from fuzz/corpus/config_json
expect_usage "--from is required" ci/fuzz-merge --target config_json
expect_usage "--from needs a value" ci/fuzz-merge --target config_json --from
expect_usage "--from 'no-such-folder' is not a folder" ci/fuzz-merge --target config_json --from no-such-folder
expect_usage "unknown argument '--bogus'" ci/fuzz-merge --target config_json --from fuzz/corpus/config_json --bogus
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
[ "$failures" -eq 0 ]
