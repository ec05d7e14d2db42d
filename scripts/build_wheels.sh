#!/usr/bin/env bash
# Builds dtcomm's release wheels and sdist into .whl/dist (or $DTCOMM_WHEEL_OUT):
#
#   scripts/build_wheels.sh [--arch x86_64|aarch64|all] [--no-sdist] [--only-abi3]
#
# Per architecture, manylinux_2_28 (glibc 2.28, what torch's own wheels need), linked by zig
# (`ziglang` from PyPI, through maturin --zig and cargo-zigbuild) so that no glibc symbol newer
# than 2.28 is used whatever this machine's glibc is:
#   dtcomm-V-cp311-abi3-manylinux_2_28_ARCH.whl  every CPython >= 3.11 (PyO3's limited API; the
#                                                buffer protocol is in it from 3.11 on)
#   dtcomm-V-cp310-cp310-manylinux_2_28_ARCH.whl CPython 3.10 (needs a python3.10 here)
# Each carries the extension module, the Python package, `dt-rdzv` (the server, with the etcd
# backend, as dtcomm/_bin/dt-rdzv behind the `dt-rdzv` command), the C header and library
# (dtcomm.get_include(), dtcomm.get_lib()). CUDA and NCCL stay loaded at run time (dlopen).
# Then, per wheel: `auditwheel show` (nothing linked beyond the manylinux policy), a scan for
# this machine's paths, the size. The build tools live in .whl/tools (uv venv from PyPI).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=${DTCOMM_WHEEL_OUT:-$ROOT/.whl/dist}
TOOLS=${DTCOMM_WHEEL_TOOLS:-$ROOT/.whl/tools}
GLIBC=2.28
archs=(x86_64) sdist=1 only_abi3=0
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) shift; [ "$1" = all ] && archs=(x86_64 aarch64) || archs=("$1") ;;
    --no-sdist) sdist=0 ;;
    --only-abi3) only_abi3=1 ;;
    *) echo "usage: $0 [--arch x86_64|aarch64|all] [--no-sdist] [--only-abi3]" >&2; exit 2 ;;
  esac
  shift
done
log() { printf '[build_wheels] %s\n' "$*" >&2; }

command -v cargo >/dev/null || { log "cargo not found: install Rust (https://rustup.rs)"; exit 1; }
command -v uv >/dev/null || export PATH="$HOME/.local/bin:$PATH"
command -v uv >/dev/null || { log "uv not found (scripts/setup.sh installs it)"; exit 1; }
[ -n "$(scripts/features.sh)" ] \
  || { log "protoc or protobuf's .proto files missing: dt-rdzv's etcd backend cannot build (scripts/setup.sh installs them)"; exit 1; }

# Pinned, so that a wheel is built the same way next month (maturin 1.16.0 carries
# cargo-zigbuild 0.24.0 inside; the standalone one builds dt-rdzv and the C library).
tools=("maturin==1.16.0" "cargo-zigbuild==0.24.0" "ziglang==0.17.1" "auditwheel==6.8.2")
if [ "$(cat "$TOOLS/.dtcomm-tools" 2>/dev/null)" != "${tools[*]}" ]; then
  log "build tools into $TOOLS (${tools[*]} from PyPI)"
  uv venv --quiet --allow-existing --python python3 "$TOOLS"
  VIRTUAL_ENV="$TOOLS" uv pip install --quiet "${tools[@]}"
  echo "${tools[*]}" > "$TOOLS/.dtcomm-tools"
fi
# cargo-zigbuild and maturin find zig as `python3 -m ziglang` of the tools' venv.
export PATH="$TOOLS/bin:$PATH"

# Nothing of this machine in the binaries: panic locations and generated code name their files
# by path, so the cargo home, the checkout and the target dir are remapped to fixed names; the
# debug info (which names the build directories too) is left out of the release build.
CARGO_HOME_DIR=${CARGO_HOME:-$HOME/.cargo}
RUSTUP_HOME_DIR=${RUSTUP_HOME:-$HOME/.rustup}
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }--remap-path-prefix=$CARGO_HOME_DIR=/cargo --remap-path-prefix=$RUSTUP_HOME_DIR=/rustup --remap-path-prefix=$ROOT=/dtcomm --remap-path-prefix=$CARGO_TARGET_DIR=/target"
export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=debuginfo

py310=$(uv python find --no-project 3.10 2>/dev/null || true)
[ -n "$py310" ] || for p in python3.10 "$HOME"/.pyenv/versions/3.10*/bin/python3.10; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then
    py310=$(command -v "$p"); break
  fi
done

mkdir -p "$OUT"
stage=python/dtcomm
for arch in "${archs[@]}"; do
  target=$arch-unknown-linux-gnu
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    log "rustup target add $target"
    rustup target add "$target" >&2 || { log "no Rust standard library for $target: skipped"; continue; }
  fi
  log "$arch: dt-rdzv (with etcd) and libdtcomm_ffi.so, release, glibc $GLIBC"
  # A target dir of their own: maturin and cargo-zigbuild link through zig wrapper scripts at
  # different paths, and the linker is part of every crate's fingerprint, so in one target dir
  # each build would recompile every dependency the other just built.
  cargo zigbuild --quiet --release --locked --target "$target.$GLIBC" \
    --target-dir "$CARGO_TARGET_DIR/wheel-bins" \
    -p dt-rdzv -p dtcomm-ffi --features dt-rdzv/etcd,dtcomm-ffi/cuda
  rel=$CARGO_TARGET_DIR/wheel-bins/$target/release
  rm -rf "$stage/_bin" "$stage/lib" "$stage/include"
  install -D -m 0755 "$rel/dt-rdzv" "$stage/_bin/dt-rdzv"
  install -D -m 0755 "$rel/libdtcomm_ffi.so" "$stage/lib/libdtcomm_ffi.so"
  install -D -m 0644 ffi/include/dtcomm.h "$stage/include/dtcomm.h"

  common=(build --quiet --release --locked --strip --zig --compatibility "manylinux_${GLIBC/./_}"
          --target "$target" --out "$OUT")
  log "$arch: the abi3 wheel (CPython >= 3.11)"
  # (the features of pyproject's [tool.maturin] again: a --features list may replace them)
  maturin "${common[@]}" --features pyo3/extension-module,cuda,pyo3/abi3-py311 --interpreter python3.11
  if [ "$only_abi3" = 0 ]; then
    if [ -n "$py310" ]; then
      log "$arch: the CPython 3.10 wheel ($py310)"
      maturin "${common[@]}" --interpreter "$py310"
    else
      log "$arch: no python3.10 here: no cp310 wheel (uv python install 3.10 gives one)"
    fi
  fi
done
rm -rf "$stage/_bin" "$stage/lib" "$stage/include"
if [ "$sdist" = 1 ]; then
  log "sdist"
  maturin sdist --out "$OUT" >/dev/null 2>&1
  # It must hold every crate the module needs: cargo resolves its workspace offline, and its
  # Cargo.lock pins the same versions as ours (maturin drops the members the module does not
  # need, ffi and benches, so their packages leave the lock; nothing else may change).
  tmp=$(mktemp -d)
  tar xzf "$OUT/dtcomm-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1).tar.gz" -C "$tmp"
  src=$(echo "$tmp"/dtcomm-*)
  cargo metadata --quiet --offline --format-version 1 --manifest-path "$src/python/Cargo.toml" >/dev/null \
    || { log "the sdist's workspace does not resolve offline"; exit 1; }
  pins() { awk '/^name = /{n=$3} /^version = /{print n, $3}' "$1" | sort -u; }
  extra=$(comm -13 <(pins Cargo.lock) <(pins "$src/Cargo.lock"))
  rm -rf "$tmp"
  [ -z "$extra" ] || { log "the sdist's Cargo.lock differs from ours: $extra"; exit 1; }
  log "sdist: its workspace resolves offline with our Cargo.lock's versions"
fi

# The verdicts: auditwheel on each wheel, no path of this machine inside, the size.
status=0
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
for whl in "$OUT"/dtcomm-"$version"-*.whl; do
  [ -e "$whl" ] || continue
  echo "== $(basename "$whl")  $(du -k "$whl" | cut -f1) KiB"
  auditwheel show "$whl" | tr '\n' ' ' | sed 's/  */ /g'; echo
  tmp=$(mktemp -d)
  "$TOOLS/bin/python" -m zipfile -e "$whl" "$tmp"
  leaks=$(grep -rlaF -e "$ROOT" -e "$CARGO_TARGET_DIR" -e "$HOME/" "$tmp" | sed "s|$tmp/||" || true)
  rm -rf "$tmp"
  if [ -n "$leaks" ]; then
    echo "FAIL: this machine's paths ($ROOT, $CARGO_TARGET_DIR, $HOME/) in: $leaks"; status=1
  else
    echo "no path of this machine inside"
  fi
done
[ "$sdist" = 0 ] || ls -l "$OUT"/dtcomm-"$version".tar.gz
exit $status
