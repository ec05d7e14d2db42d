"""Run by tests/interop/test_etcd_ha.py under ``dtrun --rdzv-backend native`` (2 nodes x 2
workers): ``python etcd_ha_train.py STOP_FILE STEPS_PREFIX``. Trains (all_reduce steps) until
rank 0 sees STOP_FILE, appending ``<step> <time>`` per step to ``STEPS_PREFIX.<rank>``;
prints ``START <rank> <world>`` and, at the end, ``DONE <rank> <world> <steps>``."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import dtcomm

dtcomm.init()
rank, world = dtcomm.rank(), dtcomm.size()
print("START", rank, world, flush=True)
stop_file, steps_file = sys.argv[1], sys.argv[2] + f".{rank}"
x = np.zeros(2, dtype=np.int64)
step = 0
with open(steps_file, "w") as out:
    while True:
        x[0] = rank + 1
        x[1] = 1 if (rank == 0 and os.path.exists(stop_file)) else 0
        dtcomm.all_reduce(x, op=dtcomm.ReduceOp.MAX)
        out.write(f"{step} {time.time():.4f}\n")
        out.flush()
        step += 1
        if x[1]:
            break
        time.sleep(0.02)
print("DONE", rank, world, step, flush=True)
dtcomm.shutdown()
