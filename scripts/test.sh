#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust tests, and the Python tests against the real
# torch client from PyPI, then the release wheel in a clean venv. Sets itself up first
# (scripts/setup.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=${DTCOMM_VENV:-$ROOT/.venv}

scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== import cycles between files (Rust and Python)"
"$VENV/bin/python" scripts/check_cycles.py
echo "== Python: ruff, mypy, stubtest of _dtcomm.pyi"
DTCOMM_VENV="$VENV" scripts/lint_python.sh
read -r -a FEATURES <<< "$(scripts/features.sh)"
echo "== cargo clippy -D warnings ${FEATURES[*]}"
cargo clippy --quiet --workspace --all-targets "${FEATURES[@]}" -- -D warnings
echo "== cargo doc -D warnings (broken and private intra-doc links) ${FEATURES[*]}"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --workspace --no-deps "${FEATURES[@]}"
echo "== cargo test ${FEATURES[*]}"
cargo test --workspace "${FEATURES[@]}"
echo "== pytest (real torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
export DT_RDZV_BIN="$CARGO_TARGET_DIR/debug/dt-rdzv"
"$VENV/bin/python" -m pytest -n 2 tests python/tests
echo "== the wheel in a fresh venv without cargo (scripts/test_wheel.sh)"
t=$SECONDS
scripts/test_wheel.sh
echo "== test_wheel.sh: $((SECONDS - t)) s"
