"""Run by python/tests/test_torch_backend.py at world 3 (``dtgroup.run_group``, torch's
env:// on the test's dt-rdzv): every torch.distributed collective through
``init_process_group("dtcomm")`` against the expected values (dtcomm loaded by torch through
the entry point: this script never imports it), subgroups, functional collectives, complex
tensors, a uint16 tensor refused naming the rank. Prints ``ok <rank>``."""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

dist.init_process_group("dtcomm", timeout=timedelta(seconds=60))
assert "dtcomm" in sys.modules  # loaded by torch through the entry point, not by this script
r, w = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "dtcomm" and w == 3
eq = torch.testing.assert_close


def ex(t: torch.Tensor, **k: torch.Tensor) -> None:
    torch.testing.assert_close(t, k.pop("want"), rtol=0, atol=0)


# all_reduce: every op on several dtypes, sync and async
for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int8, torch.uint8):
    base = [torch.arange(5).to(dtype) + p for p in range(w)]
    for op, want in [
        (dist.ReduceOp.SUM, sum(b.to(torch.float64) for b in base)),
        (dist.ReduceOp.PRODUCT, base[0].double() * base[1].double() * base[2].double()),
        (dist.ReduceOp.MIN, base[0].double()),
        (dist.ReduceOp.MAX, base[2].double()),
    ]:
        t = base[r].clone()
        dist.all_reduce(t, op=op)
        ex(t, want=want.to(dtype))
    t = base[r].clone()
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    avg = sum(b.to(torch.float64) for b in base) / w
    want = avg.to(dtype) if dtype.is_floating_point else torch.div(sum(b.to(torch.int64) for b in base), w, rounding_mode="floor").to(dtype)
    ex(t, want=want)
for op, fn in [(dist.ReduceOp.BAND, torch.bitwise_and), (dist.ReduceOp.BOR, torch.bitwise_or), (dist.ReduceOp.BXOR, torch.bitwise_xor)]:
    vals = [torch.tensor([5, 6, 7, 12]) * (p + 1) for p in range(w)]
    t = vals[r].clone()
    dist.all_reduce(t, op=op)
    ex(t, want=fn(fn(vals[0], vals[1]), vals[2]))

# future of an async op, and a big (ring) all_reduce on a view
t = torch.full((100_000,), float(r))
fut = dist.all_reduce(t, async_op=True).get_future()
out = fut.wait()
ex(out[0], want=torch.full((100_000,), 3.0))
m = torch.zeros(4, 10)
m[1] += r + 1
dist.all_reduce(m[1])
ex(m[1], want=torch.full((10,), 6.0))

# broadcast, reduce
t = torch.full((3,), float(r))
dist.broadcast(t, src=2)
ex(t, want=torch.full((3,), 2.0))
t = torch.full((3,), float(r + 1))
dist.reduce(t, dst=1, op=dist.ReduceOp.MAX)
ex(t, want=torch.full((3,), 3.0 if r == 1 else float(r + 1)))

# all_gather (list, uneven shapes), all_gather_into_tensor, objects
outs = [torch.empty(p + 1) for p in range(w)]
dist.all_gather(outs, torch.full((r + 1,), float(r)))
for p in range(w):
    ex(outs[p], want=torch.full((p + 1,), float(p)))
o = torch.empty(w * 2, dtype=torch.bfloat16)
dist.all_gather_into_tensor(o, torch.full((2,), float(r), dtype=torch.bfloat16))
ex(o, want=torch.tensor([0, 0, 1, 1, 2, 2], dtype=torch.bfloat16))
objs = [None] * w
dist.all_gather_object(objs, {"rank": r})
assert objs == [{"rank": p} for p in range(w)], objs
lst = [f"hello {r}"]
dist.broadcast_object_list(lst, src=1)
assert lst == ["hello 1"], lst

# reduce_scatter (list) and reduce_scatter_tensor
out = torch.empty(2)
dist.reduce_scatter(out, [torch.full((2,), float(r * 10 + p)) for p in range(w)])
ex(out, want=torch.full((2,), float(sum(q * 10 + r for q in range(w)))))
out = torch.empty(2)
dist.reduce_scatter_tensor(out, torch.arange(6, dtype=torch.float32) + r)
ex(out, want=torch.arange(6, dtype=torch.float32)[2 * r:2 * r + 2] * 3 + 3)

# all_to_all_single (equal and uneven), all_to_all (list)
inp = torch.arange(w * 2, dtype=torch.float32) + 100 * r
out = torch.empty(w * 2)
dist.all_to_all_single(out, inp)
ex(out, want=torch.cat([torch.arange(w * 2, dtype=torch.float32)[2 * r:2 * r + 2] + 100 * p for p in range(w)]))
isz = [r + q + 1 for q in range(w)]
osz = [p + r + 1 for p in range(w)]
inp = torch.full((sum(isz), 2), float(r))
out = torch.empty(sum(osz), 2)
dist.all_to_all_single(out, inp, osz, isz)
ex(out, want=torch.cat([torch.full((p + r + 1, 2), float(p)) for p in range(w)]))
outs = [torch.empty(2) for _ in range(w)]
dist.all_to_all(outs, [torch.full((2,), float(r * 10 + q)) for q in range(w)])
for p in range(w):
    ex(outs[p], want=torch.full((2,), float(p * 10 + r)))

# gather, scatter
g = [torch.empty(2) for _ in range(w)] if r == 0 else None
dist.gather(torch.full((2,), float(r)), g, dst=0)
if r == 0:
    for p in range(w):
        ex(g[p], want=torch.full((2,), float(p)))
out = torch.empty(2)
dist.scatter(out, [torch.full((2,), float(p * 3)) for p in range(w)] if r == 1 else None, src=1)
ex(out, want=torch.full((2,), float(r * 3)))

# barrier, send/recv, isend/irecv, batch_isend_irecv
dist.barrier()
nxt, prv = (r + 1) % w, (r - 1) % w
buf = torch.empty(4)
if r == 0:
    dist.send(torch.full((4,), 7.0), 1)
elif r == 1:
    dist.recv(buf, 0)
    ex(buf, want=torch.full((4,), 7.0))
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((3,), float(r)), nxt),
                               dist.P2POp(dist.irecv, buf[:3], prv)]) if r % 2 == 0 else \
       dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf[:3], prv),
                               dist.P2POp(dist.isend, torch.full((3,), float(r)), nxt)])
for q in reqs:
    q.wait()
ex(buf[:3], want=torch.full((3,), float(prv)))

# subgroups
sub = dist.new_group([0, 2])
if r in (0, 2):
    t = torch.full((2,), float(r + 1))
    dist.all_reduce(t, group=sub)
    ex(t, want=torch.full((2,), 4.0))
    assert dist.get_backend(sub) == "dtcomm"
pairs = dist.new_subgroups_by_enumeration([[0, 1], [2]])[0]
t = torch.ones(1)
dist.all_reduce(t, group=pairs)
ex(t, want=torch.full((1,), 2.0 if r < 2 else 1.0))

# functional collectives (DTensor / FSDP2 / compile path)
t = fc.all_reduce(torch.full((2,), float(r)), "sum", dist.group.WORLD)
ex(t, want=torch.full((2,), 3.0))
g = fc.all_gather_single(torch.full((2,), float(r)), 0, dist.group.WORLD)
ex(g, want=torch.tensor([0.0, 0, 1, 1, 2, 2]))
s = fc.reduce_scatter_single(torch.arange(6, dtype=torch.float32), "sum", 0, dist.group.WORLD)
ex(s, want=(torch.arange(6, dtype=torch.float32) * 3)[2 * r:2 * r + 2])

# complex tensors are carried as complex (test_dtypes_complex_bool.py checks more)
c = torch.full((2,), complex(r, 1))
dist.all_reduce(c)
ex(c, want=torch.full((2,), complex(3, 3)))

# bad input on this backend: errors name the rank
try:
    dist.all_reduce(torch.ones(2, dtype=torch.uint16))
except TypeError as e:
    assert f"rank {r}: all_reduce" in str(e) and "torch.uint16" in str(e), e
else:
    raise AssertionError("uint16 all_reduce succeeded")
dist.destroy_process_group()
print("ok", r)
