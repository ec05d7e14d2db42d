#!/usr/bin/env bash
# Soak dt-rdzv serve's doors: every adversarial attack in rotation for N minutes (default 10)
# against one server, beside a well-behaved torch TCPStore client (its own process); prints
# the server's RSS (now and peak) after each attack, its peak RSS and the bystander's worst
# stall at the end. Not part of CI.
#
#   scripts/soak.sh [MINUTES] [--baseline]
#
#   --baseline          the bystander alone, no attacks (the machine's own stalls)
#   SOAK_PROFILE=release  build and soak the release server (default: debug)
#   SOAK_LOG=FILE       keep the server's log
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MINUTES=${1:-10}
shift || true
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${DTCOMM_VENV:-$ROOT/.venv}
PROFILE=${SOAK_PROFILE:-debug}
if [ "$PROFILE" = release ]; then
  cargo build --quiet --release -p dt-rdzv --bin dt-rdzv --example native_attack
else
  cargo build --quiet -p dt-rdzv --bin dt-rdzv --example native_attack
fi
export DT_RDZV_BIN=$CARGO_TARGET_DIR/$PROFILE/dt-rdzv
echo "soak: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), server $DT_RDZV_BIN"
exec "$VENV/bin/python" tests/adversarial/soak.py --minutes "$MINUTES" \
  --native-attack "$CARGO_TARGET_DIR/$PROFILE/examples/native_attack" "$@"
