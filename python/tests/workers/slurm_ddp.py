"""One task of ``srun -n N``: DDP over dtcomm with ``init_method="dtcomm://"`` (no
``MASTER_ADDR``, no ``RANK``: the ranks and the store come from Slurm's variables by dtcomm's
launch rules; ``import dtcomm`` after torch registers ``dtcomm://``). Trains a small model and prints its loss and a
checksum of the parameters, which must be the same on every rank."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

import dtcomm  # noqa: F401  (with torch loaded: registers init_method="dtcomm://")

backend = os.environ.get("BACKEND", "dtcomm")
dist.init_process_group(backend, init_method="dtcomm://")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(),
                                                          nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(100 + rank)
w_true = torch.linspace(-1, 1, 16)
first = last = 0.0
for step in range(40):
    x = torch.randn(64, 16, generator=gen)
    loss = ((model(x).squeeze(1) - x @ w_true) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    first = loss.item() if step == 0 else first
    last = loss.item()
checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
print(f"DDP rank={rank} world={world} local={os.environ.get('SLURM_LOCALID')} "
      f"first={first:.4f} last={last:.4f} checksum={checksum:.10f}", flush=True)
dist.destroy_process_group()
