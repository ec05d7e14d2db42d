"""Run by python/tests/test_gpu.py at world 2 on one GPU with ``DTCOMM_CUDA=nccl``: an
all_reduce of a ``cuda:0`` tensor, which NCCL refuses for two ranks on one device; prints
``DEVICE: <message>`` for the ``dtcomm.DeviceError`` every rank gets."""

from __future__ import annotations

import torch
import torch.distributed as dist

import dtcomm

dist.init_process_group("dtcomm")
x = torch.ones(8, device="cuda:0")
try:
    dist.all_reduce(x)
except dtcomm.DeviceError as e:
    print("DEVICE:", e)
