#!/usr/bin/env bash
# Fuzzes the config loader alone for a bounded time: scripts/fuzz.sh [SECONDS] config (see there).
#   scripts/fuzz-config.sh [SECONDS]     (default 60)
exec "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" "${1:-60}" config
