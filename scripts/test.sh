#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust tests, and the Python tests against the real
# torch client from PyPI. Sets itself up first (scripts/setup.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${DTCOMM_VENV:-$ROOT/.venv}

scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --quiet --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== pytest (real torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
export DT_RDZV_BIN="$CARGO_TARGET_DIR/debug/dt-rdzv"
"$VENV/bin/python" -m pytest -n 2 tests python/tests
