"""Run by python/tests/test_torch_parallel.py at world 2 (``dtgroup.run_group``) once per
backend: ``init_process_group(BACKEND)`` and ``WHAT`` (environment): ``fsdp2`` (FSDP2),
``tp`` (tensor parallel) or ``dcp`` (an FSDP2 model saved with torch.distributed.checkpoint
to ``CKPT``, loaded back and compared, trained on). Rank 0 saves (losses, gradients,
parameters) with ``torch.save`` to ``OUT``; every rank prints ``done <what> <backend>
<rank>``. Runs with torch's default threads (``OMP_NUM_THREADS`` dropped before torch loads),
as under ``torch.multiprocessing.spawn``."""

from __future__ import annotations

import os

os.environ.pop("OMP_NUM_THREADS", None)          # torch's default threads, as under mp.spawn
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

backend, what, out = os.environ["BACKEND"], os.environ["WHAT"], os.environ["OUT"]
dist.init_process_group(backend)
r = dist.get_rank()


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    # different data per rank, except under tensor parallelism (every rank sees the batch)
    g = torch.Generator().manual_seed(100 * step + (0 if what == "tp" else r))
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def train(model: nn.Module, steps: int = 4
          ) -> tuple[list[torch.Tensor], list[list[torch.Tensor]], list[torch.Tensor]]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, grads = [], []
    for step in range(steps):
        x, y = data(step)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append([full(p.grad).clone() for p in model.parameters()])
        opt.step()
    return losses, grads, [full(p.detach()).clone() for p in model.parameters()]


if what == "fsdp2":
    from torch.distributed.fsdp import fully_shard
    m = mlp()
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(m)
    result = train(m)
elif what == "tp":
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    m = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    result = train(m)
elif what == "dcp":
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.fsdp import fully_shard
    def sharded() -> nn.Module:
        m = mlp()
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        return fully_shard(m)
    m = sharded()
    train(m, steps=2)
    ckpt = os.environ["CKPT"]
    dcp.save(get_model_state_dict(m), checkpoint_id=ckpt)
    fresh = sharded()
    sd = get_model_state_dict(fresh)
    dcp.load(sd, checkpoint_id=ckpt)
    set_model_state_dict(fresh, sd)
    for a, b in zip(m.parameters(), fresh.parameters()):
        assert torch.equal(full(a.detach()), full(b.detach())), "loaded parameters differ"
    result = train(fresh, steps=2)
else:
    sys.exit(f"unknown {what}")
if r == 0:
    torch.save(result, out)
print("done", what, backend, r, flush=True)
dist.destroy_process_group()
