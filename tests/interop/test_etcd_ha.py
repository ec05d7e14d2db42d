"""Three `dt-rdzv serve` sharing jobs through a three-member etcd 3.4 cluster (Debian's
`etcd-server`, started here on loopback ports and stopped by PID): a training job (dtrun, native
rendezvous, 2 nodes x 2 workers) runs while the server that owns it is SIGKILLed, then while
etcd's leader is SIGKILLed. The job finishes with no lost member and no round change; the test
prints the pause each fault caused (the longest gap between training steps after it, and how long
the job went without an owner)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from etcd_servers import EtcdMember, etcd_binary, start_etcd_cluster
from native_server import NativeServer, Procs, dt_rdzv_bin, procs  # noqa: F401 (fixture)
import native_server as native_server_mod
from dtgroup import base_env

WORKERS = Path(__file__).resolve().parent / "workers"

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd not installed (scripts/setup.sh installs etcd-server)")


def serve_unreachable_etcd() -> subprocess.CompletedProcess[str]:
    """`dt-rdzv serve --backend` naming an etcd nobody listens on."""
    return subprocess.run(
        [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--port", "0", "--native-port", "0",
         "--http-port", "0", "--no-auth", "--backend", "etcd://127.0.0.1:9,127.0.0.1:10",
         "--backend-timeout", "500ms"],
        capture_output=True, text=True, timeout=60)


def backend_supported() -> bool:
    """Whether the dt-rdzv under test was built with the etcd backend."""
    return "without the `etcd` feature" not in serve_unreachable_etcd().stderr


def test_an_unreachable_etcd_at_start_is_a_clear_error_naming_the_endpoints() -> None:
    r = serve_unreachable_etcd()
    if "without the `etcd` feature" in r.stderr:
        pytest.skip("dt-rdzv built without the etcd feature (protoc missing at build time)")
    assert r.returncode != 0
    assert "etcd://127.0.0.1:9,127.0.0.1:10" in r.stderr, r.stderr
    assert "unreachable" in r.stderr, r.stderr


def http_json(server: NativeServer, path: str) -> dict[str, object] | None:
    assert server.http
    req = urllib.request.Request(f"http://{server.http}{path}",
                                 headers={"Authorization": f"Bearer {server.token}"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return None


def owner_of(servers: list[NativeServer], job: str) -> NativeServer | None:
    for s in servers:
        if s.proc.poll() is None:
            b = http_json(s, "/v1/backend")
            if b and job in b.get("owned_jobs", []):  # type: ignore[operator]
                return s
    return None


def running_on(server: NativeServer, job: str, members: int) -> bool:
    j = http_json(server, f"/v1/jobs/{job}")
    return bool(j) and j.get("state") == "running" and len(j.get("members", [])) == members


def longest_gap(steps: Path, since: float, until: float) -> float:
    """The longest time between two training steps of rank 0 that overlaps [since, until]."""
    times = [float(l.split()[1]) for l in steps.read_text().splitlines() if l.strip()]
    gaps = [b - a for a, b in zip(times, times[1:]) if b >= since and a <= until]
    return max(gaps, default=float("nan"))


def test_a_job_survives_the_loss_of_its_owning_server_and_of_etcds_leader(
        procs: Procs, tmp_path: Path) -> None:
    if not backend_supported():
        pytest.skip("dt-rdzv built without the etcd feature (protoc missing at build time)")
    cluster: list[EtcdMember] = start_etcd_cluster(tmp_path)
    servers: list[NativeServer] = []
    try:
        backend = "etcd://" + ",".join(m.endpoint for m in cluster)
        token = uuid.uuid4().hex
        identity = ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
        for i in range(3):
            # The first generates the group's certificate; the others load it (members pin one
            # fingerprint for the whole endpoint list).
            servers.append(native_server_mod.start(
                tmp_path, "--no-tcpstore", "--backend", backend, "--owner-ttl", "2s", *identity,
                token=token, log_name=f"dt-rdzv-{i}.log"))
        assert len({s.fingerprint for s in servers}) == 1

        job = f"ha-{uuid.uuid4().hex[:8]}"
        script = WORKERS / "etcd_ha_train.py"
        stop_file, steps = tmp_path / "stop", tmp_path / "steps"
        env = base_env({**servers[0].client_env(job), "DTCOMM_TIMEOUT": "60"})
        del env["DTCOMM_RDZV_ENDPOINT"]
        endpoints = ",".join(s.native for s in servers)
        cmd = [sys.executable, "-m", "dtcomm", "--rdzv-backend", "native", "--rdzv-endpoint",
               endpoints, "--nnodes", "2", "--nproc-per-node", "2", str(script), str(stop_file),
               str(steps)]
        for n in ("A", "B"):
            procs.start(n, cmd, env)
        procs.wait_for("4 workers training",
                       lambda: all(Path(f"{steps}.{r}").exists() and Path(f"{steps}.{r}").stat().st_size
                                   for r in range(4)), 90)
        owner = owner_of(servers, job)
        assert owner is not None, [s.log()[-2000:] for s in servers]

        # Fault 1: SIGKILL the owning server. Its lease expires (2 s); the agents' connections
        # go silent (3 s) and they rejoin through the endpoint list; another server claims the
        # job and rebuilds the round from their resumes.
        killed = time.time()
        owner.proc.kill()
        owner.proc.wait(timeout=10)
        others = [s for s in servers if s is not owner]
        procs.wait_for("the job owned and running on another server",
                       lambda: (o := owner_of(others, job)) is not None and running_on(o, job, 2), 60)
        without_owner = time.time() - killed
        new_owner = owner_of(others, job)
        assert new_owner is not None
        time.sleep(2)
        gap1 = longest_gap(Path(f"{steps}.0"), killed, time.time())

        # Fault 2: SIGKILL etcd's leader. The two others elect a new one; the servers' etcd
        # clients move to them; the job does not notice.
        leader = next(m for m in cluster if m.is_leader())
        killed2 = time.time()
        leader.proc.kill()
        leader.proc.wait(timeout=10)
        rest = [m for m in cluster if m is not leader]
        procs.wait_for("a new etcd leader",
                       lambda: sum(m.is_leader() for m in rest) == 1, 60)
        elected = time.time() - killed2
        procs.wait_for("the owner healthy on the new etcd leader",
                       lambda: (h := http_json(new_owner, "/v1/backend")) is not None
                       and h.get("degraded") is None and job in h.get("owned_jobs", []), 60)
        time.sleep(2)
        gap2 = longest_gap(Path(f"{steps}.0"), killed2, time.time())

        stop_file.write_text("stop")
        for n in ("A", "B"):
            assert procs.wait_exit(n, 90) == 0, procs.dump()
        out = procs.out("A") + procs.out("B")
        starts = re.findall(r"^\[rank\d\]: START (\d) (\d)", out, re.M)
        done = re.findall(r"^\[rank\d\]: DONE (\d) (\d) (\d+)", out, re.M)
        # No lost member and no round change: each of the 4 workers started once and finished.
        assert sorted(starts) == [(str(r), "4") for r in range(4)], procs.dump()
        assert sorted(d[0] for d in done) == ["0", "1", "2", "3"], procs.dump()
        assert len({d[2] for d in done}) == 1, f"ranks stopped at different steps: {done}"
        print(f"\nSIGKILL of the owning dt-rdzv: job owned and running again after "
              f"{without_owner:.2f} s; longest gap between training steps {gap1:.3f} s")
        print(f"SIGKILL of etcd's leader: new leader after {elected:.2f} s; longest gap between "
              f"training steps {gap2:.3f} s")
    finally:
        for s in servers:
            s.stop()
        for m in cluster:
            native_server_mod.stop_process(m.proc)  # type: ignore[arg-type]


def test_torch_tcpstore_clients_of_different_servers_share_one_store(tmp_path: Path) -> None:
    """torch's own TCPStore client, through two servers of a group: one store behind both
    doors (the server holding it serves, the other relays)."""
    torch = pytest.importorskip("torch")
    if not backend_supported():
        pytest.skip("dt-rdzv built without the etcd feature (protoc missing at build time)")
    from datetime import timedelta
    cluster = start_etcd_cluster(tmp_path)
    servers: list[NativeServer] = []
    try:
        backend = "etcd://" + ",".join(m.endpoint for m in cluster)
        token = uuid.uuid4().hex
        for i in range(2):
            servers.append(native_server_mod.start(
                tmp_path, "--backend", backend, token=token,
                log_name=f"dt-rdzv-store-{i}.log"))
        stores = []
        for s in servers:
            host, port = s.store.rsplit(":", 1)
            stores.append(torch.distributed.TCPStore(host, int(port), is_master=False,
                                                     timeout=timedelta(seconds=30)))
        stores[0].set("job/x", "1")
        assert stores[1].get("job/x") == b"1"
        for _ in range(5):
            stores[0].add("job/n", 1)
            stores[1].add("job/n", 1)
        assert stores[1].add("job/n", 0) == 10
        stores[1].wait(["job/x"])
        holders = [http_json(s, "/v1/backend")["tcpstore_owner"] for s in servers]  # type: ignore[index]
        assert sorted(holders) == [False, True], holders
    finally:
        for s in servers:
            s.stop()
        for m in cluster:
            native_server_mod.stop_process(m.proc)  # type: ignore[arg-type]
