#!/usr/bin/env bash
# Soak dt-rdzv serve's doors: every adversarial attack in rotation for N minutes (default 10)
# against one server, beside a well-behaved torch TCPStore client; prints the server's peak
# RSS and the bystander's worst stall. Not part of CI.
#
#   scripts/soak.sh [MINUTES]        (SOAK_LOG=FILE keeps the server's log)
#
# Uses $DT_RDZV_BIN if set, else the debug build in $CARGO_TARGET_DIR (built here).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MINUTES=${1:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${DTCOMM_VENV:-$ROOT/.venv}
cargo build --quiet -p dt-rdzv --bin dt-rdzv --example native_attack
export DT_RDZV_BIN=${DT_RDZV_BIN:-$CARGO_TARGET_DIR/debug/dt-rdzv}
echo "soak: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), server $DT_RDZV_BIN"
exec "$VENV/bin/python" tests/adversarial/soak.py --minutes "$MINUTES" \
  --native-attack "$CARGO_TARGET_DIR/debug/examples/native_attack"
