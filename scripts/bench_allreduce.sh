#!/usr/bin/env bash
# dtcomm allreduce against the incumbents, in one invocation, interleaved in rounds:
# dtcomm (all_reduce_perf), gloo (torch) and Open MPI over TCP, world 2 and world 4, float32
# sum in place, the per-size schedule of benches/incumbents/common.py. Prints the medians over
# rounds and the ratios. Every step is wrapped by benches/incumbents/probe.py (bounded wait for
# an idle window, then it records the co-tenant load) and bounded by `timeout`.
#
# Usage: scripts/bench_allreduce.sh [outdir=target/bench-allreduce] [rounds=3]
# Env:   DTCOMM_VENV  the project's venv (default .venv, made by scripts/setup.sh); its python
#                     runs gloo (torch), mpi4py and the probe
#        TORCH_PY / MPI_PY     another python for gloo / for mpi4py + numpy (default: the venv's)
#        INCUMBENTS  the incumbent harness (default benches/incumbents)
#        SIZES_W2 / SIZES_W4   sizes (default 8,1K,64K,1M,16M,64M / 8,1M,16M,64M)
#        SKIP="gloo mpi"       leave incumbents out
#        MAX_LOAD=0.2          rounds whose co-tenant load (probe.py foreign_frac) is above this are
#                              left out of the medians when at least one round of that config is under it
# Needs: cargo and scripts/setup.sh's venv; Open MPI and mpi4py come from scripts/setup_bench.sh
# (apt-get install openmpi-bin libopenmpi-dev, mpi4py into the venv), run here when missing.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/target/bench-allreduce}; ROUNDS=${2:-3}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
INCUMBENTS=${INCUMBENTS:-$ROOT/benches/incumbents}
VPY=${DTCOMM_VENV:-$ROOT/.venv}/bin/python
TPY=${TORCH_PY:-$VPY}
MPY=${MPI_PY:-$VPY}
SIZES_W2=${SIZES_W2:-8,1K,64K,1M,16M,64M}
SIZES_W4=${SIZES_W4:-8,1M,16M,64M}
SKIP=${SKIP:-}
log() { echo "[$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$OUT/run.log" >&2; }
skipped() { case " $SKIP " in *" $1 "*) return 0;; esac; return 1; }
setup() {  # $1 component of scripts/setup_bench.sh, $2 what is missing, $3 the SKIP that avoids it
  log "$2: running scripts/setup_bench.sh $1"
  "$ROOT/scripts/setup_bench.sh" "$1" || { log "scripts/setup_bench.sh $1 failed${3:+ (SKIP=\"$3\" leaves it out)}"; exit 1; }
}
[ -f "$INCUMBENTS/probe.py" ] || { log "no incumbent harness in $INCUMBENTS"; exit 1; }
if [ ! -x "$VPY" ]; then
  setup torch "no project venv at $(dirname "$(dirname "$VPY")") (it runs the probe and the summary)"
fi
if ! skipped gloo && ! "$TPY" -c 'import importlib.util as u; assert u.find_spec("torch")' 2>/dev/null; then
  if [ -n "${TORCH_PY:-}" ]; then log "TORCH_PY=$TORCH_PY has no torch"; exit 1; fi
  setup torch "no torch in the project venv (needed for gloo)" gloo
fi
if ! skipped mpi && ! { command -v mpirun >/dev/null && "$MPY" -c 'from mpi4py import MPI; import numpy' 2>/dev/null; }; then
  if [ -n "${MPI_PY:-}" ] && command -v mpirun >/dev/null; then log "MPI_PY=$MPI_PY has no working mpi4py + numpy"; exit 1; fi
  setup mpi "Open MPI (mpirun) or mpi4py missing" mpi
fi
P() { local name=$1; shift; "$VPY" "$INCUMBENTS/probe.py" "$OUT/probe_$name.json" --wait-idle 0.6 --max-wait 10 -- "$@"; }

(cd "$ROOT" && cargo build --release -q -p dt-bench --bin all_reduce_perf) || exit 1
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BENCH="$TARGET/release/all_reduce_perf"

dtcomm() {  # $1 world, $2 sizes, $3 tag
  log "dtcomm w$1 $3"
  P "dtcomm_w$1_$3" env DTCOMM_SOCKET_IFNAME=lo timeout 600 "$BENCH" --world "$1" --sizes "$2" --anchor-schedule \
    -d float -o sum --json "$OUT/dtcomm_w$1_$3.json" >> "$OUT/run.log" 2>&1 || log "FAILED dtcomm w$1 $3"
}
gloo() {
  skipped gloo && return
  log "gloo w$1 $3"
  # shellcheck disable=SC2046
  (cd "$INCUMBENTS" && P "gloo_w$1_$3" timeout 900 "$TPY" gloo_bench.py --world "$1" --timeout 850 \
    --sizes $(echo "$2" | tr , ' ') --out "$OUT/gloo_w$1_$3.json") >> "$OUT/run.log" 2>&1 || log "FAILED gloo w$1 $3"
}
mpi() {
  skipped mpi && return
  log "mpi-tcp w$1 $3"
  # shellcheck disable=SC2046
  (cd "$INCUMBENTS" && P "mpi-tcp_w$1_$3" env OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo \
    timeout 900 mpirun --allow-run-as-root --oversubscribe -np "$1" "$MPY" mpi_bench.py --label tcp \
    --sizes $(echo "$2" | tr , ' ') --out "$OUT/mpi-tcp_w$1_$3.json") >> "$OUT/run.log" 2>&1 || log "FAILED mpi w$1 $3"
}

for r in $(seq 1 "$ROUNDS"); do
  dtcomm 2 "$SIZES_W2" r$r; gloo 2 "$SIZES_W2" r$r; mpi 2 "$SIZES_W2" r$r
  dtcomm 4 "$SIZES_W4" r$r; gloo 4 "$SIZES_W4" r$r; mpi 4 "$SIZES_W4" r$r
done

MAX_LOAD=${MAX_LOAD:-0.2} "$VPY" - "$OUT" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
max_load = float(os.environ.get("MAX_LOAD", "0.2"))
rows = {}  # (impl, world, bytes) -> list of (busbw, avg_us, p50_us, foreign)
def foreign(name):
    try:
        return json.load(open(os.path.join(out, f"probe_{name}.json")))["foreign_frac"]
    except Exception:
        return float("nan")
for f in sorted(glob.glob(os.path.join(out, "*_w*_r*.json"))):
    if os.path.basename(f).startswith("probe_"):
        continue
    name = os.path.basename(f)[:-5]
    impl, world = re.match(r"(.+)_w(\d+)_r\d+", name).groups()
    d = json.load(open(f))
    fr = foreign(name)
    if impl == "dtcomm":
        for r in d["results"]:
            c = r["in_place"]
            rows.setdefault((impl, int(world), r["size"]), []).append((c["bus_bw"], c["time"], c["p50_us"], fr))
    else:
        for r in d["results"]:
            rows.setdefault((impl, int(world), r["bytes"]), []).append((r["busbw_GBps"], r["avg_us"], r.get("p50_us", float("nan")), fr))
def kept(k):
    v = rows.get(k, [])
    quiet = [x for x in v if x[3] <= max_load]
    return quiet if quiet else v
def med(k, i):
    v = [x[i] for x in kept(k)]
    return statistics.median(v) if v else float("nan")
def rng(k, i):
    v = [x[i] for x in kept(k)]
    return f"[{min(v):.3g}-{max(v):.3g}]" if v else ""
def used(k):
    v = rows.get(k, [])
    quiet = [x for x in v if x[3] <= max_load]
    return f"{len(quiet)}/{len(v)}" if quiet else f"0/{len(v)} (all loaded, all used)"
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else (f"{b >> 10} KiB" if b >= 1024 else f"{b} B")
impls = ["dtcomm", "gloo", "mpi-tcp"]
print(f"allreduce, float32 sum in place, medians over rounds ([min-max] of dtcomm); busbw in GB/s; latency = p50 per call (avg per op) in us")
print(f"rounds used = rounds with co-tenant load <= {max_load} (all rounds when none is), as dtcomm/gloo/mpi-tcp")
print("| world | size | dtcomm busbw | gloo busbw | mpi-tcp busbw | dtcomm p50 (avg) us | gloo p50 (avg) us | mpi-tcp p50 (avg) us | dtcomm/gloo | dtcomm/mpi-tcp | rounds used |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for world in sorted({k[1] for k in rows}):
    for b in sorted({k[2] for k in rows if k[1] == world}):
        d, g, m = (("dtcomm", world, b), ("gloo", world, b), ("mpi-tcp", world, b))
        small = b <= 1024
        def ratio(x, y):
            if small:  # latency: how many times faster (by p50)
                return med(y, 2) / med(x, 2)
            return med(x, 0) / med(y, 0)
        print(f"| {world} | {size(b)} | {med(d,0):.3f} {rng(d,0)} | {med(g,0):.3f} | {med(m,0):.3f} | "
              f"{med(d,2):.1f} ({med(d,1):.1f}) | {med(g,2):.1f} ({med(g,1):.1f}) | {med(m,2):.1f} ({med(m,1):.1f}) | "
              f"{ratio(d,g):.2f}x | {ratio(d,m):.2f}x | {used(d)} / {used(g)} / {used(m)} |")
print("ratios: busbw ratio for sizes > 1 KiB; for <= 1 KiB, p50 latency ratio (incumbent / dtcomm, >1 = dtcomm faster)")
print("co-tenant load per run (probe.py foreign_frac):")
for f in sorted(glob.glob(os.path.join(out, "probe_*.json"))):
    print(f"  {os.path.basename(f)[6:-5]}: {json.load(open(f))['foreign_frac']}")
PY
