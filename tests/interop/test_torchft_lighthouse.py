"""`dt-rdzv serve --torchft-port` against torchft's own clients (the `torchft-nightly` wheel):
``torchft._torchft.LighthouseClient`` and ``torchft.Manager`` talk gRPC to dt-rdzv as they
would to torchft's Lighthouse. A quorum of two replica groups, the heartbeat round trip
(torchft's ``test_heartbeat_round_trip``), the join timeout (``test_join_timeout_behavior``),
a silent replica dropped within the heartbeat timeout (and the status page saying why), a
call's deadline, and the kill route. Skipped when torchft is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from native_server import dt_rdzv_bin, serve, stop_process

torchft_ext = pytest.importorskip(
    "torchft._torchft", reason="torchft not installed (pip install torchft-nightly)")
LighthouseClient = torchft_ext.LighthouseClient


@dataclass
class Lighthouse:
    """A `dt-rdzv serve --torchft-port 0` started by a test."""

    proc: subprocess.Popen[str]
    port: int
    log_path: Path

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        return LighthouseClient(self.address, connect_timeout=timedelta(seconds=5))

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.address}/status.json", timeout=5) as r:
            return json.loads(r.read())

    def job(self, key: str = "") -> dict[str, Any]:
        return next(j for j in self.status()["jobs"] if j["job"] == key)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start(tmp_path: Path, *extra: str) -> Lighthouse:
    binary = dt_rdzv_bin()
    if not os.path.exists(binary):
        pytest.skip(f"no dt-rdzv binary at {binary} (cargo build -p dt-rdzv, or set DT_RDZV_BIN)")
    log_path = tmp_path / f"dt-rdzv-torchft-{len(list(tmp_path.glob('dt-rdzv-torchft-*.log')))}.log"
    port = [] if "--torchft-port" in extra else ["--torchft-port", "0"]
    proc, addr = serve(["--host", "127.0.0.1", "--port", "0", "--no-native", "--no-http",
                        "--no-auth", *port, *extra], "torchft", log_path)
    port = int(addr.rsplit(":", 1)[1])
    return Lighthouse(proc, port, log_path)


@pytest.fixture
def lighthouse_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[Lighthouse] = []

    def make(*extra: str) -> Lighthouse:
        lh = start(tmp_path, *extra)
        started.append(lh)
        return lh

    yield make
    for lh in started:
        assert stop_process(lh.proc) == 0, lh.log()


def ids(q: Any) -> list[str]:
    return [m.replica_id for m in q.participants]


def test_quorum_of_two(lighthouse_factory: Any) -> None:
    lh = lighthouse_factory("--torchft-min-replicas", "2")
    results: dict[str, Any] = {}

    def ask(name: str, step: int) -> None:
        c = lh.client()
        results[name] = c.quorum(replica_id=name, timeout=timedelta(seconds=10),
                                 address=f"http://127.0.0.1:1/{name}",
                                 store_address=f"127.0.0.1:{1000 + step}", step=step,
                                 world_size=2, data={"who": name})

    threads = [threading.Thread(target=ask, args=("replica_1", 5)),
               threading.Thread(target=ask, args=("replica_0", 7))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert set(results) == {"replica_0", "replica_1"}
    a, b = results["replica_0"], results["replica_1"]
    assert ids(a) == ids(b) == ["replica_0", "replica_1"], "sorted by replica_id"
    # torchft's Lighthouse starts at 1 and a restarted one reissues ids; dt-rdzv starts above
    # its start time in milliseconds, so that a restart never goes back.
    assert a.quorum_id == b.quorum_id
    assert 1_700_000_000_000 < a.quorum_id <= time.time() * 1000 + 1, a.quorum_id
    m0, m1 = a.participants
    assert (m0.step, m0.world_size, m0.store_address) == (7, 2, "127.0.0.1:1007")
    assert m1.data == {"who": "replica_1"}, "the member's JSON goes back as it came"
    assert a.created.seconds > 1_700_000_000

    # Same two again: a fast quorum, the same id.
    results.clear()
    threads = [threading.Thread(target=ask, args=(n, 8)) for n in ("replica_0", "replica_1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results["replica_0"].quorum_id == a.quorum_id
    job = lh.job()
    assert [p["replica_id"] for p in job["quorum"]["participants"]] == ["replica_0", "replica_1"]
    assert job["waiting_calls"] == 0


def test_a_restarted_lighthouse_never_reissues_a_quorum_id(lighthouse_factory: Any) -> None:
    """torchft's Lighthouse restarts at id 1, so a Manager whose last quorum was 1 sees a new
    membership under the same id and does not reconfigure; dt-rdzv's ids go on rising."""
    lh = lighthouse_factory("--torchft-min-replicas", "1")
    first = lh.client().quorum(replica_id="r0", timeout=timedelta(seconds=10))
    assert stop_process(lh.proc) == 0, lh.log()
    again = lighthouse_factory("--torchft-min-replicas", "1", "--torchft-port", str(lh.port))
    second = again.client().quorum(replica_id="r1", timeout=timedelta(seconds=10))
    assert second.quorum_id > first.quorum_id, (first.quorum_id, second.quorum_id)


def test_heartbeat_round_trip(lighthouse_factory: Any) -> None:
    """torchft's own `test_heartbeat_round_trip`, at 200 ms."""
    lh = lighthouse_factory("--torchft-heartbeat-timeout-ms", "200")
    client = lh.client()
    client.heartbeat("rep0")
    beats = {h["replica_id"]: h for h in lh.job()["heartbeats"]}
    assert beats["rep0"]["healthy"]
    time.sleep(0.15)
    q = client.quorum(replica_id="rep0", timeout=timedelta(milliseconds=500))
    assert "rep0" in ids(q)
    time.sleep(0.25)
    probe = client.quorum(replica_id="probe", timeout=timedelta(milliseconds=500))
    assert ids(probe) == ["probe"]
    assert probe.quorum_id == q.quorum_id + 1
    left = lh.job()["departures"]
    assert [(d["replica_id"], d["reason"]) for d in left] == [("rep0", "heartbeat_timeout")]


def test_join_timeout(lighthouse_factory: Any) -> None:
    """A valid quorum waits for a healthy replica that has not joined, until the join
    timeout; without stragglers it does not wait."""
    lh = lighthouse_factory("--torchft-join-timeout-ms", "600")
    client = lh.client()
    t = time.monotonic()
    q = client.quorum(replica_id="solo", timeout=timedelta(seconds=5))
    assert ids(q) == ["solo"] and time.monotonic() - t < 0.4

    lh = lighthouse_factory("--torchft-join-timeout-ms", "600")
    client = lh.client()
    client.heartbeat("straggler")
    stop = threading.Event()

    def keep_beating() -> None:
        c = lh.client()
        while not stop.is_set():
            c.heartbeat("straggler")
            time.sleep(0.1)

    beater = threading.Thread(target=keep_beating)
    beater.start()
    try:
        results: dict[str, Any] = {}

        def ask(name: str) -> None:
            results[name] = lh.client().quorum(replica_id=name, timeout=timedelta(seconds=5))

        t = time.monotonic()
        threads = [threading.Thread(target=ask, args=(n,)) for n in ("a", "b")]
        for th in threads:
            th.start()
        time.sleep(0.3)
        assert "Valid quorum with 2 participants, waiting for 1" in lh.job()["status"]
        for th in threads:
            th.join(10)
        elapsed = time.monotonic() - t
        assert ids(results["a"]) == ["a", "b"]
        assert 0.5 <= elapsed < 3, elapsed
    finally:
        stop.set()
        beater.join()


def test_silent_replica_dropped_within_heartbeat_timeout(lighthouse_factory: Any) -> None:
    lh = lighthouse_factory("--torchft-min-replicas", "1", "--torchft-heartbeat-timeout-ms", "500",
                            "--torchft-join-timeout-ms", "60000")
    results: dict[str, Any] = {}

    def ask(name: str) -> None:
        results[name] = lh.client().quorum(replica_id=name, timeout=timedelta(seconds=10))

    # Both beat, then join: one quorum of two.
    c = lh.client()
    c.heartbeat("alive")
    c.heartbeat("silent")
    threads = [threading.Thread(target=ask, args=(n,)) for n in ("alive", "silent")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert ids(results["alive"]) == ["alive", "silent"]

    # "silent" stops; "alive" keeps beating and asks again: the next quorum comes once
    # "silent" is past the heartbeat timeout (not the 60 s join timeout), without it.
    t = time.monotonic()
    stop = threading.Event()

    def keep_beating() -> None:
        while not stop.is_set():
            c.heartbeat("alive")
            time.sleep(0.1)

    beater = threading.Thread(target=keep_beating)
    beater.start()
    try:
        q = lh.client().quorum(replica_id="alive", timeout=timedelta(seconds=10))
    finally:
        stop.set()
        beater.join()
    elapsed = time.monotonic() - t
    assert ids(q) == ["alive"]
    assert q.quorum_id == results["alive"].quorum_id + 1
    assert elapsed < 0.5 + 0.5, f"dropped after {elapsed:.2f}s"
    job = lh.job()
    left = [(d["replica_id"], d["reason"]) for d in job["departures"]]
    assert left == [("silent", "heartbeat_timeout")]
    beats = {h["replica_id"]: h["healthy"] for h in job["heartbeats"]}
    assert beats == {"alive": True, "silent": False}
    with urllib.request.urlopen(f"{lh.address}/status", timeout=5) as r:
        page = r.read().decode()
    first = results["alive"].quorum_id
    assert f"silent left after quorum {first}" in page and "heartbeat timeout" in page
    with urllib.request.urlopen(f"{lh.address}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert f'dtrdzv_torchft_quorum_id{{job=""}} {q.quorum_id}' in metrics, metrics
    assert 'dtrdzv_torchft_quorum_participants{job=""} 1' in metrics, metrics
    assert 'dtrdzv_torchft_replicas_silent{job=""} 1' in metrics, metrics
    assert 'dtrdzv_torchft_departures_total{reason="heartbeat_timeout"} 1' in metrics, metrics


def test_quorum_deadline(lighthouse_factory: Any) -> None:
    """A quorum call that no quorum answers ends at the client's timeout; the server forgets
    it."""
    lh = lighthouse_factory("--torchft-min-replicas", "2")
    t = time.monotonic()
    with pytest.raises(Exception) as e:
        lh.client().quorum(replica_id="lonely", timeout=timedelta(milliseconds=400))
    elapsed = time.monotonic() - t
    assert 0.3 <= elapsed < 5, elapsed
    text = str(e.value).lower()
    assert any(w in text for w in ("deadline", "timeout", "timed out")), e.value
    deadline = time.monotonic() + 5
    while lh.job()["waiting_calls"] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lh.job()["waiting_calls"] == 0


def test_kill_route(lighthouse_factory: Any) -> None:
    lh = lighthouse_factory()
    req = urllib.request.Request(f"{lh.address}/replica/nobody/kill", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 404
    # A member whose Manager address answers nothing: the call is tried and fails.
    lh.client().quorum(replica_id="r0", timeout=timedelta(seconds=5), address="http://127.0.0.1:1")
    req = urllib.request.Request(f"{lh.address}/replica/r0/kill", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=15)
    assert e.value.code == 502
    assert "connect" in e.value.read().decode()


MANAGER_WORKER = r"""
import sys, time
from datetime import timedelta
import torch.distributed as dist
from torchft import Manager, ProcessGroupGloo

store = dist.TCPStore(host_name="127.0.0.1", port=0, is_master=True, wait_for_workers=False)
manager = Manager(pg=ProcessGroupGloo(), min_replica_size=1, load_state_dict=lambda x: None,
                  state_dict=lambda: None, replica_id=sys.argv[2], store_addr="127.0.0.1",
                  store_port=store.port, rank=0, world_size=1, use_async_quorum=False,
                  lighthouse_addr=sys.argv[1], timeout=timedelta(seconds=10))
t = time.time()
manager.start_quorum()
print(f"QUORUM {time.time() - t:.3f} {manager.num_participants()}", flush=True)
if sys.argv[3] == "wait":
    time.sleep(60)
manager.shutdown()
"""


def run_manager(lh: Lighthouse, name: str, mode: str) -> subprocess.Popen[str]:
    import sys
    return subprocess.Popen([sys.executable, "-c", MANAGER_WORKER, lh.address, name, mode],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def quorum_line(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("QUORUM "):
            return line
    proc.kill()
    raise AssertionError("the Manager formed no quorum:\n" + "".join(lines[-40:]))


def test_manager_join_timeout_behavior(lighthouse_factory: Any) -> None:
    """torchft's `test_join_timeout_behavior`: a Manager alone, join timeout 100 ms, gets its
    quorum in under 0.4 s; then `POST /replica/{id}/kill` reaches its ManagerService."""
    pytest.importorskip("torchft")
    lh = lighthouse_factory("--torchft-join-timeout-ms", "100")
    proc = run_manager(lh, "lighthouse_test", "wait")
    try:
        _, took, participants = quorum_line(proc).split()
        assert float(took) < 0.4, took
        assert participants == "1"
        job = lh.job()
        [member] = job["quorum"]["participants"]
        assert member["replica_id"].startswith("lighthouse_test")
        req = urllib.request.Request(f"{lh.address}/replica/{member['replica_id']}/kill",
                                     method="POST")
        with urllib.request.urlopen(req, timeout=15) as r:
            # 202: the Manager exits before it answers (it logs "got kill request").
            assert r.status in (200, 202), r.read()
        proc.wait(timeout=30)
        assert proc.returncode != 0, "the Manager exits when killed"
        assert proc.stdout is not None
        assert "got kill request" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
