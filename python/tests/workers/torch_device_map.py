"""Run by python/tests/test_torch_lists_strided.py at world 2: a fresh process whose first
group takes its backend from torch's default device map (``default_device_backend_map``) after
``import dtcomm``, with no ``is_backend_available`` call first (issue 44); then a
``new_group`` naming ``cpu:dtcomm,cuda:dtcomm``."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import dtcomm  # noqa: F401 - registers the backend in torch's tables

r = int(os.environ["RANK"])
dist.Backend.default_device_backend_map["cpu"] = "dtcomm"
dist.init_process_group()
t = torch.full((2,), float(r + 1))
dist.all_reduce(t)
assert t.tolist() == [3.0, 3.0], t
g = dist.new_group(backend="cpu:dtcomm,cuda:dtcomm")
dist.all_reduce(t, group=g)
assert t.tolist() == [6.0, 6.0], t
dist.destroy_process_group()
print("ok", r, flush=True)
sys.stdout.flush()
os._exit(0)
