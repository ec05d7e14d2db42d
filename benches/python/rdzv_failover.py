"""The pause a SIGKILL of the owning dt-rdzv causes, with three servers on a three-member etcd:
time from the kill until every member was welcomed back into its round by another server
(cause ``resumed``). The killed server is restarted on the same ports between runs.

    .venv/bin/python benches/python/rdzv_failover.py --members 4 --runs 5

Needs etcd (Debian's etcd-server) and a dt-rdzv built with the etcd feature ($DT_RDZV_BIN, else
the debug build in the cargo target dir). Prints every pause and the median [min-max].
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "interop"), str(ROOT / "python" / "tests")]
from etcd_servers import free_port, start_etcd_cluster  # noqa: E402
from native_server import dt_rdzv_bin, stop_process  # noqa: E402


class Server:
    """One `dt-rdzv serve --backend` on fixed ports (so that it can come back on them)."""

    def __init__(self, tmp: Path, i: int, backend: str, token: str, ttl: str) -> None:
        self.tmp, self.i, self.backend, self.token, self.ttl = tmp, i, backend, token, ttl
        self.native, self.http = free_port(), free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.fingerprint = ""

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.native}"

    def start(self) -> None:
        log = open(self.tmp / f"dt-rdzv-{self.i}.log", "a")
        self.proc = subprocess.Popen(
            [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--no-tcpstore",
             "--native-port", str(self.native), "--http-port", str(self.http),
             "--backend", self.backend, "--owner-ttl", self.ttl,
             "--tls-cert", str(self.tmp / "cert.pem"), "--tls-key", str(self.tmp / "key.pem")],
            stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "DTRDZV_TOKEN": self.token, "DTRDZV_LOG": "info"})
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"dt-rdzv {self.i} did not start (see {log.name})")
            if line.startswith("dt-rdzv listening native="):
                self.fingerprint = line.split("fingerprint=")[1].strip()
            if line.startswith("dt-rdzv listening http="):
                return
        raise SystemExit(f"dt-rdzv {self.i} did not start in time")

    def owns(self, job: str) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/v1/backend",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return job in json.loads(r.read()).get("owned_jobs", [])
        except OSError:
            return False


def reader(name: int, proc: subprocess.Popen[str], out: queue.Queue[tuple[int, float, dict]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            out.put((name, time.monotonic(), json.loads(line)))
        except ValueError:
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--owner-ttl", default="2s")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rdzv-failover-"))
    cluster = start_etcd_cluster(tmp)
    servers: list[Server] = []
    members: list[subprocess.Popen[str]] = []
    try:
        backend = "etcd://" + ",".join(m.endpoint for m in cluster)
        token = secrets.token_hex(16)
        for i in range(3):
            s = Server(tmp, i, backend, token, a.owner_ttl)
            s.start()
            servers.append(s)
        job = f"failover-{secrets.token_hex(4)}"
        events: queue.Queue[tuple[int, float, dict]] = queue.Queue()
        endpoints = ",".join(s.endpoint for s in servers)
        for k in range(a.members):
            p = subprocess.Popen(
                [dt_rdzv_bin(), "member", "--native", endpoints, "--fingerprint",
                 servers[0].fingerprint, "--job", job, "--member", f"m{k}",
                 "--min", str(a.members), "--max", str(a.members)],
                stdout=subprocess.PIPE, stderr=open(tmp / f"member-{k}.log", "w"), text=True,
                env={**os.environ, "DTRDZV_TOKEN": token})
            members.append(p)
            threading.Thread(target=reader, args=(k, p, events), daemon=True).start()

        def welcomed(timeout: float, cause: str | None) -> float:
            """Waits until every member was welcomed (with ``cause``); the last one's time."""
            seen: dict[int, float] = {}
            deadline = time.monotonic() + timeout
            while len(seen) < a.members:
                try:
                    k, t, e = events.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise SystemExit(f"members not welcomed within {timeout}s: {sorted(seen)}")
                if e.get("event") == "welcome" and (cause is None or e["cause"].startswith(cause)):
                    seen[k] = t
            return max(seen.values())

        welcomed(60, None)
        pauses = []
        for run in range(a.runs):
            owner = next((s for s in servers if s.owns(job)), None)
            if owner is None:
                raise SystemExit("no server owns the job")
            assert owner.proc is not None
            killed = time.monotonic()
            os.kill(owner.proc.pid, signal.SIGKILL)
            owner.proc.wait()
            back = welcomed(60, "resumed")
            pauses.append(back - killed)
            print(f"run {run + 1}: SIGKILL of server {owner.i}: every member resumed after "
                  f"{pauses[-1]:.3f} s", flush=True)
            owner.start()
            time.sleep(1)
        print(f"failover pause, {a.members} members, owner TTL {a.owner_ttl}: median "
              f"{statistics.median(pauses):.3f} s [{min(pauses):.3f}-{max(pauses):.3f}] over "
              f"{len(pauses)} runs")
        return 0
    finally:
        for p in members:
            p.kill()
        for s in servers:
            if s.proc is not None:
                stop_process(s.proc)  # type: ignore[arg-type]
        for m in cluster:
            stop_process(m.proc)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
