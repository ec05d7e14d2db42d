#!/usr/bin/env bash
# Horovod's own PyTorch examples, unchanged, under `dtrun --horovod -np 2`
# (python/tests/test_horovod_examples.py): pytorch_mnist.py on generated MNIST files and
# pytorch_synthetic_benchmark.py. The scripts are Horovod's code, not kept here: they are
# fetched from GitHub at a pinned commit, so this needs GitHub access (CI has none; there the
# tests skip). torchvision, which they import, is installed into the venv if missing.
#
#   scripts/horovod_examples.sh [DIR]     # DIR: where the scripts go (default target/horovod-examples)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${DTCOMM_VENV:-$ROOT/.venv}
COMMIT=2626dc87a3a8eb8fb7d2216198ce45bce0f9e65a   # horovod/horovod master, 2026-11
DIR=${1:-$ROOT/target/horovod-examples}

scripts/setup.sh
export PATH="$HOME/.local/bin:$PATH"   # uv, as setup.sh installs it
mkdir -p "$DIR"
for f in pytorch_mnist.py pytorch_synthetic_benchmark.py; do
  [ -s "$DIR/$f" ] || curl -fsSL -o "$DIR/$f" \
    "https://raw.githubusercontent.com/horovod/horovod/$COMMIT/examples/pytorch/$f"
done
"$VENV/bin/python" -c 'import torchvision' 2>/dev/null \
  || VIRTUAL_ENV="$VENV" uv pip install --quiet torchvision==0.29.2
export DT_RDZV_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/dt-rdzv
DTCOMM_HOROVOD_EXAMPLES="$DIR" "$VENV/bin/python" -m pytest -v -s python/tests/test_horovod_examples.py
