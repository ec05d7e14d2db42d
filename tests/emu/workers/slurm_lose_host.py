"""Run by tests/emu/test_slurm_hosts.py as one task per emulated host under ``srun``: after
one all_reduce rank 1 SIGKILLs itself; rank 0's next all_reduces fail and it exits with code
3 (dtcomm's error, naming the lost rank, goes to stderr as the exception's cause)."""

from __future__ import annotations

import os
import signal

import numpy as np

import dtcomm

dtcomm.init(verbose=False)
x = np.ones(1 << 16, dtype=np.float32)
dtcomm.all_reduce(x)
if dtcomm.rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    for _ in range(10_000):
        dtcomm.all_reduce(x)
except Exception as e:
    raise SystemExit(3) from e
