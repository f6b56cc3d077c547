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
expect_usage "--engine applies to scenario_ops only" ci/fuzz-campaign --target config_json --minutes 1 --engine legacy-0.15.4
expect_usage "--world applies to scenario_ops only" ci/fuzz-campaign --target scenario_json --minutes 1 --world 2
expect_usage "--max-ops needs a whole number, got 'many'" ci/fuzz-campaign --target scenario_ops --minutes 1 --max-ops many
expect_usage "unknown argument '--bogus'" ci/fuzz-campaign --target scenario_ops --minutes 1 --bogus
expect_usage "unknown argument '--bogus'" ci/fuzz-fault-hunt --bogus
expect_usage "--minutes needs a value" ci/fuzz-fault-hunt --minutes
[ "$failures" -eq 0 ]
