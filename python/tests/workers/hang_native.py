"""Run by python/tests/test_hang.py as each member of a native job that hangs on purpose.

``sleep:R``: three all_reduces, then rank R sleeps outside any call while the others wait in a
fourth all_reduce. ``cycle``: ranks 0 and 1 each wait to receive from the other. Prints
``READY <rank>`` before hanging; the test kills every member by PID."""

from __future__ import annotations

import sys
import time

import numpy as np

import dtcomm

mode = sys.argv[1]
dtcomm.init()
rank = dtcomm.rank()
x = np.ones(4, dtype=np.float32)
for _ in range(3):
    dtcomm.all_reduce(x)
print("READY", rank, flush=True)
if mode.startswith("sleep:"):
    if rank == int(mode.split(":", 1)[1]):
        time.sleep(600)
    else:
        dtcomm.all_reduce(x)
elif mode == "cycle":
    y = np.zeros(4, dtype=np.float32)
    dtcomm.recv(y, 1 - rank)
