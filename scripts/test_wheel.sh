#!/usr/bin/env bash
# The wheel on a clean machine: builds the abi3 wheel and the sdist (scripts/build_wheels.sh,
# which checks the sdist's workspace), or takes the one given, makes a fresh venv (uv) on a
# PATH with no cargo or rustc, installs the wheel with
# pip (torch and numpy from uv's cache or PyPI first, as a user has them), and from that venv
# alone runs:
#   dt-rdzv serve (free ports, stopped by PID), dtrun: two ranks all_reduce through it,
#   torchrun --rdzv-backend=dtcomm through it, a Horovod-API allreduce (dtrun --horovod),
#   a C program compiled against dtcomm.get_include() and linked to dtcomm.get_lib(),
#   the versions of dt-rdzv, dtrun and dtcomm (one, the workspace's), a dt-rdzv binary missing
#   or not executable (the message names it), a second dtcomm on sys.path (named at import).
# It prints the time from `pip install` of the wheel to the first all_reduce.
#
#   scripts/test_wheel.sh [WHEEL]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
command -v uv >/dev/null || export PATH="$HOME/.local/bin:$PATH"
log() { printf '[test_wheel] %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

whl=${1:-}
if [ -z "$whl" ]; then
  out=$ROOT/.whl/test-dist
  rm -rf "$out"
  t=$SECONDS
  DTCOMM_WHEEL_OUT=$out scripts/build_wheels.sh --only-abi3
  log "build_wheels.sh: $((SECONDS - t)) s"
  whl=$(ls "$out"/dtcomm-"$version"-cp311-abi3-manylinux_2_28_"$(uname -m)".whl)
fi
[ -f "$whl" ] || fail "no wheel $whl"
whl=$(cd "$(dirname "$whl")" && pwd)/$(basename "$whl")
torch_req=$(grep -E '^torch==' requirements-dev.txt | cut -d' ' -f1)
uv_bin=$(command -v uv)

work=$(mktemp -d /tmp/dtcomm-wheel-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# A PATH without cargo and rustc: every directory holding either is left out.
clean_path=
IFS=: read -r -a dirs <<< "$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ ! -e "$d/cargo" ] && [ ! -e "$d/rustc" ] && clean_path=${clean_path:+$clean_path:}$d
done
venv=$work/venv
log "fresh venv $venv (python3, pip, $torch_req numpy)"
"$uv_bin" venv --quiet --seed --python python3 "$venv"
"$venv/bin/python" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
  || fail "python3 is older than 3.11: the abi3 wheel needs 3.11 or later"
VIRTUAL_ENV=$venv "$uv_bin" pip install --quiet "$torch_req" numpy
export PATH=$venv/bin:$clean_path
unset CARGO_TARGET_DIR DT_RDZV_BIN PYTHONPATH VIRTUAL_ENV
if command -v cargo >/dev/null || command -v rustc >/dev/null; then fail "cargo/rustc still on PATH"; fi
cd "$work"
py=$venv/bin/python

# --- pip install, then the first all_reduce (through a dt-rdzv serve from the wheel)
t0=$(date +%s.%N)
pip install --quiet --no-index --no-deps "$whl"
t_pip=$(date +%s.%N)
[ "$(command -v dt-rdzv)" = "$venv/bin/dt-rdzv" ] || fail "dt-rdzv is not the venv's: $(command -v dt-rdzv)"
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
DTRDZV_TOKEN=$token DTRDZV_LOG=info dt-rdzv serve --host 127.0.0.1 --port 0 --native-port 0 \
  --http-port 0 > "$work/serve.out" 2> "$work/serve.log" &
server=$!
pids+=("$server")
for _ in $(seq 200); do
  grep -q '^dt-rdzv listening http=' "$work/serve.out" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; fail "dt-rdzv serve exited"; }
  sleep 0.1
done
word() { grep -o "$1=[^ ]*" "$work/serve.out" | head -1 | cut -d= -f2; }
store=$(word tcpstore) native=$(word native) fingerprint=$(word fingerprint) http=$(word http)
[ -n "$native" ] && [ -n "$fingerprint" ] && [ -n "$http" ] || fail "no ports from dt-rdzv: $(cat "$work/serve.out")"
log "dt-rdzv serve pid $server: tcpstore $store, native $native, http $http"

worker=$ROOT/tests/wheel/worker.py
export DTCOMM_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 DTCOMM_TIMEOUT=60
run() {  # run NAME TIMEOUT CMD...: its output to $work/NAME.out, which must say OK
  local name=$1 limit=$2; shift 2
  # (dtrun prefixes its workers' lines with "[rankN]: ")
  if ! timeout "$limit" "$@" > "$work/$name.out" 2>&1 || ! grep -qE '(^|: )OK ' "$work/$name.out"; then
    cat "$work/$name.out" >&2; fail "$name"
  fi
  log "$name: $(grep -E '(^|: )OK ' "$work/$name.out")"
}
run dtrun 120 env DTCOMM_RDZV_TOKEN="$token" DTCOMM_RDZV_FINGERPRINT="$fingerprint" \
  DTCOMM_RDZV_STORE="$store" DTCOMM_RUN_ID=wheel-dtrun \
  dtrun --rdzv-backend native --rdzv-endpoint "$native" --nnodes 1 --nproc-per-node 2 \
  "$worker" dtcomm
first=$(sed -n 's/^\(\[rank0\]: \)\{0,1\}FIRST_ALLREDUCE_AT //p' "$work/dtrun.out")
install_to_first=$(python3 -c "print(f'{$first - $t0:.1f}')")
log "pip install of the wheel: $(python3 -c "print(f'{$t_pip - $t0:.1f}')") s; pip install to first all_reduce: $install_to_first s"

run torchrun 180 env DTCOMM_RDZV_TOKEN="$token" \
  torchrun --nnodes=1 --nproc-per-node=2 --rdzv-backend=dtcomm --rdzv-endpoint="$native" \
  --rdzv-id=wheel-torchrun --rdzv-conf="fingerprint=$fingerprint,store=$store" \
  --local-addr=127.0.0.1 "$worker" torch
run horovod 120 dtrun --horovod --nproc-per-node 2 "$worker" horovod

# --- C: the header and library from the installed package
inc=$("$py" -c 'import dtcomm; print(dtcomm.get_include())')
lib=$("$py" -c 'import dtcomm; print(dtcomm.get_lib())')
case "$inc$lib" in "$venv"/*"$venv"/*) ;; *) fail "get_include/get_lib outside the venv: $inc $lib" ;; esac
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -Wall -Werror -I "$inc" "$ROOT/ffi/examples/allreduce.c" \
  -L "$lib" -Wl,-rpath,"$lib" -ldtcomm_ffi -o "$work/allreduce"
timeout 120 dtrun --no-python --nproc-per-node 2 "$work/allreduce" > "$work/c.out" 2>&1 \
  || { cat "$work/c.out" >&2; fail "the C program"; }
log "C: $(grep -c . "$work/c.out") lines, exit 0 on both ranks"

kill -TERM "$server"
code=0; wait "$server" || code=$?
[ "$code" = 0 ] || { cat "$work/serve.log" >&2; fail "dt-rdzv serve exited $code on SIGTERM"; }
log "dt-rdzv serve stopped by PID (exit 0)"

# --- one version
v_rdzv=$(dt-rdzv --version) v_dtrun=$(dtrun --version) v_py=$("$py" -c 'import dtcomm; print(dtcomm.__version__)')
[ "$v_rdzv" = "dt-rdzv $version" ] && [ "$v_dtrun" = "dtrun $version" ] && [ "$v_py" = "$version" ] \
  || fail "versions disagree: '$v_rdzv' '$v_dtrun' '$v_py' (Cargo.toml: $version)"
log "versions: $v_rdzv, $v_dtrun, dtcomm.__version__ $v_py"

# --- bad installs: the binary not executable, then missing; a second dtcomm on sys.path
bin=$("$py" -c 'from dtcomm._install import rdzv_bin; print(rdzv_bin())')
chmod -x "$bin"
msg=$(dt-rdzv --version 2>&1) && fail "a non-executable dt-rdzv ran"
[[ "$msg" == *"$bin is not executable"* ]] || fail "no file named: $msg"
mv "$bin" "$bin.away"
msg=$(dt-rdzv --version 2>&1) && fail "a missing dt-rdzv ran"
[[ "$msg" == *"$bin is missing"* ]] || fail "no file named: $msg"
mv "$bin.away" "$bin" && chmod +x "$bin"
mkdir -p "$work/other/dtcomm" && : > "$work/other/dtcomm/__init__.py"
msg=$("$py" -W always -c "import sys; sys.path.append('$work/other'); import dtcomm" 2>&1)
[[ "$msg" == *"installed more than once"*"$work/other/dtcomm"* ]] || fail "no duplicate named: $msg"
log "bad installs named: $bin (not executable, missing), $work/other/dtcomm (a second copy)"
log "PASS $(basename "$whl"): pip install to first all_reduce $install_to_first s"
