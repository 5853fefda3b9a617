#!/usr/bin/env bash
# Installs what zerorun needs to build and test, from Debian's package archive only, and only what
# is missing (idempotent). Runs apt-get as root, or through sudo. Prints what it installs.
# Usage: scripts/install-deps.sh [--dry-run]
set -euo pipefail

# Build: compiler, CMake >= 3.25, Ninja, pkg-config and the libraries zerorun links.
build_pkgs=(g++ cmake ninja-build pkg-config rapidjson-dev liburing-dev libhwloc-dev libucx-dev
            libopenblas-dev libdnnl-dev libxxhash-dev libprotobuf-dev protobuf-compiler)
# Tests: doctest; clang + its runtime for the libFuzzer target; what the launcher's tests start
# (sshd in network namespaces, pdsh, iproute2; a one-node Slurm with munge; OpenMPI's mpirun) and
# procps for process-table checks. Each such test skips, naming the package, when it is missing.
test_pkgs=(doctest-dev clang libclang-rt-14-dev openssh-server openssh-client iproute2 procps pdsh slurm-wlm munge
           openmpi-bin)

missing=()
for p in "${build_pkgs[@]}" "${test_pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all dependencies present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
[[ ${1:-} == --dry-run ]] && exit 0

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
