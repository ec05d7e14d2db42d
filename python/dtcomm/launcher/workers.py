"""The workers of one node: spawned with torchrun's environment, each line of their output
prefixed with the rank, and stopped together when one fails. Every worker gets
``PR_SET_PDEATHSIG`` (Linux): if the agent dies, even by SIGKILL, its workers are killed."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from .rendezvous import Rendezvous

GRACE_S = 5.0


@dataclass
class Spec:
    """What to run and how many."""

    cmd: list[str]
    nproc: int
    nnodes: int
    run_id: str
    #: Restarts of this node's workers so far (TORCHELASTIC_RESTART_COUNT).
    restart: int = 0
    max_restarts: int = 0
    #: Hosts of different sizes (``dtrun -H``): the global rank of this node's first worker
    #: and the job's size; None: ``node_rank * nproc`` and ``nnodes * nproc``.
    rank_offset: int | None = None
    world: int | None = None


class Interrupted(Exception):
    """The workers were stopped because ``interrupt`` said so (a new rendezvous round)."""


class Stopped(Exception):
    """The agent got SIGTERM or SIGINT: the workers were stopped; the agent should leave, not
    restart them. ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True) \
    if sys.platform.startswith("linux") else None


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks the kernel to SIGKILL the child when the agent (the thread
    that forks, here the main thread) exits; closes the race with an agent that died before
    the call. Async-signal-safe enough: one syscall through an already loaded libc."""
    if _libc is None:
        return None
    prctl = _libc.prctl

    def pre() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(137)

    return pre


def node_ranks(spec: Spec, rdzv: Rendezvous) -> tuple[list[int], int]:
    """The global ranks of this node's workers, and the workers' world size."""
    first = spec.rank_offset if spec.rank_offset is not None else rdzv.node_rank * spec.nproc
    world = spec.world if spec.world is not None else spec.nnodes * spec.nproc
    return [first + lr for lr in range(spec.nproc)], world


def worker_env(spec: Spec, rdzv: Rendezvous, local_rank: int) -> dict[str, str]:
    """torchrun's variables (so scripts run unchanged) plus dtcomm's."""
    ranks, world = node_ranks(spec, rdzv)
    rank = ranks[local_rank]
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        GROUP_RANK=str(rdzv.node_rank),
        ROLE_RANK=str(rank),
        ROLE_NAME="default",
        ROLE_WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(spec.nproc),
        WORLD_SIZE=str(world),
        GROUP_WORLD_SIZE=str(spec.nnodes),
        MASTER_ADDR=rdzv.host,
        MASTER_PORT=str(rdzv.port),
        TORCHELASTIC_RUN_ID=spec.run_id,
        TORCHELASTIC_RESTART_COUNT=str(spec.restart),
        TORCHELASTIC_MAX_RESTARTS=str(spec.max_restarts),
        # env:// then connects every rank as a client of the rendezvous server (nobody binds).
        TORCHELASTIC_USE_AGENT_STORE="True",
        DTCOMM_RDZV_ENDPOINT=rdzv.endpoint,
        DTCOMM_RUN_ID=rdzv.namespace,
        DTCOMM_STORE_PREFIX=f"{rdzv.namespace}/dtcomm",
        PYTHONUNBUFFERED=env.get("PYTHONUNBUFFERED", "1"),
    )
    if rdzv.link_secret is not None:
        env["DTCOMM_LINK_SECRET"] = rdzv.link_secret
    if env.get("DTRUN_HOROVOD") == "1":
        # What horovodrun sets (its Gloo controller's rank variables).
        env.update(
            HOROVOD_RANK=str(rank),
            HOROVOD_SIZE=str(world),
            HOROVOD_LOCAL_RANK=str(local_rank),
            HOROVOD_LOCAL_SIZE=str(spec.nproc),
            HOROVOD_CROSS_RANK=str(rdzv.node_rank),
            HOROVOD_CROSS_SIZE=str(spec.nnodes),
            HOROVOD_CONTROLLER="gloo",
            HOROVOD_CPU_OPERATIONS="gloo",
        )
    if spec.nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"
    return env


def _pump(src: IO[bytes], dst: IO[str], prefix: str, lock: threading.Lock) -> None:
    for raw in iter(src.readline, b""):
        line = raw.decode(errors="replace")
        with lock:
            dst.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
            dst.flush()
    src.close()


def _signal_all(procs: list[subprocess.Popen[bytes]], sig: int) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)  # the worker's own session: it and its children
            except ProcessLookupError:
                pass


def run(spec: Spec, rdzv: Rendezvous, interrupt: Callable[[], str | None] | None = None) -> int:
    """Runs the node's workers; returns dtrun's exit code (the first failed worker's). With
    ``interrupt``, polled twice a second: when it returns a reason, the workers are stopped
    and :class:`Interrupted` is raised (unless one had failed first). SIGTERM/SIGINT to the
    agent stop the workers (the signal, then SIGKILL after a grace period) and raise
    :class:`Stopped`: a stop is not a worker failure."""
    lock = threading.Lock()
    procs: list[subprocess.Popen[bytes]] = []
    pumps: list[threading.Thread] = []
    ranks: list[int] = []
    for lr in range(spec.nproc):
        env = worker_env(spec, rdzv, lr)
        p = subprocess.Popen(
            spec.cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=_die_with_parent(os.getpid()),
        )
        rank = int(env["RANK"])
        print(f"[dtrun] worker pid {p.pid} rank {rank}", file=sys.stderr, flush=True)
        procs.append(p)
        ranks.append(rank)
        for src, dst in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
            assert src is not None
            t = threading.Thread(target=_pump, args=(src, dst, f"[rank{rank}]: ", lock),
                                 daemon=True)
            t.start()
            pumps.append(t)

    stopping: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        stopping.append(sig)
        _signal_all(procs, sig)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    failed: tuple[int, int] | None = None
    interrupted: str | None = None
    last_check = 0.0
    try:
        while any(p.poll() is None for p in procs):
            for rank, p in zip(ranks, procs, strict=True):
                rc = p.poll()
                if rc is not None and rc != 0 and failed is None:
                    failed = (rank, rc)
            if failed is None and interrupt is not None and time.monotonic() - last_check > 0.5:
                last_check = time.monotonic()
                interrupted = interrupt()
                if interrupted is not None:
                    break
            elif failed is None and spec.nnodes > 1 and time.monotonic() - last_check > 0.5:
                last_check = time.monotonic()
                other = rdzv.failed_elsewhere()
                if other is not None:
                    print(f"[dtrun] a worker on another node failed (rank, code: {other}); "
                          "stopping this node's workers", file=sys.stderr, flush=True)
                    failed = (-1, int(other.split()[1]) or 1)
            if failed is not None or stopping:
                break
            time.sleep(0.05)
        if failed is not None and failed[0] >= 0 and not stopping:
            rdzv.fail(*failed)
        if failed is not None or stopping or interrupted is not None:
            _signal_all(procs, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.05)
            _signal_all(procs, signal.SIGKILL)
        for p in procs:
            p.wait()
        for t in pumps:
            t.join(timeout=2.0)
        if stopping:
            raise Stopped(stopping[0])
        if interrupted is not None and failed is None:
            raise Interrupted(interrupted)
        if failed is None:
            for rank, p in zip(ranks, procs, strict=True):
                if p.returncode != 0:
                    failed = (rank, p.returncode)
                    break
        if failed is not None:
            rank, rc = failed
            code = rc if rc > 0 else 128 - rc  # killed by signal n: 128 + n, like a shell
            who = f"rank {rank}" if rank >= 0 else "a worker on another node"
            print(f"[dtrun] {who} exited with code {rc}; stopped the others; exiting {code}",
                  file=sys.stderr, flush=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return code
