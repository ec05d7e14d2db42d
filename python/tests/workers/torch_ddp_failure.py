"""Run by python/tests/test_torch_ddp.py at world 2 (``dtgroup.run_group``): DDP trains 3
steps, then rank 1 exits with code 5; rank 0 prints ``BACKWARD: <error type> <message>`` for
the failure DDP's backward re-raises, ``WAIT: <error type> <message>`` for ``Work.wait()`` and
``FUTURE: <error type> <message>`` for the future of a failed all_reduce."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("dtcomm", timeout=timedelta(seconds=60))
r = dist.get_rank()
torch.manual_seed(0)
ddp = DDP(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)))
x = torch.randn(4, 8)
for _ in range(3):                          # good steps (the 2nd rebuilds buckets)
    ddp(x).sum().backward()
t = torch.ones(4)
dist.all_reduce(t)
if r == 1:
    os._exit(5)                             # injected failure: rank 1 dies
time.sleep(0.5)
out = ddp(x).sum()                          # no buffers: the forward does not communicate
try:
    out.backward()
except Exception as e:                      # DDP re-raises the failed future from backward
    print("BACKWARD:", type(e).__name__, str(e).splitlines()[0][:300], flush=True)
else:
    raise AssertionError("backward with a dead peer succeeded")
work = dist.all_reduce(torch.ones(4), async_op=True)
try:
    work.wait(timeout=timedelta(seconds=30))
except Exception as e:
    print("WAIT:", type(e).__name__, str(e)[:300], flush=True)
else:
    raise AssertionError("wait() on a failed all_reduce returned")
fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
try:
    fut.wait()
except Exception as e:
    print("FUTURE:", type(e).__name__, str(e)[:200], flush=True)
else:
    raise AssertionError("the future of a failed all_reduce succeeded")
os._exit(0)
