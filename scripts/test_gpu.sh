#!/usr/bin/env bash
# The GPU test set and the CUDA benchmark, for a machine with an NVIDIA GPU (the test suite
# and CI have none; there these tests skip). Sets itself up first (scripts/setup.sh).
#
#   scripts/test_gpu.sh            # tests, then the benchmark (results under $OUT or ./gpu-results)
#
# With one GPU, NCCL refuses two ranks on one device, so the tests run NCCL at world 1 and host
# staging at worlds 2 and 3 (see python/tests/test_gpu.py).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${DTCOMM_VENV:-$ROOT/.venv}
RESULTS=${OUT:-$ROOT/gpu-results}
mkdir -p "$RESULTS"

scripts/setup.sh
"$VENV/bin/python" -c 'import dtcomm, json; print(json.dumps(dtcomm.cuda_status(), indent=1))' \
  | tee "$RESULTS/cuda_status.json"
"$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: nothing to test here")'

echo "== GPU tests"
export DT_RDZV_BIN="$CARGO_TARGET_DIR/debug/dt-rdzv"
"$VENV/bin/python" -m pytest -m gpu -v python/tests/test_gpu.py 2>&1 | tee "$RESULTS/tests.txt"

echo "== CUDA all_reduce: dtcomm (NCCL, staging) beside torch's nccl, and gloo on host tensors"
"$VENV/bin/python" benches/python/cuda_allreduce.py --rounds 3 2>&1 | tee "$RESULTS/bench.txt"

echo "== all_reduce_perf on device buffers (nccl-tests format): NCCL at world 1, staging at world 2, host buffers beside"
cargo build --release -q -p dt-bench --features cuda
PERF="$CARGO_TARGET_DIR/release/all_reduce_perf"
{
  "$PERF" --device cuda --world 1 -b 8 -e 256M -f 4
  DTCOMM_CUDA=stage "$PERF" --device cuda --world 2 -b 8 -e 256M -f 4
  "$PERF" --world 2 -b 8 -e 256M -f 4
} 2>&1 | tee "$RESULTS/all_reduce_perf.txt"
