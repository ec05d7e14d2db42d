"""Run by python/tests/test_torch_lists_strided.py at world 2 (``dtgroup.run_group``, torch's
env:// on the test's dt-rdzv): the same calls on a gloo group and on the dtcomm group in one
run, results compared exactly. Several tensors per rank in one call (all_reduce with each op,
broadcast with each rootTensor, all_gather, sparse all_reduce), strided inputs and outputs
(transposed and sliced views through every collective, written back into the view), and
bad input refused on both ranks naming the tensor and the rule, the group usable after.
Prints one line per part and ``ok <rank>``; exits with ``os._exit(0)`` (gloo's teardown
sometimes aborts, see torch_ddp_vs_gloo.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

dist.init_process_group("dtcomm", timeout=timedelta(seconds=60))
gloo = dist.new_group(backend="gloo")
ours = dist.group.WORLD
r, w = dist.get_rank(), dist.get_world_size()
assert w == 2 and dist.get_backend() == "dtcomm"
Op = dist.ReduceOp


def both(run: Callable[..., Any], what: str, lists: bool = False) -> None:
    """``run(group)`` on gloo and on dtcomm, each on fresh inputs; the results equal. With
    ``lists``, ``run(group, strided)``: gloo reads a list's tensors as raw memory (a strided
    member's elements land in the wrong places), so gloo gets them contiguous and dtcomm
    strided, with the same values."""
    if lists:
        theirs, mine = run(gloo, False), run(ours, True)
    else:
        theirs, mine = run(gloo), run(ours)
    flat_t, flat_m = _flat(theirs), _flat(mine)
    assert len(flat_t) == len(flat_m), (what, len(flat_t), len(flat_m))
    for i, (a, b) in enumerate(zip(flat_t, flat_m, strict=True)):
        a = a.to_dense() if a.is_sparse else a
        b = b.to_dense() if b.is_sparse else b
        assert a.dtype == b.dtype and torch.equal(a, b), f"rank {r}: {what}[{i}]: gloo {a} != {b}"


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for y in x for t in _flat(y)]


def data(seed: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 10 + r)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


# --- several tensors per rank in one call ---------------------------------------------------
for dtype in (torch.float32, torch.int64, torch.complex64, torch.bool):
    ops = [Op.SUM, Op.PRODUCT]
    if not dtype.is_complex:
        ops += [Op.MIN, Op.MAX]
    if not dtype.is_floating_point and not dtype.is_complex:
        ops += [Op.BAND, Op.BOR, Op.BXOR]
    for op in ops:
        for k in (2, 3):
            def allreduce(pg: Any, strided: bool, op: Any = op, k: int = k,
                          dtype: torch.dtype = dtype) -> Any:
                ts = [data(i, (5, 3), dtype) for i in range(k)]
                if strided:
                    ts[1] = ts[1].t().contiguous().t()  # one strided member of the list
                o = dist.AllreduceOptions()
                o.reduceOp = op
                pg.allreduce(ts, o).wait()
                return ts
            if dtype is torch.complex64 and op == Op.PRODUCT:
                continue  # gloo has no complex product of lists (view_as_real differs)
            both(allreduce, f"allreduce {k} {dtype} {op}", lists=True)
print("allreduce lists", r, flush=True)

for k in (1, 2, 3):
    for root in range(w):
        for pick in range(k):
            def broadcast(pg: Any, strided: bool, k: int = k, root: int = root,
                          pick: int = pick) -> Any:
                ts = [data(i + 5, (4, 2)) for i in range(k)]
                last = data(9, (2, 4)).t()
                ts.append(last if strided else last.contiguous())
                o = dist.BroadcastOptions()
                o.rootRank, o.rootTensor = root, pick
                pg.broadcast(ts, o).wait()
                return ts
            both(broadcast, f"broadcast k={k} root={root} rootTensor={pick}", lists=True)
print("broadcast lists", r, flush=True)

for k in (1, 2, 3):
    def allgather(pg: Any, strided: bool, k: int = k) -> Any:
        ins = [data(i + 20, (3, 4)) for i in range(k)]
        if strided:
            ins[0] = ins[0].t().contiguous().t()
        outs = [[torch.zeros(3, 4) for _ in range(w * k)] for _ in range(k)]
        pg.allgather(outs, ins).wait()
        return outs
    both(allgather, f"allgather k={k}", lists=True)
print("allgather lists", r, flush=True)


def sparse(pg: Any) -> Any:
    a = torch.sparse_coo_tensor([[0, 2, 5]], [1.0 + r, 2.0, 3.0], (6,))
    b = torch.sparse_coo_tensor([[1, 2]], [10.0, 20.0 + r], (6,))
    c = torch.sparse_coo_tensor([[5, 5]], [7.0, r], (6,))
    ts = [a, b, c]
    o = dist.AllreduceOptions()
    pg.allreduce(ts, o).wait()
    return [t.to_dense() for t in ts]


both(sparse, "sparse allreduce of 3")
print("sparse lists", r, flush=True)


# --- strided inputs and outputs, written back into the views --------------------------------
# gloo reads a view that is not one dense block as raw memory from its first element, so its
# reference runs on contiguous copies (`View.arg`) copied back into the views (`View.back`).
class View:
    def __init__(self, x: torch.Tensor, strided: bool) -> None:
        self.x = x
        self.arg = x if strided else x.contiguous()

    def back(self) -> None:
        if self.arg is not self.x:
            self.x.copy_(self.arg)


def base(seed: int) -> torch.Tensor:
    return data(seed, (4, 6))


def t_allreduce(pg: Any, strided: bool) -> Any:
    b = base(1)
    v = View(b.t()[1:5], strided)
    dist.all_reduce(v.arg, group=pg)
    v.back()
    return b


def t_broadcast(pg: Any, strided: bool) -> Any:
    b = base(2)
    v = View(b[:, ::2], strided)
    dist.broadcast(v.arg, src=1, group=pg)
    v.back()
    return b


def t_reduce(pg: Any, strided: bool) -> Any:
    b = base(3)
    v = View(b.t(), strided)
    dist.reduce(v.arg, dst=0, group=pg)
    v.back()
    return b if r == 0 else torch.zeros(1)


def t_allgather(pg: Any, strided: bool) -> Any:
    out = torch.zeros(4, w)
    vs = [View(c, strided) for c in out.unbind(1)]
    dist.all_gather([v.arg for v in vs], View(base(4).t()[2], strided).arg, group=pg)
    for v in vs:
        v.back()
    return out


def t_gather(pg: Any, strided: bool) -> Any:
    out = torch.zeros(4, w)
    vs = [View(c, strided) for c in out.unbind(1)]
    x = View(base(5)[:, 1], strided).arg
    dist.gather(x, [v.arg for v in vs] if r == 0 else None, dst=0, group=pg)
    for v in vs:
        v.back()
    return out


def t_scatter(pg: Any, strided: bool) -> Any:
    out = torch.zeros(6, 4)
    v = View(out.t()[1], strided)
    src = [View(base(6 + i).t()[:, 1], strided).arg for i in range(w)] if r == 1 else None
    dist.scatter(v.arg, src, src=1, group=pg)
    v.back()
    return out


def t_into_tensor(pg: Any, strided: bool) -> Any:
    out = torch.zeros(6, 2 * w)
    v = View(out.t(), strided)
    dist.all_gather_into_tensor(v.arg, View(base(8)[::2], strided).arg, group=pg)
    v.back()
    return out


def t_reduce_scatter(pg: Any, strided: bool) -> Any:
    out = torch.zeros(6, 2)
    v = View(out.t(), strided)
    dist.reduce_scatter_tensor(v.arg, View(data(10, (6, 4)).t(), strided).arg, group=pg)
    v.back()
    return out


def t_alltoall(pg: Any, strided: bool) -> Any:
    out = torch.zeros(4, 8)
    v = View(out.t(), strided)
    dist.all_to_all_single(v.arg, View(data(9, (4, 8)).t(), strided).arg, group=pg)
    v.back()
    return out


for name, fn in [("all_reduce", t_allreduce), ("broadcast", t_broadcast), ("reduce", t_reduce),
                 ("all_gather", t_allgather), ("gather", t_gather), ("scatter", t_scatter),
                 ("all_gather_into_tensor", t_into_tensor),
                 ("reduce_scatter_tensor", t_reduce_scatter),
                 ("all_to_all_single", t_alltoall)]:
    both(fn, f"strided {name}", lists=True)
print("strided", r, flush=True)


# --- bad input: refused on both ranks, naming the tensor and the rule; group usable after -----
def refused(run: Callable[[], Any], *words: str) -> None:
    try:
        run()
    except (ValueError, RuntimeError) as e:
        msg = str(e)
        assert f"rank {r}" in msg and all(x in msg for x in words), (words, msg)
    else:
        raise AssertionError(f"accepted: {words}")


def ar(ts: list[torch.Tensor], op: Any = Op.SUM) -> None:
    o = dist.AllreduceOptions()
    o.reduceOp = op
    ours.allreduce(ts, o).wait()


refused(lambda: ar([torch.ones(2), torch.ones(2, dtype=torch.float64)]), "tensors[1]", "dtype")
refused(lambda: ar([torch.ones(2), torch.ones(3)]), "tensors[1]", "shape")
refused(lambda: ar([torch.ones(2, dtype=torch.bool), torch.ones(2)], Op.PRODUCT),
        "tensors[1]", "dtype")
refused(lambda: ar([torch.ones(2, dtype=torch.complex64) for _ in range(2)], Op.MAX),
        "MAX", "complex")
refused(lambda: ar([torch.ones(2), torch.ones(2)], Op.BAND), "BAND", "bitwise")
refused(lambda: dist.all_reduce(torch.zeros(1).expand(3)), "tensors[0]", "overlaps itself")
shared = torch.zeros(4)
refused(lambda: dist.all_gather([shared[0:3], shared[1:4]], torch.ones(3)),
        "outputs[1]", "overlaps outputs[0]")
cols = torch.zeros(3, 3)
refused(lambda: dist.all_gather([cols[:, 0], cols[0, :]], torch.ones(3)),
        "outputs[1]", "overlaps outputs[0]")
refused(lambda: ar([torch.ones(2)] * 2), "tensors[1]", "overlaps tensors[0]")
refused(lambda: ours.reduce([torch.ones(2)] * 2, dist.ReduceOptions()).wait(),
        "reduce", "single-element")
t = torch.full((3,), float(r + 1))
dist.all_reduce(t)
assert t.tolist() == [3.0] * 3, t
print("refused", r, flush=True)

dist.destroy_process_group()
print("ok", r, flush=True)
sys.stdout.flush()
os._exit(0)
