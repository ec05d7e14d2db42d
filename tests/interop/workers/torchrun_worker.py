"""A torchrun worker (tests/interop/test_torchrun.py and test_torchrun_etcd.py run it under
unmodified torchrun agents): gloo process group from torchrun's environment, one checked
all_reduce; prints
``WORKER rank=<r> world=<n> sum=<sum of rank + 1> restart=<TORCHELASTIC_RESTART_COUNT>``."""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.ones(3) * (rank + 1)
dist.all_reduce(x)
expected = world * (world + 1) / 2
assert torch.all(x == expected), (x, expected)
print(f"WORKER rank={rank} world={world} sum={x[0].item():.0f} "
      f"restart={os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
dist.destroy_process_group()
