#!/usr/bin/env bash
# Fuzzes the config loader (tests/fuzz/config_fuzz.cc) with libFuzzer + ASan + UBSan for a bounded time.
#   scripts/fuzz-config.sh [SECONDS]     (default 60)
# Builds with clang in its own build dir (ZERORUN_FUZZ_BUILD_DIR, default build-fuzz/), seeds the corpus
# from configs/*.json, and exits non-zero when libFuzzer reports a crash, leak, timeout or sanitizer error
# (the reproducer is left in the build dir as crash-*/leak-*/timeout-*).
set -euo pipefail
secs="${1:-60}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: $0 [SECONDS]  (a positive number of seconds; got '$secs')" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bdir="${ZERORUN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${ZERORUN_JOBS:-2}"
for tool in clang clang++ cmake ninja; do
  command -v "$tool" > /dev/null || { echo "fuzz-config: '$tool' not found (install clang, cmake, ninja-build)" >&2; exit 2; }
done

mkdir -p "$bdir"
cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZERORUN_FUZZ=ON -DZERORUN_CUDA=OFF -DZERORUN_BENCH=OFF > "$bdir/cmake.log" 2>&1 ||
  { cat "$bdir/cmake.log" >&2; exit 1; }
ninja -C "$bdir" -j"$jobs" zr_fuzz_config

corpus="$bdir/fuzz/config-corpus"
mkdir -p "$corpus"
i=0
for f in "$root"/configs/*.json; do
  # first byte = load options (world size 1-8 etc., see config_fuzz.cc)
  { printf "\\x$(printf '%02x' $((i % 8)))"; cat "$f"; } > "$corpus/seed-$(basename "$f")"
  i=$((i + 1))
done
cd "$bdir/fuzz"
echo "fuzz-config: running zr_fuzz_config for ${secs}s (corpus $corpus)"
"$bdir/bin/zr_fuzz_config" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
  -dict="$root/tests/fuzz/config.dict" -print_final_stats=1 "$corpus"
