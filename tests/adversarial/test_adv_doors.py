"""The second hardening round's attacks on a real `dt-rdzv serve`, replayed: the etcd v2
door (a deep key, a recursive read of a large tree, a far TTL, writes that fill the history,
keys named like a legacy run), silent connections on the etcd, HTTP and TCPStore doors, and
pipelined WAITs. Each beside a well-behaved torch TCPStore client: the server stays up, its
RSS stays bounded, and the bystanders see no error and no stall over 1 s."""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from adversary import MiB, Bystander, RssWatch, closed_by_peer, raw  # noqa: E402
from conftest import dt_rdzv_bin, stop_process  # noqa: E402


@dataclass
class Doors:
    proc: subprocess.Popen[str]
    host: str
    tcpstore: int
    http: int
    etcd: int
    log_path: Path


@pytest.fixture
def doors(tmp_path: Path) -> Iterator[Doors]:
    log_path = tmp_path / "dt-rdzv.log"
    proc = subprocess.Popen(
        [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--port", "0", "--native-port", "0",
         "--http-port", "0", "--etcd-v2-port", "0", "--no-auth"],
        stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True,
        env={**os.environ, "DTRDZV_LOG": "info"})
    assert proc.stdout is not None
    ports: dict[str, int] = {}
    deadline = time.monotonic() + 20
    while len(ports) < 4 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("dt-rdzv listening "):
            name, addr = line.split()[2].split("=", 1)
            ports[name] = int(addr.rsplit(":", 1)[1])
    if len(ports) < 4:
        proc.kill()
        raise RuntimeError(f"dt-rdzv did not open its ports\n{log_path.read_text()}")
    d = Doors(proc, "127.0.0.1", ports["tcpstore"], ports["http"], ports["etcd_v2"], log_path)
    try:
        yield d
    finally:
        assert proc.poll() is None, f"dt-rdzv died\n{log_path.read_text()[-3000:]}"
        assert stop_process(proc) == 0, log_path.read_text()[-3000:]


def call(host: str, port: int, method: str, path: str, params: dict[str, Any] | None = None,
         timeout: float = 10) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    body, headers = None, {}
    if method == "PUT":
        body = urllib.parse.urlencode(params or {})
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif params:
        path += "?" + urllib.parse.urlencode(params)
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    text = r.read()
    conn.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


def timed(f: Any) -> tuple[float, Any]:
    t = time.monotonic()
    out = f()
    return time.monotonic() - t, out


def test_deep_key_and_far_ttl_do_not_take_the_server_down(doors: Doors) -> None:
    with Bystander(doors.host, doors.tcpstore) as by:
        status, body = call(doors.host, doors.etcd, "PUT", "/v2/keys/z" + "/a" * 2100, {"value": "v"})
        assert status == 400 and "levels" in body["cause"], (status, body)
        status, _ = call(doors.host, doors.etcd, "PUT", "/v2/keys/z" + "/a" * 100, {"value": "v"})
        assert status == 201
        status, body = call(doors.host, doors.etcd, "GET", "/v2/keys/z", {"recursive": "true"})
        assert status == 200, body
        # A TTL past year 9999: stored clamped; reads, listings and the answer itself work.
        status, body = call(doors.host, doors.etcd, "PUT", "/v2/keys/far/k",
                            {"value": "v", "ttl": "300000000000"})
        assert status == 201 and body["node"]["ttl"] > 0, body
        for path in ("/v2/keys/far", "/v2/keys/far/k"):
            status, body = call(doors.host, doors.etcd, "GET", path, {"recursive": "true"})
            assert status == 200, body
        time.sleep(0.5)
    assert not by.errors and by.worst < 1.0, (by.errors, by.worst)


def test_large_reads_are_refused_and_the_history_is_bounded(doors: Doors) -> None:
    value = "x" * (1_500_000)
    with Bystander(doors.host, doors.tcpstore) as by, RssWatch(doors.proc.pid) as rss:
        for i in range(60):                              # 90 MB of values
            status, _ = call(doors.host, doors.etcd, "PUT", f"/v2/keys/big/k{i}", {"value": value})
            assert status in (200, 201)
        took, (status, body) = timed(lambda: call(doors.host, doors.etcd, "GET", "/v2/keys/",
                                                  {"recursive": "true"}))
        assert status == 400 and "limit" in body["cause"], (status, str(body)[:200])
        # 60 more writes to one key: each event keeps a value and the previous one (180 MB of
        # history unbounded).
        for _ in range(60):
            call(doors.host, doors.etcd, "PUT", "/v2/keys/one", {"value": value})
        status, body = call(doors.host, doors.etcd, "GET", "/v2/keys/big/k7")
        assert status == 200 and len(body["node"]["value"]) == len(value)
    assert not by.errors and by.worst < 1.0, (by.errors, by.worst)
    # 90 MB of store and a 64 MiB history bound, plus the process itself: under what 180 MB
    # of history or a 90 MB tree cloned and copied into JSON (~4x) would take.
    assert rss.peak < 350 * MiB, rss.peak / MiB


def test_keys_named_like_a_legacy_run_are_not_purged(doors: Doors) -> None:
    status, _ = call(doors.host, doors.etcd, "PUT", "/v2/keys/apps/run_2024/db/password", {"value": "s"})
    assert status == 201
    # A mkdir-if-missing of the same directory (what torch's legacy handler does to start a
    # run) must not purge it as an abandoned run's.
    status, _ = call(doors.host, doors.etcd, "PUT", "/v2/keys/apps/run_2024",
                     {"dir": "true", "prevExist": "false"})
    assert status in (403, 412), status                      # it exists: etcd's NodeExist
    status, body = call(doors.host, doors.etcd, "GET", "/v2/keys/apps/run_2024/db/password")
    assert status == 200 and body["node"]["value"] == "s", body


def silent(host: str, port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=5)
        out.append(s)
    return out


@pytest.mark.parametrize("door", ["http", "etcd", "tcpstore"])
def test_silent_connections_do_not_lock_clients_out(doors: Doors, door: str) -> None:
    port = {"http": doors.http, "etcd": doors.etcd, "tcpstore": doors.tcpstore}[door]
    many = {"http": 300, "etcd": 700, "tcpstore": 700}[door]
    socks = silent(doors.host, port, many)
    time.sleep(0.5)          # they are established and have had their grace (250 ms)
    try:
        with Bystander(doors.host, doors.tcpstore, name="after") as by:
            if door == "http":
                took, (status, body) = timed(lambda: call(doors.host, doors.http, "GET", "/healthz"))
            elif door == "etcd":
                took, (status, body) = timed(lambda: call(doors.host, doors.etcd, "GET", "/v2/keys/"))
            else:
                import torch.distributed as dist
                from datetime import timedelta
                took, store = timed(lambda: dist.TCPStore(doors.host, doors.tcpstore, is_master=False,
                                                          timeout=timedelta(seconds=10)))
                store.set("k", "v")
                status, body = 200, store.get("k")
            assert status == 200, (status, body)
            assert took < 1.0, took
            time.sleep(0.5)
        assert not by.errors and by.worst < 1.0, (by.errors, by.worst)
        # The silent ones are closed by their first-bytes deadline (5 s).
        time.sleep(6)
        assert all(closed_by_peer(s, 2.0) for s in socks[:5])
    finally:
        for s in socks:
            s.close()
    log = doors.log_path.read_text()
    assert log.count("\n") < 2000, "refusals and evictions are logged at a limited rate"


def wait_req(keys: list[bytes]) -> bytes:
    parts = [bytes([6]) + struct.pack("<q", len(keys))]       # WAIT
    for k in keys:
        parts += [struct.pack("<q", len(k)), k]
    return b"".join(parts)


def test_pipelined_waits_are_bounded_per_connection(doors: Doors) -> None:
    with Bystander(doors.host, doors.tcpstore) as by, RssWatch(doors.proc.pid) as rss:
        s = raw(doors.host, doors.tcpstore, timeout=30)        # validated
        # Batches of 4,000 keys of 8 KB (33 MB, within one request's limits); ten would
        # hold 330 MB of waiting keys on one connection.
        for b in range(10):
            keys = [f"/w{b}/{i}/".encode().ljust(8 << 10, b"x") for i in range(4000)]
            try:
                s.sendall(wait_req(keys))
            except (BrokenPipeError, ConnectionResetError):
                break
        assert closed_by_peer(s, 10.0), "ten batches of waits were all kept"
        s.close()
    assert "bytes of waiting keys" in doors.log_path.read_text(), "closed for its waits"
    assert not by.errors and by.worst < 1.0, (by.errors, by.worst)
    assert rss.peak < 400 * MiB, rss.peak / MiB
