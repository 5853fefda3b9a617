#!/usr/bin/env bash
# Training tokens/s (forward + backward + AdamW step) of the benchmark GPT (4 layers, d 256, 4 heads,
# T 128, V 256, batch 8): zerorun's engine (bench_train, ZeRO stage 0 on one rank) beside PyTorch
# running the same model with torch.optim.AdamW (bench/gpt/torch_gpt.py --train), fp32 and bf16, the
# same thread count, interleaved in one run (this host is shared: compare ratios within one run).
# bf16: zerorun keeps bf16 weights with fp32 master/optimizer state; torch runs fp32 weights under
# torch.autocast('cpu', torch.bfloat16), as users do. Installs Debian's python3-torch and
# libopenblas0-openmp when missing (without the latter torch falls back to the reference BLAS).
# torch runs twice: as users run it (libgomp's default spin-waiting) and with OMP_WAIT_POLICY=passive;
# on a loaded host the spinning threads of the first lose their core and torch slows down several-fold,
# so the second is the fairer baseline there (zerorun's thread pool sleeps when idle).
#   bench/train/run.sh [build-dir] [threads] [reps]     (needs: ninja -C build bench_train)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
cores=$(nproc --all)
threads=${2:-$cores}
reps=${3:-3}
bench=$build/bin/bench_train
[[ -x $bench ]] || { echo "run.sh: $bench not found; build the bench_train target first" >&2; exit 1; }

need=()
/usr/bin/python3 -c "import torch" 2>/dev/null || need+=(python3-torch)
dpkg -s libopenblas0-openmp >/dev/null 2>&1 || need+=(libopenblas0-openmp)
if ((${#need[@]})); then
  echo "installing ${need[*]}"
  sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi

export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads ZERORUN_NUM_THREADS=$threads
dims=(--layers 4 --dim 256 --heads 4 --seq 128 --vocab 256 --batch 8)
tps() { awk '/^tokens_per_s/ {print $2}'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A res
for ((r = 1; r <= reps; r++)); do
  for dt in fp32 bf16; do
    out=$("$bench" --dtype "$dt" --threads "$threads" --iters 3 --warmup 1 "${dims[@]}" 2>/dev/null)
    echo "  rep $r: ${out%%$'\n'*}" >&2
    res[zr_$dt]+="$(tps <<<"$out") "
    # torch bf16 on a CPU without bf16 arithmetic is many times slower than fp32: one timed step, no
    # warm-up (a step takes seconds; its first-step overheads are lost in that).
    it=(--iters 3 --warmup 1); [[ $dt == bf16 ]] && it=(--iters 1 --warmup 0)
    for wait in default passive; do
      env=(); [[ $wait == passive ]] && env=(OMP_WAIT_POLICY=passive)
      out=$(env "${env[@]}" /usr/bin/python3 "$here/../gpt/torch_gpt.py" --train --dtype "$dt" --threads "$threads" \
        "${it[@]}" "${dims[@]}")
      echo "  rep $r: ${out%%$'\n'*} [OMP wait $wait]" >&2
      res[pt_${wait}_$dt]+="$(tps <<<"$out") "
    done
  done
done

echo "GPT training step (fwd+bwd+AdamW), 4 layers, d 256, 4 heads, T 128, V 256, B 8, threads $threads, median of $reps interleaved runs"
printf "%-6s %14s | %14s %8s | %16s %8s\n" dtype zerorun_tok/s torch_tok/s ratio torch_passive ratio
div() { awk -v a="$1" -v b="$2" 'BEGIN {print a / b}'; }
for dt in fp32 bf16; do
  z=$(median <<<"${res[zr_$dt]}")
  p=$(median <<<"${res[pt_default_$dt]}")
  q=$(median <<<"${res[pt_passive_$dt]}")
  printf "%-6s %14.1f | %14.1f %8.2f | %16.1f %8.2f\n" "$dt" "$z" "$p" "$(div "$z" "$p")" "$q" "$(div "$z" "$q")"
done
echo "ratio = zerorun / torch; torch_passive: the same torch run with OMP_WAIT_POLICY=passive"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $cores cores"
