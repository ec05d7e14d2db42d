"""Run by python/tests/test_gpu.py at world 1, 2 and 3 (``dtgroup.run_group``): CUDA tensors
through ``init_process_group("dtcomm")`` on the device ``GPU`` (environment, default 0).
Checks all_reduce, broadcast, all_gather_into_tensor and reduce_scatter_tensor, stream
ordering (a long kernel on a side stream before an async all_reduce) and DDP training on CUDA;
prints ``OK <rank> <world> <first loss> <last loss>``. dtcomm's own lines (NCCL or host
staging) come on the same output."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

dist.init_process_group("dtcomm")
r, w = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", int(os.environ.get("GPU", "0")))
torch.cuda.set_device(dev)
x = torch.full((1 << 20,), float(r + 1), device=dev)
dist.all_reduce(x)
assert torch.all(x == w * (w + 1) / 2).item(), x[:4]
b = torch.full((1000,), float(r), device=dev)
dist.broadcast(b, src=w - 1)
assert torch.all(b == w - 1).item()
g = torch.empty(w * 3, device=dev)
dist.all_gather_into_tensor(g, torch.full((3,), float(r), device=dev))
assert g.tolist() == [float(p) for p in range(w) for _ in range(3)], g
rs = torch.empty(2, device=dev)
dist.reduce_scatter_tensor(rs, torch.arange(2.0 * w, device=dev))
assert rs.tolist() == [w * (2.0 * r), w * (2.0 * r + 1)], rs
# stream ordering: a long kernel on a side stream, then the fill, then an async all_reduce
s = torch.cuda.Stream(device=dev)
with torch.cuda.stream(s):
    y = torch.empty(4096, device=dev)
    torch.cuda._sleep(50_000_000)
    y.fill_(r + 1.0)
    work = dist.all_reduce(y, async_op=True)
    work.wait()
    z = y * 2
s.synchronize()
assert torch.all(z == w * (w + 1)).item(), z[:4]
# DDP on CUDA with init_process_group("dtcomm") alone
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 1).to(dev),
                                                  device_ids=[dev.index])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for step in range(30):
    torch.manual_seed(step * 17 + r)
    xb = torch.randn(64, 32, device=dev)
    loss = ((model(xb) - xb.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], losses
print("OK", r, w, losses[0], losses[-1])
dist.destroy_process_group()
