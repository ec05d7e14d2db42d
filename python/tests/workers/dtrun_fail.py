"""Run by python/tests/test_dtrun.py under ``dtrun``: after a barrier rank 1 prints
``rank 1 fails`` and exits with code 3; the others sleep for 120 s, so dtrun must stop them."""

from __future__ import annotations

import sys
import time

import dtcomm

dtcomm.init(verbose=False)
dtcomm.barrier()
if dtcomm.rank() == 1:
    print("rank 1 fails", flush=True)
    sys.exit(3)
time.sleep(120)                 # the others would run long: dtrun must stop them
