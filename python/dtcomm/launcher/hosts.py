"""``dtrun -H host:slots,... [-np N]``: horovodrun's way of placing a job. The processes fill the
hosts' slots in order (``-np`` defaults to every slot); this ``dtrun`` starts one ``dtrun`` per
host that got processes — on this machine directly, on the others through ``ssh`` (``DTRUN_SSH``,
default ``ssh -o BatchMode=yes``), in the same directory with the same ``DTCOMM_*``,
``HOROVOD_*``, ``DTRUN_*`` and ``PYTHONPATH`` variables — and the per-host ``dtrun`` s meet through
the store the first host's one serves (``--rdzv-host``, ``DTRUN_HOSTS_PORT`` or 29400). Ranks are
numbered host by host, so hosts may hold different numbers of processes. Waits for every host;
when one fails, stops the others and exits with its code."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from .._dtcomm import STORE_PORT

#: Variables a remote ``dtrun`` gets from this one (besides its command line).
_FORWARD = ("DTCOMM_", "DTRUN_", "HOROVOD_", "DTRDZV_", "NCCL_", "GLOO_", "OMP_NUM_THREADS",
            "PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES")
#: The placement this dtrun decided, which every host's dtrun gets on its command line instead.
_PLACEMENT = ("DTRUN_HOSTS", "DTRUN_NNODES", "DTRUN_RDZV_ENDPOINT", "DTRUN_NPROC_PER_NODE",
              "DTRUN_RDZV_ID", "DTRUN_RDZV_BACKEND")


def child_env() -> dict[str, str]:
    """This process's environment without the placement variables."""
    return {k: v for k, v in os.environ.items() if k not in _PLACEMENT}


@dataclass(frozen=True)
class Host:
    """One ``-H`` entry and what it got."""

    name: str
    slots: int
    #: Processes placed on it.
    procs: int = 0
    #: Global rank of its first process.
    first: int = 0


def parse(text: str) -> list[tuple[str, int]]:
    """``a:2,b:4,c`` (slots default to 1) as [(host, slots)]; raises ``SystemExit`` on bad
    input, naming the entry."""
    out: list[tuple[str, int]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        if ":" in entry:
            name, _, slots = entry.rpartition(":")
        else:
            name, slots = entry, "1"
        try:
            n = int(slots)
        except ValueError:
            raise SystemExit(f"dtrun: -H entry {entry!r}: slots {slots!r} is not a number") \
                from None
        if not name or n < 1:
            raise SystemExit(f"dtrun: -H entry {entry!r}: needs a host and at least one slot")
        if any(h == name for h, _ in out):
            raise SystemExit(f"dtrun: -H lists host {name!r} twice")
        out.append((name, n))
    if not out:
        raise SystemExit(f"dtrun: -H {text!r} names no host")
    return out


def place(hosts: list[tuple[str, int]], np: int | None) -> list[Host]:
    """Fills the hosts' slots in order with ``np`` processes (default: every slot); the hosts
    that got none are left out."""
    total = sum(s for _, s in hosts)
    n = total if np is None else np
    if n < 1:
        raise SystemExit("dtrun: -np must be at least 1")
    if n > total:
        raise SystemExit(f"dtrun: -np {n} is more than the {total} slots of -H "
                         f"({', '.join(f'{h}:{s}' for h, s in hosts)})")
    out, first = [], 0
    for name, slots in hosts:
        k = min(slots, n - first)
        if k == 0:
            break
        out.append(Host(name, slots, k, first))
        first += k
    return out


def is_local(name: str) -> bool:
    """Whether ``name`` is this machine (no ssh needed)."""
    if name in ("localhost", "127.0.0.1", "::1"):
        return True
    mine = {socket.gethostname(), socket.getfqdn()}
    return name in mine or name.split(".")[0] == socket.gethostname().split(".")[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def commands(placed: list[Host], child_args: list[str], run_id: str, port: int) -> list[list[str]]:
    """Each host's ``dtrun`` command line (local ones as argv, remote ones through ssh)."""
    first = placed[0].name
    if all(is_local(h.name) for h in placed):
        store_host = "127.0.0.1"
    elif is_local(first):
        # Named as this machine (`localhost` would send the other hosts to themselves).
        store_host = socket.getfqdn()
    else:
        store_host = first
    endpoint = f"{store_host}:{port}"
    world = placed[-1].first + placed[-1].procs
    ssh = shlex.split(os.environ.get("DTRUN_SSH", "ssh -o BatchMode=yes"))
    env = {k: v for k, v in child_env().items() if k.startswith(_FORWARD)}
    out = []
    for i, h in enumerate(placed):
        argv = [sys.executable, "-m", "dtcomm", "--nnodes", str(len(placed)), "--node-rank",
                str(i), "--nproc-per-node", str(h.procs), "--rank-offset", str(h.first),
                "--world-size", str(world), "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
                "--rdzv-backend", "store", *(["--rdzv-host"] if i == 0 else []), *child_args]
        if is_local(h.name):
            out.append(argv)
        else:
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
            remote = f"cd {shlex.quote(os.getcwd())} && env {exports} " + shlex.join(argv)
            out.append([*ssh, h.name, remote])
    return out


def run(hosts_text: str, np: int | None, child_args: list[str], run_id: str | None) -> int:
    """Places the job, starts every host's ``dtrun``, waits for all of them."""
    placed = place(parse(hosts_text), np)
    port = int(os.environ.get("DTRUN_HOSTS_PORT", "0")) or (
        _free_port() if is_local(placed[0].name) else STORE_PORT)
    run_id = run_id or f"dtrun-{uuid.uuid4().hex[:8]}"
    cmds = commands(placed, child_args, run_id, port)
    layout = ", ".join(f"{h.name}: ranks {h.first}..{h.first + h.procs - 1}" for h in placed)
    print(f"[dtrun] -H: {layout}; store on {placed[0].name}:{port}", file=sys.stderr,
          flush=True)
    # The others' store clients retry until the first host's store is up (their deadline is
    # --rdzv-timeout).
    procs = [subprocess.Popen(c, start_new_session=True, env=child_env()) for c in cmds]
    failed: list[tuple[str, int]] = []
    done = threading.Event()

    def stop_all(sig: int = signal.SIGTERM) -> None:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    def on_signal(sig: int, _frame: object) -> None:
        stop_all(sig)
        done.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not done.is_set():
            codes = [p.poll() for p in procs]
            for h, c in zip(placed, codes, strict=True):
                if c not in (None, 0) and all(h.name != f for f, _ in failed):
                    failed.append((h.name, c))
            if failed:
                print(f"[dtrun] -H: host {failed[0][0]} exited {failed[0][1]}; stopping the "
                      f"others", file=sys.stderr, flush=True)
                stop_all()
                break
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.1)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        return failed[0][1] if failed else 1
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
