"""'Why is my job stuck?' against real jobs: members of a native job hang on purpose and
``dt-rdzv status --hang`` (the server, from the summaries on their heartbeats) names who waits
for whom; a SIGSTOPped rank is named as not heartbeating; a store job (torch's env://, rank 0
hosting torch's own TCPStore) is diagnosed from the summaries its ranks publish there."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import native_server as native_server_mod
import pytest
from dtgroup import WORKERS, base_env
from native_server import NativeServer, Procs, dt_rdzv_bin, procs  # noqa: F401

SCRIPT = WORKERS / "hang_native.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hang(server: NativeServer, job: str) -> dict[str, Any]:
    r = server.cli("status", "--hang", job, "--json")
    assert r.returncode == 0, r.stderr
    report: dict[str, Any] = json.loads(r.stdout)
    return report


def _start(server: NativeServer, procs: Procs, job: str, world: int, mode: str) -> None:
    env = base_env(server.client_env(job, DTCOMM_RDZV_MEMBERS=str(world), DTCOMM_TIMEOUT="600"))
    for i in range(world):
        procs.start(f"{job}-m{i}", [sys.executable, str(SCRIPT), mode], env)
    procs.wait_for("every member ready",
                   lambda: all("READY" in procs.out(f"{job}-m{i}") for i in range(world)), 120)


def _finding(server: NativeServer, procs: Procs, job: str,
             kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    found: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def look() -> bool:
        report = _hang(server, job)
        found[:] = [(f, report) for f in report["findings"] if f["kind"] == kind]
        return bool(found)

    procs.wait_for(f"a {kind} finding for {job}", look, 60)
    return found[0]


@pytest.fixture
def server(tmp_path: Path) -> Any:
    # A long heartbeat timeout: a SIGSTOPped member stays in the round, named as silent.
    s = native_server_mod.start(tmp_path, heartbeat_timeout="60s")
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.parametrize(("world", "sleeper"), [(6, 3), (4, 0)])
def test_the_rank_the_others_wait_for_is_named(server: NativeServer, procs: Procs,
                                               world: int, sleeper: int) -> None:
    job = f"hang-{uuid.uuid4().hex[:8]}"
    _start(server, procs, job, world, f"sleep:{sleeper}")
    f, report = _finding(server, procs, job, "waiting")
    others = [r for r in range(world) if r != sleeper]
    assert f["culprits"] == [sleeper], report
    assert f["waiters"] == others, report
    assert f["op"] == "all_reduce" and f["group"] == 0, report
    assert f"for rank {sleeper}, which completed seq" in f["words"], f["words"]
    assert "has called no collective for" in f["words"], f["words"]
    text = server.cli("status", "--hang", job)
    assert text.returncode == 0 and f"rank {sleeper}, which completed" in text.stdout, text
    if sleeper == 0:
        return  # rank 0 stuck itself: answered above, with no help from it
    # Frozen (SIGSTOP): named as not heartbeating from three missed heartbeats on, and as
    # gone once the server drops its connection (its QUIC connection idles out within about
    # 2 s, and the round ends naming it): either answer names the frozen member.
    pid = next(p for n, p, _ in procs.procs if n == f"{job}-m{sleeper}").pid
    os.kill(pid, signal.SIGSTOP)
    try:
        seen: list[dict[str, Any]] = []

        def named() -> bool:
            report = _hang(server, job)
            seen[:] = [f for f in report["findings"]
                       if (f["kind"] == "silent" and f["culprits"] == [sleeper])
                       or (f["kind"] == "missing" and f":{pid}" in f["words"])]
            return bool(seen)

        procs.wait_for(f"the frozen rank {sleeper} named", named, 60)
        words = seen[0]["words"]
        assert (f"rank {sleeper} stopped heartbeating" in words
                or "waits for" in words), words
    finally:
        os.kill(pid, signal.SIGCONT)


def test_two_ranks_receiving_from_each_other_are_a_cycle(server: NativeServer,
                                                         procs: Procs) -> None:
    job = f"cycle-{uuid.uuid4().hex[:8]}"
    _start(server, procs, job, 2, "cycle")
    f, report = _finding(server, procs, job, "cycle")
    assert f["culprits"] == [0, 1], report
    assert "rank 0 waits in recv from rank 1 and rank 1 in recv from rank 0" in f["words"], report


STORE_WORKER = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("dtcomm")
r = dist.get_rank()
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
print("READY", r, flush=True)
if r == 1:
    time.sleep(600)
else:
    dist.all_reduce(t)
"""


def test_a_store_job_is_diagnosed_from_its_store(procs: Procs, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    port = free_port()
    script = tmp_path / "store_worker.py"
    script.write_text(STORE_WORKER)
    for r in range(3):
        env = base_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
                        "WORLD_SIZE": "3", "DTCOMM_TIMEOUT": "600"})
        procs.start(f"store-r{r}", [sys.executable, str(script)], env)
    procs.wait_for("every rank ready",
                   lambda: all("READY" in procs.out(f"store-r{r}") for r in range(3)), 120)
    found: list[dict[str, Any]] = []

    def look() -> bool:
        out = subprocess.run(
            [dt_rdzv_bin(), "status", "--hang", "--store", f"127.0.0.1:{port}", "--json"],
            capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        found[:] = [f for f in json.loads(out.stdout)["findings"] if f["kind"] == "waiting"]
        return bool(found)

    procs.wait_for("a waiting finding in the store", look, 60)
    assert found[0]["culprits"] == [1], found
    assert found[0]["waiters"] == [0, 2], found


def _agents_workers_waiting(server: NativeServer, procs: Procs, job: str,
                            cmds: list[list[str]], env: dict[str, str],
                            waiters: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Starts the agents (`cmds`, one each) of STORE_WORKER's workers, waits until every
    worker is ready and the server's report has `waiters` waiting; that finding and the report.
    Summaries reach the server up to ~2 s late (each worker writes once a second, its agent
    relays once a second), hence the wait for the settled finding."""
    names = [f"{job}-{i}" for i in range(len(cmds))]
    for n, cmd in zip(names, cmds):
        procs.start(n, cmd, env)
    workers = len(waiters) + 1
    procs.wait_for("every worker ready",
                   lambda: sum(procs.out(n).count("READY") for n in names) == workers, 180)
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def settled() -> bool:
        report = _hang(server, job)
        seen[:] = [(f, report) for f in report["findings"]
                   if f["kind"] == "waiting" and f["waiters"] == waiters]
        return bool(seen)

    procs.wait_for(f"ranks {waiters} waiting", settled, 60)
    return seen[0]


def test_a_dtrun_jobs_workers_are_diagnosed_from_their_agents_relays(
        server: NativeServer, procs: Procs, tmp_path: Path) -> None:
    """dtrun --rdzv-backend native: the agents (one per node) are the job's members, the
    workers meet through node 0's store and publish their summaries there; each agent relays
    its own workers' (ClientMsg::Relay), so the server names the worker the others wait for,
    from its own answer (`/v1/jobs/JOB/hang` and `dt-rdzv status --hang`)."""
    pytest.importorskip("torch")
    script = tmp_path / "store_worker.py"
    # Four workers on two nodes; rank 1 sleeps, the others wait for it.
    script.write_text(STORE_WORKER)
    job = f"dtrun-hang-{uuid.uuid4().hex[:8]}"
    env = base_env({**server.client_env(job), "DTCOMM_TIMEOUT": "600"})
    del env["DTCOMM_RDZV_ENDPOINT"]
    cmd = [sys.executable, "-m", "dtcomm", "--rdzv-backend", "native", "--rdzv-endpoint",
           server.native, "--nnodes", "2", "--nproc-per-node", "2", str(script)]
    found, report = _agents_workers_waiting(server, procs, job, [cmd, cmd], env, [0, 2, 3])
    assert found["culprits"] == [1], report
    assert "rank 1" in found["words"], report
    # The per-rank table lists the workers, each named after the agent that relays it.
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == [0, 1, 2, 3], report
    assert all("/rank" in r["member"] for r in ranks.values()), report


def _torchrun(server: NativeServer, job: str, script: Path, nproc: int) -> list[str]:
    conf = f"fingerprint={server.fingerprint},last_call_timeout=5,join_timeout=120"
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
            f"--nproc-per-node={nproc}", "--monitor-interval=0.5", "--rdzv-backend=dtcomm",
            f"--rdzv-endpoint={server.native}", f"--rdzv-id={job}", f"--rdzv-conf={conf}",
            "--local-addr=127.0.0.1", str(script)]


@pytest.mark.parametrize("nprocs", [(2, 2), (1, 2)])
def test_a_torchrun_jobs_workers_are_diagnosed_from_their_agents_relays(
        server: NativeServer, procs: Procs, tmp_path: Path, nprocs: tuple[int, int]) -> None:
    """torchrun --rdzv-backend=dtcomm: torch's own elastic agents, with dtcomm's handler, are
    the job's members; the workers meet at rank 0's store and publish their summaries there;
    each agent relays its own workers' from its monitor loop, so the server names the worker
    the others wait for. With a different --nproc-per-node on each node (1 and 2: three
    workers), each agent finds its workers' ranks where torch's agents settled them."""
    pytest.importorskip("torch")
    script = tmp_path / "store_worker.py"
    script.write_text(STORE_WORKER)
    job = f"torchrun-hang-{uuid.uuid4().hex[:8]}"
    env = base_env({"DTCOMM_RDZV_TOKEN": server.token, "DTCOMM_TIMEOUT": "600"})
    cmds = [_torchrun(server, job, script, n) for n in nprocs]
    workers = sum(nprocs)
    waiters = [r for r in range(workers) if r != 1]
    found, report = _agents_workers_waiting(server, procs, job, cmds, env, waiters)
    assert found["culprits"] == [1], report
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == list(range(workers)), report
    # Each worker is relayed by its own agent: the agent with one worker relays one rank.
    by_agent: dict[str, int] = {}
    for r in ranks.values():
        agent = r["member"].rsplit("/rank", 1)[0]
        by_agent[agent] = by_agent.get(agent, 0) + 1
    assert sorted(by_agent.values()) == sorted(nprocs), report
