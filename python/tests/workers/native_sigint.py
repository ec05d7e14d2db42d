"""Run by python/tests/test_native_rdzv.py as the only member of a 2-member native job:
SIGINT to itself after 1 s while ``dtcomm.init()`` waits for the round; prints
``INTERRUPTED after <seconds> s`` (or ``NOT INTERRUPTED``)."""

from __future__ import annotations

import os
import signal
import threading
import time

import dtcomm

# Ctrl-C's default handler even when this process started with SIGINT ignored (a CI runner,
# nohup, a background job): Python installs it only where SIGINT was not ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
t = time.monotonic()
try:
    dtcomm.init(verbose=False)                     # the other member never comes
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print(f"INTERRUPTED after {time.monotonic() - t:.2f} s", flush=True)
