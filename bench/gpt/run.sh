#!/usr/bin/env bash
# GPT forward+backward tokens/s: zerorun (bench_gpt) beside PyTorch on the same dims, same thread
# count, in the same run and interleaved (this host is shared: compare within one run, as ratios).
# Installs Debian's python3-torch and libopenblas0-openmp when missing (without the latter torch falls
# back to the reference BLAS and runs ~35x slower).
#   bench/gpt/run.sh [build-dir] [threads] [reps]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
threads=${2:-$(nproc)}
reps=${3:-3}
bench=$build/bin/bench_gpt
[[ -x $bench ]] || { echo "run.sh: $bench not found; build the bench_gpt target first" >&2; exit 1; }

need=()
/usr/bin/python3 -c "import torch" 2>/dev/null || need+=(python3-torch)
dpkg -s libopenblas0-openmp >/dev/null 2>&1 || need+=(libopenblas0-openmp)
if ((${#need[@]})); then
  echo "installing ${need[*]}"
  sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi

export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads ZERORUN_NUM_THREADS=$threads
# On an oversubscribed host OpenMP's spin-waiting workers (PyTorch) lose far more than a pool that
# sleeps (zerorun): there, let PyTorch's workers sleep too, unless the caller chose a policy.
load=$(cut -d' ' -f1 /proc/loadavg)
if [[ -z ${OMP_WAIT_POLICY:-} ]] && awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l > n) }'; then
  export OMP_WAIT_POLICY=PASSIVE
fi
echo "load average $load on $(nproc) CPUs; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-default}"
dims=(--layers 4 --dim 256 --heads 4 --seq 128 --vocab 256 --batch 8)
tps() { awk '/^tokens_per_s/ {print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A res
for ((r = 1; r <= reps; r++)); do
  for dt in fp32 bf16; do
    res[zr_$dt]+="$("$bench" --dtype "$dt" --threads "$threads" --iters 10 "${dims[@]}" | tps) "
    # torch bf16 on a CPU without bf16 arithmetic is ~40x slower: fewer iterations.
    it=10; [[ $dt == bf16 ]] && it=2
    res[pt_$dt]+="$(/usr/bin/python3 "$here/torch_gpt.py" --dtype "$dt" --threads "$threads" --iters $it --warmup 1 "${dims[@]}" | tps) "
  done
done

echo "GPT fwd+bwd, 4 layers, d 256, 4 heads, T 128, V 256, B 8, threads $threads, median of $reps interleaved runs"
printf "%-6s %14s %14s %8s\n" dtype zerorun_tok/s torch_tok/s ratio
for dt in fp32 bf16; do
  z=$(tr ' ' '\n' <<<"${res[zr_$dt]}" | grep . | median)
  p=$(tr ' ' '\n' <<<"${res[pt_$dt]}" | grep . | median)
  printf "%-6s %14.1f %14.1f %8.2f\n" "$dt" "$z" "$p" "$(awk -v a="$z" -v b="$p" 'BEGIN {print a / b}')"
done
zf=$(tr ' ' '\n' <<<"${res[zr_fp32]}" | grep . | median)
zb=$(tr ' ' '\n' <<<"${res[zr_bf16]}" | grep . | median)
printf "zerorun bf16 / zerorun fp32: %.2f\n" "$(awk -v a="$zb" -v b="$zf" 'BEGIN {print a / b}')"
