"""Run by python/tests/test_waiting.py at world 2 (``dtgroup.run_group``, a 3 s
``DTCOMM_TIMEOUT``): rank 1 writes its PID to ``PIDFILE`` and SIGSTOPs itself; rank 0's
all_reduce waits for it until the deadline and prints ``ENDED <error type>: <message>`` (or
``NO TIMEOUT``) and ``WAIT cpu <ms of CPU> ms over <seconds> s``, then SIGKILLs rank 1."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np

import dtcomm

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
