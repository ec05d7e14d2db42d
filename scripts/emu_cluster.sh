#!/usr/bin/env bash
# An emulated cluster on one machine: HOSTS network namespaces ("hosts"), each with a NIC
# whose rate and delay are limited in both directions, so that cross-host algorithms are
# measured against a link rate and latency, as between real hosts, rather than at loopback's
# copy ceiling. Ranks in different namespaces have different host identities (dtcomm reads
# the network namespace), so they share memory only within a "host".
#
# Where the kernel has sch_netem, the NICs are veth pairs on a bridge with `tc netem` on both
# ends. Where it has not, they are TAP interfaces whose other end is `emu_wire` (dt-bench:
# a userspace switch that delivers each frame after both links' serialisation and delay,
# MTU $EMU_MTU, default 9000), started here and stopped by PID at `down`.
#
#   scripts/emu_cluster.sh up HOSTS [RATE=10gbit] [DELAY=50us]   make dtc-h0..: 10.77.0.1.. (bridge .254)
#   scripts/emu_cluster.sh exec H cmd [args...]                 run cmd in host H
#   scripts/emu_cluster.sh down                                 remove everything it made
#   scripts/emu_cluster.sh launch HOSTS PER_HOST [RATE] [DELAY] -- cmd [args...]
#       up, then a `dt-rdzv serve` on the bridge, then HOSTS*PER_HOST copies of
#       `cmd args --world W --rank R --store 10.77.0.254:PORT` (the join mode of the
#       benches' *_perf binaries), rank R on host R / PER_HOST; prints rank 0's output; down.
#       Env: DT_RDZV_BIN (default: $CARGO_TARGET_DIR or target/debug/dt-rdzv), LAUNCH_TIMEOUT (s, 900),
#       EMU_WIRE (force the userspace wire: 1; default only without sch_netem), EMU_MTU.
#
# Inside every host the names dtc-h0.. resolve to the hosts' addresses (an /etc/hosts of
# its own, /etc/netns/dtc-hI/hosts, which `ip netns exec` mounts over /etc/hosts), as a
# cluster's DNS names its nodes.
#
# DELAY applies to each link each way, so host to host a frame takes two DELAYs (plus
# serialisation at RATE on each link).
# Needs root (or CAP_NET_ADMIN) and iproute2; exit 3 when namespaces cannot be made here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BR=dtcbr0
NET=10.77.0
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WIRE_PID=${TMPDIR:-/tmp}/dtc-emu-wire.pid
WIRE_LOG=${TMPDIR:-/tmp}/dtc-emu-wire.log

need() { command -v "$1" >/dev/null || { echo "emu_cluster: '$1' not found (apt-get install -y iproute2)" >&2; exit 3; }; }
down() {
  if [ -f "$WIRE_PID" ]; then
    kill "$(cat "$WIRE_PID")" 2>/dev/null || true
    rm -f "$WIRE_PID"
  fi
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^dtc-h' || true); do
    ip netns delete "$ns" 2>/dev/null || true
  done
  for v in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^dtcv' || true); do
    ip link delete "$v" 2>/dev/null || true
  done
  ip link delete "$BR" 2>/dev/null || true
  rm -rf /etc/netns/dtc-h* 2>/dev/null || true
}

# Each host's /etc/hosts: the machine's, then every emulated host by name.
names() {
  local n=$1
  for ((i = 0; i < n; i++)); do
    mkdir -p "/etc/netns/dtc-h$i"
    { cat /etc/hosts 2>/dev/null || true
      for ((j = 0; j < n; j++)); do echo "$NET.$((j + 1)) dtc-h$j"; done
    } >"/etc/netns/dtc-h$i/hosts"
  done
}

up() {
  local n=$1 rate=${2:-10gbit} delay=${3:-50us}
  need ip; need tc
  down
  ip link add "$BR" type bridge 2>/dev/null || { echo "emu_cluster: cannot make a bridge (needs root or CAP_NET_ADMIN)" >&2; exit 3; }
  QDISC=netem
  if ! tc qdisc add dev "$BR" root netem delay 1us 2>/dev/null; then QDISC=wire; fi
  [ "${EMU_WIRE:-0}" = 1 ] && QDISC=wire
  tc qdisc del dev "$BR" root 2>/dev/null || true
  if [ "$QDISC" = wire ]; then
    ip link delete "$BR"
    wire_up "$n" "$rate" "$delay"
    return
  fi
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
    # The host's NIC: egress limited inside, ingress limited on the bridge side.
    ip netns exec "$ns" tc qdisc add dev eth0 root netem rate "$rate" delay "$delay" limit 100000
    tc qdisc add dev "dtcv$i" root netem rate "$rate" delay "$delay" limit 100000
  done
  names "$n"
  echo "emu_cluster: $n hosts dtc-h0..dtc-h$((n - 1)) at $NET.1..$n, bridge $NET.254, links $rate / $delay each way (netem)" >&2
}

# No sch_netem: TAP NICs joined by emu_wire, which applies the rate and delay itself.
wire_up() {
  local n=$1 rate=$2 delay=$3 mtu=${EMU_MTU:-9000}
  local wire=${EMU_WIRE_BIN:-$TARGET/release/emu_wire}
  if [ ! -x "$wire" ]; then
    (cd "$ROOT" && cargo build --release -q -p dt-bench --bin emu_wire) >&2
  fi
  local ports=()
  for ((i = 0; i < n; i++)); do ports+=("dtct$i"); done
  ports+=("$BR")
  # (its output to a log, not to our caller's pipes, which it would hold open)
  "$wire" --rate "$rate" --delay "$delay" "${ports[@]}" </dev/null >"$WIRE_LOG" 2>&1 &
  echo $! >"$WIRE_PID"
  for _ in $(seq 100); do ip link show "$BR" >/dev/null 2>&1 && break; sleep 0.05; done
  ip link show "$BR" >/dev/null 2>&1 || { echo "emu_cluster: emu_wire did not make its interfaces: $(cat "$WIRE_LOG")" >&2; down; exit 3; }
  ip link set "$BR" mtu "$mtu"
  ip addr add "$NET.254/24" dev "$BR"
  ip link set "$BR" up
  for ((i = 0; i < n; i++)); do
    local ns=dtc-h$i
    ip netns add "$ns"
    ip link set "dtct$i" netns "$ns"
    ip netns exec "$ns" ip link set "dtct$i" name eth0
    ip netns exec "$ns" ip link set eth0 mtu "$mtu"
    ip netns exec "$ns" ip addr add "$NET.$((i + 1))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
  done
  names "$n"
  echo "emu_cluster: $n hosts dtc-h0..dtc-h$((n - 1)) at $NET.1..$n, bridge $NET.254, links $rate / $delay each way (emu_wire, MTU $mtu)" >&2
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
  *) sed -n '2,29p' "$0"; exit 2 ;;
esac
