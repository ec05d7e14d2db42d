"""Run by python/tests/test_bad_input.py in 2 processes (``dtgroup.run_group``): after one good
``all_reduce`` rank 1 exits with code 7 without a goodbye; rank 0's next async ``all_reduce``
must fail from ``wait()`` with ``PeerLostError``, printed as ``LOST: <message>``."""

from __future__ import annotations

import os
import time

import numpy as np

import dtcomm

dtcomm.init(verbose=False)
r = dtcomm.rank()
x = np.ones(1 << 20, np.float32)
dtcomm.all_reduce(x)
if r == 1:
    os._exit(7)            # injected failure: rank 1 dies without a goodbye
time.sleep(0.5)
w = dtcomm.all_reduce(x, async_op=True)
try:
    w.wait(timeout=60)
except dtcomm.PeerLostError as e:
    print("LOST:", e)
    assert w.is_completed() and isinstance(w.exception(), dtcomm.PeerLostError)
else:
    raise AssertionError("all_reduce with a dead peer succeeded")
