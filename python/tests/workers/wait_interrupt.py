"""Run by python/tests/test_waiting.py at world 2 (``dtgroup.run_group``): rank 0 blocks in an
all_reduce (``MODE=blocking``, or ``async`` then ``wait()``) that rank 1 joins only after 8 s,
and SIGINTs itself after 1 s. Rank 0 prints ``INTERRUPTED after <seconds> s`` (or ``NOT
INTERRUPTED``) and ``FAILED SINCE: <message>`` (or ``STILL USABLE``); rank 1 prints ``PEER TOLD
after <seconds> s <error type>: <message>`` (or ``PEER NOT TOLD``)."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np

import dtcomm

# Ctrl-C's default handler even when this process started with SIGINT ignored (a CI runner,
# nohup, a background job): Python installs it only where SIGINT was not ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

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
