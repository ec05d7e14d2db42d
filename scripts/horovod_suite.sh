#!/usr/bin/env bash
# Horovod's own PyTorch test suite (test/parallel/test_torch.py, 115 tests) against
# dtcomm.horovod at worlds 2 and 3, each rank under `dtrun --horovod` as horovodrun --gloo would
# start it; per-rank logs and JUnit files and a summary table under target/horovod-suite/.
# Horovod's code is not kept here: give a checkout of its repository at v0.28.1.
#
#   git clone --depth 1 --branch v0.28.1 https://github.com/horovod/horovod.git ~/horovod
#   scripts/horovod_suite.sh ~/horovod [--worlds 2 3] [-k EXPR]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${DTCOMM_VENV:-$ROOT/.venv}
SRC=${1:-${DTCOMM_HOROVOD_SRC:-}}
[ $# -gt 0 ] && shift
scripts/setup.sh
exec "$VENV/bin/python" tests/horovod_suite/run_horovod_suite.py --horovod-src "$SRC" "$@"
