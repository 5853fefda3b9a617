#!/usr/bin/env bash
# Renders a sweep's report.html with headless Chromium and writes a PNG screenshot, to check the
# report by eye (docs/experiments.md). Installs chromium with apt-get when it is missing (never run by
# the tests, which check the HTML structurally). Usage: scripts/report-screenshot.sh REPORT.html OUT.png [WIDTHxHEIGHT]
set -euo pipefail
report=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1040x2600}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z $browser ]]; then
  sudo=""; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq && $sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  browser=$(command -v chromium)
fi
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size/x/,}" \
  --screenshot="$out" "file://$report" 2>/dev/null
echo "wrote $out"
