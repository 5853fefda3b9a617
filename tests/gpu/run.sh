#!/usr/bin/env bash
# The GPU check, one script for a machine with an NVIDIA GPU (and, as a dry run, for one without).
#
#   tests/gpu/run.sh [--build DIR] [--report FILE] [--budget-s S] [--no-gpu] [--jobs N]
#
# Parts, each reported PASS / FAIL / SKIP with its time and figures in the report (default
# DIR/gpu-report.txt); a failing part does not stop the others:
#   build        configure with -DZERORUN_CUDA=ON (Release) unless DIR is configured, build the targets
#   gpu-tests    ctest -L gpu: every CUDA op against the CPU reference (forward, backward, every dtype),
#                the optimizers bit for bit, two-stream ordering, NCCL collectives (tests/gpu/*.cc)
#   kernel-gpt   bench_gpt_kernels (a GPT written against the kernel entries), 50 steps, fp32 and bf16,
#                on cuda and on the cpu with the same seed: the loss curves compared step by step
#   device-fake  the engine, module graph and zero/ on Device::CUDA through the recording fake device
#                (tests/device, no GPU needed): stages 0-3 bitwise the CPU run, every kernel, copy and
#                collective ordered after its producer
#   train-gpt    zerorun-train --device cuda (NCCL, one rank), 50 steps on one GPU at ZeRO stages 0-3
#                with and without offload_optimizer cpu, against the CPU run of the same seed and
#                stage (an offload run the config refuses, e.g. stage 0, is SKIP naming the refusal).
#                Without a GPU: --device cuda must fail cleanly, naming the device.
#   mfu          bench_gpt_kernels at GPT-2 124M (12 layers, d 768, T 1024, V 50257, bf16): tokens/s
#                and MFU against 989.4 TFLOP/s (H100/H200 dense bf16); the issue's target is 40 %
#   nccl-busbw   zerorun-bench all_reduce / reduce_scatter / all_gather --backend nccl, one rank per GPU
#                (at most 8), busbw as nccl-tests reports it
# Without a GPU (none visible, or --no-gpu) it says so and runs what the CPU can: the build, the gpu
# tests' own logic with the CPU as the device (ZERORUN_GPU_TEST_DEVICE=cpu), the kernel GPT curve
# comparison between the cpu and ref kernel backends, the CPU reference training runs compared with
# each other (stage k vs stage 0), the MFU bench at small dims on the CPU, and zerorun-bench's refusal
# of nccl; every GPU run is reported SKIP. The budget (default 480 s) is checked before each part; a
# part that no longer fits is reported SKIP (over budget).
# Exit status: 0 when no part failed, 1 otherwise.
set -uo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="$src/build-gpu"
report=""
budget=480
force_no_gpu=0
jobs="$(nproc)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --report) report="$2"; shift 2 ;;
    --budget-s) budget="$2"; shift 2 ;;
    --no-gpu) force_no_gpu=1; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$build" = /* ]] || build="$PWD/$build"
report="${report:-$build/gpu-report.txt}"
mkdir -p "$build" "$(dirname "$report")"
work="$build/gpu-run"
rm -rf "$work" && mkdir -p "$work"
start=$(date +%s)
failures=0

# ---- reporting ------------------------------------------------------------------------------------
: > "$report"
say() { echo "$*" | tee -a "$report"; }
part_start=0
begin() { part_start=$(date +%s); echo; echo "== $1"; }
# result PART STATUS DETAIL
result() {
  local secs=$(( $(date +%s) - part_start ))
  [[ "$2" == FAIL* ]] && failures=$((failures + 1))
  printf '%-28s %-6s %5ss  %s\n' "$1" "${2%% *}" "$secs" "$3" | tee -a "$report"
}
left() { echo $(( budget - ($(date +%s) - start) )); }
# fits SECONDS: true when that much budget is left.
fits() { (( $(left) >= $1 )); }

gpus=0
if [[ $force_no_gpu == 0 ]] && command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
say "# zerorun tests/gpu/run.sh report"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(hostname); commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')"
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; budget ${budget} s"
if (( gpus > 0 )); then
  say "gpus: $gpus"
  nvidia-smi -L 2>/dev/null | sed 's/^/  /' | tee -a "$report"
  nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/  driver, memory: /' | tee -a "$report"
else
  say "gpus: none visible$([[ $force_no_gpu == 1 ]] && echo ' (--no-gpu)'): dry run; every GPU run is reported SKIP"
fi
say ""
say "part                         status  time  detail"

# ---- helpers -------------------------------------------------------------------------------------
# compare_curves A B REL: max over steps of |a - b| / max(|b|, 1) <= REL; prints "max_rel=... steps=N".
compare_curves() {
  awk -v rel="$3" 'NR == FNR { a[FNR] = $1; n = FNR; next }
    { b[FNR] = $1; m = FNR }
    END {
      if (n == 0 || n != m) { printf "steps differ: %d vs %d\n", n, m; exit 1 }
      worst = 0; at = 1
      for (i = 1; i <= n; ++i) {
        d = a[i] - b[i]; if (d < 0) d = -d
        s = b[i]; if (s < 0) s = -s; if (s < 1) s = 1
        if (d / s > worst) { worst = d / s; at = i }
        if (a[i] != a[i]) { printf "step %d is NaN\n", i; exit 1 }
      }
      printf "max_rel=%.3g at step %d of %d (tolerance %s), first %.4f/%.4f, last %.4f/%.4f\n", worst, at, n, rel, a[1], b[1], a[n], b[n]
      exit worst <= rel ? 0 : 1
    }' "$1" "$2"
}
# losses_of SUMMARY.json: the "losses" array, one per line.
losses_of() { tr -d ' \n' < "$1" | sed -n 's/.*"losses":\[\([^]]*\)\].*/\1/p' | tr ',' '\n'; }
json_field() { sed -n "s/.*\"$2\": \\([^,}]*\\).*/\\1/p" "$1" | tail -1; }

bin="$build/bin"

# ---- build ----------------------------------------------------------------------------------------
begin build
targets=(zr_test_gpu zr_test_device zerorun-train zerorun-bench bench_gpt_kernels)
build_ok=0
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S "$src" -B "$build" "${gen[@]}" "${launcher[@]}" -DZERORUN_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    > "$work/configure.log" 2>&1 || true
fi
if grep -q '^ZERORUN_CUDA:STRING=OFF' "$build/CMakeCache.txt" 2>/dev/null; then
  result build "FAIL" "$build is configured with ZERORUN_CUDA=OFF (use another --build)"
elif [[ ! -f "$build/CMakeCache.txt" ]]; then
  result build "FAIL" "configure failed: $(tail -3 "$work/configure.log" | tr '\n' ' ')"
elif cmake --build "$build" -j "$jobs" --target "${targets[@]}" > "$work/build.log" 2>&1; then
  build_ok=1
  result build PASS "targets ${targets[*]} in $build ($(grep -m1 '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" | cut -d= -f2))"
else
  result build "FAIL" "see $work/build.log: $(grep -m1 -E 'error' "$work/build.log" | cut -c1-160)"
fi
if [[ $build_ok == 0 ]]; then
  say ""
  say "the build failed: the other parts need it and are not run"
  exit 1
fi

# ---- gpu-tests ------------------------------------------------------------------------------------
begin gpu-tests
if (( gpus > 0 )); then
  if fits 60; then
    ctest --test-dir "$build" -L '^gpu$' --output-on-failure --timeout 300 > "$work/gpu-tests.log" 2>&1
    rc=$?
    summary=$(grep -E 'tests passed|tests failed' "$work/gpu-tests.log" | tail -1)
    skipped=$(grep -c '(Skipped)' "$work/gpu-tests.log" || true)
    failed=$(grep -E '\(Failed\)|\*\*\*Failed|\(Timeout\)' "$work/gpu-tests.log" | sed 's/.* - //' | tr '\n' ';' | cut -c1-300)
    if [[ $rc == 0 && $skipped == 0 ]]; then result gpu-tests PASS "$summary"
    elif [[ $rc == 0 ]]; then result gpu-tests "FAIL" "$summary; $skipped skipped although a GPU is visible"
    else result gpu-tests "FAIL" "$summary; failed: $failed (log $work/gpu-tests.log)"; fi
  else result gpu-tests "SKIP" "over budget"; fi
else
  result gpu-tests SKIP "no GPU"
  begin gpu-tests-logic
  if ZERORUN_GPU_TEST_DEVICE=cpu "$build/tests/gpu/zr_test_gpu" -tce='nccl*' > "$work/gpu-tests-cpu.log" 2>&1; then
    result gpu-tests-logic PASS "the gpu tests with the CPU as the device: $(grep 'test cases' "$work/gpu-tests-cpu.log" | sed 's/\[doctest\] //')"
  else
    result gpu-tests-logic "FAIL" "ZERORUN_GPU_TEST_DEVICE=cpu: $(grep 'test cases' "$work/gpu-tests-cpu.log") (log $work/gpu-tests-cpu.log)"
  fi
fi

# ---- device-fake ----------------------------------------------------------------------------------
begin device-fake
if "$build/tests/zr_test_device" > "$work/device-fake.log" 2>&1; then
  result device-fake PASS "$(grep 'test cases' "$work/device-fake.log" | sed 's/\[doctest\] //')"
else
  result device-fake "FAIL" "$(grep 'test cases' "$work/device-fake.log") (log $work/device-fake.log)"
fi

# ---- kernel-gpt -----------------------------------------------------------------------------------
# Same seed, same initial weights and batch on both sides; fp32 must follow closely, bf16 loosely.
kgpt=(--layers 2 --dim 128 --heads 4 --seq 128 --vocab 256 --batch 4 --steps 50 --warmup 1 --lr 1e-3 --seed 5)
kgpt_dry=(--layers 2 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 2 --steps 50 --warmup 1 --lr 1e-3 --seed 5)
for dt in fp32 bf16; do
  tol=$([[ $dt == fp32 ]] && echo 2e-3 || echo 3e-2)
  begin "kernel-gpt $dt"
  if ! fits 60; then result "kernel-gpt $dt" SKIP "over budget"; continue; fi
  if (( gpus > 0 )); then
    a_desc="cuda"; b_desc="cpu"
    "$bin/bench_gpt_kernels" --device cuda --dtype "$dt" "${kgpt[@]}" --losses "$work/kgpt-$dt-a.txt" > "$work/kgpt-$dt-a.log" 2>&1
    ra=$?
    "$bin/bench_gpt_kernels" --device cpu --dtype "$dt" "${kgpt[@]}" --losses "$work/kgpt-$dt-b.txt" > "$work/kgpt-$dt-b.log" 2>&1
    rb=$?
  else
    a_desc="cpu kernels"; b_desc="ref kernels"
    "$bin/bench_gpt_kernels" --device cpu --dtype "$dt" "${kgpt_dry[@]}" --losses "$work/kgpt-$dt-a.txt" > "$work/kgpt-$dt-a.log" 2>&1
    ra=$?
    ZERORUN_KERNELS=ref "$bin/bench_gpt_kernels" --device cpu --dtype "$dt" "${kgpt_dry[@]}" --losses "$work/kgpt-$dt-b.txt" > "$work/kgpt-$dt-b.log" 2>&1
    rb=$?
  fi
  if [[ $ra != 0 || $rb != 0 ]]; then
    result "kernel-gpt $dt" "FAIL" "$a_desc rc $ra: $(tail -1 "$work/kgpt-$dt-a.log" | cut -c1-120); $b_desc rc $rb: $(tail -1 "$work/kgpt-$dt-b.log" | cut -c1-120)"
  elif cmp=$(compare_curves "$work/kgpt-$dt-a.txt" "$work/kgpt-$dt-b.txt" "$tol"); then
    result "kernel-gpt $dt" PASS "$a_desc vs $b_desc: $cmp"
  else
    result "kernel-gpt $dt" "FAIL" "$a_desc vs $b_desc: $cmp"
  fi
done

# ---- train-gpt --------------------------------------------------------------------------------------
train=(--steps 50 --seed 11 --log_every 25)
write_config() {  # STAGE OFFLOAD(0|1) FILE
  local off=""
  [[ $2 == 1 ]] && off=', "offload_optimizer": {"device": "cpu", "pin_memory": true}'
  cat > "$3" <<EOF
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
 "bf16": {"enabled": true}, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": $1$off}}
EOF
}
for stage in 0 1 2 3; do
  begin "train-gpt cpu stage $stage"
  if ! fits 30; then result "train-gpt cpu stage $stage" SKIP "over budget"; continue; fi
  write_config "$stage" 0 "$work/stage$stage.json"
  if "$bin/zerorun-train" --deepspeed_config "$work/stage$stage.json" "${train[@]}" --summary "$work/cpu-$stage.json" \
       > "$work/cpu-$stage.log" 2>&1; then
    losses_of "$work/cpu-$stage.json" > "$work/cpu-$stage.txt"
    if [[ $stage == 0 ]]; then
      result "train-gpt cpu stage $stage" PASS "reference curve: $(head -1 "$work/cpu-$stage.txt") -> $(tail -1 "$work/cpu-$stage.txt") over $(awk 'END { print NR }' "$work/cpu-$stage.txt") steps"
    elif cmp=$(compare_curves "$work/cpu-$stage.txt" "$work/cpu-0.txt" 1e-2); then
      result "train-gpt cpu stage $stage" PASS "vs cpu stage 0: $cmp"
    else
      result "train-gpt cpu stage $stage" "FAIL" "vs cpu stage 0: $cmp"
    fi
  else
    result "train-gpt cpu stage $stage" "FAIL" "$(tail -1 "$work/cpu-$stage.log" | cut -c1-160)"
  fi
  for off in 0 1; do
    name="train-gpt cuda stage $stage$([[ $off == 1 ]] && echo ' +offload')"
    begin "$name"
    if (( gpus == 0 )); then result "$name" SKIP "no GPU"; continue; fi
    if ! fits 30; then result "$name" SKIP "over budget"; continue; fi
    write_config "$stage" "$off" "$work/gpu-$stage-$off.json"
    if "$bin/zerorun-train" --device cuda --deepspeed_config "$work/gpu-$stage-$off.json" "${train[@]}" \
         --summary "$work/gpu-$stage-$off.sum.json" > "$work/gpu-$stage-$off.log" 2>&1; then
      losses_of "$work/gpu-$stage-$off.sum.json" > "$work/gpu-$stage-$off.txt"
      if [[ ! -s "$work/cpu-$stage.txt" ]]; then result "$name" "FAIL" "ran, but the CPU reference is missing"
      elif cmp=$(compare_curves "$work/gpu-$stage-$off.txt" "$work/cpu-$stage.txt" 3e-2); then
        result "$name" PASS "vs cpu: $cmp; $(json_field "$work/gpu-$stage-$off.sum.json" tokens_per_second) tokens/s"
      else result "$name" "FAIL" "vs cpu: $cmp"; fi
    elif [[ $off == 1 ]] && grep -qE 'offload_optimizer.*(not implemented|stage)' "$work/gpu-$stage-$off.log"; then
      result "$name" SKIP "refused by the config: $(grep -m1 -E 'offload_optimizer' "$work/gpu-$stage-$off.log" | cut -c1-140)"
    else
      result "$name" "FAIL" "$(grep -m1 -iE 'error|unknown' "$work/gpu-$stage-$off.log" | cut -c1-160) (log $work/gpu-$stage-$off.log)"
    fi
  done
done

if (( gpus == 0 )); then
  # Without a GPU, --device cuda must stop at once with a message naming the device (not train on the CPU).
  begin "train-gpt cuda refusal"
  if "$bin/zerorun-train" --device cuda --deepspeed_config "$work/stage0.json" --steps 1 > "$work/gpu-refusal.log" 2>&1; then
    result "train-gpt cuda refusal" "FAIL" "zerorun-train --device cuda succeeded without a GPU"
  elif grep -qiE 'cuda' "$work/gpu-refusal.log"; then
    result "train-gpt cuda refusal" PASS "$(grep -m1 -iE 'cuda' "$work/gpu-refusal.log" | cut -c1-160)"
  else
    result "train-gpt cuda refusal" "FAIL" "no message naming cuda: $(tail -1 "$work/gpu-refusal.log" | cut -c1-160)"
  fi
fi

# ---- mfu --------------------------------------------------------------------------------------------
begin mfu
gpt2=(--layers 12 --dim 768 --heads 12 --seq 1024 --vocab 50257 --dtype bf16)
if (( gpus > 0 )); then
  if fits 90; then
    if "$bin/bench_gpt_kernels" --device cuda "${gpt2[@]}" --batch 8 --steps 14 --warmup 4 > "$work/mfu.log" 2>&1; then
      j=$(tail -1 "$work/mfu.log")
      mfu=$(sed -n 's/.*"mfu": \([0-9.]*\).*/\1/p' <<<"$j")
      met=$(awk -v m="$mfu" 'BEGIN { print (m >= 0.40) ? "met" : "NOT met" }')
      result mfu PASS "GPT-2 124M bf16 B 8 T 1024: $(sed -n 's/.*"step_ms": \([0-9.]*\).*/\1/p' <<<"$j") ms/step, $(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' <<<"$j") tokens/s, $(sed -n 's/.*"tflops": \([0-9.]*\).*/\1/p' <<<"$j") TFLOP/s, MFU $mfu (40 % target $met)"
      say "  $j"
    else
      result mfu "FAIL" "$(tail -2 "$work/mfu.log" | tr '\n' ' ' | cut -c1-200)"
    fi
  else result mfu SKIP "over budget"; fi
else
  # The same bench on the CPU at small dims: its logic, and the formula's inputs, without a GPU.
  if "$bin/bench_gpt_kernels" --device cpu --layers 2 --dim 64 --heads 4 --seq 64 --vocab 512 --batch 2 --steps 6 \
       --warmup 2 --peak-tflops 1 > "$work/mfu.log" 2>&1; then
    result mfu SKIP "no GPU; the bench ran on the CPU at small dims: $(tail -1 "$work/mfu.log" | cut -c1-200)"
  else
    result mfu "FAIL" "the bench failed on the CPU: $(tail -1 "$work/mfu.log" | cut -c1-160)"
  fi
fi

# ---- nccl-busbw -------------------------------------------------------------------------------------
begin nccl-busbw
if (( gpus > 0 )); then
  ranks=$(( gpus > 8 ? 8 : gpus ))
  detail=""
  status=PASS
  for op in allreduce reduce_scatter all_gather; do
    if ! fits 40; then status=SKIP; detail+="$op: over budget; "; continue; fi
    if "$bin/zerorun-bench" "$op" --backend nccl --nprocs "$ranks" --min-bytes 1M --max-bytes 1G --factor 8 --check \
         > "$work/nccl-$op.log" 2>&1; then
      last=$(grep -E '^ +[0-9]' "$work/nccl-$op.log" | tail -1 | awk '{print $1/1048576 " MiB: algbw " $5 " busbw " $6 " GB/s"}')
      detail+="$op ($ranks ranks) $last; "
      sed 's/^/  /' "$work/nccl-$op.log" >> "$report"
    else
      status="FAIL"
      detail+="$op failed: $(tail -1 "$work/nccl-$op.log" | cut -c1-100); "
    fi
  done
  result nccl-busbw "$status" "$detail"
else
  if "$bin/zerorun-bench" allreduce --backend nccl > "$work/nccl.log" 2>&1; then
    result nccl-busbw "FAIL" "zerorun-bench --backend nccl ran without a GPU"
  elif grep -q "needs a CUDA device" "$work/nccl.log"; then
    result nccl-busbw SKIP "no GPU; zerorun-bench refuses nccl cleanly: $(tail -1 "$work/nccl.log" | sed 's/.*zerorun-bench: //')"
  else
    result nccl-busbw "FAIL" "unexpected: $(tail -1 "$work/nccl.log")"
  fi
fi

say ""
say "total $(( $(date +%s) - start )) s; $failures part(s) failed; logs in $work"
echo "report: $report"
(( failures == 0 ))
