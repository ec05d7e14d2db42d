"""The GPU test set: real CUDA tensors through ``init_process_group("dtcomm")``. Marked
``gpu``; every test skips (saying so) unless torch sees a CUDA device. ``scripts/test_gpu.sh``
runs this file and the CUDA benchmark on a GPU machine.

With one GPU, NCCL refuses two ranks on one device ("duplicate GPU"), so a single-GPU machine
tests NCCL at world 1 and host staging at world 2 and 3 (the ranks agree on staging because
they share the GPU); a machine with more GPUs also runs NCCL at world 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dtcomm
from dtgroup import check, run_group, server, torch_env  # noqa: F401 (fixture)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"),
]

COLLECTIVES = """
import os, sys, torch, torch.distributed as dist
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
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 1).to(dev), device_ids=[dev.index])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for step in range(30):
    torch.manual_seed(step * 17 + r)
    xb = torch.randn(64, 32, device=dev)
    loss = ((model(xb) - xb.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], losses
print("OK", r, w, losses[0], losses[-1])
dist.destroy_process_group()
"""


@pytest.mark.parametrize("world", [1, 2, 3])
def test_collectives_stream_ordering_and_ddp_on_cuda(tmp_path: Path, server: dtcomm.RdzvServer, world: int) -> None:
    gpus = torch.cuda.device_count()
    per_rank = {r: {"GPU": str(r % gpus)} for r in range(world)}
    res = run_group(tmp_path, world, COLLECTIVES, {**torch_env(server), "DTCOMM_TIMEOUT": "60"}, per_rank=per_rank)
    check(res)
    shared = world > gpus
    for r in res:
        assert f"OK {r.rank} {world}" in r.out, r.out
        if shared:
            assert "share a GPU" in r.out and "host staging" in r.out, r.out
        elif world > 1:
            assert "device buffers go by NCCL" in r.out, r.out


FORCED_NCCL_ON_ONE_GPU = """
import torch, torch.distributed as dist, dtcomm
dist.init_process_group("dtcomm")
x = torch.ones(8, device="cuda:0")
try:
    dist.all_reduce(x)
except dtcomm.DeviceError as e:
    print("DEVICE:", e)
"""


def test_nccl_forced_on_a_shared_gpu_fails_every_rank_saying_why(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    if torch.cuda.device_count() > 1:
        pytest.skip("this machine has a GPU per rank")
    res = run_group(
        tmp_path, 2, FORCED_NCCL_ON_ONE_GPU, {**torch_env(server), "DTCOMM_CUDA": "nccl", "DTCOMM_TIMEOUT": "30"}
    )
    check(res)
    for r in res:
        assert "DEVICE:" in r.out and "share a GPU, which NCCL refuses" in r.out, r.out


ABORT = """
import os, signal, time, torch, torch.distributed as dist, dtcomm
dist.init_process_group("dtcomm")
r = dist.get_rank()
x = torch.ones(1 << 20, device="cuda:0")
dist.all_reduce(x)
torch.cuda.synchronize()
if r == 1:
    os.kill(os.getpid(), signal.SIGKILL)
t = time.monotonic()
try:
    for _ in range(100):
        dist.all_reduce(x)
    torch.cuda.synchronize()
except dtcomm.DtcommError as e:
    print("FAILED after %.1fs:" % (time.monotonic() - t), type(e).__name__, e)
"""


def test_a_killed_rank_fails_the_survivor_fast(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, ABORT, {**torch_env(server), "DTCOMM_TIMEOUT": "60"})
    out = res[0].out
    assert "FAILED after" in out and "rank 1" in out, out
    secs = float(out.split("FAILED after ")[1].split("s:")[0])
    assert secs < 30, f"the survivor waited {secs}s: not told of the loss"
