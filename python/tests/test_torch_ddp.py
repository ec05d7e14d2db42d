"""DDP on dtcomm: gradients bit-identical to gloo for 5 steps on 2 ranks (default hook, one
bucket per parameter, a Python comm hook through get_future()); an injected failure surfaces
from Work.wait() and from DDP's backward."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import check, run_group, server, torch_env  # noqa: F401 (fixture)

pytest.importorskip("torch")

DDP_VS_GLOO = """
from datetime import timedelta
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

dist.init_process_group("dtcomm", timeout=timedelta(seconds=90))
gloo = dist.new_group(backend="gloo")
r = dist.get_rank()

def train(pg, variant):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
    model.register_buffer("stat", torch.full((3,), float(r)))      # differs per rank: DDP broadcasts it
    kw = {"bucket_cap_mb": 0.0001} if variant == "tiny-buckets" else {}
    ddp = DDP(model, process_group=pg, **kw)
    if variant == "future-hook":
        ddp.register_comm_hook(pg, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + r)                     # different data per rank
    grads = []
    for step in range(5):
        x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        grads.append([p.grad.clone() for p in ddp.parameters()])
        opt.step()
    return grads, [p.detach().clone() for p in ddp.parameters()], ddp.module.stat.clone()

for variant in ("default", "tiny-buckets", "future-hook"):
    g_ours, p_ours, b_ours = train(None, variant)        # default group: dtcomm
    g_gloo, p_gloo, b_gloo = train(gloo, variant)
    for step, (a, b) in enumerate(zip(g_ours, g_gloo)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), f"{variant}: step {step} param {i}: max diff {(x - y).abs().max()}"
    assert all(torch.equal(x, y) for x, y in zip(p_ours, p_gloo)), variant
    assert torch.equal(b_ours, b_gloo) and torch.equal(b_ours, torch.zeros(3)), (b_ours, b_gloo)
    # the gradients really were averaged across ranks: both ranks hold the same ones
    flat = torch.cat([g.reshape(-1) for g in g_ours[-1]])
    other = flat.clone()
    dist.broadcast(other, src=0)
    assert torch.equal(flat, other)
    print("bit-identical", variant, r, flush=True)
dist.destroy_process_group()
# Skip interpreter finalization: torch 2.15's gloo group (the reference here) sometimes aborts
# in its teardown ("terminate called without an active exception", pytorch/pytorch#190489 and
# the abandoned #179291) after every result is printed; 1 run in ~10 under parallel load.
import os, sys
sys.stdout.flush()
os._exit(0)
"""


def test_ddp_gradients_bit_identical_to_gloo(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, DDP_VS_GLOO, torch_env(server), timeout=240)
    check(res)
    for r in res:
        for v in ("default", "tiny-buckets", "future-hook"):
            assert f"bit-identical {v} {r.rank}" in r.out


FAILURE = """
import os, time
from datetime import timedelta
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("dtcomm", timeout=timedelta(seconds=60))
r = dist.get_rank()
torch.manual_seed(0)
ddp = DDP(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)))
x = torch.randn(4, 8)
for _ in range(3):                          # good steps (the 2nd rebuilds buckets)
    ddp(x).sum().backward()
t = torch.ones(4)
dist.all_reduce(t)
if r == 1:
    os._exit(5)                             # injected failure: rank 1 dies
time.sleep(0.5)
out = ddp(x).sum()                          # no buffers: the forward does not communicate
try:
    out.backward()
except Exception as e:                      # DDP re-raises the failed future from backward
    print("BACKWARD:", type(e).__name__, str(e).splitlines()[0][:300], flush=True)
else:
    raise AssertionError("backward with a dead peer succeeded")
work = dist.all_reduce(torch.ones(4), async_op=True)
try:
    work.wait(timeout=timedelta(seconds=30))
except Exception as e:
    print("WAIT:", type(e).__name__, str(e)[:300], flush=True)
else:
    raise AssertionError("wait() on a failed all_reduce returned")
fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
try:
    fut.wait()
except Exception as e:
    print("FUTURE:", type(e).__name__, str(e)[:200], flush=True)
else:
    raise AssertionError("the future of a failed all_reduce succeeded")
os._exit(0)
"""


def test_injected_failure_surfaces_from_wait_and_backward(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, FAILURE, {**torch_env(server), "DTCOMM_TIMEOUT": "30"}, timeout=180)
    assert res[1].code == 5, res[1].out
    out = res[0].out
    assert res[0].code == 0, out
    line = out.split("BACKWARD:")[1].splitlines()[0] if "BACKWARD:" in out else ""
    assert "rank 1 was lost during all_reduce" in line, out
    assert "WAIT: PeerLostError" in out or "WAIT: DtcommError" in out, out
    assert "FUTURE:" in out, out
