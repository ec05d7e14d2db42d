"""Run by python/tests/test_horovod.py under ``dtrun --horovod -np 2``: Horovod's own torch
example, shortened and unmodified (it imports ``horovod.torch``; nothing here knows about
dtcomm). Trains a small model with ``DistributedOptimizer`` and fp16 compression; rank 0
prints ``HVD-OK size=<size> loss=<averaged final loss>``."""

from __future__ import annotations

# Horovod's own torch example, shortened: nothing here knows about dtcomm.
import os
import torch
import horovod.torch as hvd

hvd.init()
assert hvd.rank() == int(os.environ["HOROVOD_RANK"]) and hvd.size() == 2
assert hvd.local_size() == int(os.environ["HOROVOD_LOCAL_SIZE"]) == 2
torch.manual_seed(hvd.rank())
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.fp16, op=hvd.Average)
g = torch.Generator().manual_seed(100 + hvd.rank())
for step in range(20):
    x = torch.randn(32, 8, generator=g)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
avg = hvd.allreduce(loss.detach(), name="final_loss")
params = hvd.allgather_object([p.detach().sum().item() for p in model.parameters()])
assert params[0] == params[1], params
if hvd.rank() == 0:
    print(f"HVD-OK size={hvd.size()} loss={avg.item():.4f}", flush=True)
hvd.shutdown()
