#!/usr/bin/env bash
# Sets up everything dtcomm needs on a fresh machine: checks the Rust toolchain, creates the
# project-local virtualenv (.venv, or $DTCOMM_VENV) with torch from PyPI, and builds the
# workspace. Idempotent: a second run reuses what is there and takes seconds.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${DTCOMM_VENV:-$ROOT/.venv}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

log() { printf '[setup] %s\n' "$*" >&2; }

command -v cargo >/dev/null || { log "cargo not found: install Rust (https://rustup.rs)"; exit 1; }
command -v python3 >/dev/null || { log "python3 not found"; exit 1; }

# uv makes the torch install take seconds once its cache is warm.
if ! command -v uv >/dev/null; then
  log "installing uv (pip --user)"
  python3 -m pip install --quiet --user uv 2>/dev/null || python3 -m pip install --quiet uv
  export PATH="$HOME/.local/bin:$PATH"
fi

# Debian's chromium, for the status page's browser test (driven by Playwright from PyPI; no
# browser is downloaded). Installed with apt-get when missing and we may (root or passwordless
# sudo); otherwise that one test skips, saying so.
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo -n)
  if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then
    log "apt-get install chromium (status page test)"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq chromium >/dev/null \
      || { "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null \
           && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq chromium >/dev/null; } \
      || log "could not install chromium: the status page's browser test will skip"
  else
    log "chromium missing and no root: the status page's browser test will skip (apt-get install chromium)"
  fi
fi

want=$(cat requirements-dev.txt | sha256sum | cut -c1-16)
have=$(cat "$VENV/.dtcomm-stamp" 2>/dev/null || true)
if [ "$want" != "$have" ] || [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV (torch and test packages from PyPI)"
  uv venv --quiet --allow-existing --python python3 "$VENV"
  VIRTUAL_ENV="$VENV" uv pip install --quiet -r requirements-dev.txt
  echo "$want" > "$VENV/.dtcomm-stamp"
else
  log "$VENV is up to date"
fi

log "building the workspace (target dir $CARGO_TARGET_DIR)"
cargo build --quiet --workspace --bins

# The Python package dtcomm (PyO3 module + python/dtcomm), installed editable into the venv by
# maturin (release build). Skipped when no Rust source it links and no build file changed.
pkg=$( { cat pyproject.toml Cargo.lock python/Cargo.toml;
         find python/src collectives/src rdzv/src rdzv/proto/src -name '*.rs' -print0 | sort -z | xargs -0 cat; } \
       | sha256sum | cut -c1-16)
if [ "$pkg" != "$(cat "$VENV/.dtcomm-pkg-stamp" 2>/dev/null || true)" ] \
   || ! ls python/dtcomm/_dtcomm*.so >/dev/null 2>&1; then
  log "building the Python package dtcomm (maturin develop --release)"
  VIRTUAL_ENV="$VENV" "$VENV/bin/maturin" develop --quiet --release
  echo "$pkg" > "$VENV/.dtcomm-pkg-stamp"
else
  log "Python package dtcomm is up to date"
fi
log "ready: $CARGO_TARGET_DIR/debug/dt-rdzv, $VENV/bin/python (import dtcomm, dtrun)"
