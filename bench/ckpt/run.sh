#!/usr/bin/env bash
# Training-checkpoint save and load throughput of zerorun-train (Engine::SaveCheckpoint/LoadCheckpoint,
# one rank) beside fio on the same directory, interleaved, as ratios. The model: a GPT of
# 6 layers x d 768 (42.9M parameters, fp32 + AdamW: ~515 MB of weights, exp_avg, exp_avg_sq). fio
# writes the checkpoint's byte count as one file sequentially with an fsync at the end, the best of
# four ways (buffered 1 MiB writes, the same with --sync_file_range=write:8 as zerorun's buffered
# writer does, O_DIRECT 1 MiB writes, O_DIRECT 4 MiB writes two in flight on io_uring; zerorun's own
# default is O_DIRECT 2 MiB writes eight in flight on io_uring), and reads it back the best of three ways (1 MiB buffered reads, O_DIRECT 1 MiB
# reads, O_DIRECT 4 MiB reads four in flight on io_uring); the page cache is dropped before every load
# and every fio read (root), so both read the disk. Two loads: the default (verify every byte, then apply)
# and the one-pass load (--load_one_pass).
#   bench/ckpt/run.sh [build-dir] [dir on the disk to measure (default /var/tmp)] [rounds (default 3)]
# Also the time an asynchronous save (checkpoint.writer.decoupled) blocks training, at a process's first
# save and at its next one, against the synchronous
# save. Installs fio when missing (Debian, root or sudo).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
base=${2:-/var/tmp}
rounds=${3:-3}
train=$build/bin/zerorun-train
[[ -x $train ]] || { echo "run.sh: $train not found; build zerorun-train first" >&2; exit 1; }
if ! command -v fio >/dev/null; then
  echo "installing fio"
  sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends fio >/dev/null
fi
drop=0
[[ $(id -u) == 0 ]] && drop=1
dropcache() { if ((drop)); then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }
work=$(mktemp -d "$base/zr-ckpt-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "zero_optimization": {"stage": 0}}
JSON
# The same job with DeepSpeed's decoupled writer: every save asynchronous (the call returns after the
# snapshot into host memory; the files are written in the background).
python3 - "$work/ds.json" "$work/ds_async.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["checkpoint"] = {"writer": {"decoupled": True}}
json.dump(c, open(sys.argv[2], "w"))
PY
model=(--n_layer 6 --d_model 768 --n_head 12 --seq_len 32 --vocab_size 256 --log_every 1)
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; disk: $(df -hT "$base" | awk 'NR==2 {print $2, $1}') at $base"
echo "# fio $(fio --version); page cache dropped before reads: $([[ $drop == 1 ]] && echo yes || echo 'no (not root): reads may come from the cache')"
results=$work/results.txt
: > "$results"
for round in $(seq "$rounds"); do
  rm -rf "$work/ck" "$work/cka" "$work/fio"
  # The time an asynchronous save blocks training (the save call), against the synchronous one below.
  # Two saves (steps 2 and 4): the first snapshot lands in memory the process never touched, the
  # second in the first's freed buffers (the host allocator's cache), as in a run that saves regularly.
  out=$("$train" --deepspeed_config "$work/ds_async.json" "${model[@]}" --steps 4 --save_interval 2 --save_dir "$work/cka" 2>&1)
  line=$(grep '^saved checkpoint' <<< "$out" | sed -n 1p)
  line2=$(grep '^saved checkpoint' <<< "$out" | sed -n 2p)
  [[ -n $line && -n $line2 ]] || { echo "$out" | tail -5; exit 1; }
  async_s=$(sed -E 's/.*background, ([0-9.]+) s.*/\1/' <<< "$line")
  async2_s=$(sed -E 's/.*background, ([0-9.]+) s.*/\1/' <<< "$line2")
  # The second save first finishes the first one's files when they are still being written (two
  # steps of this model are shorter than the write): that wait is printed apart and taken out here.
  wait2_s=0
  if [[ $line2 =~ of\ which\ ([0-9.]+)\ s\ finishing ]]; then wait2_s=${BASH_REMATCH[1]}; fi
  async2_s=$(python3 -c "print(f'{max(0.0, $async2_s - $wait2_s):.3f}')")
  [[ -f $work/cka/latest ]] || { echo "run.sh: the asynchronous save left no latest" >&2; exit 1; }
  rm -rf "$work/cka"
  out=$("$train" --deepspeed_config "$work/ds.json" "${model[@]}" --steps 1 --save_dir "$work/ck" 2>&1)
  line=$(grep -m1 '^saved checkpoint' <<< "$out") || { echo "$out" | tail -5; exit 1; }
  bytes=$(sed -E 's/.*wrote ([0-9]+) bytes.*/\1/' <<< "$line")
  save_s=$(sed -E 's/.*bytes, ([0-9.]+) s.*/\1/' <<< "$line")
  total=$(du -sb "$work/ck" | cut -f1)
  mkdir -p "$work/fio"
  # fio's best of four: buffered 1 MiB writes, the same with sync_file_range(WRITE) every 8 MiB
  # (writeback started while it writes, as zerorun's writer does), O_DIRECT 1 MiB writes, and O_DIRECT
  # 4 MiB writes two in flight on io_uring (the peer's best, whichever it is on the disk measured).
  fw=0
  for extra in "--bs=1M --ioengine=psync --direct=0" "--bs=1M --ioengine=psync --direct=0 --sync_file_range=write:8" \
               "--bs=1M --ioengine=psync --direct=1" "--bs=4M --ioengine=io_uring --iodepth=2 --direct=1"; do
    rm -rf "$work/fio"/*
    bw=$(fio --name=ckpt --directory="$work/fio" --rw=write --size="$total" --end_fsync=1 $extra --output-format=json \
           | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["write"]; print(j["io_bytes"]/ (j["runtime"]/1e3))')
    fw=$(python3 -c "print(max($fw, $bw))")
  done
  dropcache
  out=$("$train" --deepspeed_config "$work/ds.json" "${model[@]}" --steps 1 --load_dir "$work/ck" 2>&1)
  line=$(grep -m1 '^resumed from' <<< "$out") || { echo "$out" | tail -5; exit 1; }
  load_s=$(sed -E 's/.*loaded in ([0-9.]+) s.*/\1/' <<< "$line")
  # The one-pass load (--load_one_pass: each block read once, past the page cache, checked as it is
  # applied; a damaged checkpoint leaves the run partly loaded).
  dropcache
  out=$("$train" --deepspeed_config "$work/ds.json" "${model[@]}" --steps 1 --load_dir "$work/ck" --load_one_pass 2>&1)
  line=$(grep -m1 '^resumed from' <<< "$out") || { echo "$out" | tail -5; exit 1; }
  load1_s=$(sed -E 's/.*loaded in ([0-9.]+) s.*/\1/' <<< "$line")
  # fio's best of three reads of the file it wrote: buffered 1 MiB reads (from a dropped page cache),
  # O_DIRECT 1 MiB reads, and O_DIRECT 4 MiB reads four in flight on io_uring.
  fr=0
  for extra in "--bs=1M --ioengine=psync --direct=0" "--bs=1M --ioengine=psync --direct=1" \
               "--bs=4M --ioengine=io_uring --iodepth=4 --direct=1"; do
    dropcache
    bw=$(fio --name=ckpt --directory="$work/fio" --rw=read --size="$total" $extra --output-format=json \
           | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(j["io_bytes"]/ (j["runtime"]/1e3))')
    fr=$(python3 -c "print(max($fr, $bw))")
  done
  echo "$round $bytes $total $save_s $fw $load_s $fr $async_s $async2_s $wait2_s $load1_s" >> "$results"
  echo "round $round: checkpoint $total bytes (rank 0 wrote $bytes); save $save_s s (async: blocked $async_s s, the next save $async2_s s after $wait2_s s finishing the first), fio write $(python3 -c "print(f'{$fw/1e9:.3f}')") GB/s; load $load_s s (one pass: $load1_s s), fio read $(python3 -c "print(f'{$fr/1e9:.3f}')") GB/s"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
save = [r[2] / r[3] for r in rows]; fw = [r[4] for r in rows]
load = [r[2] / r[5] for r in rows]; fr = [r[6] for r in rows]
med = statistics.median
print(f"save: zerorun {med(save)/1e9:.3f} GB/s, fio write {med(fw)/1e9:.3f} GB/s, ratio {med([a/b for a, b in zip(save, fw)]):.2f} (median of {len(rows)} interleaved rounds)")
print(f"load: zerorun {med(load)/1e9:.3f} GB/s, fio read  {med(fr)/1e9:.3f} GB/s, ratio {med([a/b for a, b in zip(load, fr)]):.2f} "
      "(the default load: every byte verified before anything is applied, then read again)")
load1 = [r[2] / r[10] for r in rows]
print(f"load, one pass (--load_one_pass): zerorun {med(load1)/1e9:.3f} GB/s, ratio {med([a/b for a, b in zip(load1, fr)]):.2f}")
print(f"async save: training blocked {med([r[7] for r in rows]):.3f} s (the process's first save) and {med([r[8] for r in rows]):.3f} s "
      f"(its next, not counting the {med([r[9] for r in rows]):.3f} s it first waited for the previous save's files) "
      f"against {med([r[3] for r in rows]):.3f} s for the synchronous save, "
      f"ratios {med([r[7] / r[3] for r in rows]):.2f} and {med([r[8] / r[3] for r in rows]):.2f}")
print("zerorun's figures are the checkpoint directory's bytes over the whole SaveCheckpoint / LoadCheckpoint call "
      "(gathering, checksums, fsyncs, the manifest and latest; the load also verifies and scatters into the engine)")
PY
