#!/usr/bin/env bash
# Builds zerorun with CUDA and runs the tests labelled "gpu" (NCCL backend, device kernels).
#   tests/gpu/run.sh [build-dir]      (default: build-gpu next to the sources)
# Needs the CUDA toolkit with NCCL and at least one GPU; tests skip themselves without a device.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$src/build-gpu}"
cmake -S "$src" -B "$build" -G Ninja -DZERORUN_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
ninja -C "$build" -j"$(nproc)"
nvidia-smi -L || echo "warning: nvidia-smi found no GPU; the gpu tests will skip" >&2
ctest --test-dir "$build" -L gpu --output-on-failure
