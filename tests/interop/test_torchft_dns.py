"""A torchft client whose `TORCHFT_LIGHTHOUSE` names every server, as a Kubernetes headless
Service or a DNS name with one record per server does: one name, two addresses (an
`/etc/hosts` of its own, bind-mounted in a private mount namespace for the client only), two
`dt-rdzv serve --torchft-port` on one etcd listening on the same port at those addresses. The
server the client reached holds the Lighthouse; it is SIGKILLed, and the same client object
(torchft's own `LighthouseClient`, the connector its `Manager` uses) gets its next quorum from
the other address with no new configuration. Skipped without torchft, etcd, the etcd feature
or the privilege to make a mount namespace; servers stopped by PID."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from etcd_servers import EtcdMember, etcd_binary, start_etcd_cluster
from native_server import serve, stop_process
from test_torchft_ha import backend_supported

pytest.importorskip("torchft._torchft",
                    reason="torchft not installed (pip install torchft-nightly)")

NAME = "lighthouse.dtcomm.test"
HOSTS = ("127.0.0.1", "127.0.0.2")

# torchft's client, reading commands on stdin: "order" prints the name's addresses as this
# process resolves them, "quorum" asks for one (one JSON line per command).
CLIENT = r"""
import json, socket, sys
from datetime import timedelta
from torchft._torchft import LighthouseClient
url, name, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = LighthouseClient(url, connect_timeout=timedelta(seconds=5))
for line in sys.stdin:
    if line.strip() == "order":
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        print(json.dumps({"order": [i[4][0] for i in infos]}), flush=True)
        continue
    try:
        q = client.quorum(replica_id="replica_dns", timeout=timedelta(seconds=30),
                          world_size=1)
        print(json.dumps({"quorum_id": q.quorum_id,
                          "members": [m.replica_id for m in q.participants]}), flush=True)
    except Exception as e:
        print(json.dumps({"error": str(e)}), flush=True)
"""


def mount_namespace_works(hosts: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && getent hosts "$1"',
         str(hosts), NAME], capture_output=True, text=True, timeout=30)
    return probe.returncode == 0


def common_free_port() -> int:
    """A port free on both loopback addresses."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind((HOSTS[0], 0))
            port = int(a.getsockname()[1])
            with socket.socket() as b:
                try:
                    b.bind((HOSTS[1], port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port free on both loopback addresses")


class Client:
    """torchft's client in a mount namespace where NAME has both servers' addresses."""

    def __init__(self, hosts: Path, port: int, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "sh", "-c",
             'mount --bind "$0" /etc/hosts && shift && exec "$@"', str(hosts), "--",
             sys.executable, "-c", CLIENT, f"http://{NAME}:{port}", NAME, str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()  # the client's own timeouts bound this wait
        assert line, f"the client ended ({self.proc.wait(10)}): {self.log.read_text()[-3000:]}"
        return dict(json.loads(line))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[list[subprocess.Popen[str]], list[Path], int]]:
    if etcd_binary() is None:
        pytest.skip("etcd not installed (scripts/setup.sh installs Debian's etcd-server)")
    if not backend_supported():
        pytest.skip("dt-rdzv built without the etcd feature (protoc missing at build time)")
    etcd: list[EtcdMember] = start_etcd_cluster(tmp_path, n=1)
    procs: list[subprocess.Popen[str]] = []
    logs: list[Path] = []
    try:
        port = common_free_port()
        for i, host in enumerate(HOSTS):
            log = tmp_path / f"dt-rdzv-{i}.log"
            proc, _ = serve(
                ["--host", host, "--no-tcpstore", "--native-port", "0", "--no-http",
                 "--torchft-port", str(port), "--torchft-min-replicas", "1",
                 "--torchft-heartbeat-timeout-ms", "2000",
                 "--backend", "etcd://" + etcd[0].endpoint, "--owner-ttl", "2s"],
                "torchft", log)
            procs.append(proc)
            logs.append(log)
        yield procs, logs, port
    finally:
        for p in procs:
            stop_process(p)
        for m in etcd:
            stop_process(m.proc)  # type: ignore[arg-type]


def holders(procs: list[subprocess.Popen[str]], logs: list[Path]) -> list[int]:
    return [i for i, (p, lg) in enumerate(zip(procs, logs, strict=True))
            if p.poll() is None
            and "serving the group's torchft Lighthouse door" in lg.read_text(errors="replace")]


@pytest.mark.timeout(180)
def test_one_name_for_every_server_carries_a_client_past_the_death_of_its_server(
        servers: tuple[list[subprocess.Popen[str]], list[Path], int], tmp_path: Path) -> None:
    procs, logs, port = servers
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{h} {NAME}\n" for h in HOSTS) + "127.0.0.1 localhost\n")
    if not mount_namespace_works(hosts):
        pytest.skip("no mount namespace here (unshare --mount needs CAP_SYS_ADMIN)")
    dump = lambda: "\n".join(  # noqa: E731
        f"--- {lg.name}\n{lg.read_text(errors='replace')[-3000:]}" for lg in logs)
    client = Client(hosts, port, tmp_path / "client.log")
    try:
        order = client.ask("order")["order"]
        assert sorted(order) == sorted(HOSTS), order
        first = client.ask("quorum")
        assert "error" not in first, (first, dump())
        assert first["members"] == ["replica_dns"], first
        # The server at the first address answered, and so took the door.
        reached = HOSTS.index(order[0])
        assert holders(procs, logs) == [reached], (order, dump())

        killed = time.monotonic()
        procs[reached].kill()
        procs[reached].wait(10)
        second = client.ask("quorum")
        took = time.monotonic() - killed
        assert "error" not in second, (second, dump())
        assert second["quorum_id"] > first["quorum_id"], (first, second)
        assert holders(procs, logs) == [1 - reached], dump()
        print(f"\n{NAME} -> {order}: the server at {order[0]} SIGKILLed; the same client had "
              f"its next quorum through {order[1]} after {took:.2f} s (owner TTL 2 s); "
              f"quorum id {first['quorum_id']} -> {second['quorum_id']}")
    finally:
        client.close()
