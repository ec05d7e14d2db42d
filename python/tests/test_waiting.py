"""How dtcomm waits (docs/waiting.md), as behaviour: an idle communicator uses no CPU; a call
blocked on a peer that never comes answers Ctrl-C (a signal handler's KeyboardInterrupt) within
a second, fails the communicator and tells the peer; set-up answers it too (the workers are
started with SIGINT ignored, as under a CI runner or nohup, and set the handler they rely on). Timing bounds here
only separate the mechanism from the fallback it replaces (the peer arrives after 8 s, the
deadline is 60 s); benches/python/train_step.py measures speed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_idle_communicator_uses_no_cpu(tmp_path: Path, server: dtcomm.RdzvServer,
                                       transport: str) -> None:
    res = run_group(tmp_path, 2, WORKERS / "wait_idle.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TRANSPORT": transport})
    check(res)
    for r in res:
        m = re.search(r"IDLE cpu ([\d.]+) ms over ([\d.]+) s", r.out)
        assert m, r.out
        # Well under 1 % of a core over the sleep (the interpreter itself uses ~0).
        assert float(m.group(1)) < 0.01 * float(m.group(2)) * 1e3, r.out


@pytest.mark.parametrize("mode", ["blocking", "async"])
def test_blocked_call_answers_sigint_and_the_peer_hears(tmp_path: Path, server: dtcomm.RdzvServer,
                                                        mode: str) -> None:
    res = run_group(tmp_path, 2, WORKERS / "wait_interrupt.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60", "MODE": mode},
                    timeout=60, sigint_ignored=True)
    check(res)
    zero, one = res[0].out, res[1].out
    m = re.search(r"INTERRUPTED after ([\d.]+) s", zero)
    assert m, zero
    # The signal came 1 s into the wait; the peer only arrives at 8 s.
    assert float(m.group(1)) < 3.0, zero
    assert "FAILED SINCE" in zero and "interrupted" in zero, zero
    assert "PEER TOLD" in one and "interrupted" in one and "rank 0" in one, one
    told = re.search(r"PEER TOLD after ([\d.]+) s", one)
    assert told and float(told.group(1)) < 5.0, one       # not at the 60 s deadline


def test_setup_answers_sigint(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 1, WORKERS / "wait_setup_sigint.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_WORLD_SIZE": "2",
                     "WORLD_SIZE": "2", "DTCOMM_TIMEOUT": "60"}, timeout=60, sigint_ignored=True)
    check(res)
    m = re.search(r"INTERRUPTED after ([\d.]+) s", res[0].out)
    assert m and float(m.group(1)) < 3.0, res[0].out


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_waiting_for_a_stopped_rank_costs_no_cpu(tmp_path: Path, server: dtcomm.RdzvServer,
                                                 transport: str) -> None:
    res = run_group(tmp_path, 2, WORKERS / "wait_stopped.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TRANSPORT": transport,
                     # The call's deadline, not a link's dial (the set-up's), must be the one
                     # that passes: the two raced by microseconds when both were 3 s.
                     "DTCOMM_TIMEOUT": "3", "DTCOMM_SETUP_TIMEOUT": "60",
                     "PIDFILE": str(tmp_path / "pid1")}, timeout=60)
    zero = res[0].out
    assert res[0].code == 0, zero
    # By the deadline, naming rank 1: as a timeout in the call, or (when the call first needs
    # a link to rank 1, which links open on first use) as the link's handshake timing out.
    ended = re.search(r"ENDED (CommTimeoutError|SetupError): (.*)", zero)
    assert ended and ("ranks [1]" in ended.group(2) or "rank 1 " in ended.group(2)), zero
    m = re.search(r"WAIT cpu ([\d.]+) ms over ([\d.]+) s", zero)
    assert m, zero
    # The whole 3 s wait: no thread spins for it (a few % of one core at most, for the naps'
    # liveness checks).
    assert float(m.group(1)) < 0.05 * float(m.group(2)) * 1e3, zero


def test_the_native_connect_answers_sigint(tmp_path: Path) -> None:
    """Ctrl-C while the QUIC handshake waits for a server that does not answer (it used to
    wait out the whole connect timeout first)."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # closed again: nothing answers there
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DTCOMM_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_"))}
    env.update(DTCOMM_RDZV_ENDPOINT=f"127.0.0.1:{port}", DTCOMM_RDZV_FINGERPRINT="sha256:" + "0" * 64,
               DTCOMM_RDZV_TOKEN="t")
    p = subprocess.run(
        [sys.executable, str(WORKERS / "native_connect_sigint.py")], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    m = re.search(r"INTERRUPTED after ([\d.]+) s", p.stdout)
    assert m, (p.stdout, p.stderr)
    # The signal comes 0.5 s in; the connect timeout alone is 3 s.
    assert float(m.group(1)) < 2.0, p.stdout
