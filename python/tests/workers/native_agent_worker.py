"""Run by python/tests/test_native_rdzv.py as the worker of ``torchrun --rdzv-backend=dtcomm``
and of ``dtrun --rdzv-backend native`` agents: prints ``LINKSECRET <first 16 characters of
DTCOMM_LINK_SECRET, or none>``, then all_reduce steps printing ``STEP <step> rank <r> world
<n> group <GROUP_RANK> restart <TORCHELASTIC_RESTART_COUNT>``; alone in the world it stops
after step 20 with ``FINISHED alone``."""

from __future__ import annotations

import os
import time

import numpy as np

import dtcomm

print("LINKSECRET", os.environ.get("DTCOMM_LINK_SECRET", "none")[:16], flush=True)
dtcomm.init(verbose=False)
r, w = dtcomm.rank(), dtcomm.size()
for step in range(100000):
    x = np.ones(1, dtype=np.int64)
    dtcomm.all_reduce(x)
    print(f"STEP {step} rank {r} world {int(x[0])} group {os.environ['GROUP_RANK']} "
          f"restart {os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
    if w == 1 and step >= 20:
        print("FINISHED alone", flush=True)
        break
    time.sleep(0.1)
dtcomm.shutdown()
