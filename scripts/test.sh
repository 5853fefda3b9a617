#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds, and runs every CTest test except
# those labelled `gpu`. Unit tests run in parallel; multi-process and slow tests one at a time (they
# start processes and time failures). The exit status is the suite's.
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
ctest --test-dir "$build" -LE '^(unit|gpu)$' --output-on-failure "${extra[@]}" || status=1
if [[ $status -eq 0 ]]; then echo "test.sh: all tests passed"; else echo "test.sh: FAILURES (see above)"; fi
exit $status
