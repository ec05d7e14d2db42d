"""A small DDP training job: every worker trains the same MLP on its shard of a synthetic
regression task and prints the loss as it falls, then the measured all-reduce bandwidth.

The collectives run on dtcomm (`init_process_group("dtcomm")`, found through the
`torch.distributed.backends` entry point: no `import dtcomm` here); DEMO_BACKEND=gloo compares.
Launched by scripts/demo.sh with `dtrun --nproc-per-node 4` and with torchrun through
dt-rdzv serve, and by examples/slurm/train.sbatch with srun; the script is the same for all.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    backend = os.environ.get("DEMO_BACKEND", "dtcomm")
    # env:// (torchrun, dtrun) by default; under srun or mpirun, DEMO_INIT_METHOD=dtcomm://
    # takes the ranks and the store from the launcher (examples/slurm/train.sbatch).
    init_method = os.environ.get("DEMO_INIT_METHOD")
    if init_method is not None and init_method.startswith("dtcomm:"):
        import dtcomm  # noqa: F401  (registers dtcomm://)
    dist.init_process_group(backend, init_method=init_method, timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1234 + rank)
    w_true = torch.linspace(-1, 1, 32)
    steps = int(os.environ.get("DEMO_STEPS", "60"))
    for step in range(steps):
        x = torch.randn(64, 32, generator=gen)
        y = (x @ w_true).unsqueeze(1) + 0.01 * torch.randn(64, 1, generator=gen)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            avg = loss.detach().clone()
            dist.all_reduce(avg)
            if rank == 0:
                print(f"step {step:3d}  loss {avg.item() / world:.4f}", flush=True)
    buf = torch.ones(4 * 1024 * 1024)  # 16 MiB of float32
    dist.all_reduce(buf)
    dist.barrier()
    iters = 5
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    dt = (time.perf_counter() - t0) / iters
    busbw = buf.numel() * 4 / dt * 2 * (world - 1) / world / 1e9
    if rank == 0:
        print(f"all_reduce 16 MiB float32 over {backend}, world {world}: "
              f"{dt * 1e3:.1f} ms, busbw {busbw:.2f} GB/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
