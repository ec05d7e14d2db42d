#!/usr/bin/env bash
# Runs a command in a private network namespace whose only interface is loopback.
#
#   benches/incumbents/netns.sh cmd [args...]
#   benches/incumbents/netns.sh --check      # exit 0 when a namespace can be made here
#
# Why: torch's TCPStore server binds every address whatever host it is given, and it does a
# reverse DNS lookup per accepted client, which stalls for seconds in a sandbox without DNS.
# Inside a loopback-only namespace nothing is reachable from outside and the lookup fails at
# once, so the rendezvous benchmark measures the servers rather than the resolver.
#
# Uses `unshare -n` (the namespace dies with its last process), else `ip netns` (a named
# namespace, deleted on exit). Both need root or CAP_SYS_ADMIN; `ip` (iproute2) brings lo up.
# Exit status: the command's; 3 when no namespace could be made (nothing was run).
set -euo pipefail

check=0
if [ "${1:-}" = --check ]; then check=1; set -- true; fi
[ $# -gt 0 ] || { echo "usage: $0 cmd [args...] | --check" >&2; exit 2; }
command -v ip >/dev/null || { echo "netns.sh: 'ip' not found (apt-get install -y iproute2)" >&2; exit 3; }

if command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
  [ $check = 1 ] && exit 0
  exec unshare -n bash -c 'ip link set lo up && exec "$@"' netns "$@"
fi

name="dtcomm-bench-$$"
if ip netns add "$name" 2>/dev/null; then
  trap 'ip netns delete "$name" 2>/dev/null || true' EXIT
  ip netns exec "$name" ip link set lo up
  [ $check = 1 ] && exit 0
  rc=0
  ip netns exec "$name" "$@" || rc=$?
  exit $rc
fi

echo "netns.sh: cannot create a network namespace (needs root or CAP_SYS_ADMIN)" >&2
exit 3
