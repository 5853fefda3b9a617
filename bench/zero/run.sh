#!/usr/bin/env bash
# ZeRO stages 0-3 side by side at 2 and 4 ranks on the benchmark GPT (4 layers, d 256, 4 heads, T 128,
# V 256, micro batch 8 per rank, bf16 with fp32 master weights and AdamW state = the ZeRO paper's
# mixed-precision Adam): step time, model-state memory by category and bytes sent per rank per step,
# each beside the paper's expectation (memory 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N bytes; traffic 2Ψ, 2Ψ, 2Ψ,
# 3Ψ elements in (N-1)/N units, ×2 bytes for bf16). Every run goes through the launcher over UCX:
#   zerorun --num_procs N [--bind_cores_to_rank] zerorun-train --deepspeed_config <stage>.json ...
# with the per-rank JSON summaries as the source. Ranks beyond the core count cannot be bound (the
# launcher refuses): they run unbound with one thread each and the output says they are oversubscribed
# (memory and bytes do not depend on speed; step times then do not mean much).
# Overlap of communication with computation: per run, the time collectives took (comm_bytes.*.seconds)
# beside the time the engine waited for them (timers backward_allreduce + allgather, + gather_wait at
# stage 3); and at 2 ranks with a reduce_bucket_size of 2^19 (the model is several buckets; DeepSpeed's
# default 5e8 makes it one, which nothing can overlap) stage 2 with "overlap_comm": false vs default and
# stage 3 with stage3_prefetch_bucket_size 0 vs default.
# Collectives per step are counted by op (e.g. stages 1/2: one reduce-scatter and one all-gather per
# gradient bucket).
# Before/after: with ZR_BENCH_BASE=<dir> (another build's directory holding bin/zerorun,
# bin/zerorun-train and libzerorun.so*, e.g. the previous main), every stage run at 2 and 4 ranks and
# stage 2 with several buckets is also run with that build, interleaved (the order alternates per
# rep), and a table gives step time, bytes, collectives per step and bucket peaks of both side by side.
#   bench/zero/run.sh [build-dir] [steps] [reps]   (needs: ninja -C build zerorun_cli zerorun-train)
# Step time: median over the steps after the first (from rank 0's per-step progress), median over reps.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
steps=${2:-4}
reps=${3:-1}
launcher=$build/bin/zerorun
train=$build/bin/zerorun-train
for b in "$launcher" "$train"; do
  [[ -x $b ]] || { echo "run.sh: $b not found; build zerorun_cli and zerorun-train first" >&2; exit 1; }
done
base=${ZR_BENCH_BASE:-}
if [[ -n $base ]]; then
  for b in "$base/bin/zerorun" "$base/bin/zerorun-train"; do
    [[ -x $b ]] || { echo "run.sh: ZR_BENCH_BASE=$base: $b not found" >&2; exit 1; }
  done
fi
((steps >= 2)) || { echo "run.sh: steps must be >= 2 (the first step is warm-up)" >&2; exit 2; }
cores=$(nproc --all)
work=$(mktemp -d /tmp/zr_bench_zero.XXXXXX)
trap 'rm -rf "$work"' EXIT
unset ZERORUN_NUM_THREADS  # the launcher's OMP_NUM_THREADS must decide the threads per rank
export ZERORUN_COMM_BACKEND=ucx

for stage in 0 1 2 3; do
  # Persistence threshold 0: every parameter is partitioned at stage 3 (DeepSpeed's default 1e5 would
  # keep this small model's 64 K-element matrices whole on every rank).
  cat >"$work/stage$stage.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}},
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0}}
JSON
done

# Stage 3 with nothing kept gathered between a module's forward and its backward: the paper's 3Ψ
# (DeepSpeed's default stage3_max_reuse_distance keeps this small model gathered through backward).
sed "s/\"stage\": 3,/\"stage\": 3, \"stage3_max_reuse_distance\": 0,/" "$work/stage3.json" >"$work/stage3nr.json"

# allgather_bucket_size at stages 1/2: the same run with the parameter gather in chunks of 2^17 elements
# (pipelined with the optimizer through staging buffers) instead of one gather per group.
agb=131072
for stage in 1 2; do
  sed "s/\"stage\": $stage,/\"stage\": $stage, \"allgather_bucket_size\": $agb,/" \
    "$work/stage$stage.json" >"$work/stage${stage}agb.json"
done

# Overlap on and off at 2 ranks, with several gradient buckets per step.
rbs=524288
sed "s/\"stage\": 2,/\"stage\": 2, \"reduce_bucket_size\": $rbs,/" "$work/stage2.json" >"$work/stage2rb.json"
sed "s/\"stage\": 2,/\"stage\": 2, \"reduce_bucket_size\": $rbs, \"overlap_comm\": false,/" "$work/stage2.json" \
  >"$work/stage2rbsync.json"
sed "s/\"stage\": 3,/\"stage\": 3, \"reduce_bucket_size\": $rbs,/" "$work/stage3.json" >"$work/stage3rb.json"
sed "s/\"stage\": 3,/\"stage\": 3, \"reduce_bucket_size\": $rbs, \"stage3_prefetch_bucket_size\": 0,/" \
  "$work/stage3.json" >"$work/stage3rbnopf.json"
osteps=$((steps > 8 ? steps : 8))  # these compare step times: a few more steps

model=(--n_layer 4 --d_model 256 --n_head 4 --seq_len 128 --vocab_size 256)
# run <tag> <n> <config> <steps> <launcher> <train> [env...]: one launcher job, summaries into $work.
run() {
  local tag=$1 n=$2 cfg=$3 nsteps=$4 l=$5 t=$6
  shift 6
  local bind=(--bind_cores_to_rank)
  if ((n > cores)); then bind=(); fi
  if ! env "$@" OMP_NUM_THREADS=1 "$l" --num_procs "$n" "${bind[@]}" "$t" \
      --deepspeed_config "$work/$cfg.json" --steps "$nsteps" --log_every 1 "${model[@]}" \
      --summary "$work/${tag}_{rank}.json" >"$work/$tag.log" 2>&1; then
    echo "run.sh: $tag ($n ranks, $cfg) failed; its output:" >&2
    tail -30 "$work/$tag.log" >&2
    exit 1
  fi
}
for ((r = 1; r <= reps; r++)); do
  for n in 2 4; do
    stages=(0 1 2 3 3nr)
    if ((n == 2)); then stages+=(1agb 2agb 2rb 2rbsync 3rb 3rbnopf); fi
    for stage in "${stages[@]}"; do
      tag="n${n}_s${stage}_r${r}"
      nsteps=$steps
      if [[ $stage == *rb* ]]; then nsteps=$osteps; fi
      echo "rep $r: $n ranks, stage $stage ..." >&2
      with_base=0
      if [[ -n $base ]] && [[ $stage =~ ^(0|1|2|3|3nr|2rb)$ ]]; then with_base=1; fi
      if ((with_base && r % 2 == 0)); then
        run "b_$tag" "$n" "stage$stage" "$nsteps" "$base/bin/zerorun" "$base/bin/zerorun-train" LD_LIBRARY_PATH="$base"
      fi
      run "$tag" "$n" "stage$stage" "$nsteps" "$launcher" "$train"
      if ((with_base && r % 2 == 1)); then
        run "b_$tag" "$n" "stage$stage" "$nsteps" "$base/bin/zerorun" "$base/bin/zerorun-train" LD_LIBRARY_PATH="$base"
      fi
    done
  done
done

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512_bf16|amx_bf16)$' | tr '\n' ' ')
echo "CPU: $cpu; ISA flags: $isa; zerorun kernels: ${ZERORUN_ISA:-the best of these (chosen at run time)}"
/usr/bin/python3 - "$work" "$steps" "$reps" "$cores" "$agb" "$osteps" "$rbs" "${base:-}" <<'PY'
import glob, json, re, statistics, sys
work, steps, reps, cores, agb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
osteps, rbs, base_dir = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
MiB = 1 << 20

def step_ms(log, tokens):
    # rank 0 prints the cumulative global tokens/s after every step: t_k = tokens * k / tps_k.
    t = {}
    for m in re.finditer(r"step\s+(\d+)/\d+ .*?\|\s+(\d+) tokens/s", open(log).read()):
        k, tps = int(m.group(1)), float(m.group(2))
        t[k] = tokens * k / tps
    d = [t[k] - t[k - 1] for k in sorted(t) if k - 1 in t and k >= 2]
    return 1e3 * statistics.median(d)

rows = []
for n in (2, 4):
    for stage in (0, 1, 2, 3, "3nr"):
        base = int(str(stage)[0])
        times, summ = [], None
        for r in range(1, reps + 1):
            tag = f"n{n}_s{stage}_r{r}"
            ranks = [json.load(open(f)) for f in sorted(glob.glob(f"{work}/{tag}_*.json"))]
            assert len(ranks) == n, (tag, len(ranks))
            tokens = ranks[0]["micro_batch"] * ranks[0]["seq_len"] * n
            times.append(step_ms(f"{work}/{tag}.log", tokens))
            summ = ranks
        psi = summ[0]["parameters"]
        cur = lambda s, c: s["memory_bytes"][c]["current"]
        peak = lambda s, c: s["memory_bytes"][c]["peak"]
        cats = ("params", "grads", "master", "optimizer")
        ms = max(sum(cur(s, c) for c in cats) for s in summ)   # model states after a step, worst rank
        sent = statistics.mean(sum(v["bytes_sent"] for v in s["comm_bytes"].values()) for s in summ) / steps
        unit = psi * (n - 1) / n * 2                           # Ψ(N-1)/N bf16 elements, in bytes
        want_mem = {0: 16 * psi, 1: 4 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n, 3: 16 * psi / n}[base]
        want_k = {0: 2, 1: 2, 2: 2, 3: 3}[base]
        rows.append(dict(n=n, stage=stage, ms=statistics.median(times), tps=tokens / (statistics.median(times) / 1e3),
                         cats={c: max(cur(s, c) for s in summ) for c in cats}, ms_total=ms, want_mem=want_mem,
                         buckets=max(peak(s, "buckets") for s in summ), act=max(peak(s, "activations") for s in summ),
                         peak_total=max(s["memory_bytes"]["peak_total"] for s in summ), sent=sent, k=sent / unit,
                         want_k=want_k, loss=summ[0]["final_loss"],
                         ops=" ".join(f"{k} {statistics.mean(s['comm_bytes'][k]['bytes_sent'] for s in summ) / steps / unit:.3f}"
                                      for k in sorted(summ[0]["comm_bytes"]) if k != "all_reduce" or stage == 0),
                         calls=" ".join(f"{k} {summ[0]['comm_bytes'][k]['calls'] / steps:g}" for k in sorted(summ[0]["comm_bytes"]))))

psi = summ[0]["parameters"]
print(f"ZeRO stages on the benchmark GPT: Ψ = {psi} parameters, bf16 weights/grads, fp32 master + AdamW, "
      f"micro batch 8 x T 128 per rank, UCX, {steps} steps ({steps - 1} timed), median of {reps} run(s); {cores} cores")
for n in (2, 4):
    if n > cores:
        print(f"NOTE: {n} ranks on {cores} cores are OVERSUBSCRIBED (unbound, 1 thread each): their step times "
              f"are not meaningful; memory and bytes do not depend on speed.")
print()
print("Step time and model-state memory per rank (MiB; current after a step, the largest rank)")
h = f"{'N':>2} {'stage':>5} {'step ms':>8} {'tok/s':>7} | {'params':>7} {'grads':>7} {'master':>7} {'optim':>7} | {'states':>7} {'paper':>7} {'meas/paper':>10} | {'bkt pk':>7} {'act pk':>7} {'total pk':>8}"
print(h)
print("-" * len(h))
for r in rows:
    c = r["cats"]
    print(f"{r['n']:>2} {r['stage']:>5} {r['ms']:>8.0f} {r['tps']:>7.0f} | {c['params']/MiB:>7.2f} {c['grads']/MiB:>7.2f} "
          f"{c['master']/MiB:>7.2f} {c['optimizer']/MiB:>7.2f} | {r['ms_total']/MiB:>7.2f} {r['want_mem']/MiB:>7.2f} "
          f"{r['ms_total']/r['want_mem']:>10.3f} | {r['buckets']/MiB:>7.2f} {r['act']/MiB:>7.2f} {r['peak_total']/MiB:>8.2f}")
print("tok/s: all ranks together; states = params+grads+master+optim")
print("paper: 16Ψ (stage 0), 4Ψ+12Ψ/N (1), 2Ψ+14Ψ/N (2), 16Ψ/N (3) bytes; bkt/act/total pk: peaks")
print()
print("Bytes sent per rank per step (mean over ranks; every collective, incl. the 8-byte loss/norm all-reduces)")
h = f"{'N':>2} {'stage':>5} {'MiB/step':>9} {'in Ψ(N-1)/N':>12} {'paper':>6} {'meas/paper':>10}  by collective (Ψ(N-1)/N units)"
print(h)
print("-" * len(h))
for r in rows:
    print(f"{r['n']:>2} {r['stage']:>5} {r['sent']/MiB:>9.2f} {r['k']:>11.3f}Ψ {r['want_k']:>5}Ψ {r['k']/r['want_k']:>10.3f}  {r['ops']}")
print("(scalar all-reduces of the loss and the gradient norm, 28 bytes a step, are in the total; in the breakdown only at stage 0)")
print()
print("Collectives per step (rank 0, calls by op)")
for r in rows:
    print(f"{r['n']:>2} {r['stage']:>5}  {r['calls']}")
print("units: Ψ(N-1)/N bf16 elements = 2Ψ(N-1)/N bytes; paper: 2Ψ for stages 0-2 (all-reduce or reduce-scatter + "
      "all-gather), 3Ψ for stage 3 (parameters gathered in forward and backward + gradient reduce-scatter)")
print("3nr: stage 3 with stage3_max_reuse_distance 0 (every module's parameters gathered again for its backward); "
      "stage 3 with DeepSpeed's default distance keeps this small model's parameters gathered through backward")

def run_stats(tag):
    times, ranks = [], None
    for r in range(1, reps + 1):
        ranks = [json.load(open(f)) for f in sorted(glob.glob(f"{work}/{tag}_r{r}_*.json"))]
        tokens = ranks[0]["micro_batch"] * ranks[0]["seq_len"] * len(ranks)
        times.append(step_ms(f"{work}/{tag}_r{r}.log", tokens))
    ag = ranks[0]["comm_bytes"].get("all_gather", {"calls": 0, "bytes_sent": 0})
    return statistics.median(times), ag["calls"] / steps, ag["bytes_sent"] / steps, max(
        s["memory_bytes"]["buckets"]["peak"] for s in ranks)

print()
print(f"allgather_bucket_size at 2 ranks: one gather per group (default 5e8) vs chunks of {agb} elements pipelined "
      "with the optimizer (rank 0)")
h = f"{'stage':>5} {'step ms':>8} {'chunked':>8} {'ratio':>6} | {'gathers/step':>12} {'chunked':>8} | {'gather MiB/step':>15} {'chunked':>8} | {'bkt pk MiB':>10} {'chunked':>8}"
print(h)
print("-" * len(h))
for stage in (1, 2):
    d, c = run_stats(f"n2_s{stage}"), run_stats(f"n2_s{stage}agb")
    print(f"{stage:>5} {d[0]:>8.0f} {c[0]:>8.0f} {c[0] / d[0]:>6.3f} | {d[1]:>12.0f} {c[1]:>8.0f} | {d[2] / MiB:>15.2f} "
          f"{c[2] / MiB:>8.2f} | {d[3] / MiB:>10.2f} {c[3] / MiB:>8.2f}")
print("ratio: chunked / default step time (not asserted); bytes are equal by construction; the chunked peak of "
      "buckets includes 2 staging buffers of 2·B elements")

def overlap(tag, nsteps):
    # Per step, mean over ranks and reps: collective execution time vs the engine's waits for it.
    comm, bar, ag, gw, rw, times = [], [], [], [], [], []
    for r in range(1, reps + 1):
        ranks = [json.load(open(f)) for f in sorted(glob.glob(f"{work}/{tag}_r{r}_*.json"))]
        for s in ranks:
            t = s["timers_ms"]
            comm.append(1e3 * sum(v["seconds"] for v in s["comm_bytes"].values()) / nsteps)
            bar.append(t["backward_allreduce"] / nsteps)
            ag.append(t["allgather"] / nsteps)
            gw.append(t.get("gather_wait", 0) / nsteps)
            rw.append(t["reduce_wait"] / nsteps)
        tokens = ranks[0]["micro_batch"] * ranks[0]["seq_len"] * len(ranks)
        times.append(step_ms(f"{work}/{tag}_r{r}.log", tokens))
    m = statistics.mean
    exposed = m(bar) + m(ag) + m(gw) + m(rw)
    return dict(comm=m(comm), bar=m(bar), ag=m(ag), gw=m(gw), rw=m(rw), exposed=exposed,
                hidden=1 - exposed / m(comm) if m(comm) > 0 else float("nan"), ms=statistics.median(times))

print()
print("Communication vs the part of it the engine waited for (ms per step, mean over ranks; all steps)")
h = (f"{'N':>2} {'run':>22} | {'comm':>7} | {'bwd_ar':>7} {'allgath':>7} {'r_wait':>7} {'g_wait':>7} {'exposed':>7} | "
     f"{'hidden':>6} | {'step ms':>7}")
print(h)
print("-" * len(h))
runs = [(n, f"s{st}", f"stage {st}", steps) for n in (2, 4) for st in range(4)]
runs += [(2, "s2rb", f"stage 2, rbs {rbs}", osteps), (2, "s2rbsync", "  + overlap_comm false", osteps),
         (2, "s3rb", f"stage 3, rbs {rbs}", osteps), (2, "s3rbnopf", "  + prefetch 0", osteps)]
res = {}
for n, key, label, nsteps in runs:
    o = res[(n, key)] = overlap(f"n{n}_{key}", nsteps)
    print(f"{n:>2} {label:>22} | {o['comm']:>7.1f} | {o['bar']:>7.1f} {o['ag']:>7.1f} {o['rw']:>7.1f} {o['gw']:>7.1f} {o['exposed']:>7.1f} | "
          f"{o['hidden']:>6.2f} | {o['ms']:>7.0f}")
print("comm: Σ over collectives of the communicator's execution time (start of the backend's work to completion, "
      "incl. waiting for peers); exposed: bwd_ar (waiting for gradient reductions after backward, and stages 0/1's "
      "boundary reductions) + allgath (waiting for the gathers after the update) + r_wait (overlap_comm false: "
      "reducing buckets synchronously inside backward) + g_wait (stage 3: blocked on parameter gathers in "
      "forward/backward); hidden = 1 - exposed/comm. An overlapped op starts when submitted and its time includes "
      "waiting for the peer to submit it too, and it shares the rank's core with the computation, so comm grows "
      "with overlap. Default reduce_bucket_size 5e8 is one "
      "bucket for this model: stages 0-2 cannot overlap it.")
print()
print(f"Overlap off vs on at 2 ranks (reduce_bucket_size {rbs}; step ms: median of steps 2..{osteps})")
h = f"{'stage':>5} {'switch':>28} | {'default':>7} {'off':>7} {'off/def':>7} | {'exposed def':>11} {'off':>7}"
print(h)
print("-" * len(h))
for st, off, label in ((2, "s2rbsync", '"overlap_comm": false'), (3, "s3rbnopf", "stage3_prefetch_bucket_size 0")):
    d, o = res[(2, f"s{st}rb")], res[(2, off)]
    print(f"{st:>5} {label:>28} | {d['ms']:>7.0f} {o['ms']:>7.0f} {o['ms'] / d['ms']:>7.3f} | {d['exposed']:>11.1f} "
          f"{o['exposed']:>7.1f}")
print("off/def > 1: what overlapping (stage 2) or prefetching (stage 3) saves; not asserted")

if base_dir:
    def summary(tag, nsteps):
        times, sent, peaks, calls = [], [], [], None
        for r in range(1, reps + 1):
            ranks = [json.load(open(f)) for f in sorted(glob.glob(f"{work}/{tag}_r{r}_*.json"))]
            tokens = ranks[0]["micro_batch"] * ranks[0]["seq_len"] * len(ranks)
            times.append(step_ms(f"{work}/{tag}_r{r}.log", tokens))
            sent.append(statistics.mean(sum(v["bytes_sent"] for v in s["comm_bytes"].values()) for s in ranks) / nsteps)
            peaks.append(max(s["memory_bytes"]["buckets"]["peak"] for s in ranks))
            calls = ", ".join(f"{k} {v['calls'] / nsteps:g}" for k, v in sorted(ranks[0]["comm_bytes"].items()))
        return statistics.median(times), statistics.mean(sent), max(peaks), calls
    print()
    print(f"Before/after, interleaved in this run: base = {base_dir}, new = this build (medians over {reps} rep(s))")
    h = (f"{'N':>2} {'stage':>5} | {'ms base':>7} {'ms new':>7} {'new/base':>8} | {'MiB/step base':>13} {'new':>7} {'new/base':>8} | "
         f"{'bkt pk MiB base':>15} {'new':>6}")
    print(h)
    print("-" * len(h))
    detail = []
    for n, stage, nsteps in [(n, st, steps) for n in (2, 4) for st in ("0", "1", "2", "3", "3nr")] + [(2, "2rb", osteps)]:
        b, x = summary(f"b_n{n}_s{stage}", nsteps), summary(f"n{n}_s{stage}", nsteps)
        print(f"{n:>2} {stage:>5} | {b[0]:>7.0f} {x[0]:>7.0f} {x[0] / b[0]:>8.3f} | {b[1] / MiB:>13.3f} {x[1] / MiB:>7.3f} "
              f"{x[1] / b[1]:>8.4f} | {b[2] / MiB:>15.2f} {x[2] / MiB:>6.2f}")
        detail.append((n, stage, b[3], x[3]))
    print("collectives per step (rank 0):")
    for n, stage, b, x in detail:
        print(f"{n:>2} {stage:>5}  base: {b}\n          new:  {x}")
    print(f"2rb: stage 2 with reduce_bucket_size {rbs} (several buckets per group); step-time ratios are single "
          "interleaved runs on a shared host: read them against the run-to-run noise quoted in docs/benchmarks.md")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $cores cores"
