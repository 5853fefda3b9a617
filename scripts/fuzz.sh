#!/usr/bin/env bash
# Fuzzes zerorun's parsers of outside input with libFuzzer + ASan + UBSan, each for a bounded time:
#   config    DeepSpeed JSON configs (tests/fuzz/config_fuzz.cc)
#   hostfile  hostfiles, include/exclude filters, core lists, --world_info, .zerorun_env
#   store     the rendezvous store server's wire protocol (tests/fuzz/store_protocol_fuzz.cc)
#   shard     llm.c token shard files (tests/fuzz/shard_fuzz.cc)
# Usage: scripts/fuzz.sh [SECONDS_EACH] [TARGET...]   (default 30 s; all four targets)
# Builds with clang in its own build dir (ZERORUN_FUZZ_BUILD_DIR, default build-fuzz/), seeds each
# corpus (configs/*.json and small valid inputs), and exits non-zero when libFuzzer reports a crash,
# leak, timeout or sanitizer error (the reproducer is left in the build dir's fuzz/ as crash-* etc.).
set -euo pipefail
secs="${1:-30}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: $0 [SECONDS_EACH] [config|hostfile|store|shard...]  (got '$secs')" >&2
  exit 2
fi
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(config hostfile store shard)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bdir="${ZERORUN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${ZERORUN_JOBS:-2}"
for tool in clang clang++ cmake ninja; do
  command -v "$tool" > /dev/null || { echo "fuzz: '$tool' not found (install clang, cmake, ninja-build)" >&2; exit 2; }
done
declare -A exe=([config]=zr_fuzz_config [hostfile]=zr_fuzz_hostfile [store]=zr_fuzz_store_protocol [shard]=zr_fuzz_shard)
build=()
for t in "${targets[@]}"; do
  [[ -n "${exe[$t]:-}" ]] || { echo "fuzz: unknown target '$t' (config, hostfile, store, shard)" >&2; exit 2; }
  build+=("${exe[$t]}")
done

mkdir -p "$bdir"
cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZERORUN_FUZZ=ON -DZERORUN_CUDA=OFF -DZERORUN_BENCH=OFF > "$bdir/cmake.log" 2>&1 ||
  { cat "$bdir/cmake.log" >&2; exit 1; }
ninja -C "$bdir" -j"$jobs" "${build[@]}"

# Little-endian bytes for printf: le32 20240520 -> \x88\xd8\x34\x01
le32() { local v=$1; printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((v & 255)) $(((v >> 8) & 255)) $(((v >> 16) & 255)) $(((v >> 24) & 255)); }

seed() {  # seed TARGET: fills $bdir/fuzz/TARGET-corpus
  local dir="$bdir/fuzz/$1-corpus" i=0
  mkdir -p "$dir"
  case $1 in
    config)  # first byte = load options (world size 1-8 etc., see config_fuzz.cc)
      for f in "$root"/configs/*.json; do
        { printf "\\x$(printf '%02x' $((i % 8)))"; cat "$f"; } > "$dir/seed-$(basename "$f")"
        i=$((i + 1))
      done ;;
    hostfile)
      printf '\x00worker-1 slots=4\nworker-2 slots=2\n# c\n\nworker-1:0,2@worker-2' > "$dir/hostfile-include"
      printf '\x04worker-1 slots=4\nworker-2 slots=2\n\nworker-2:1' > "$dir/hostfile-exclude"
      printf '\x010-3,5,7-9' > "$dir/ranges"
      printf '\x02gpu;h1:0,1@h2:0,1,2' > "$dir/world-info"
      printf '\x03# comment\nexport NCCL_DEBUG=INFO\nDATA_DIR="/data/my set"\n' > "$dir/env-file" ;;
    store)  # events: op len bytes (see store_protocol_fuzz.cc); frames: u32 len, opcode, fields
      printf '\x04\x0f\x0b\x00\x00\x00\x02\x01\x00\x00\x00k\x01\x00\x00\x00v\x10\x00' > "$dir/set"
      printf '\x05\x12\x0e\x00\x00\x00\x03\x01\x00\x00\x00k\x64\x00\x00\x00\x00\x00\x00\x00\x04\x0f\x0b\x00\x00\x00\x02\x01\x00\x00\x00k\x01\x00\x00\x00v\x11\x00\x0c\x05' > "$dir/get-then-set"
      printf '\x04\x11\x0d\x00\x00\x00\x0a\x01\x00\x00\x00d\x03\x00\x00\x00bye\x08\x00\x05\x12\x0e\x00\x00\x00\x03\x01\x00\x00\x00d\x10\x27\x00\x00\x00\x00\x00\x00\x11\x00' > "$dir/on-disconnect" ;;
    shard)
      local header tokens=""
      header="$(le32 20240520)$(le32 1)$(le32 4)"
      for _ in $(seq 1 253); do header+="$(le32 0)"; done
      local tok
      for tok in 1 2 3 250; do tokens+="$(printf '\\x%02x\\x%02x' $((tok & 255)) $((tok >> 8)))"; done
      printf "\\x00$header$tokens" > "$dir/shard-4-tokens"
      printf "\\x00$header" > "$dir/shard-truncated" ;;
  esac
}

cd "$bdir"
mkdir -p fuzz
cd fuzz
for t in "${targets[@]}"; do
  seed "$t"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  case $t in
    config) args+=(-max_len=16384 -dict="$root/tests/fuzz/config.dict") ;;
    shard) args+=(-max_len=8192) ;;
    *) args+=(-max_len=4096) ;;
  esac
  echo "fuzz: running ${exe[$t]} for ${secs}s (corpus $bdir/fuzz/$t-corpus)"
  "$bdir/bin/${exe[$t]}" "${args[@]}" "$bdir/fuzz/$t-corpus"
done
