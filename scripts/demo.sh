#!/usr/bin/env bash
# The main job on its built-in default: installs what is missing, builds, and runs it.
# (Until the engine lands this runs the most meaningful thing that exists; it says so.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZERORUN_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
echo "demo: the training engine (zerorun-train) is not built yet; running the core self-checks instead"
exec "$build/tests/zr_test_core" --test-suite=unit
