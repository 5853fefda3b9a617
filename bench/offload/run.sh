#!/usr/bin/env bash
# The offload I/O engine against fio on the same file, interleaved: for each (block size, queue depth)
# and direction, one pass each of
#   fio --ioengine=io_uring --direct=1 --bs=B --iodepth=Q   (its best settings here: --fixedbufs
#       --registerfiles, one job, sequential; fio 3.33 from Debian)
#   zerorun-bench io --engine io_uring --block-size B --queue-depth Q   (registered pinned buffers on
#       transparent huge pages: zerorun's default)
#   the same with --no-huge-pages ("io_uring_4k": 4 KiB pages, as fio's malloc'ed buffers are with THP
#       in madvise mode; this separates the engine from the buffers it is given)
#   zerorun-bench io --engine pread   (one synchronous request at a time: the oracle and fallback)
#   fio as above with --mem=shmhuge ("fio_huge": its buffers on 2 MiB huge pages, like zerorun's default;
#       only when huge pages can be reserved: root, /proc/sys/vm/nr_hugepages, restored afterwards)
# in an order rotated every repetition, over one file laid out by fio first (both then overwrite and
# read the same blocks). Prints every pass, then medians and the ratios zerorun/fio (target >= 0.95)
# and pread/fio, and the like-for-like pairs io_uring/fio_huge and io_uring_4k/fio. The file lives on a disk file system (default /var/tmp; tmpfs is refused: it measures
# memory). fio is installed here (apt-get) when missing, never by the test path.
#   bench/offload/run.sh [build-dir] [size=1G] [reps=3] [dir=/var/tmp]
#   BENCH_CONFIGS="1M:8 256K:32" overrides the (block size : queue depth) pairs.
# Run it under `flock /work/bench.lock` on a shared machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
size=${2:-1G}
reps=${3:-3}
dir=${4:-/var/tmp}
configs=${BENCH_CONFIGS:-"1M:8 256K:32"}
bench=$build/bin/zerorun-bench
[[ -x $bench ]] || { echo "run.sh: $bench not found; build zerorun_bench first" >&2; exit 1; }
command -v python3 >/dev/null || { echo "run.sh: needs python3 (to read fio's JSON)" >&2; exit 1; }
if ! command -v fio >/dev/null; then
  echo "run.sh: installing fio (apt-get)"
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); else sudo_cmd=(); fi
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends fio >/dev/null
fi
fstype=$(findmnt -n -o FSTYPE -T "$dir" 2>/dev/null || stat -f -c %T "$dir")
case $fstype in tmpfs|ramfs) echo "run.sh: $dir is $fstype (memory); give a directory on a disk" >&2; exit 2 ;; esac

work=$(mktemp -d "$dir/zr_bench_offload.XXXXXX")
huge_before=""
cleanup() {
  rm -rf "$work"
  if [[ -n $huge_before ]]; then echo "$huge_before" >/proc/sys/vm/nr_hugepages; fi
}
trap cleanup EXIT
# fio's buffers on huge pages (--mem=shmhuge) need reserved 2 MiB pages: bs x iodepth of them, rounded up.
tools=(fio io_uring io_uring_4k pread)
if [[ $(id -u) -eq 0 && -w /proc/sys/vm/nr_hugepages ]]; then
  need=8
  for cfg in $configs; do
    b=$(numfmt --from=iec "${cfg%%:*}"); q=${cfg##*:}
    n=$(( (b * q + 2097151) / 2097152 + 4 )); (( n > need )) && need=$n
  done
  huge_before=$(cat /proc/sys/vm/nr_hugepages)
  echo $((huge_before + need)) >/proc/sys/vm/nr_hugepages
  if (( $(cat /proc/sys/vm/nr_hugepages) >= huge_before + need )); then tools+=(fio_huge); fi
fi
file=$work/data
echo "# bench/offload: $file ($fstype), $size per pass, $reps rep(s), configs: $configs"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cpu(s); kernel $(uname -r); $(fio --version)"
fio --name=layout --filename="$file" --size="$size" --rw=write --bs=1M --iodepth=8 --ioengine=io_uring \
    --direct=1 --output-format=terse >/dev/null

results=$work/results.tsv
: >"$results"
gbps_fio() {  # dir bs qd [fio options] -> GB/s
  local rw=$1 bs=$2 qd=$3
  shift 3
  fio --name=zr --filename="$file" --size="$size" --rw="$rw" --bs="$bs" --iodepth="$qd" --ioengine=io_uring \
      --direct=1 --fixedbufs=1 --registerfiles=1 --numjobs=1 --output-format=json "$@" |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]['$rw']; print('%.4f' % (j['bw_bytes']/1e9))"
}
gbps_zr() {  # tool dir bs qd -> GB/s
  local tool=$1 rw=$2 bs=$3 qd=$4 extra=()
  local engine=$tool
  if [[ $tool == io_uring_4k ]]; then engine=io_uring; extra=(--no-huge-pages); fi
  "$bench" io --path "$file" --size "$size" --engine "$engine" --block-size "$bs" --queue-depth "$qd" \
      --reps 1 "--$rw" --json "${extra[@]}" |
    python3 -c "import json,sys; j=json.loads(sys.stdin.readline()); print('%.4f' % j['${rw}_gbps_median'])"
}

for ((rep = 0; rep < reps; rep++)); do
  for cfg in $configs; do
    bs=${cfg%%:*}
    qd=${cfg##*:}
    for rw in write read; do
      nt=${#tools[@]}
      for ((k = 0; k < nt; k++)); do
        t=${tools[$(((k + rep) % nt))]}
        case $t in
          fio) g=$(gbps_fio "$rw" "$bs" "$qd") ;;
          fio_huge) g=$(gbps_fio "$rw" "$bs" "$qd" --mem=shmhuge --hugepage-size=2m) ;;
          *) g=$(gbps_zr "$t" "$rw" "$bs" "$qd") ;;
        esac
        printf '%s\t%s\t%s\t%s\t%s\n' "$cfg" "$rw" "$t" "$rep" "$g" >>"$results"
        printf '  rep %d  bs %-5s qd %-3s %-5s %-11s %7s GB/s\n' "$rep" "$bs" "$qd" "$rw" "$t" "$g"
      done
    done
  done
done

python3 - "$results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    cfg, rw, tool, rep, g = line.split()
    runs[(cfg, rw, tool)].append(float(g))
print("# medians (GB/s) and ratios to fio; target io_uring/fio >= 0.95")
print("  %-8s %-5s %7s %9s %12s %7s %13s %16s %10s" % ("bs:qd", "dir", "fio", "io_uring", "io_uring_4k", "pread",
      "io_uring/fio", "io_uring_4k/fio", "pread/fio"))
worst = {}
huge = any(k[2] == "fio_huge" for k in runs)
for cfg in dict.fromkeys(k[0] for k in runs):
    for rw in ("write", "read"):
        m = {t: statistics.median(runs[(cfg, rw, t)]) for t in ("fio", "io_uring", "io_uring_4k", "pread")}
        r = {t: m[t] / m["fio"] for t in m}
        for t in ("io_uring", "io_uring_4k"):
            worst[t] = min(worst.get(t, r[t]), r[t])
        print("  %-8s %-5s %7.3f %9.3f %12.3f %7.3f %13.3f %16.3f %10.3f" % (cfg, rw, m["fio"], m["io_uring"],
              m["io_uring_4k"], m["pread"], r["io_uring"], r["io_uring_4k"], r["pread"]))
        if huge:
            fh = statistics.median(runs[(cfg, rw, "fio_huge")])
            lk = m["io_uring"] / fh
            worst["like"] = min(worst.get("like", lk), lk)
            print("  %-8s %-5s fio_huge %7.3f   io_uring/fio_huge %.3f  (like for like: both on huge pages)" %
                  (cfg, rw, fh, lk))
for t in ("io_uring", "io_uring_4k"):
    print("# lowest %s/fio median ratio: %.3f (%s)" % (t, worst[t], "meets 0.95" if worst[t] >= 0.95 else "BELOW 0.95"))
if huge:
    print("# lowest io_uring/fio_huge median ratio: %.3f (%s)" % (worst["like"],
          "meets 0.95" if worst["like"] >= 0.95 else "BELOW 0.95"))
PY
