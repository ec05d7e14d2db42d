"""dtrun's lifecycle on the native rendezvous: SIGTERM to the agent stops its workers and
leaves the job (not a worker failure, even with --max-restarts), and a SIGKILLed agent takes
its workers down (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtgroup import WORKERS, base_env
from native_server import NativeServer, Procs, native_server, procs  # noqa: F401 (fixtures)


def _alive(pid: int) -> bool:
    """Running (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.fixture
def worker_pids() -> Iterator[list[int]]:
    """Worker PIDs a test saw; any still running at the end are SIGKILLed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _start_agent(native_server: NativeServer, procs: Procs, tmp_path: Path,
                 worker_pids: list[int]) -> tuple[object, int]:
    script = WORKERS / "dtrun_sleeper.py"
    job = f"job-{uuid.uuid4().hex[:8]}"
    env = base_env({**native_server.client_env(job), "PYTHONFAULTHANDLER": "1"})
    del env["DTCOMM_RDZV_ENDPOINT"]
    agent = procs.start("agent", [sys.executable, "-m", "dtcomm", "--rdzv-backend", "native",
                                  "--rdzv-endpoint", native_server.native, "--nnodes", "1",
                                  "--max-restarts", "2", str(script)], env)
    procs.wait_for("the worker", lambda: "WORKER UP" in procs.out("agent"), 60)
    pid = int(re.search(r"WORKER UP (\d+)", procs.out("agent")).group(1))  # type: ignore[union-attr]
    worker_pids.append(pid)
    return agent, pid


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_sigterm_stops_the_workers_and_leaves_despite_max_restarts(
    native_server: NativeServer, procs: Procs, tmp_path: Path, worker_pids: list[int]
) -> None:
    agent, worker = _start_agent(native_server, procs, tmp_path, worker_pids)
    t0 = time.monotonic()
    os.kill(agent.pid, signal.SIGTERM)  # type: ignore[attr-defined]
    code = procs.wait_exit("agent", 15)
    took = time.monotonic() - t0
    out = procs.out("agent")
    assert code == 128 + signal.SIGTERM, out
    assert took < 10, f"{took:.1f}s\n{out}"
    assert "restart 1 of 2" not in out and "leaving the job" in out, out
    assert _wait_gone(worker, 5), out


def test_a_sigkilled_agent_takes_its_workers_down(
    native_server: NativeServer, procs: Procs, tmp_path: Path, worker_pids: list[int]
) -> None:
    agent, worker = _start_agent(native_server, procs, tmp_path, worker_pids)
    os.kill(agent.pid, signal.SIGKILL)  # type: ignore[attr-defined]  # the agent only
    assert _wait_gone(worker, 5), procs.out("agent")
