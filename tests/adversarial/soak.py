"""Every attack of the adversarial suite in rotation against one `dt-rdzv serve` for N minutes,
beside a torch TCPStore bystander, while the native-door attacker (`native_attack` example)
runs its own loop. Prints the server's peak RSS and the bystander's worst stall. Run through
`scripts/soak.sh`; not part of CI."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import multiprocessing.synchronize
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "python" / "tests"))

from adversary import (  # noqa: E402
    MiB,
    VALUE_LIMIT,
    Bystander,
    RssWatch,
    append_req,
    closed_by_peer,
    discard,
    get_req,
    get_value,
    multi_get_req,
    raw,
    rss_bytes,
    set_req,
)
from native_server import dt_rdzv_bin, stop_process  # noqa: E402

CAP = 64


def append_flood(host: str, port: int) -> str:
    s = raw(host, port)
    for _ in range(16):
        try:
            s.sendall(append_req(b"/soak-append/v", b"a" * MiB))
        except OSError:
            break
    ok = closed_by_peer(s, 5.0)
    s.close()
    # Next round starts from an empty value.
    d = raw(host, port)
    d.sendall(bytes([8]) + len(b"/soak-append/v").to_bytes(8, "little") + b"/soak-append/v")
    d.recv(8)
    d.close()
    return f"append past the limit closed={ok}"


def unread_gets(host: str, port: int) -> str:
    w = raw(host, port)
    w.sendall(set_req(b"/soak-get/v", b"g" * VALUE_LIMIT))
    get_value(w, b"/soak-get/v")
    socks = [raw(host, port) for _ in range(4)]
    sent = 0
    for s in socks:
        s.setblocking(False)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                sent += s.send(get_req(b"/soak-get/v") * 4096)
            except BlockingIOError:
                time.sleep(0.05)
    for i in range(4):
        w.sendall(set_req(b"/soak-get/v", bytes([i]) * VALUE_LIMIT))
    get_value(w, b"/soak-get/v")
    for s in socks + [w]:
        s.close()
    return f"4 unread GET pipelines took {sent / MiB:.1f} MiB of requests"


def churn(host: str, port: int) -> str:
    s = raw(host, port, timeout=30)
    n = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        s.sendall(set_req(b"/soak-churn/v", bytes([n % 256]) * VALUE_LIMIT))
        s.sendall(multi_get_req([b"/soak-churn/v"] * 32))
        discard(s, 32 * (8 + VALUE_LIMIT))
        n += 1
    s.close()
    return f"{n} x (8 MiB SET + 256 MiB MULTI_GET)"


def conn_flood(host: str, port: int) -> str:
    held = []
    for _ in range(CAP + 40):
        try:
            held.append(raw(host, port))
        except OSError:
            pass
    time.sleep(0.2)
    refused = sum(closed_by_peer(s, 0.05) for s in held)
    for s in held:
        s.close()
    time.sleep(0.5)  # let the server see them go before the next attack connects
    return f"{len(held)} connections, {refused} closed at the cap"


def quota_fill(host: str, port: int) -> str:
    s = raw(host, port)
    kept = 0
    for i in range(40):
        try:
            s.sendall(set_req(b"/soak-quota/k%d" % i, b"q" * VALUE_LIMIT))
            kept += 1
        except OSError:
            break
    ok = closed_by_peer(s, 5.0)
    s.close()
    return f"namespace fill closed={ok} after <= {kept} SETs"


ATTACKS = [append_flood, unread_gets, churn, conn_flood, quota_fill]


def bystander_process(host: str, port: int, stop: mp.synchronize.Event, worst: mp.Value,
                      ops: mp.Value, error: mp.Array) -> None:
    """The bystander in a process of its own (the attacks' Python must not stall it)."""
    with Bystander(host, port) as by:
        while not stop.wait(0.1) and not by.errors:
            worst.value, ops.value = by.worst, by.ops
    worst.value, ops.value = by.worst, by.ops
    if by.errors:
        error.value = by.errors[0].encode()[:500]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--native-attack", required=True, help="the native_attack example binary")
    ap.add_argument("--baseline", action="store_true",
                    help="no attacks: the bystander alone, for the machine's own stalls")
    args = ap.parse_args()
    token = secrets.token_hex(16)
    log = open(os.environ.get("SOAK_LOG", "/dev/null"), "w")
    proc = subprocess.Popen(
        [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--port", "0", "--native-port", "0",
         "--http-port", "0", "--handshake-timeout", "2s", "--frame-timeout", "2s",
         "--max-tcpstore-connections", str(CAP), "--max-namespace-bytes", str(128 * MiB),
         "--max-store-bytes", str(512 * MiB)],
        stdout=subprocess.PIPE, stderr=log, text=True,
        env={**os.environ, "DTRDZV_TOKEN": token, "DTRDZV_LOG": "info"})
    assert proc.stdout is not None
    store = proc.stdout.readline().strip().split("=", 1)[1]
    native_line = proc.stdout.readline().split()
    native = native_line[2].split("=", 1)[1]
    fingerprint = native_line[3].split("=", 1)[1]
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    host, port = store.rsplit(":", 1)
    seconds = args.minutes * 60
    print(f"soak: dt-rdzv pid {proc.pid} tcpstore={store} native={native}, {args.minutes} min",
          flush=True)
    attack_cmd = [args.native_attack, native, fingerprint, token, str(seconds)]
    if args.baseline:
        attack_cmd = ["sleep", str(seconds)]
    attacker = subprocess.Popen(attack_cmd, stdout=subprocess.PIPE, text=True)
    last_native: list[str] = []
    threading.Thread(target=lambda: [last_native.append(l.strip()) for l in attacker.stdout],
                     daemon=True).start()
    rounds = 0
    stop = mp.Event()
    worst, ops, error = mp.Value("d", 0.0), mp.Value("q", 0), mp.Array("c", 512)
    by = mp.Process(target=bystander_process, args=(host, int(port), stop, worst, ops, error))
    by.start()
    try:
        with RssWatch(proc.pid) as rss:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not error.value and by.is_alive():
                if args.baseline:
                    time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
                    print(f"baseline: bystander worst {worst.value * 1000:.0f} ms over "
                          f"{ops.value} ops", flush=True)
                    continue
                attack = ATTACKS[rounds % len(ATTACKS)]
                t = time.monotonic()
                what = attack(host, int(port))
                rounds += 1
                now = rss_bytes(proc.pid) / MiB
                print(f"[{time.monotonic() - deadline + seconds:6.0f}s] {attack.__name__}: "
                      f"{what} ({time.monotonic() - t:.1f} s); RSS now {now:.0f}, "
                      f"peak {rss.peak / MiB:.0f} MiB,"
                      f" bystander worst {worst.value * 1000:.0f} ms over {ops.value} ops",
                      flush=True)
        attacker.wait(timeout=120)
    finally:
        stop.set()
        by.join(timeout=30)
        if attacker.poll() is None:
            attacker.kill()
        code = stop_process(proc, signal.SIGTERM)
    print("\n".join(last_native[-2:]))
    err = error.value.decode() or "none"
    print(f"soak done: {rounds} TCPStore attacks; server peak RSS {rss.peak / MiB:.0f} MiB; "
          f"bystander worst stall {worst.value * 1000:.0f} ms over {ops.value} ops, errors: "
          f"{err}; server exit {code}; load {open('/proc/loadavg').read().split()[:3]}")
    return 0 if err == "none" and worst.value < 1.0 and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
