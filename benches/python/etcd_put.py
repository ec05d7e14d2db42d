"""etcd v2 PUT latency: dt-rdzv's etcd v2 door beside real etcd 3.4 (`--enable-v2`) in the same
run, and optionally beside another dt-rdzv build (a before/after comparison).

    DT_RDZV_BIN=target/release/dt-rdzv .venv/bin/python benches/python/etcd_put.py \\
        [--rounds 3] [--small 2000] [--big 60] [--baseline OTHER_DT_RDZV]

Each round starts every server afresh and, on one keep-alive HTTP/1.1 connection, warms up with
200 PUTs, then times ``--small`` PUTs of a 100-byte value (50 keys in turn) and ``--big`` PUTs
of a 1 MiB value (4 keys in turn): a value torch's etcd rendezvous writes, and one near the
door's 1.5 MiB limit, whose body arrives in many pieces. Servers are interleaved round by
round; medians of each round's median, with [min-max] over the rounds.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
sys.path.insert(0, str(ROOT / "python" / "tests"))

from etcd_servers import V2Server, etcd_binary, start_door, start_etcd  # noqa: E402

HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}


def timed_puts(server: V2Server, small: int, big: int) -> tuple[float, float]:
    """(median µs of the small PUTs, median ms of the 1 MiB PUTs)."""
    c = http.client.HTTPConnection(server.host, server.port, timeout=30)

    def put(key: str, body: str) -> float:
        t = time.perf_counter()
        c.request("PUT", f"/v2/keys/bench/{key}", body=body, headers=HEADERS)
        r = c.getresponse()
        r.read()
        if r.status not in (200, 201):
            raise SystemExit(f"{server.name}: PUT {key}: HTTP {r.status}")
        return time.perf_counter() - t

    value = urllib.parse.urlencode({"value": "x" * 100})
    mib = urllib.parse.urlencode({"value": "y" * (1 << 20)})
    for i in range(200):
        put(f"warm{i}", value)
    s = [put(f"s{i % 50}", value) for i in range(small)]
    b = [put(f"b{i % 4}", mib) for i in range(big)]
    c.close()
    return statistics.median(s) * 1e6, statistics.median(b) * 1e3


def with_binary(binary: str, start: Callable[[], V2Server]) -> V2Server:
    """`start()` with ``DT_RDZV_BIN`` set to ``binary`` meanwhile."""
    before = os.environ.get("DT_RDZV_BIN")
    os.environ["DT_RDZV_BIN"] = binary
    try:
        return start()
    finally:
        if before is None:
            del os.environ["DT_RDZV_BIN"]
        else:
            os.environ["DT_RDZV_BIN"] = before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--big", type=int, default=60)
    ap.add_argument("--baseline", help="another dt-rdzv binary, measured beside")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        starts: dict[str, Callable[[], V2Server]] = {
            "dt-rdzv": lambda: start_door(tmp, "--no-auth")}
        if args.baseline:
            base = args.baseline
            starts["baseline"] = lambda: with_binary(base, lambda: start_door(tmp, "--no-auth"))
        if etcd_binary():
            starts["etcd 3.4"] = lambda: start_etcd(tmp)
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in starts}
        for r in range(args.rounds):
            order = list(starts) if r % 2 == 0 else list(starts)[::-1]
            for name in order:
                server = starts[name]()
                try:
                    got[name].append(timed_puts(server, args.small, args.big))
                finally:
                    server.stop()
                print(f"round {r + 1} {name:9} small {got[name][-1][0]:7.0f} us  "
                      f"1 MiB {got[name][-1][1]:7.2f} ms", flush=True)
    print(f"\netcd v2 PUT, median [min-max] of {args.rounds} rounds "
          f"(load {os.getloadavg()[0]:.1f}):")
    print("| server | 100 B PUT | 1 MiB PUT |\n|---|---|---|")
    for name, v in got.items():
        s, b = [x[0] for x in v], [x[1] for x in v]
        print(f"| {name} | {statistics.median(s):.0f} us [{min(s):.0f}-{max(s):.0f}] | "
              f"{statistics.median(b):.2f} ms [{min(b):.2f}-{max(b):.2f}] |")


if __name__ == "__main__":
    main()
