"""How dtcomm waits (docs/waiting.md), as behaviour: an idle communicator uses no CPU; a call
blocked on a peer that never comes answers Ctrl-C (a signal handler's KeyboardInterrupt) within
a second, fails the communicator and tells the peer; set-up answers it too. Timing bounds here
only separate the mechanism from the fallback it replaces (the peer arrives after 8 s, the
deadline is 60 s); benches/python/train_step.py measures speed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dtcomm
from dtgroup import check, run_group, server  # noqa: F401 (fixture)

IDLE = """
import time, numpy as np, dtcomm
dtcomm.init(verbose=False)
x = np.ones(1 << 16, np.float32)
for _ in range(20):
    dtcomm.all_reduce(x)
dtcomm.all_reduce(x, async_op=True).wait()      # the progress thread exists from here on
t0, c0 = time.monotonic(), time.process_time()
time.sleep(2.0)
cpu, wall = time.process_time() - c0, time.monotonic() - t0
print(f"IDLE cpu {cpu * 1e3:.1f} ms over {wall:.2f} s", flush=True)
dtcomm.barrier()
dtcomm.shutdown()
"""


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_idle_communicator_uses_no_cpu(tmp_path: Path, server: dtcomm.RdzvServer,
                                       transport: str) -> None:
    res = run_group(tmp_path, 2, IDLE, {"DTCOMM_RDZV_ENDPOINT": server.endpoint,
                                        "DTCOMM_TRANSPORT": transport})
    check(res)
    for r in res:
        m = re.search(r"IDLE cpu ([\d.]+) ms over ([\d.]+) s", r.out)
        assert m, r.out
        # Well under 1 % of a core over the sleep (the interpreter itself uses ~0).
        assert float(m.group(1)) < 0.01 * float(m.group(2)) * 1e3, r.out


INTERRUPT = """
import os, signal, threading, time, numpy as np, dtcomm
dtcomm.init(verbose=False)
r = dtcomm.rank()
x = np.ones(4, np.float32)
dtcomm.all_reduce(x)                               # the links are up
mode = os.environ["MODE"]
if r == 0:
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    t = time.monotonic()
    try:
        if mode == "async":
            dtcomm.all_reduce(x, async_op=True).wait()
        else:
            dtcomm.all_reduce(x)
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        print(f"INTERRUPTED after {time.monotonic() - t:.2f} s", flush=True)
    try:
        dtcomm.all_reduce(x)
        print("STILL USABLE", flush=True)
    except dtcomm.DtcommError as e:
        print(f"FAILED SINCE: {e}", flush=True)
    time.sleep(9)                                  # alive: the peer must hear it, not see it die
else:
    time.sleep(8)
    try:
        # The first call may complete from what rank 0 had already posted before it was
        # interrupted; the next one needs rank 0 and must fail at once, saying why.
        for _ in range(2):
            t = time.monotonic()
            dtcomm.all_reduce(x)
        print("PEER NOT TOLD", flush=True)
    except dtcomm.DtcommError as e:
        print(f"PEER TOLD after {time.monotonic() - t:.2f} s {type(e).__name__}: {e}", flush=True)
"""


@pytest.mark.parametrize("mode", ["blocking", "async"])
def test_blocked_call_answers_sigint_and_the_peer_hears(tmp_path: Path, server: dtcomm.RdzvServer,
                                                        mode: str) -> None:
    res = run_group(tmp_path, 2, INTERRUPT, {"DTCOMM_RDZV_ENDPOINT": server.endpoint,
                                             "DTCOMM_TIMEOUT": "60", "MODE": mode}, timeout=60)
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


SETUP = """
import os, signal, threading, time, dtcomm
if int(os.environ["DTCOMM_RANK"]) == 0:
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    t = time.monotonic()
    try:
        dtcomm.init(verbose=False)                 # rank 1 never comes
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        print(f"INTERRUPTED after {time.monotonic() - t:.2f} s", flush=True)
"""


def test_setup_answers_sigint(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 1, SETUP, {"DTCOMM_RDZV_ENDPOINT": server.endpoint,
                                         "DTCOMM_WORLD_SIZE": "2", "WORLD_SIZE": "2",
                                         "DTCOMM_TIMEOUT": "60"}, timeout=60)
    check(res)
    m = re.search(r"INTERRUPTED after ([\d.]+) s", res[0].out)
    assert m and float(m.group(1)) < 3.0, res[0].out


STOPPED = """
import os, signal, time, numpy as np, dtcomm
from pathlib import Path
dtcomm.init(verbose=False)
r = dtcomm.rank()
x = np.ones(4, np.float32)
dtcomm.all_reduce(x)
pidfile = Path(os.environ["PIDFILE"])
if r == 1:
    pidfile.write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)            # a frozen host: no reset, no goodbye
    time.sleep(60)
else:
    while not pidfile.exists():
        time.sleep(0.01)
    time.sleep(0.2)
    t0, c0 = time.monotonic(), time.process_time()
    try:
        dtcomm.all_reduce(x)
        print("NO TIMEOUT", flush=True)
    except dtcomm.DtcommError as e:
        print(f"ENDED {type(e).__name__}: {e}", flush=True)
    cpu, wall = time.process_time() - c0, time.monotonic() - t0
    print(f"WAIT cpu {cpu * 1e3:.1f} ms over {wall:.2f} s", flush=True)
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
"""


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_waiting_for_a_stopped_rank_costs_no_cpu(tmp_path: Path, server: dtcomm.RdzvServer,
                                                 transport: str) -> None:
    res = run_group(tmp_path, 2, STOPPED, {"DTCOMM_RDZV_ENDPOINT": server.endpoint,
                                           "DTCOMM_TRANSPORT": transport, "DTCOMM_TIMEOUT": "3",
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
