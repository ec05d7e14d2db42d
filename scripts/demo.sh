#!/usr/bin/env bash
# The main job: sets everything up, then
#  1. `dtrun --nproc-per-node 4` trains a small model with DDP over dtcomm (embedded dt-rdzv),
#     printing the loss falling and the measured all-reduce bandwidth;
#  2. starts dt-rdzv serve and runs the same script as a local 2-node x 2-process torchrun job
#     whose rendezvous goes through it (unmodified torchrun, c10d backend), again on dtcomm.
# The server is stopped by PID at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${DTCOMM_VENV:-$ROOT/.venv}
scripts/setup.sh

export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 TORCH_CPP_LOG_LEVEL=ERROR
echo "[demo] dtrun --nproc-per-node 4 examples/train_ddp.py (DDP over dtcomm)"
"$VENV/bin/dtrun" --nproc-per-node "${DEMO_NPROC:-4}" examples/train_ddp.py
[ "${DEMO_TORCHRUN:-1}" = 1 ] || exit 0

LOG=$(mktemp -d)
"$CARGO_TARGET_DIR/debug/dt-rdzv" serve --host 127.0.0.1 --port "${DEMO_PORT:-0}" --native-port 0 --http-port 0 --no-auth \
  > "$LOG/ready" 2> "$LOG/dt-rdzv.log" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -qs listening "$LOG/ready" && break; sleep 0.05; done
ENDPOINT=$(sed -n 's/^dt-rdzv listening tcpstore=//p' "$LOG/ready")
echo "[demo] dt-rdzv serve (pid $SERVER) at $ENDPOINT; logs in $LOG"

echo "[demo] torchrun 2 nodes x 2 through dt-rdzv serve, same script"
agent() {
  "$VENV/bin/python" -m torch.distributed.run --nnodes=2 --nproc-per-node=2 \
    --rdzv-backend=c10d --rdzv-endpoint="$ENDPOINT" --rdzv-id=demo \
    --rdzv-conf=is_host=false --local-addr=127.0.0.1 examples/train_ddp.py
}
# Either agent may get the node with rank 0 (the one that prints): show both, without blank
# lines (grep finding nothing is not a failure).
agent 2>&1 | (grep -v '^\s*$' || true) &
A1=$!
agent 2>&1 | (grep -v '^\s*$' || true) &
A2=$!
rc1=0; rc2=0
wait $A2 || rc2=$?
wait $A1 || rc1=$?
echo "[demo] agents exited $rc1 $rc2; server log:"
grep -E "purged|listening" "$LOG/dt-rdzv.log" | sed 's/^/[dt-rdzv] /' || true
exit $(( rc1 | rc2 ))
