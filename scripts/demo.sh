#!/usr/bin/env bash
# The main job on its built-in default: installs what is missing, builds, then trains a small GPT
# (4 layers, d_model 128) on the synthetic Markov corpus in bf16 with ZeRO-1, AdamW and a
# WarmupCosineLR schedule, as 2 ranks started by the `zerorun` launcher over UCX (one core each).
# The loss heads for the corpus's entropy floor (printed beside it). Extra arguments go to
# zerorun-train (e.g. --steps 100, --deepspeed_config configs/zero2_bf16.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ZERORUN_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
ranks=${ZERORUN_DEMO_RANKS:-2}
echo "demo: zerorun-train on $ranks ranks (zerorun --num_procs $ranks --bind_cores_to_rank), built-in default config"
export ZERORUN_COMM_BACKEND=${ZERORUN_COMM_BACKEND:-ucx}
exec "$build/bin/zerorun" --num_procs "$ranks" --bind_cores_to_rank \
  "$build/bin/zerorun-train" --summary "${TMPDIR:-/tmp}/zerorun-demo-rank{rank}.json" "$@"
