#!/usr/bin/env bash
# rdzv_perf beside torch's TCPStore server, in one run, inside a private loopback-only network
# namespace (benches/incumbents/netns.sh). The namespace matters: outside it torch's server does
# a reverse DNS lookup per accepted client, which stalls ~5 s per burst in a sandbox without
# DNS and would make torch look 100x slower than it is. Torch's server runs under the project's
# venv python (${DTCOMM_VENV:-.venv}/bin/python, made by scripts/setup.sh).
# Usage: scripts/bench_rdzv.sh [--members 64,256,1024,4096] [--rounds 3] [--json] [rdzv_perf options]
# Env:   DTCOMM_VENV  the project's venv (default .venv)
#        NETNS        the namespace wrapper (default benches/incumbents/netns.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export DTCOMM_VENV=${DTCOMM_VENV:-$ROOT/.venv}
scripts/setup.sh
cargo build --quiet --release -p dt-bench -p dt-rdzv
NETNS=${NETNS:-$ROOT/benches/incumbents/netns.sh}
if ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "# bench_rdzv: 'ip' or 'unshare' missing: running scripts/setup_bench.sh netns" >&2
  scripts/setup_bench.sh netns || echo "# bench_rdzv: scripts/setup_bench.sh netns failed" >&2
fi
# rdzv_perf runs torch's server with $DTCOMM_VENV/bin/python unless given --python
run=("$CARGO_TARGET_DIR/release/rdzv_perf" "$@")
if "$NETNS" --check 2>/dev/null; then
  exec "$NETNS" "${run[@]}"
fi
echo "# warning: no private network namespace (needs root and unshare or ip netns; see $NETNS);" \
  "torch's figures will include DNS stalls" >&2
exec "${run[@]}"
