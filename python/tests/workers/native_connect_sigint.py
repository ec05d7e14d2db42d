"""Run by python/tests/test_waiting.py: ``dtcomm.init()`` against a native endpoint where no
server answers (the QUIC handshake waits out its connect timeout); SIGINT to itself after
0.5 s; prints ``INTERRUPTED after <seconds> s: <message>``, ``FAILED after <seconds> s: <error>``
or ``NOT INTERRUPTED``."""

from __future__ import annotations

import os
import signal
import threading
import time

import dtcomm

# Ctrl-C's default handler even when this process started with SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
t = time.monotonic()
try:
    dtcomm.init(verbose=False)
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt as e:
    print(f"INTERRUPTED after {time.monotonic() - t:.2f} s: {e}", flush=True)
except Exception as e:  # noqa: BLE001 - the test reports what ended the wait
    print(f"FAILED after {time.monotonic() - t:.2f} s: {e!r}", flush=True)
