"""Run by python/tests/test_horovod_gloo_launch.py as each of 2 processes started the way
``horovodrun --gloo`` starts them (``HOROVOD_RANK``/``_SIZE``/... and
``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT``): ``hvd.init()``, an allreduce and an allgather,
asserted; prints ``ok <module name> <HOROVOD_RANK>``."""

from __future__ import annotations

import os

import torch

import dtcomm.horovod.torch as hvd

hvd.init()
assert (hvd.rank(), hvd.size()) == (int(os.environ["HOROVOD_RANK"]), 2)
t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
assert t.item() == 3.0, t
g = hvd.allgather(torch.tensor([hvd.rank()]))
assert g.tolist() == [0, 1], g
hvd.shutdown()
print("ok", hvd.__name__, os.environ["HOROVOD_RANK"], flush=True)
