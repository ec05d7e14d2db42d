"""Run by tests/emu/test_mpirun_hosts.py as 3 ranks under ``mpirun`` or ``mpiexec.hydra``
across two emulated hosts, with no rendezvous endpoint: three ``hvd.init()`` /
``hvd.shutdown()`` cycles with an allreduce and an allgather; prints ``cycle <c> rank <r> of
<n> local <l>/<ls> cross <c>/<cs> homogeneous <bool> sum <list> gather <list> rdzv from <where
the endpoint came from>``."""

from __future__ import annotations

import dtcomm.horovod.torch as hvd
import torch

from dtcomm import _config

for cycle in range(3):
    hvd.init()
    s = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), op=hvd.Sum, name=f"s{cycle}")
    g = hvd.allgather(torch.tensor([hvd.rank()] * (hvd.rank() + 1)), name=f"g{cycle}")
    print(f"cycle {cycle} rank {hvd.rank()} of {hvd.size()} local {hvd.local_rank()}/"
          f"{hvd.local_size()} cross {hvd.cross_rank()}/{hvd.cross_size()} "
          f"homogeneous {hvd.is_homogeneous()} sum {s.tolist()} gather {g.tolist()} "
          f"rdzv from {_config.resolve().endpoint.source}", flush=True)
    hvd.shutdown()
