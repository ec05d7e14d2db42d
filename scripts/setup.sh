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

# Debian packages the tests use, installed with apt-get when missing and we may (root or
# passwordless sudo); otherwise the tests that need them skip, saying so:
#   chromium     the status page's browser test (driven by Playwright from PyPI; no download)
#   etcd-server  real etcd 3.4: the reference the etcd v2 door is compared with, and the
#                backend of the tests where several dt-rdzv share jobs (--backend etcd://)
#   protobuf-compiler  protoc, which the etcd v3 client (dt-rdzv's `etcd` feature) builds with,
#   libprotobuf-dev    and protobuf's well-known .proto files it imports (only Recommended by
#                      protobuf-compiler, so --no-install-recommends leaves them out)
#   openmpi-bin  a real `mpirun`: Horovod scripts and the C examples launched by it with no
#                rendezvous endpoint (the benchmarks' Open MPI comes from scripts/setup_bench.sh)
#   mpich        a real `mpiexec.hydra` (MPICH's launcher; Intel MPI's is Hydra too): scripts
#                launched by it meet through its PMI-1 socket. `mpirun` stays Open MPI's
#                (alternatives priority 50 against MPICH's 40)
#   libpmix-dev  the libpmix.so Slurm's mpi/pmix plugin loads (`srun --mpi=pmix`)
#   slurm-wlm, munge  a real Slurm (slurmctld, slurmd, srun, sbatch) and its authentication:
#                python/tests/test_slurm_real.py starts a one-node cluster in a temporary
#                directory (slurm_cluster.py) and stops it by PID; nothing runs as a service
apt_want=()
command -v chromium >/dev/null || apt_want+=(chromium)
command -v etcd >/dev/null || apt_want+=(etcd-server)
command -v protoc >/dev/null || apt_want+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || apt_want+=(libprotobuf-dev)
command -v mpirun >/dev/null || apt_want+=(openmpi-bin)
command -v mpiexec.hydra >/dev/null || apt_want+=(mpich)
command -v slurmctld >/dev/null || apt_want+=(slurm-wlm)
command -v munged >/dev/null || apt_want+=(munge)
# (Slurm's mpi/pmix plugin opens the unversioned libpmix.so, which only the -dev package ships)
[ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || [ "$(uname -m)" != x86_64 ] || apt_want+=(libpmix-dev)
if [ ${#apt_want[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo -n)
  if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then
    log "apt-get install ${apt_want[*]}"
    apt() { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@"; }
    apt install -y -qq --no-install-recommends "${apt_want[@]}" >/dev/null \
      || { apt update -qq >/dev/null && apt install -y -qq --no-install-recommends "${apt_want[@]}" >/dev/null; } \
      || log "could not install ${apt_want[*]}: the tests that need them will skip"
  else
    log "missing ${apt_want[*]} and no root: the tests that need them will skip (apt-get install ${apt_want[*]})"
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

# dt-rdzv's etcd backend needs protoc to build; without it the workspace builds without the
# backend and its tests skip (scripts/features.sh says which features the build uses).
read -r -a FEATURES <<< "$(scripts/features.sh)"
log "building the workspace (target dir $CARGO_TARGET_DIR) ${FEATURES[*]}"
cargo build --quiet --workspace --bins "${FEATURES[@]}"

# The Python package dtcomm (PyO3 module + python/dtcomm), installed editable into the venv by
# maturin (release build). Skipped when no Rust source it links and no build file changed.
pkg=$( { cat pyproject.toml Cargo.lock python/Cargo.toml;
         find python/src collectives/src launch/src rdzv/src rdzv/proto/src sys/nccl/src -name '*.rs' -print0 | sort -z | xargs -0 cat; } \
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
