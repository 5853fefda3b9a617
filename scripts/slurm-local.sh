#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, used to check `zerorun --launcher slurm` end to end:
# installs slurm-wlm + munge if missing (Debian, root), starts a private munged, slurmctld and slurmd
# (own config, state dir and ports; no systemd needed), runs a 2-rank job through
# `zerorun --launcher slurm` with the zr_env_probe rank program, checks every rank's variables, runs a
# 3-trial zerorun-sweep whose trials are each one Slurm job (zerorun --launcher slurm as the spec's
# command, the fake trainer), and tears everything down (also on failure or Ctrl-C).
#
#   scripts/slurm-local.sh [BIN_DIR]     # BIN_DIR holds zerorun and zr_env_probe (default build/bin)
# Exit 0: the job ran and the ranks saw RANK/WORLD_SIZE/LOCAL_RANK/... from SLURM_*; 3: cannot set up.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$root/build/bin}" && pwd)
ranks=${ZR_SLURM_RANKS:-2}
start=$(date +%s.%N)

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "slurm-local: slurm-wlm/munge missing and not root to install them"; exit 3; }
  echo "slurm-local: installing slurm-wlm and munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null
fi
[ "$(id -u)" = 0 ] || { echo "slurm-local: needs root (SlurmUser=root, private daemons)"; exit 3; }

work=$(mktemp -d /tmp/zr-slurm.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  # Our daemons (by the pids they wrote) and the step daemons of our slurmd (SLURM_CONF=$work/...).
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for p in /proc/[0-9]*; do
    if { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$work/slurm.conf"; then
      kill -9 "${p#/proc/}" 2>/dev/null || true
    fi
  done
  for _ in $(seq 1 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  if [ "${ZR_SLURM_KEEP:-0}" = 1 ]; then echo "slurm-local: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT INT TERM

host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/state" "$work/spool" "$work/munge" "$work/out"
chmod 700 "$work/munge"
# munge: a private key and socket.
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.sock" \
  --pid-file="$work/munged.pid" --log-file="$work/munge/munged.log" --seed-file="$work/munge/seed"
pids+=("$(cat "$work/munged.pid")")

cat > "$work/slurm.conf" <<CONF
ClusterName=zrlocal
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.sock
CredType=cred/munge
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=zr Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -i
slurmd
for _ in $(seq 1 50); do [ -s "$work/slurmctld.pid" ] && [ -s "$work/slurmd.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$work/slurmctld.pid")" "$(cat "$work/slurmd.pid")")
for _ in $(seq 1 100); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' && break
  sleep 0.1
done
sinfo -h -o %T | grep -qE '^(idle|mixed)' || { echo "slurm-local: node never became idle"; tail -5 "$work"/slurm*.log; exit 3; }
ready=$(date +%s.%N)

# The job: zerorun drives srun, srun starts one `zerorun --from_env slurm` per rank.
"$bin/zerorun" --launcher slurm --num_procs "$ranks" --master_port 29613 "$bin/zr_env_probe" --out "$work/out" "arg with space"
done_at=$(date +%s.%N)

fail=0
for r in $(seq 0 $((ranks - 1))); do
  f="$work/out/rank$r.gen0.txt"
  [ -f "$f" ] || { echo "slurm-local: rank $r wrote nothing"; fail=1; continue; }
  for want in "env RANK=$r" "env LOCAL_RANK=$r" "env WORLD_SIZE=$ranks" "env LOCAL_SIZE=$ranks" "env CROSS_RANK=0" \
              "env CROSS_SIZE=1" "env MASTER_PORT=29613" "env MASTER_ADDR=$host" "arg 1 --local_rank=$r" "arg 4 arg with space"; do
    grep -qxF "$want" "$f" || { echo "slurm-local: rank $r: missing '$want'"; fail=1; }
  done
  grep -qE '^env ZERORUN_JOB_TOKEN=[0-9a-f]{64}$' "$f" || { echo "slurm-local: rank $r: no job token"; fail=1; }
done
t0=$(grep '^env ZERORUN_JOB_TOKEN=' "$work/out/rank0.gen0.txt" | cut -d= -f2)
t1=$(grep '^env ZERORUN_JOB_TOKEN=' "$work/out/rank1.gen0.txt" | cut -d= -f2)
[ "$t0" = "$t1" ] || { echo "slurm-local: ranks got different tokens"; fail=1; }

# A failing rank: srun (--kill-on-bad-exit) stops the step, zerorun returns the rank's code.
set +e
"$bin/zerorun" --launcher slurm --num_procs "$ranks" --kill_grace 1 "$bin/zr_env_probe" --exit 5 --on_rank 1 --sleep 30 >/dev/null 2>&1
code=$?
set -e
[ "$code" = 5 ] || { echo "slurm-local: failing rank gave exit code $code, expected 5"; fail=1; }
# A sweep with one Slurm job per trial: the spec's command is the launcher with --launcher slurm, so
# every trial is its own srun (a new job id each); the fake trainer writes SLURM_JOB_ID in its summary.
if [ -x "$bin/zerorun-sweep" ] && [ -x "$bin/zr_fake_trainer" ]; then
  cat > "$work/sweep.json" <<SPEC
{"base_config": {"train_micro_batch_size_per_gpu": 1}, "strategy": "grid",
 "command": ["$bin/zerorun", "--launcher", "slurm", "--num_procs", "1", "$bin/zr_fake_trainer"],
 "args": ["--steps", "3"], "objective": {"metric": "final_loss"},
 "params": {"x": {"flag": "--x", "choices": [0.1, 0.3, 0.5]}}}
SPEC
  if "$bin/zerorun-sweep" "$work/sweep.json" --out "$work/sweep" > "$work/sweep.log" 2>&1; then
    jobs=$({ cat "$work"/sweep/trials/*/run0/summary.0.json 2>/dev/null || true; } | { grep -o '"slurm_job_id": "[0-9]*"' || true; } | sort -u | wc -l)
    ok=$(grep -c '"status":"ok"' "$work/sweep/results.jsonl" || true)
    if [ "$jobs" = 3 ] && [ "$ok" = 3 ]; then
      echo "slurm-local: sweep of 3 trials ran as 3 Slurm jobs"
    else
      echo "slurm-local: sweep: $ok ok trial(s), $jobs distinct Slurm job id(s), expected 3 and 3"; tail -5 "$work/sweep.log"; fail=1
    fi
  else
    echo "slurm-local: the sweep failed"; tail -5 "$work/sweep.log"; fail=1
  fi
fi
end=$(date +%s.%N)

awk -v a="$start" -v b="$ready" -v c="$done_at" -v d="$end" 'BEGIN {
  printf "slurm-local: daemons up in %.1f s, 2-rank job %.1f s, failing job %.1f s, total %.1f s\n", b - a, c - b, d - c, d - a }'
[ $fail = 0 ] && echo "slurm-local: OK" || echo "slurm-local: FAILED"
exit $fail
