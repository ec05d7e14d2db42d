#!/usr/bin/env bash
# Lints the Python package python/dtcomm: ruff (rules in pyproject.toml), mypy (the package,
# settings in pyproject.toml) and mypy's stubtest (python/dtcomm/_dtcomm.pyi against the built
# extension dtcomm._dtcomm, which must be installed in the venv: scripts/setup.sh or
# `maturin develop`). Exits non-zero on any finding.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${DTCOMM_VENV:-$ROOT/.venv}
PY="$VENV/bin/python"

status=0
echo "== ruff check python/dtcomm"
"$PY" -m ruff check python/dtcomm || status=1
echo "== mypy python/dtcomm"
"$PY" -m mypy --config-file pyproject.toml python/dtcomm || status=1
echo "== stubtest dtcomm._dtcomm"
# Run from the root: `dtcomm` is the installed package (the editable install points at
# python/), its stub found through mypy_path. No allowlist: stubtest judges every entry.
"$PY" -m mypy.stubtest dtcomm._dtcomm --mypy-config-file pyproject.toml || status=1
exit "$status"
