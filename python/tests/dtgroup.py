"""Helpers for dtcomm's Python tests: a rendezvous server per test and a group of worker
processes that run a worker program of ``workers/``, each stopped by PID at its deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import dtcomm

ROOT = Path(__file__).resolve().parents[2]
#: The worker programs the tests run (``[sys.executable, str(WORKERS / "name.py"), ...]``); on
#: every worker's ``PYTHONPATH`` too (``base_env``), so they can import helpers kept there.
WORKERS = Path(__file__).resolve().parent / "workers"
HELPERS = WORKERS


@pytest.fixture
def server() -> Iterator[dtcomm.RdzvServer]:
    """An in-process dt-rdzv server on an ephemeral loopback port."""
    s = dtcomm.RdzvServer("127.0.0.1", 0)
    try:
        yield s
    finally:
        s.stop()


@dataclass
class Result:
    """One worker's exit code and output."""

    rank: int
    code: int
    out: str


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DTCOMM_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "TORCHELASTIC"))
    }
    env.update(
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(HELPERS) + os.pathsep + env.get("PYTHONPATH", ""),
        DTCOMM_SOCKET_IFNAME="lo",
        GLOO_SOCKET_IFNAME="lo",
        TORCH_CPP_LOG_LEVEL="ERROR",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


def run_all(cmds: list[tuple[list[str], dict[str, str]]],
            timeout: float = 120.0) -> list[tuple[int, str, str]]:
    """Starts every ``(argv, env)`` at once (processes that meet each other: none can finish
    alone) and returns each one's ``(returncode, stdout, stderr)`` in order. Past ``timeout``
    (one deadline for all) every process is killed and the test fails with what each one had
    printed, so that a hang says which process stopped where."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for argv, env in cmds]
    deadline = time.monotonic() + timeout
    got: list[tuple[int, str, str]] = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            got.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        said = []
        for i, p in enumerate(procs):
            running = p.poll() is None
            if running:
                p.kill()
            out, err = p.communicate()
            tail = "\n".join((out + err).splitlines()[-15:])
            state = "killed at the deadline" if running else f"exited {p.returncode}"
            said.append(f"--- process {i} ({state}):\n{tail}")
        raise AssertionError(f"past {timeout:.0f} s:\n" + "\n".join(said)) from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return got


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_group(
    tmp_path: Path,
    world: int,
    script: Path,
    env: dict[str, str],
    timeout: float = 120.0,
    per_rank: dict[int, dict[str, str]] | None = None,
    args: Sequence[str] = (),
    sigint_ignored: bool = False,
) -> list[Result]:
    """Runs the worker program `script` (a file, usually ``WORKERS / "name.py"``) with `args`
    in `world` processes with DTCOMM_RANK / DTCOMM_WORLD_SIZE (and RANK / WORLD_SIZE) set, each
    one's output in ``tmp_path / "rank{r}.log"``; returns each one's exit code and output.
    Processes still running at the deadline are killed. ``sigint_ignored``: start them with
    SIGINT ignored, as a CI runner or ``nohup`` does."""
    procs = []
    for r in range(world):
        e = base_env(
            {"DTCOMM_RANK": str(r), "DTCOMM_WORLD_SIZE": str(world), "RANK": str(r),
             "WORLD_SIZE": str(world), **env, **(per_rank or {}).get(r, {})}
        )
        log = open(tmp_path / f"rank{r}.log", "w+")
        p = subprocess.Popen(
            [sys.executable, str(script), *args], env=e, stdout=log, stderr=subprocess.STDOUT,
            text=True, preexec_fn=_ignore_sigint if sigint_ignored else None
        )
        procs.append((r, p, log))
    results = []
    for r, p, log in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        log.seek(0)
        results.append(Result(r, p.returncode, log.read()))
        log.close()
    return results


def torch_env(server: dtcomm.RdzvServer) -> dict[str, str]:
    """torch's env:// rendezvous on the test's dt-rdzv: every rank a client (as under dtrun)."""
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(server.port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }


def check(results: list[Result]) -> None:
    """Fails with every worker's output unless all exited 0."""
    bad = [r for r in results if r.code != 0]
    if bad:
        msg = "\n".join(f"--- rank {r.rank} exited {r.code}:\n{r.out}" for r in results)
        pytest.fail(msg)
