#!/usr/bin/env bash
# rdzv_perf beside torch's TCPStore server, in one run, inside a private loopback-only network
# namespace (as ../shared/anchors/rendezvous does). The namespace matters: outside it torch's
# server does a reverse DNS lookup per accepted client, which stalls ~5 s per burst in a sandbox
# without DNS and would make torch look 100x slower than it is.
# Usage: scripts/bench_rdzv.sh [--members 64,256,1024,4096] [--rounds 3] [--json]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export DTCOMM_VENV=${DTCOMM_VENV:-$ROOT/.venv}
scripts/setup.sh
cargo build --quiet --release -p dt-bench -p dt-rdzv
NETNS=${NETNS:-$ROOT/../shared/anchors/rendezvous/netns.sh}
run=("$CARGO_TARGET_DIR/release/rdzv_perf" "$@")
if [ -x "$NETNS" ] && unshare -n true 2>/dev/null; then
  exec "$NETNS" "${run[@]}"
fi
echo "# warning: no private network namespace (needs root and unshare); torch's figures will include DNS stalls" >&2
exec "${run[@]}"
