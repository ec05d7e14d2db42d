"""Servers for the etcd v2 tests: real etcd 3.4 (Debian's `etcd-server`, `--enable-v2`) and
`dt-rdzv serve --etcd-v2-port`, each started on free loopback ports and stopped by PID."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from native_server import dt_rdzv_bin, stop_process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class V2Server:
    """Something that answers etcd's v2 keys API at ``host:port``."""

    name: str
    proc: subprocess.Popen[str]
    host: str
    port: int
    log_path: Path

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        return stop_process(self.proc)


def wait_ready(url: str, proc: subprocess.Popen[str], log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: exited {proc.returncode}\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/v2/keys/", timeout=1) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError:
            return  # it answers (a token is asked for)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{url} did not answer within {timeout}s\n{log.read_text()}")


def etcd_binary() -> str | None:
    return shutil.which("etcd") or (
        "/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


def start_etcd(tmp_path: Path) -> V2Server:
    """A one-member etcd 3.4 with the v2 API on."""
    binary = etcd_binary()
    assert binary, "etcd not installed (scripts/setup.sh installs Debian's etcd-server)"
    client, peer = free_port(), free_port()
    log_path = tmp_path / f"etcd-{client}.log"
    proc = subprocess.Popen(
        [binary, "--name", "ref", "--data-dir", str(tmp_path / f"etcd-{client}"), "--enable-v2",
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"ref=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=open(log_path, "w"), text=True)
    wait_ready(f"http://127.0.0.1:{client}", proc, log_path)
    return V2Server("etcd", proc, "127.0.0.1", client, log_path)


def start_etcd_tls(tmp_path: Path, ca: Path, cert: Path, key: Path,
                   timeout: float = 30) -> V2Server:
    """A one-member etcd 3.4 serving clients over TLS only (``cert``/``key``), asking every
    client for a certificate of ``ca`` (``--client-cert-auth``), as dt-rdzv-ha.yaml runs its
    members. Ready once etcd says it serves client requests."""
    binary = etcd_binary()
    assert binary, "etcd not installed (scripts/setup.sh installs Debian's etcd-server)"
    client, peer = free_port(), free_port()
    url = f"https://127.0.0.1:{client}"
    log_path = tmp_path / f"etcd-tls-{client}.log"
    proc = subprocess.Popen(
        [binary, "--name", "tls", "--data-dir", str(tmp_path / f"etcd-tls-{client}"),
         "--listen-client-urls", url, "--advertise-client-urls", url,
         "--cert-file", str(cert), "--key-file", str(key), "--trusted-ca-file", str(ca),
         "--client-cert-auth",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"tls=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=open(log_path, "w"), text=True)
    deadline = time.monotonic() + timeout
    while "ready to serve client requests" not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"etcd (TLS) did not start\n{log_path.read_text()}")
        time.sleep(0.1)
    return V2Server("etcd-tls", proc, "127.0.0.1", client, log_path)


def start_door(tmp_path: Path, *extra: str) -> V2Server:
    """`dt-rdzv serve --etcd-v2-port 0` (TCPStore, native and HTTP on free ports)."""
    log_path = tmp_path / f"dt-rdzv-v2-{len(list(tmp_path.glob('dt-rdzv-v2-*.log')))}.log"
    proc = subprocess.Popen(
        [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--port", "0", "--native-port", "0",
         "--http-port", "0", "--etcd-v2-port", "0", *extra],
        stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True,
        env={**os.environ, "DTRDZV_LOG": os.environ.get("DTRDZV_LOG", "info")})
    assert proc.stdout is not None
    port = None
    deadline = time.monotonic() + 20
    while port is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("dt-rdzv listening etcd_v2="):
            port = int(line.strip().rsplit(":", 1)[1])
    if port is None:
        proc.kill()
        raise RuntimeError(f"dt-rdzv did not open its etcd v2 port\n{log_path.read_text()}")
    server = V2Server("dt-rdzv", proc, "127.0.0.1", port, log_path)
    wait_ready(server.url, proc, log_path)
    return server


@pytest.fixture
def door(tmp_path: Path) -> Iterator[V2Server]:
    """`dt-rdzv serve --no-auth --etcd-v2-port 0` for one test, stopped by PID after it."""
    s = start_door(tmp_path, "--no-auth")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.log()


@dataclass
class EtcdMember:
    """One member of an etcd cluster started by a test."""

    name: str
    proc: subprocess.Popen[str]
    client_port: int
    log_path: Path

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def status(self) -> dict[str, object] | None:
        """etcd's maintenance status through its gRPC gateway (None when it does not answer)."""
        req = urllib.request.Request(f"http://{self.endpoint}/v3/maintenance/status",
                                     data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=1) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def is_leader(self) -> bool:
        s = self.status()
        return bool(s) and s["header"]["member_id"] == s.get("leader")  # type: ignore[index]


def start_etcd_cluster(tmp_path: Path, n: int = 3, timeout: float = 60) -> list[EtcdMember]:
    """``n`` etcd 3.4 members on loopback ports forming one cluster, with a leader elected.
    Stop them by PID (``stop_process``) when done."""
    binary = etcd_binary()
    assert binary, "etcd not installed (scripts/setup.sh installs Debian's etcd-server)"
    ports = [(free_port(), free_port()) for _ in range(n)]
    cluster = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
    token = f"dt-{os.getpid()}-{time.monotonic_ns()}"
    members = []
    for i, (client, peer) in enumerate(ports):
        log_path = tmp_path / f"etcd-e{i}.log"
        proc = subprocess.Popen(
            [binary, "--name", f"e{i}", "--data-dir", str(tmp_path / f"etcd-e{i}"),
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", cluster, "--initial-cluster-token", token,
             "--initial-cluster-state", "new"],
            stdout=subprocess.DEVNULL, stderr=open(log_path, "w"), text=True)
        members.append(EtcdMember(f"e{i}", proc, client, log_path))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(m.proc.poll() is not None for m in members):
            break
        if sum(m.is_leader() for m in members) == 1:
            return members
        time.sleep(0.1)
    logs = "\n".join(f"--- {m.name}\n{m.log_path.read_text()[-3000:]}" for m in members)
    for m in members:
        stop_process(m.proc)  # type: ignore[arg-type]
    raise RuntimeError(f"the etcd cluster elected no leader within {timeout}s\n{logs}")
