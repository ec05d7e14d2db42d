#!/usr/bin/env bash
# dtcomm allreduce against the incumbents, in one invocation, interleaved in rounds:
# dtcomm (all_reduce_perf) with its default links (shared memory between same-host ranks) and
# over TCP only, Open MPI with its default (shared memory) and over TCP, gloo (torch); world 2
# and world 4 on this host; 2 emulated hosts x 2 ranks (scripts/emu_cluster.sh: dtcomm across
# hosts vs its flat TCP ring); one core's memcpy as the ceiling; float32 sum in place, the
# per-size schedule of benches/incumbents/common.py. Prints medians over rounds with ranges. Every step is wrapped by benches/incumbents/probe.py (bounded wait for
# an idle window, then it records the co-tenant load) and bounded by `timeout`.
#
# Usage: scripts/bench_allreduce.sh [outdir=target/bench-allreduce] [rounds=3]
# Env:   DTCOMM_VENV  the project's venv (default .venv, made by scripts/setup.sh); its python
#                     runs gloo (torch), mpi4py and the probe
#        TORCH_PY / MPI_PY     another python for gloo / for mpi4py + numpy (default: the venv's)
#        INCUMBENTS  the incumbent harness (default benches/incumbents)
#        SIZES_W2 / SIZES_W4   sizes (default 8,1K,64K,1M,16M,64M / 8,1M,16M,64M)
#        SKIP="gloo mpi cluster"  leave incumbents (or the emulated cluster) out
#        CLUSTER_RATE=2gbit  link rate of the emulated hosts; CLUSTER_SIZES=1M,16M,64M
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

dtcomm() {  # $1 world, $2 sizes, $3 tag, $4 links (auto: shared memory between same-host ranks; tcp)
  local name=dtcomm; [ "$4" = tcp ] && name=dtcomm-tcp
  log "$name w$1 $3"
  P "${name}_w$1_$3" env DTCOMM_SOCKET_IFNAME=lo DTCOMM_TRANSPORT="$4" timeout 600 "$BENCH" --world "$1" --sizes "$2" --anchor-schedule \
    -d float -o sum --json "$OUT/${name}_w$1_$3.json" >> "$OUT/run.log" 2>&1 || log "FAILED $name w$1 $3"
}
gloo() {
  skipped gloo && return
  log "gloo w$1 $3"
  # shellcheck disable=SC2046
  (cd "$INCUMBENTS" && P "gloo_w$1_$3" timeout 900 "$TPY" gloo_bench.py --world "$1" --timeout 850 \
    --sizes $(echo "$2" | tr , ' ') --out "$OUT/gloo_w$1_$3.json") >> "$OUT/run.log" 2>&1 || log "FAILED gloo w$1 $3"
}
mpi() {  # $4: tcp (loopback TCP only) or shm (Open MPI's default: shared memory on one host)
  skipped mpi && return
  log "mpi-$4 w$1 $3"
  local mca=()
  [ "$4" = tcp ] && mca=(OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo)
  # shellcheck disable=SC2046
  (cd "$INCUMBENTS" && P "mpi-$4_w$1_$3" env "${mca[@]}" \
    timeout 900 mpirun --allow-run-as-root --oversubscribe -np "$1" "$MPY" mpi_bench.py --label "$4" \
    --sizes $(echo "$2" | tr , ' ') --out "$OUT/mpi-$4_w$1_$3.json") >> "$OUT/run.log" 2>&1 || log "FAILED mpi-$4 w$1 $3"
}
cluster() {  # 2 emulated hosts x 2 ranks (scripts/emu_cluster.sh): $1 tag, $2 links
  skipped cluster && return
  local name=cluster-dtcomm; [ "$2" = tcp ] && name=cluster-dtcomm-tcp
  log "$name 2x2 $1 ($CLUSTER_RATE)"
  P "${name}_w4_$1" env DTCOMM_TRANSPORT="$2" DT_RDZV_BIN="$TARGET/debug/dt-rdzv" \
    "$ROOT/scripts/emu_cluster.sh" launch 2 2 "$CLUSTER_RATE" -- "$BENCH" --sizes "$CLUSTER_SIZES" --anchor-schedule \
    -d float -o sum --json "$OUT/${name}_w4_$1.json" >> "$OUT/run.log" 2>&1 || log "FAILED $name $1"
}
memcpy() {  # one core's memcpy bandwidth, the ceiling of any one-host copy, in the same run
  log "memcpy $1"
  "$VPY" - "$OUT/memcpy_$1.json" <<'MC' >> "$OUT/run.log" 2>&1 || log "FAILED memcpy $1"
import json, sys, time
import numpy as np
res = {}
for mib in (16, 64):
    a = np.ones(mib << 18, np.float32); b = np.empty_like(a); np.copyto(b, a)
    ts = []
    for _ in range(15):
        t = time.perf_counter(); np.copyto(b, a); ts.append(time.perf_counter() - t)
    res[str(mib << 20)] = (mib << 20) / sorted(ts)[len(ts) // 2] / 1e9
json.dump(res, open(sys.argv[1], "w")); print("memcpy GB/s", res)
MC
}

if ! skipped cluster && ! { [ -x "$TARGET/debug/dt-rdzv" ] && ip netns list >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; }; then
  log "no emulated cluster here (needs root, iproute2 and $TARGET/debug/dt-rdzv): leaving it out"; SKIP="$SKIP cluster"
fi
CLUSTER_RATE=${CLUSTER_RATE:-2gbit}
CLUSTER_SIZES=${CLUSTER_SIZES:-1M,16M,64M}
for r in $(seq 1 "$ROUNDS"); do
  memcpy r$r
  dtcomm 2 "$SIZES_W2" r$r auto; mpi 2 "$SIZES_W2" r$r shm; gloo 2 "$SIZES_W2" r$r
  dtcomm 2 "$SIZES_W2" r$r tcp; mpi 2 "$SIZES_W2" r$r tcp
  dtcomm 4 "$SIZES_W4" r$r auto; mpi 4 "$SIZES_W4" r$r shm; gloo 4 "$SIZES_W4" r$r
  dtcomm 4 "$SIZES_W4" r$r tcp; mpi 4 "$SIZES_W4" r$r tcp
  cluster r$r auto; cluster r$r tcp
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
    if "dtcomm" in impl:
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
def cell(k, small):
    v = [x[2 if small else 0] for x in kept(k)]
    if not v:
        return "-"
    m = statistics.median(v)
    return f"{m:.3g} [{min(v):.3g}-{max(v):.3g}] ({len(v)})"
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else (f"{b >> 10} KiB" if b >= 1024 else f"{b} B")
impls = ["dtcomm", "mpi-shm", "gloo", "dtcomm-tcp", "mpi-tcp"]
print("allreduce, float32 sum in place: busbw GB/s (sizes > 1 KiB) or p50 latency us (<= 1 KiB);")
print("median [min-max] (rounds used) over interleaved rounds; rounds with co-tenant load above")
print(f"{max_load} (probe.py foreign_frac) are left out when a quieter round of that config exists.")
print("dtcomm = default links (shared memory between same-host ranks), mpi-shm = Open MPI's default.")
print("| world | size | " + " | ".join(impls) + " | dtcomm/mpi-shm | dtcomm/gloo |")
print("|---|---|" + "---|" * (len(impls) + 2))
for world in sorted({k[1] for k in rows if not k[0].startswith("cluster")}):
    for b in sorted({k[2] for k in rows if k[1] == world and not k[0].startswith("cluster")}):
        small = b <= 1024
        ks = {i: (i, world, b) for i in impls}
        def ratio(x, y):
            if small:
                return med(ks[y], 2) / med(ks[x], 2)
            return med(ks[x], 0) / med(ks[y], 0)
        print(f"| {world} | {size(b)} | " + " | ".join(cell(ks[i], small) for i in impls)
              + f" | {ratio('dtcomm', 'mpi-shm'):.2f}x | {ratio('dtcomm', 'gloo'):.2f}x |")
print("ratios: busbw ratio; for <= 1 KiB the p50 latency ratio (incumbent / dtcomm); > 1 = dtcomm faster")
cl = sorted({k[2] for k in rows if k[0].startswith("cluster")})
if cl:
    print()
    print(f"2 emulated hosts x 2 ranks (scripts/emu_cluster.sh, links {os.environ.get('CLUSTER_RATE', '2gbit')}): busbw GB/s")
    print("| size | dtcomm across hosts (shm within, tcp between) | dtcomm flat tcp ring | ratio |")
    print("|---|---|---|---|")
    for b in cl:
        a, t = ("cluster-dtcomm", 4, b), ("cluster-dtcomm-tcp", 4, b)
        print(f"| {size(b)} | {cell(a, False)} | {cell(t, False)} | {med(a, 0) / med(t, 0):.2f}x |")
mc = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "memcpy_r*.json")))]
if mc:
    print()
    for k in sorted(mc[0], key=int):
        v = [m[k] for m in mc]
        print(f"one core's memcpy at {size(int(k))}: {statistics.median(v):.2f} GB/s [{min(v):.2f}-{max(v):.2f}] (ceiling of a one-host copy)")
print()
print("co-tenant load per run (probe.py foreign_frac):")
for f in sorted(glob.glob(os.path.join(out, "probe_*.json"))):
    print(f"  {os.path.basename(f)[6:-5]}: {json.load(open(f))['foreign_frac']}")
PY
