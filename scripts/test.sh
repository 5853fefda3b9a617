#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds, and runs every CTest test except
# those labelled `gpu`. Unit tests run in parallel; multi-process, slow and fault tests one at a time
# (they start processes and time failures); the fault suite (label `fault`, about 2 minutes) last.
# A test whose dependency is missing reports Skipped (ZERORUN_NO_SKIP=1 makes that a failure).
# The exit status is the suite's.
# Env: ZERORUN_BUILD_DIR (default build/), ZERORUN_CMAKE_ARGS, CTEST_ARGS (extra ctest arguments).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZERORUN_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
# shellcheck disable=SC2206
extra=(${CTEST_ARGS:-})
status=0
ctest --test-dir "$build" -L '^unit$' -j "$(nproc)" --output-on-failure "${extra[@]}" || status=1
ctest --test-dir "$build" -LE '^(unit|gpu|fault)$' --output-on-failure "${extra[@]}" || status=1
ctest --test-dir "$build" -L '^fault$' --output-on-failure "${extra[@]}" || status=1
if [[ $status -eq 0 ]]; then echo "test.sh: all tests passed"; else echo "test.sh: FAILURES (see above)"; fi
exit $status
