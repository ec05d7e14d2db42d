"""Run by python/tests/test_dtypes_complex_bool.py at world 2 (``dtgroup.run_group``, torch's
env:// on the test's dt-rdzv): complex64, complex128 and bool tensors through every kind of
call of ``init_process_group("dtcomm")`` (all_reduce with each op the dtype has, broadcast,
send/recv, all_gather, reduce), a complex MAX and a bool AVG refused on both ranks naming the
rank, op and dtype (the group stays usable: no hang), bitwise ``reduce`` of integer and bool
tensors, and DDP over a model with a complex parameter against gloo, bit for bit. Prints one
line per part and ``ok <rank>``; exits with ``os._exit(0)`` (gloo's teardown sometimes
aborts, see torch_ddp_vs_gloo.py)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("dtcomm", timeout=timedelta(seconds=60))
gloo = dist.new_group(backend="gloo")
r, w = dist.get_rank(), dist.get_world_size()
assert w == 2 and dist.get_backend() == "dtcomm"
Op = dist.ReduceOp


def direct_all_reduce(t: torch.Tensor, op: dist.ReduceOp) -> None:
    """``all_reduce`` as DDP's reducer and torch's C++ call it: the tensor as it is."""
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    dist.group.WORLD.allreduce([t], opts).wait()


def same(t: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert t.dtype == want.dtype, (what, t.dtype, want.dtype)
    assert torch.equal(t, want), f"rank {r}: {what}: {t} != {want}"


# --- complex: every call, against the values and against gloo -------------------------------
for dt in (torch.complex64, torch.complex128):
    vals = [torch.tensor([1 + 2j, 3 - 1j, 0.5j, -2.25 + 0j, 7 - 3j], dtype=dt) * (p + 1) + p
            for p in range(w)]
    mine = vals[r]
    # dist.all_reduce hands torch's real view of a complex tensor to the backend (and refuses
    # PRODUCT itself); ProcessGroup.allreduce hands the complex tensor itself
    for op, want in [(Op.SUM, vals[0] + vals[1]), (Op.PRODUCT, vals[0] * vals[1]),
                     (Op.AVG, (vals[0] + vals[1]) / 2)]:
        t = mine.clone()
        direct_all_reduce(t, op)
        same(t, want, f"ProcessGroup.allreduce {op} {dt}")
        if op != Op.PRODUCT:
            t = mine.clone()
            dist.all_reduce(t, op=op)
            same(t, want, f"all_reduce {op} {dt}")
    t, g = mine.clone(), mine.clone()
    dist.all_reduce(t)
    dist.all_reduce(g, group=gloo)
    same(t, g, f"all_reduce SUM {dt} against gloo")
    t = mine.clone()
    dist.broadcast(t, src=1)
    same(t, vals[1], f"broadcast {dt}")
    t = mine.clone()
    bopts = dist.BroadcastOptions()
    bopts.rootRank = 1
    dist.group.WORLD.broadcast([t], bopts).wait()  # as DDP's first broadcast: complex itself
    same(t, vals[1], f"ProcessGroup.broadcast {dt}")
    outs = [torch.empty_like(mine) for _ in range(w)]
    dist.all_gather(outs, mine)
    for p in range(w):
        same(outs[p], vals[p], f"all_gather {dt} from {p}")
    flat = torch.empty(w * mine.numel(), dtype=dt)
    dist.all_gather_into_tensor(flat, mine)
    same(flat, torch.cat(vals), f"all_gather_into_tensor {dt}")
    if r == 0:
        dist.send(mine, dst=1)
    else:
        got = torch.zeros_like(mine)
        dist.recv(got, src=0)
        same(got, vals[0], f"recv {dt}")
    t = mine.clone()
    dist.reduce(t, dst=0, op=Op.PRODUCT)
    same(t, vals[0] * vals[1] if r == 0 else mine, f"reduce PRODUCT {dt}")
    # a big one: the ring splits it into chunks, never inside an element
    big = torch.arange(300_001, dtype=torch.float64).to(dt) * (1 + 1j) * (r + 1)
    dist.all_reduce(big)
    same(big, torch.arange(300_001, dtype=torch.float64).to(dt) * (1 + 1j) * 3, f"big {dt}")
    print("complex", dt, r, flush=True)

# --- complex MAX and bool AVG are refused on every rank, before anything is sent -------------
for t, op, words in [(torch.ones(3, dtype=torch.complex64), Op.MAX, ("max", "complex64")),
                     (torch.ones(3, dtype=torch.complex128), Op.MIN, ("min", "complex128")),
                     (torch.ones(3, dtype=torch.bool), Op.AVG, ("avg", "bool")),
                     (torch.ones(3), Op.BAND, ("band", "float"))]:
    for call, run in [("all_reduce", lambda t=t, op=op: direct_all_reduce(t, op)),
                      ("reduce", lambda t=t, op=op: dist.reduce(t, dst=1, op=op))]:
        try:
            run()
        except (ValueError, RuntimeError) as e:
            msg = str(e)
            assert f"rank {r}" in msg and call in msg and all(x in msg for x in words), msg
        else:
            raise AssertionError(f"{call} {op} of {t.dtype} succeeded")
t = torch.full((4,), float(r + 1))
dist.all_reduce(t)  # the group is still usable on both ranks
same(t, torch.full((4,), 3.0), "all_reduce after the refusals")
print("refused", r, flush=True)

# --- bool: logical ops, broadcast, all_gather, send/recv ------------------------------------
masks = [torch.tensor([True, False, True, False, True]),
         torch.tensor([True, True, False, False, True])]
a, b = masks
for op, want in [(Op.SUM, a | b), (Op.MAX, a | b), (Op.BOR, a | b), (Op.PRODUCT, a & b),
                 (Op.MIN, a & b), (Op.BAND, a & b), (Op.BXOR, a ^ b)]:
    t = masks[r].clone()
    dist.all_reduce(t, op=op)
    same(t, want, f"all_reduce {op} bool")
t = masks[r].clone()
dist.broadcast(t, src=1)
same(t, b, "broadcast bool")
outs = [torch.empty_like(a) for _ in range(w)]
dist.all_gather(outs, masks[r])
same(outs[0], a, "all_gather bool 0")
same(outs[1], b, "all_gather bool 1")
if r == 1:
    dist.send(b, dst=0)
else:
    got = torch.zeros_like(a)
    dist.recv(got, src=1)
    same(got, b, "recv bool")
print("bool", r, flush=True)

# --- bitwise reduce: integers and bool, to either root --------------------------------------
for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool):
    ints = [torch.tensor([0b1100, 0b1010, 5, 0, 7]), torch.tensor([0b1010, 0b0110, 3, 1, 7])]
    vals = [(x != 0) if dt is torch.bool else x.to(dt) for x in ints]
    for op, fn in [(Op.BAND, torch.bitwise_and), (Op.BOR, torch.bitwise_or),
                   (Op.BXOR, torch.bitwise_xor)]:
        for root in range(w):
            t = vals[r].clone()
            dist.reduce(t, dst=root, op=op)
            same(t, fn(vals[0], vals[1]) if r == root else vals[r], f"reduce {op} {dt} to {root}")
print("bitwise reduce", r, flush=True)


# --- DDP over a model with a complex parameter, against gloo -------------------------------
class WithComplex(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.c = nn.Parameter(torch.randn(6, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + (x.to(torch.complex64) * self.c).real


def train(pg: dist.ProcessGroup | None) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = WithComplex()
    rank0 = model.c.detach().clone()  # rank 0's parameter (the same seed everywhere)
    with torch.no_grad():
        model.c.add_(complex(r, -r))  # differs per rank: DDP's first broadcast evens it out
    ddp = DDP(model, process_group=pg)
    same(ddp.module.c.detach(), rank0, "DDP's first broadcast of the complex parameter")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(10 + r)
    for _ in range(4):
        x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 6, generator=gen)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in ddp.parameters()]


ours, theirs = train(None), train(gloo)
for i, (x, y) in enumerate(zip(ours, theirs, strict=True)):
    same(x, y, f"DDP parameter {i} against gloo")
other = ours[-1].clone()
dist.broadcast(other, src=0)
same(ours[-1], other, "DDP complex parameter equal on both ranks")
print("ddp-identical", r, flush=True)

dist.destroy_process_group()
print("ok", r, flush=True)
sys.stdout.flush()
os._exit(0)
