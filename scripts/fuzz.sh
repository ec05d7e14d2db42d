#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ (TCPStore decoder + store engine, native codec +
# rendezvous machine on one connection, rendezvous machine driven by several connections and
# jobs with a virtual clock, the data plane's frame header and control-message decoders) for a
# while each. Not part of CI.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
#
# Installs cargo-fuzz if it is missing, writes the seed corpus into fuzz/corpus/, then runs
# each target in turn (rendezvous_machine starts from no seed: its input is a list of
# operations). Works on stable Rust: RUSTC_BOOTSTRAP=1 unlocks -Zsanitizer=address.
# A crash, leak, OOM or timeout stops the run and leaves the input in fuzz/artifacts/TARGET/;
# replay it with `RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET fuzz/artifacts/TARGET/FILE`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECS=${1:-60}
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cargo run --quiet --release --manifest-path fuzz/Cargo.toml --example seed_corpus -- fuzz/corpus

for target in tcpstore_decode native_decode rendezvous_machine data_plane_decode; do
    echo "== cargo fuzz run $target (${SECS} s)"
    cargo fuzz run "$target" -- -max_total_time="$SECS" -rss_limit_mb=2048
done
