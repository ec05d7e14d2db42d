"""Run by python/tests/test_waiting.py at world 2 (``dtgroup.run_group``, ``DTCOMM_TRANSPORT``
shm or tcp): after some all_reduces (the progress thread started) it sleeps 2 s and prints
``IDLE cpu <ms of CPU> ms over <seconds> s``, the CPU the idle communicator used."""

from __future__ import annotations

import time

import numpy as np

import dtcomm

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
