"""FSDP2, tensor parallel and distributed checkpointing on CPU at world 2 with dtcomm: losses
and gradients equal to gloo's (each backend in its own run of the same script, same seeds),
and a sharded model saved with ``torch.distributed.checkpoint`` loads back bit-identical.
Started as ``torch.multiprocessing.spawn`` users start them: torch's default threads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import dtcomm
from dtgroup import check, run_group, server, torch_env  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")

WORKER = """
import os
os.environ.pop("OMP_NUM_THREADS", None)          # torch's default threads, as under mp.spawn
import sys, torch, torch.distributed as dist
from torch import nn
backend, what, out = os.environ["BACKEND"], os.environ["WHAT"], os.environ["OUT"]
dist.init_process_group(backend)
r = dist.get_rank()

def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))

def data(step):
    # different data per rank, except under tensor parallelism (every rank sees the batch)
    g = torch.Generator().manual_seed(100 * step + (0 if what == "tp" else r))
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)

def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t

def train(model, steps=4):
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
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    m = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    result = train(m)
elif what == "dcp":
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.fsdp import fully_shard
    def sharded():
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
"""


@pytest.mark.parametrize("what", ["fsdp2", "tp", "dcp"])
def test_equal_to_gloo(tmp_path: Path, server: dtcomm.RdzvServer, what: str) -> None:
    outs = {}
    for backend in ("dtcomm", "gloo"):
        out = tmp_path / f"{backend}.pt"
        env = {**torch_env(server), "BACKEND": backend, "WHAT": what, "OUT": str(out),
               "CKPT": str(tmp_path / f"ckpt-{backend}")}
        res = run_group(tmp_path, 2, WORKER, env, timeout=240)
        if backend == "gloo" and all(f"done {what} gloo {r.rank}" in r.out for r in res):
            # The reference finished its work; gloo itself sometimes aborts at exit on these
            # VMs ("terminate called without an active exception", SIGABRT after
            # destroy_process_group; seen in 1 of ~11 benchmark runs too). Not what is tested.
            res = [r if r.code != -6 else dataclasses.replace(r, code=0) for r in res]
        check(res)
        outs[backend] = torch.load(out)
    (l_ours, g_ours, p_ours), (l_gloo, g_gloo, p_gloo) = outs["dtcomm"], outs["gloo"]
    for step, (a, b) in enumerate(zip(l_ours, l_gloo)):
        assert torch.equal(a, b), f"{what}: loss at step {step}: {a} vs {b}"
    for step, (ga, gb) in enumerate(zip(g_ours, g_gloo)):
        for i, (a, b) in enumerate(zip(ga, gb)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6,
                                       msg=lambda m: f"{what}: step {step} grad {i}: {m}")
    for a, b in zip(p_ours, p_gloo):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
