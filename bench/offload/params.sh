#!/usr/bin/env bash
# Parameter offload (ZeRO-3 offload_param) step time, side by side in one run: the same zerorun-train
# job (bf16 GPT, AdamW, ZeRO stage 3, one rank, every parameter gathered on demand) with offload_param
# none, cpu and nvme, interleaved `reps` times; per step the forward + backward + step timers from each
# run's summary (the whole training step), median over the runs, and the ratios to none. For nvme also
# the bytes its store moved are implied: every shard is read in forward and backward and written once
# per step. Run under `flock /work/bench.lock` (2 cores: nothing else at the same time).
#   bench/offload/params.sh [build-dir] [dir=/var/tmp] [reps=3] [steps=6]
#   MODEL="--n_layer 8 --n_head 8 --d_model 512 --seq_len 16 --vocab_size 64" overrides the model;
#   PREFETCH=E sets stage3_prefetch_bucket_size (default DeepSpeed's 5e7: this model's whole forward is
#   gathered at its first module; a smaller window lets nvme read the next window's shards during the
#   current one).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
dir=${2:-/var/tmp}
reps=${3:-3}
steps=${4:-6}
model=${MODEL:-"--n_layer 8 --n_head 8 --d_model 512 --seq_len 16 --vocab_size 64"}
prefetch=${PREFETCH:-50000000}
train=$build/bin/zerorun-train
[[ -x $train ]] || { echo "params.sh: $train not found" >&2; exit 1; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); isa: $(grep -m1 -o 'avx512[a-z_]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "fs: $(df -T "$dir" | awk 'NR==2 {print $2}') at $dir; $(uname -sr); model: $model; prefetch $prefetch"
work=$(mktemp -d "$dir/zerorun-param-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
cfg() {  # cfg NAME OFFLOAD_JSON
  cat >"$work/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000000, "sub_group_size": 1000000,
   "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": $prefetch $2},
 "aio": {"block_size": 1048576, "queue_depth": 8}}
JSON
}
cfg none ""
cfg cpu ', "offload_param": {"device": "cpu", "pin_memory": true}'
cfg nvme ", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$work\", \"buffer_count\": 5}"
declare -A times
for ((r = 0; r < reps; r++)); do
  for name in none cpu nvme; do
    "$train" --deepspeed_config "$work/$name.json" $model --steps "$steps" --log_every 1000 \
      --summary "$work/$name.$r.out" >/dev/null 2>"$work/$name.$r.err" || { cat "$work/$name.$r.err" >&2; exit 1; }
    ms=$(python3 -c "import json; t=json.load(open('$work/$name.$r.out'))['timers_ms']; print((t['forward'] + t['backward'] + t['step']) / $steps)")
    params=$(python3 -c "import json; m=json.load(open('$work/$name.$r.out'))['memory_bytes']; print(m['params']['current'], m['pinned']['current'])")
    times[$name]+="$ms "
    echo "rep $r $name: step $ms ms (params / pinned bytes now: $params)"
  done
done
python3 - "${times[none]}" "${times[cpu]}" "${times[nvme]}" <<'PY'
import statistics as st, sys
med = {n: st.median(float(x) for x in sys.argv[i].split()) for i, n in ((1, "none"), (2, "cpu"), (3, "nvme"))}
print(f"median step (forward + backward + step): none {med['none']:.1f} ms, cpu {med['cpu']:.1f} ms "
      f"(cpu/none {med['cpu']/med['none']:.2f}), nvme {med['nvme']:.1f} ms (nvme/none {med['nvme']/med['none']:.2f})")
PY
