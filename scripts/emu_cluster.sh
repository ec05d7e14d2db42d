#!/usr/bin/env bash
# An emulated cluster on one machine: HOSTS network namespaces ("hosts"), each joined to a
# bridge by a veth pair whose rate and delay `tc netem` limits in both directions, so that
# cross-host algorithms are measured against a link rate, as between real hosts, rather than
# at loopback's copy ceiling. Ranks in different namespaces have different host identities
# (dtcomm reads the network namespace), so they share memory only within a "host".
#
#   scripts/emu_cluster.sh up HOSTS [RATE=10gbit] [DELAY=50us]   make dtc-h0..: 10.77.0.1.. (bridge .254)
#   scripts/emu_cluster.sh exec H cmd [args...]                 run cmd in host H
#   scripts/emu_cluster.sh down                                 remove everything it made
#   scripts/emu_cluster.sh launch HOSTS PER_HOST [RATE] [DELAY] -- cmd [args...]
#       up, then a `dt-rdzv serve` on the bridge, then HOSTS*PER_HOST copies of
#       `cmd args --world W --rank R --store 10.77.0.254:PORT` (the join mode of the
#       benches' *_perf binaries), rank R on host R / PER_HOST; prints rank 0's output; down.
#       Env: DT_RDZV_BIN (default: $CARGO_TARGET_DIR or target/debug/dt-rdzv), LAUNCH_TIMEOUT (s, 900).
#
# Needs root (or CAP_NET_ADMIN) and iproute2; exit 3 when namespaces cannot be made here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BR=dtcbr0
NET=10.77.0

need() { command -v "$1" >/dev/null || { echo "emu_cluster: '$1' not found (apt-get install -y iproute2)" >&2; exit 3; }; }
hosts_up() { ip netns list 2>/dev/null | awk '{print $1}' | grep -c '^dtc-h' || true; }

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^dtc-h' || true); do
    ip netns delete "$ns" 2>/dev/null || true
  done
  for v in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^dtcv' || true); do
    ip link delete "$v" 2>/dev/null || true
  done
  ip link delete "$BR" 2>/dev/null || true
}

up() {
  local n=$1 rate=${2:-10gbit} delay=${3:-50us}
  need ip; need tc
  down
  ip link add "$BR" type bridge 2>/dev/null || { echo "emu_cluster: cannot make a bridge (needs root or CAP_NET_ADMIN)" >&2; exit 3; }
  QDISC=netem
  if ! tc qdisc add dev "$BR" root netem delay 1us 2>/dev/null; then QDISC=tbf; fi
  tc qdisc del dev "$BR" root 2>/dev/null || true
  ip addr add "$NET.254/24" dev "$BR"
  ip link set "$BR" up
  for ((i = 0; i < n; i++)); do
    local ns=dtc-h$i
    ip netns add "$ns"
    ip link add "dtcv$i" type veth peer name eth0 netns "$ns"
    ip link set "dtcv$i" master "$BR" up
    ip netns exec "$ns" ip addr add "$NET.$((i + 1))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    # The host's NIC: egress limited inside, ingress limited on the bridge side. netem gives
    # rate and delay; kernels without sch_netem get tbf (rate only) and a warning.
    if [ "$QDISC" = netem ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root netem rate "$rate" delay "$delay" limit 100000
      tc qdisc add dev "dtcv$i" root netem rate "$rate" delay "$delay" limit 100000
    else
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 4mb latency 10ms
      tc qdisc add dev "dtcv$i" root tbf rate "$rate" burst 4mb latency 10ms
    fi
  done
  local what="$rate / $delay"
  [ "$QDISC" = netem ] || what="$rate (tbf; this kernel has no sch_netem, so no added delay)"
  echo "emu_cluster: $n hosts dtc-h0..dtc-h$((n - 1)) at $NET.1..$n, bridge $NET.254, links $what each way" >&2
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  exec) shift; h=$1; shift; exec ip netns exec "dtc-h$h" "$@" ;;
  launch)
    shift
    hosts=$1 per=$2; shift 2
    rate=10gbit delay=50us
    if [ "${1:-}" != -- ]; then rate=$1; shift; fi
    if [ "${1:-}" != -- ]; then delay=$1; shift; fi
    [ "${1:-}" = -- ] || { echo "usage: $0 launch HOSTS PER_HOST [RATE] [DELAY] -- cmd [args...]" >&2; exit 2; }
    shift
    trap down EXIT
    up "$hosts" "$rate" "$delay"
    bin=${DT_RDZV_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/dt-rdzv}
    port=$((29500 + RANDOM % 2000))
    "$bin" serve --host "$NET.254" --port "$port" --no-native --http-port 0 >/dev/null 2>&1 &
    srv=$!
    trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; down' EXIT
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/$NET.254/$port") 2>/dev/null && break; sleep 0.1; done
    world=$((hosts * per))
    pids=()
    out=$(mktemp)
    for ((r = 0; r < world; r++)); do
      h=$((r / per))
      if [ $r = 0 ]; then
        timeout "${LAUNCH_TIMEOUT:-900}" ip netns exec "dtc-h$h" env DTCOMM_SOCKET_IFNAME=eth0 "$@" \
          --world "$world" --rank "$r" --store "$NET.254:$port" >"$out" 2>&1 &
      else
        timeout "${LAUNCH_TIMEOUT:-900}" ip netns exec "dtc-h$h" env DTCOMM_SOCKET_IFNAME=eth0 "$@" \
          --world "$world" --rank "$r" --store "$NET.254:$port" >/dev/null 2>&1 &
      fi
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    cat "$out"; rm -f "$out"
    exit $rc
    ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
