#!/usr/bin/env bash
# All-reduce busbw of zerorun's ucx backend against OpenMPI's MPI_Allreduce, same sizes, same rank
# counts, in the same run, interleaved (the host is shared and OpenMPI's 2-rank speed drifts).
# Prints one line per (ranks, size) with both busbw figures and their ratio; the raw JSON lines go to
# $OUT (default /tmp/zerorun-bench-comm.jsonl).
#
#   bench/comm/run.sh [build-dir] [rounds]
# Needs: build-dir/bin/zerorun-bench (ninja zerorun_bench); installs openmpi-bin + libopenmpi-dev with
# apt-get when mpicc is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
rounds="${2:-3}"
out="${OUT:-/tmp/zerorun-bench-comm.jsonl}"
bench="$build/bin/zerorun-bench"
[[ -x "$bench" ]] || { echo "missing $bench: build it with 'ninja -C $build zerorun_bench'" >&2; exit 1; }

if ! command -v mpirun >/dev/null || ! echo '#include <mpi.h>' | mpicc -x c -E - >/dev/null 2>&1; then
  echo "installing OpenMPI (openmpi-bin libopenmpi-dev)" >&2
  apt-get install -y openmpi-bin libopenmpi-dev >/dev/null
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c"

sizes=(4096 65536 1048576 16777216 67108864)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
: > "$out"
for round in $(seq "$rounds"); do
  for n in 2 4; do
    for s in "${sizes[@]}"; do
      mpirun -np "$n" "$tmp/mpi_allreduce" "$s" >> "$out" 2>/dev/null
      "$bench" allreduce --nprocs "$n" --min-bytes "$s" --max-bytes "$s" --json >> "$out"
    done
  done
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows:
    by.setdefault((r["ranks"], r["size_bytes"], r["backend"]), []).append(r["busbw_gbps"])
print(f"{'ranks':>5} {'size':>10} {'openmpi busbw':>14} {'zerorun busbw':>14} {'ratio':>7}   (GB/s, median of rounds)")
for (n, s, b) in sorted(k for k in by if k[2] == "openmpi"):
    mpi = statistics.median(by[(n, s, "openmpi")])
    zr = statistics.median(by.get((n, s, "ucx"), [float("nan")]))
    print(f"{n:>5} {s:>10} {mpi:>14.3f} {zr:>14.3f} {zr / mpi if mpi else float('nan'):>7.2f}")
PY
