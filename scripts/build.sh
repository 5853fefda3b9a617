#!/usr/bin/env bash
# Configures and builds zerorun into $ZERORUN_BUILD_DIR (default: build/). Extra CMake arguments come
# from $ZERORUN_CMAKE_ARGS (e.g. "-DZERORUN_CUDA=OFF"). Uses ccache when it is installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZERORUN_BUILD_DIR:-$root/build}
args=(-S "$root" -B "$build" -G Ninja)
if command -v ccache >/dev/null; then
  args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# shellcheck disable=SC2206
extra=(${ZERORUN_CMAKE_ARGS:-})
cmake "${args[@]}" "${extra[@]}"
cmake --build "$build" -j "$(nproc)"
