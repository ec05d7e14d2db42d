"""Run by python/tests/test_mpirun_launch.py as 3 ranks under ``mpirun`` or
``mpiexec.hydra`` on one host, with no rendezvous endpoint: three ``hvd.init()`` /
``hvd.shutdown()`` cycles, each with an allreduce; prints ``cycle <c> rank <r> of <n> local
<local rank>/<local size> sum <list> rdzv from <where the endpoint came from>``."""

from __future__ import annotations

import dtcomm.horovod.torch as hvd
import torch

from dtcomm import _config

for cycle in range(3):
    hvd.init()
    s = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), op=hvd.Sum, name=f"s{cycle}")
    print(f"cycle {cycle} rank {hvd.rank()} of {hvd.size()} local {hvd.local_rank()}/"
          f"{hvd.local_size()} sum {s.tolist()} rdzv from {_config.resolve().endpoint.source}",
          flush=True)
    hvd.shutdown()
