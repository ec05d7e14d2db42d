#!/usr/bin/env bash
# Installs what the benchmarks need beyond scripts/setup.sh. Idempotent and silent about what
# is already there; the bench scripts call it when something is missing.
#
# Usage: scripts/setup_bench.sh [torch] [mpi] [netns]     (no argument: all three)
#   torch  the project's venv with torch (scripts/setup.sh): gloo_bench.py, torch's TCPStore
#   mpi    Open MPI from Debian (openmpi-bin libopenmpi-dev) and mpi4py in the project's venv
#          (benches/incumbents/requirements.txt): mpi_bench.py under mpirun
#   netns  iproute2 (ip) and unshare (util-linux): benches/incumbents/netns.sh
# Env:   DTCOMM_VENV   the project's venv (default .venv)
# apt-get needs root (or passwordless sudo); the venv does not.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${DTCOMM_VENV:-$ROOT/.venv}
export PATH="$HOME/.local/bin:$PATH"  # where scripts/setup.sh puts uv

log() { printf '[setup_bench] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

apt_install() {  # Debian packages, all installed by one apt-get call
  command -v apt-get >/dev/null || die "need the Debian packages $* and there is no apt-get: install their equivalents"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    sudo -n true 2>/dev/null || die "need root to run: apt-get install -y $*"
    sudo=(sudo -n)
  fi
  log "apt-get install -y $*"
  local tmp; tmp=$(mktemp); local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
  if ! "${apt[@]}" install -y -qq "$@" >"$tmp" 2>&1; then
    log "retrying after apt-get update"
    "${apt[@]}" update -qq >>"$tmp" 2>&1 || true
    "${apt[@]}" install -y -qq "$@" >>"$tmp" 2>&1 || { cat "$tmp" >&2; rm -f "$tmp"; die "apt-get install $* failed"; }
  fi
  rm -f "$tmp"
}

need_torch() {
  "$VENV/bin/python" -c 'import importlib.util as u; assert u.find_spec("torch")' 2>/dev/null && return
  log "no torch in $VENV: running scripts/setup.sh"
  scripts/setup.sh
}

need_mpi() {
  command -v mpirun >/dev/null && command -v mpicc >/dev/null || apt_install openmpi-bin libopenmpi-dev
  [ -x "$VENV/bin/python" ] || need_torch
  "$VENV/bin/python" -c 'from mpi4py import MPI; import numpy' >/dev/null 2>&1 && return
  command -v uv >/dev/null || die "uv not found: run scripts/setup.sh first"
  log "installing mpi4py into $VENV"
  VIRTUAL_ENV="$VENV" uv pip install --quiet -r benches/incumbents/requirements.txt
  "$VENV/bin/python" -c 'from mpi4py import MPI; import numpy' >/dev/null \
    || die "mpi4py in $VENV does not load Open MPI (see the error above)"
}

need_netns() {
  local pkgs=()
  command -v ip >/dev/null || pkgs+=(iproute2)
  command -v unshare >/dev/null || pkgs+=(util-linux)
  [ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"
}

[ $# -gt 0 ] || set -- torch mpi netns
for what in "$@"; do
  case $what in
    torch) need_torch ;;
    mpi) need_mpi ;;
    netns) need_netns ;;
    *) die "unknown component '$what' (torch, mpi, netns)" ;;
  esac
done
