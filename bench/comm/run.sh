#!/usr/bin/env bash
# Host collectives of zerorun against OpenMPI, interleaved in one run (the host is shared and
# OpenMPI's speed drifts over minutes), with the machine's memory bandwidth measured in the same run.
#
# For each round, rank count (2, 4) and op (all_reduce, reduce_scatter, all_gather), one after the other:
#   stream   STREAM-style copy, one thread per rank (at most the cores): aggregate read+write GB/s
#   openmpi      MPI_* from Debian's OpenMPI with its defaults (ob1 + vader shared memory)
#   openmpi-ucx  the same over UCX (--mca pml ucx; pml_ucx_tls/devices "any": OpenMPI 4.1 otherwise
#                refuses UCX without an RDMA device)
#   zerorun      zerorun-bench, backend ucx: ranks on one host take the shm transport (comm/shm/)
#   zerorun-ucx  zerorun-bench with ZERORUN_SHM=0: the UCX algorithms (the path before the shm transport)
# Sizes 4 KiB .. 64 MiB (x4). Prints per (ranks, op, size) the median busbw of each over the rounds (GB/s,
# nccl-tests' definition), zerorun's ratio to each OpenMPI, and at >= 16 MiB zerorun's busbw as % of the
# memory-bandwidth bound: the busbw an ideal shared-memory algorithm would reach if its DRAM traffic
# ran at the measured copy bandwidth. Traffic per byte of payload S, all ranks together: all-reduce
# (3n-1)S (each rank reads its chunk of every rank's input, writes its reduced chunk, copies the n-1
# others), reduce-scatter (n+1)S, all-gather 2nS (each rank copies its own block and the n-1 others),
# in-place all-gather 2(n-1)S (its own block is already in place).
# OPS may add all_gather_inplace: MPI_IN_PLACE for OpenMPI, --in-place for zerorun-bench (each rank's
# input is its block of the output, as ZeRO gathers its parameters).
#
#   bench/comm/run.sh [build-dir] [rounds]        (wrap it: flock /work/bench.lock bench/comm/run.sh)
# Raw JSON lines go to $OUT (default /tmp/zerorun-bench-comm.jsonl). Env: SIZES, RANKS, OPS override.
# Needs build-dir/bin/zerorun-bench; installs openmpi-bin + libopenmpi-dev with apt-get when mpicc is missing.
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
mpicc -O2 -o "$tmp/mpi_collectives" "$here/mpi_collectives.c"
cc -O2 -pthread -o "$tmp/stream_copy" "$here/stream_copy.c"

read -r -a sizes <<< "${SIZES:-4096 16384 65536 262144 1048576 4194304 16777216 67108864}"
read -r -a ranks <<< "${RANKS:-2 4}"
read -r -a ops <<< "${OPS:-all_reduce reduce_scatter all_gather}"
cores=$(nproc)
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $cores cores; ISA: $(grep -o -w -E 'avx512f|avx512bw|avx512_bf16|avx2|fma|f16c|sse4_2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# zerorun: $("$bench" allreduce --backend local --nprocs 1 --min-bytes 4 --max-bytes 4 2>&1 | grep -o -m1 'fp32 reductions on [a-z0-9]*' || echo 'fp32 reductions: ISA not printed')"
echo "# OpenMPI $(mpirun --version 2>/dev/null | head -1 | grep -o '[0-9.]*$'), UCX $(ucx_info -v 2>/dev/null | sed -n 's/.*version=\([0-9.]*\).*/\1/p' | head -1); host shared with other work: rounds interleaved, medians"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
lo=${sizes[0]}
hi=${sizes[${#sizes[@]}-1]}
: > "$out"
for round in $(seq "$rounds"); do
  for n in "${ranks[@]}"; do
    threads=$(( n < cores ? n : cores ))
    "$tmp/stream_copy" "$threads" 5 | sed "s/}$/, \"ranks\": $n, \"round\": $round}/" >> "$out"
    for op in "${ops[@]}"; do
      zop=$op zflags=()
      if [[ $op == all_gather_inplace ]]; then zop=all_gather zflags=(--in-place); fi
      mpirun -np "$n" "$tmp/mpi_collectives" --op "$op" "${sizes[@]}" >> "$out" 2>/dev/null || echo "# openmpi $n $op failed" >&2
      mpirun -np "$n" --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any "$tmp/mpi_collectives" --op "$op" --label openmpi-ucx "${sizes[@]}" >> "$out" 2>/dev/null \
        || echo "# openmpi-ucx $n $op failed" >&2
      "$bench" "$zop" --nprocs "$n" --min-bytes "$lo" --max-bytes "$hi" --factor 4 --json "${zflags[@]}" \
        | sed "s/\"op\": \"$zop\"/\"op\": \"$op\"/" >> "$out"
      ZERORUN_SHM=0 "$bench" "$zop" --nprocs "$n" --min-bytes "$lo" --max-bytes "$hi" --factor 4 --json "${zflags[@]}" \
        | sed "s/\"op\": \"$zop\"/\"op\": \"$op\"/; s/\"backend\": \"ucx\"/\"backend\": \"zerorun-ucx\"/" >> "$out"
    done
  done
done

# Hierarchical vs flat across two simulated nodes of 2 ranks (ZERORUN_NODE_ID via
# ZERORUN_BENCH_RANKS_PER_NODE=2; UCX_TLS=tcp,self so the inter-node traffic goes over TCP loopback as
# between hosts, while each node's shm stays shared memory). Not network namespaces: see docs/comm.md.
if [[ "${HIER:-1}" != 0 ]]; then
  for round in $(seq "$rounds"); do
    for mode in 1 0; do
      UCX_TLS=tcp,self ZERORUN_BENCH_RANKS_PER_NODE=2 ZERORUN_COMM_HIERARCHICAL=$mode \
        "$bench" all_reduce --nprocs 4 --min-bytes 1048576 --max-bytes 67108864 --factor 4 --json \
        | sed "s/\"backend\": \"ucx\"/\"backend\": \"2x2-hier$mode\"/" >> "$out"
    done
  done
fi

# The same across two nodes that are network namespaces of this machine (scripts/netns-hosts.sh: each
# its own network stack and sshd, joined by a bridge), started by the zerorun launcher over ssh, 2 ranks
# per node. UCX_TLS=tcp,self: UCX treats every namespace of one boot as one machine and would otherwise
# carry the "inter-node" traffic over its shared memory; with tcp the flat ring's intra-node hops go over
# TCP too (pessimistic for the flat ring there), so the default-UCX pair is printed beside it (there
# both cross the "nodes" through shared memory: optimistic for the flat ring). Needs root, iproute2 and
# openssh-server; NETNS=0 skips it.
if [[ "${NETNS:-1}" != 0 ]]; then
  hosts="$tmp/netns"
  tag="cb$((RANDOM % 100000))"
  if why=$("$here/../../scripts/netns-hosts.sh" up "$tag" 2 "$hosts" 2>&1); then
    trap '"$here/../../scripts/netns-hosts.sh" down "$tag" "$hosts" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
    launch=("$build/bin/zerorun" -H "$hosts/hostfile" --launcher ssh --launcher_args "-F $hosts/ssh_config" --num_procs 2)
    for round in $(seq "$rounds"); do
      for tls in tcp default; do
        for mode in 1 0; do
          env_tls=()
          [[ $tls == tcp ]] && env_tls=(UCX_TLS=tcp,self)
          env "${env_tls[@]}" ZERORUN_COMM_HIERARCHICAL=$mode "${launch[@]}" "$(cd "$build" && pwd)/bin/zerorun-bench" \
            all_reduce --min-bytes 1048576 --max-bytes 67108864 --factor 4 --json 2>/dev/null \
            | sed -n 's/^\[rank 0\] //p' | sed "s/\"backend\": \"ucx\"/\"backend\": \"netns-$tls-hier$mode\"/" >> "$out" \
            || echo "# netns $tls hierarchical=$mode failed" >&2
        done
      done
    done
    "$here/../../scripts/netns-hosts.sh" down "$tag" "$hosts" >/dev/null 2>&1 || true
  else
    echo "# network-namespace nodes skipped: $why" >&2
  fi
fi

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
stream = {}
by = {}
alg = {}
for r in rows:
    if r["op"] == "stream_copy":
        stream.setdefault(r["ranks"], []).append(r["copy_gbps"])
        continue
    b = {"ucx": "zerorun"}.get(r["backend"], r["backend"])
    by.setdefault((r["ranks"], r["op"], r["size_bytes"], b), []).append(r["busbw_gbps"])
    if b == "zerorun" and r.get("algorithm"):
        alg[(r["ranks"], r["op"], r["size_bytes"])] = r["algorithm"]
med = lambda k: statistics.median(by[k]) if k in by else float("nan")
def bound(op, n, copy):
    if op == "all_reduce": return copy / (3 * n - 1) * 2 * (n - 1) / n
    if op == "reduce_scatter": return copy / (n + 1) * (n - 1) / n
    if op == "all_gather_inplace": return copy / (2 * (n - 1)) * (n - 1) / n
    return copy / (2 * n) * (n - 1) / n
for n in sorted(stream):
    s = stream[n]
    print(f"# stream copy, {n} ranks: median {statistics.median(s):.2f} GB/s (read+write; rounds: {', '.join(f'{x:.1f}' for x in s)})")
simulated = ("2x2-", "netns-")
keys = sorted({k[:3] for k in by if not k[3].startswith(simulated)}, key=lambda k: (k[1], k[0], k[2]))
hdr = f"{'op':<15}{'ranks':>5}{'size':>10}{'openmpi':>9}{'ompi-ucx':>9}{'zerorun':>9}{'zr-ucx':>9}{'x ompi':>8}{'x o-ucx':>8}{'% bound':>8}  algorithm"
print(hdr + "   (busbw GB/s, median of rounds)")
hier = {k for k in by if k[3].startswith(simulated)}
for (n, op, s) in keys:
    mpi, mpu, zr, zu = (med((n, op, s, b)) for b in ("openmpi", "openmpi-ucx", "zerorun", "zerorun-ucx"))
    pct = ""
    if s >= 16 << 20 and n in stream:
        pct = f"{100 * zr / bound(op, n, statistics.median(stream[n])):.0f}%"
    print(f"{op:<15}{n:>5}{s:>10}{mpi:>9.2f}{mpu:>9.2f}{zr:>9.2f}{zu:>9.2f}{zr / mpi if mpi else float('nan'):>8.2f}"
          f"{zr / mpu if mpu else float('nan'):>8.2f}{pct:>8}  {alg.get((n, op, s), '')}")
titles = {"2x2-": "2 simulated nodes x 2 ranks (ZERORUN_BENCH_RANKS_PER_NODE), inter-node over UCX tcp",
          "netns-tcp-": "2 network-namespace nodes x 2 ranks through the launcher, UCX tcp",
          "netns-default-": "2 network-namespace nodes x 2 ranks through the launcher, UCX defaults (shm across the namespaces)"}
for prefix, title in titles.items():
    sizes = sorted({h[2] for h in hier if h[3] == prefix + "hier1"})
    if not sizes:
        continue
    print(f"# {title}: all_reduce busbw GB/s (median)")
    print(f"{'size':>10}{'hierarchical':>14}{'flat ring':>11}{'ratio':>7}")
    for s in sizes:
        h1, h0 = med((4, "all_reduce", s, prefix + "hier1")), med((4, "all_reduce", s, prefix + "hier0"))
        print(f"{s:>10}{h1:>14.2f}{h0:>11.2f}{h1 / h0 if h0 else float('nan'):>7.2f}")
PY
