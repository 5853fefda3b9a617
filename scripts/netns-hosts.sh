#!/usr/bin/env bash
# Fake cluster nodes on one machine for the launcher's multi-node tests: N network namespaces joined
# by a bridge, each running its own sshd (own config and host key, key-only root login, UsePAM no),
# plus an ssh_config and a hostfile for them. Needs root, iproute2 and openssh-server.
#
#   scripts/netns-hosts.sh up   TAG N DIR   # prints nothing on success; DIR/hostfile, DIR/ssh_config
#   scripts/netns-hosts.sh down TAG DIR     # stops the sshds, deletes namespaces and bridge (idempotent)
#
# TAG (letters/digits, <= 8 chars) keeps concurrent users apart; addresses are 10.213.<S>.11.. where
# S is derived from TAG. Use: zerorun -H DIR/hostfile --launcher_args "-F DIR/ssh_config" ...
set -euo pipefail

cmd=${1:?usage: netns-hosts.sh up TAG N DIR | down TAG DIR}
tag=${2:?TAG missing}
subnet=$(( $(printf '%s' "$tag" | cksum | cut -d' ' -f1) % 250 + 1 ))
br="zrb${tag}"

down() {
  local dir=$1
  for pidfile in "$dir"/sshd.*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^zr${tag}h" || true); do
    # anything still running in the namespace goes too
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns delete "$ns" 2>/dev/null || true
  done
  ip link delete "$br" 2>/dev/null || true
}

if [ "$cmd" = down ]; then
  down "${3:?DIR missing}"
  exit 0
fi

n=${3:?N missing}
dir=${4:?DIR missing}
[ "$(id -u)" = 0 ] || { echo "netns-hosts: needs root (network namespaces)"; exit 3; }
command -v ip >/dev/null || { echo "netns-hosts: 'ip' not found (Debian package iproute2)"; exit 3; }
sshd=$(command -v sshd || echo /usr/sbin/sshd)
[ -x "$sshd" ] || { echo "netns-hosts: sshd not found (Debian package openssh-server)"; exit 3; }
command -v ssh >/dev/null || { echo "netns-hosts: ssh not found (Debian package openssh-client)"; exit 3; }

down "$dir"  # leftovers of an earlier run with the same TAG
mkdir -p "$dir" /run/sshd
chmod 700 "$dir"
trap 'down "$dir"' ERR
ip link add "$br" type bridge || { echo "netns-hosts: cannot create a bridge (no CAP_NET_ADMIN?)"; exit 3; }
ip addr add "10.213.${subnet}.1/24" dev "$br"
ip link set "$br" up

[ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/id_ed25519"
[ -f "$dir/hostkey" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/hostkey"
cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
: > "$dir/hostfile"
cat > "$dir/ssh_config" <<CFG
Host *
  User root
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 5
CFG

for i in $(seq 0 $((n - 1))); do
  ns="zr${tag}h${i}"
  addr="10.213.${subnet}.$((11 + i))"
  ip netns add "$ns"
  ip link add "zrv${tag}x${i}" type veth peer name eth0 netns "$ns"
  ip link set "zrv${tag}x${i}" master "$br" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  cat > "$dir/sshd.$i.conf" <<CFG
ListenAddress $addr
Port 22
HostKey $dir/hostkey
PidFile $dir/sshd.$i.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AcceptEnv LC_*
PrintMotd no
CFG
  ip netns exec "$ns" "$sshd" -f "$dir/sshd.$i.conf" -E "$dir/sshd.$i.log"
  echo "$addr slots=2" >> "$dir/hostfile"
done
# wait until every sshd answers
for i in $(seq 0 $((n - 1))); do
  addr="10.213.${subnet}.$((11 + i))"
  for _ in $(seq 1 50); do
    ssh -F "$dir/ssh_config" "$addr" true 2>/dev/null && break
    sleep 0.1
  done
  ssh -F "$dir/ssh_config" "$addr" true || { echo "netns-hosts: sshd on $addr does not answer (see $dir/sshd.$i.log)"; down "$dir"; exit 4; }
done
