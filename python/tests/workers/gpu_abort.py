"""Run by python/tests/test_gpu.py at world 2: after one all_reduce of a ``cuda:0`` tensor
rank 1 SIGKILLs itself; rank 0 goes on with up to 100 all_reduces and prints ``FAILED after
<seconds>s: <error type> <message>`` when dtcomm raises."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist

import dtcomm

dist.init_process_group("dtcomm")
r = dist.get_rank()
x = torch.ones(1 << 20, device="cuda:0")
dist.all_reduce(x)
torch.cuda.synchronize()
if r == 1:
    os.kill(os.getpid(), signal.SIGKILL)
t = time.monotonic()
try:
    for _ in range(100):
        dist.all_reduce(x)
    torch.cuda.synchronize()
except dtcomm.DtcommError as e:
    print("FAILED after %.1fs:" % (time.monotonic() - t), type(e).__name__, e)
