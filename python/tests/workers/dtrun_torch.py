"""Run by python/tests/test_dtrun.py under ``dtrun``: an ordinary torch script,
``python dtrun_torch.py BACKEND``. ``init_process_group(BACKEND)`` from torchrun's environment
(env://), an ``all_reduce`` of each rank's number; prints ``BACKEND <backend> SUM <sum>``."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

dist.init_process_group(sys.argv[1])          # env:// as under torchrun; backend from argv
r = dist.get_rank()
t = torch.full((4,), float(r))
dist.all_reduce(t)
print("BACKEND", dist.get_backend(), "SUM", t[0].item())
dist.destroy_process_group()
