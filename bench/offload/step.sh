#!/usr/bin/env bash
# Optimizer step time with offload, side by side in one run: the same zerorun-train job (bf16 GPT,
# AdamW, ZeRO stage 1, one rank) with offload_optimizer none, cpu and nvme, interleaved `reps` times;
# the engine's "step" timer (the boundary: overflow check, clip norm, the optimizer over the store,
# the refresh) from each run's summary, median per step. For nvme, the I/O lower bound: the bytes the
# store swaps per step (every sub-group written; read except what the buffers still hold) divided by
# fio's sequential write and read bandwidth (--ioengine=io_uring --direct=1 --fixedbufs --registerfiles,
# the same block size and queue depth as the store's aio settings, on the same directory, in every
# repetition, the better of its default and its huge-page buffers), and the ratio step/bound (target <= 1.2).
# fio is installed (apt-get) when missing, never by the test path. Run under `flock /work/bench.lock`.
#   bench/offload/step.sh [build-dir] [dir=/var/tmp] [reps=3] [steps=6]
#   MODEL="--n_layer 8 --n_head 8 --d_model 512 --seq_len 16 --vocab_size 64" overrides the model;
#   BUFFERS=2 the NVMe store's buffer_count (default 4, DeepSpeed's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
dir=${2:-/var/tmp}
reps=${3:-3}
steps=${4:-6}
model=${MODEL:-"--n_layer 8 --n_head 8 --d_model 512 --seq_len 16 --vocab_size 64"}
train=$build/bin/zerorun-train
[[ -x $train ]] || { echo "step.sh: $train not found" >&2; exit 1; }
if ! command -v fio >/dev/null; then
  echo "step.sh: installing fio (apt-get)"
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); else sudo_cmd=(); fi
  "${sudo_cmd[@]}" apt-get install -y -q fio >/dev/null
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); isa: $(grep -m1 -o 'avx512[a-z_]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "fs: $(df -T "$dir" | awk 'NR==2 {print $2}') at $dir; $(uname -sr)"
work=$(mktemp -d "$dir/zerorun-step-bench-XXXXXX")
huge_before=""
cleanup() {
  rm -rf "$work"
  if [[ -n $huge_before ]]; then echo "$huge_before" >/proc/sys/vm/nr_hugepages; fi
}
trap cleanup EXIT
# fio's best buffers: also on 2 MiB huge pages (--mem=shmhuge) where they can be reserved (root), as the
# store's pinned buffers are on transparent huge pages; the bound takes fio's faster figure.
fio_mems=("")
if [[ $(id -u) -eq 0 && -w /proc/sys/vm/nr_hugepages ]]; then
  huge_before=$(cat /proc/sys/vm/nr_hugepages)
  echo $((huge_before + 8)) >/proc/sys/vm/nr_hugepages
  if (( $(cat /proc/sys/vm/nr_hugepages) >= huge_before + 8 )); then fio_mems+=("--mem=shmhuge --hugepage-size=2m"); fi
fi
sub=1000000
cfg() {  # cfg NAME OFFLOAD_JSON
  cat >"$work/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 1, "reduce_bucket_size": $sub, "sub_group_size": $sub $2},
 "aio": {"block_size": 1048576, "queue_depth": 8}}
JSON
}
cfg none ""
cfg cpu ', "offload_optimizer": {"device": "cpu", "pin_memory": true}'
cfg nvme ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$work\", \"buffer_count\": ${BUFFERS:-4}, \"pipeline_read\": true, \"pipeline_write\": true}"
# fio bandwidth on the same directory, block size and queue depth as the store's aio section, measured
# in every repetition beside the three runs (the disk's speed drifts), the best of its buffer kinds.
fio_bw() {  # fio_bw write|read SIZE_MIB [fio options] -> bytes/s
  local rw=$1 mib=$2
  shift 2
  fio --name=bw --filename="$work/fio.dat" --size="${mib}M" --bs=1M --iodepth=8 --rw="$rw" \
      --ioengine=io_uring --direct=1 --fixedbufs=1 --registerfiles=1 --numjobs=1 --output-format=json "$@" 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$rw']['bw_bytes'])"
}
best_bw() {  # best_bw write|read SIZE_MIB -> bytes/s
  local best=0 bw
  for mem in "${fio_mems[@]}"; do
    # shellcheck disable=SC2086
    bw=$(fio_bw "$1" "$2" $mem)
    (( bw > best )) && best=$bw
  done
  echo "$best"
}
declare -A times
wbws="" rbws=""
for ((r = 0; r < reps; r++)); do
  for name in none cpu nvme; do
    "$train" --deepspeed_config "$work/$name.json" $model --steps "$steps" --log_every 1000 \
      --summary "$work/$name.$r.out" >/dev/null 2>"$work/$name.$r.err" || { cat "$work/$name.$r.err" >&2; exit 1; }
    ms=$(python3 -c "import json,sys; s=json.load(open('$work/$name.$r.out')); print(s['timers_ms']['step'] / $steps)")
    state=$(python3 -c "import json; s=json.load(open('$work/$name.$r.out')); m=s['memory_bytes']; print(sum(m[k]['current'] for k in ('master','optimizer')) or m['pinned']['current'])")
    times[$name]+="$ms "
    echo "rep $r $name: step $ms ms (master + optimizer, or offloaded: pinned host memory incl. the host gradients, $state B)"
  done
  bytes=$(python3 -c "import json; s=json.load(open('$work/none.0.out')); m=s['memory_bytes']; print(m['master']['current'] + m['optimizer']['current'])")
  mib=$((bytes / 1048576 + 1))
  wbw=$(best_bw write "$mib"); rbw=$(best_bw read "$mib")
  wbws+="$wbw " rbws+="$rbw "
  echo "rep $r fio (best of: default buffers${fio_mems[1]:+, huge pages}): write $(python3 -c "print(f'{$wbw/1e9:.3f}')") GB/s, read $(python3 -c "print(f'{$rbw/1e9:.3f}')") GB/s"
done
python3 - "$bytes" "$wbws" "$rbws" "${times[none]}" "${times[cpu]}" "${times[nvme]}" <<'PY'
import statistics as st, sys
state = int(sys.argv[1])
wbw = [float(x) for x in sys.argv[2].split()]
rbw = [float(x) for x in sys.argv[3].split()]
t = {n: [float(x) for x in sys.argv[i].split()] for i, n in ((4, "none"), (5, "cpu"), (6, "nvme"))}
med = {n: st.median(v) for n, v in t.items()}
# Per step the store writes every sub-group and reads all but the two the buffers still hold: ~ state each way.
bounds = [(state / w + state / r) * 1e3 for w, r in zip(wbw, rbw)]
ratios = [s / b for s, b in zip(t["nvme"], bounds)]
print(f"optimizer state {state} B; fio write {st.median(wbw)/1e9:.3f} GB/s, read {st.median(rbw)/1e9:.3f} GB/s (medians)")
print(f"median step: none {med['none']:.1f} ms, cpu {med['cpu']:.1f} ms (cpu/none {med['cpu']/med['none']:.2f}), "
      f"nvme {med['nvme']:.1f} ms")
print(f"nvme I/O lower bound {st.median(bounds):.1f} ms (per rep: {', '.join(f'{b:.1f}' for b in bounds)}); "
      f"nvme step / bound = {st.median(ratios):.2f} (median of the reps' ratios; target <= 1.2)")
PY
