#!/usr/bin/env bash
# Fused AdamW throughput: zerorun's CPU kernel vs torch.optim.AdamW on one 64 M-parameter fp32
# buffer, 1 and 2 threads, in the same run; prints each and the ratio (zerorun / torch).
# Usage: bench/optim/run.sh [build-dir]   (needs zr_bench_optim built: ninja -C build zr_bench_optim)
# Installs Debian's python3-torch (+ libopenblas0-openmp) when missing; runs it with /usr/bin/python3.
set -euo pipefail
BUILD=${1:-build}
N=${ZR_BENCH_N:-67108864}
ITERS=${ZR_BENCH_ITERS:-10}
BIN="$BUILD/bin/zr_bench_optim"
[ -x "$BIN" ] || { echo "missing $BIN: run ninja -C $BUILD zr_bench_optim" >&2; exit 1; }
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "installing python3-torch (Debian) ..." >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y python3-torch libopenblas0-openmp >/dev/null
fi

torch_adamw() {  # threads -> M params/s
  /usr/bin/python3 - "$1" "$N" "$ITERS" <<'PY'
import sys, time, torch
t, n, iters = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(t)
p = torch.nn.Parameter(torch.randn(n) * 0.02)
p.grad = torch.randn(n) * 1e-3
opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01)
ms = []
for i in range(iters + 1):
    t0 = time.perf_counter(); opt.step(); t1 = time.perf_counter()
    if i: ms.append((t1 - t0) * 1e3)
ms.sort()
print(f"{n / (ms[len(ms) // 2] * 1e3):.1f}")
PY
}

echo "fused AdamW, n=$N fp32 params, fp32 grads, median of $ITERS steps"
for t in 1 2; do
  # Interleave the two so that a noisy neighbour hits both alike.
  zr=$("$BIN" --n "$N" --iters "$ITERS" --threads "$t" | sed -n 's/.*mparams_per_s=\([0-9.]*\).*/\1/p')
  th=$(torch_adamw "$t")
  ratio=$(awk -v a="$zr" -v b="$th" 'BEGIN { printf "%.2f", a / b }')
  echo "threads=$t zerorun=${zr} Mparams/s torch=${th} Mparams/s ratio=${ratio}x"
done
