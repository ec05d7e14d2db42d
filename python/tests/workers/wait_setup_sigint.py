"""Run by python/tests/test_waiting.py as rank 0 of a world of 2 whose rank 1 never comes:
SIGINT to itself after 1 s while ``dtcomm.init()`` waits; prints ``INTERRUPTED after
<seconds> s`` (or ``NOT INTERRUPTED``)."""

from __future__ import annotations

import os
import signal
import threading
import time

import dtcomm

# Ctrl-C's default handler even when this process started with SIGINT ignored (a CI runner,
# nohup, a background job): Python installs it only where SIGINT was not ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

if int(os.environ["DTCOMM_RANK"]) == 0:
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    t = time.monotonic()
    try:
        dtcomm.init(verbose=False)                 # rank 1 never comes
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        print(f"INTERRUPTED after {time.monotonic() - t:.2f} s", flush=True)
