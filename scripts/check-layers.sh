#!/usr/bin/env bash
# Checks DESIGN.md's layering: a folder includes zerorun headers only from itself and the layers
# above it (core < kernels < comm < zero < offload < runtime < launcher < tools/examples/bench/tests).
# Usage: scripts/check-layers.sh [repo-root]. Prints each violation as file:line and exits 1.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
order=(core kernels comm zero offload runtime launcher experiments)
rank_of() { local i; for i in "${!order[@]}"; do [[ ${order[$i]} == "$1" ]] && { echo "$i"; return; }; done; echo 99; }
status=0
for layer in "${order[@]}"; do
  [[ -d $layer ]] || continue
  mine=$(rank_of "$layer")
  while IFS= read -r hit; do
    file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}
    dep=$(sed -E 's/.*#include "zerorun\/([a-z_]+)\/.*/\1/' <<<"$rest")
    if (( $(rank_of "$dep") > mine )); then
      echo "$file:$line: layer '$layer' must not include from '$dep' (see DESIGN.md layers)"
      status=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' '#include "zerorun/' "$layer" || true)
done
[[ $status == 0 ]] && echo "layering ok"
exit $status
