"""Run by python/tests/test_horovod_autograd.py at world 2 and 3 (``dtgroup.run_group``):
``dtcomm.horovod.torch``'s collectives are differentiable as Horovod's are. Every rank weights
the result differently and each input gradient is asserted equal to the value Horovod's
backward definition gives (allreduce with each op and scale factors, allgather, broadcast,
alltoall, reducescatter, grouped variants, a chain). Prints ``ok <rank>`` at the end."""

from __future__ import annotations

import torch

import dtcomm.horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
tri = n * (n + 1) / 2          # sum of (k + 1) over the ranks
avg = (n + 1) / 2              # mean of (k + 1) over the ranks
ar = torch.tensor([1.0, 2.0, 3.0])


def leaf(t: torch.Tensor) -> torch.Tensor:
    return t.clone().requires_grad_(True)


# Without requires_grad: a plain result.
assert hvd.allreduce(torch.ones(2)).grad_fn is None

# allreduce, Sum: backward is a Sum allreduce of each rank's weights (k + 1) * ar.
x = leaf(torch.full((3,), float(r + 1)))
y = hvd.allreduce(x, op=hvd.Sum, name="ar.sum")
assert y.grad_fn is not None and torch.equal(y.detach(), torch.full((3,), tri))
(y * (r + 1) * ar).sum().backward()
assert torch.equal(x.grad, tri * ar), x.grad

# allreduce, Average (default): the weights averaged.
x = leaf(torch.full((3,), float(r + 1)))
(hvd.allreduce(x) * (r + 1) * ar).sum().backward()
assert torch.allclose(x.grad, avg * ar), x.grad

# Scale factors apply to the gradient too: Sum with prescale 2 and postscale 0.25.
x = leaf(torch.full((3,), float(r + 1)))
y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
assert torch.allclose(y.detach(), torch.full((3,), 0.5 * tri))
(y * (r + 1) * ar).sum().backward()
assert torch.allclose(x.grad, 0.5 * tri * ar), x.grad

# Max: Horovod's backward is a Max allreduce of the gradients.
x = leaf(torch.full((3,), float(r)))
(hvd.allreduce(x, op=hvd.Max) * (r + 1) * ar).sum().backward()
assert torch.equal(x.grad, n * ar), x.grad

# fp16 compression: the gradient comes back in the input's dtype.
x = leaf(torch.full((3,), float(r + 1)))
y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
assert y.dtype == torch.float32
(y * (r + 1) * ar).sum().backward()
assert x.grad.dtype == torch.float32 and torch.equal(x.grad, tri * ar), x.grad

# allgather: rank k gives k + 1 rows; the gradient is the average over ranks of the weights
# (k + 1) * c, narrowed to this rank's rows.
rows = n * (n + 1) // 2
c = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2)
x = leaf(torch.full((r + 1, 2), float(r)))
y = hvd.allgather(x, name="ag")
assert y.shape == (rows, 2)
(y * (r + 1) * c).sum().backward()
off = r * (r + 1) // 2
assert torch.allclose(x.grad, avg * c[off:off + r + 1]), (x.grad, off)

# allgather of a 0-d tensor: the gradient keeps its shape.
s = leaf(torch.tensor(float(r)))
(hvd.allgather(s) * torch.arange(1, n + 1, dtype=torch.float32)).sum().backward()
assert s.grad.shape == () and torch.allclose(s.grad, torch.tensor(float(r + 1))), s.grad

# broadcast from the last rank: gradient averaged, zero except on the root.
x = leaf(torch.full((4,), float(r)))
y = hvd.broadcast(x, root_rank=n - 1, name="bc")
assert torch.equal(y.detach(), torch.full((4,), float(n - 1)))
w4 = torch.arange(4, dtype=torch.float32)
(y * (r + 1) * w4).sum().backward()
want = avg * w4 if r == n - 1 else torch.zeros(4)
assert torch.allclose(x.grad, want), x.grad

# alltoall with splits: rank r sends p + 1 rows to rank p. Rank p weights the rows it got from
# rank q by 10 p + q, so the rows rank r sent to p come back with gradient 10 p + r.
send = torch.tensor([p + 1 for p in range(n)], dtype=torch.int32)
x = leaf(torch.cat([torch.full((p + 1, 2), float(10 * r + p)) for p in range(n)]))
out, got = hvd.alltoall(x, splits=send, name="a2a")
assert got.tolist() == [r + 1] * n and not got.requires_grad
weights = torch.cat([torch.full((r + 1, 2), float(10 * r + q)) for q in range(n)])
(out * weights).sum().backward()
want = torch.cat([torch.full((p + 1, 2), float(10 * p + r)) for p in range(n)])
assert torch.equal(x.grad, want), (x.grad, want)

# alltoall, equal split: rank p weights everything by p + 1.
x = leaf(torch.arange(2 * n, dtype=torch.float32) + 100 * r)
out = hvd.alltoall(x)
assert isinstance(out, torch.Tensor)
(out * (r + 1)).sum().backward()
assert x.grad.tolist() == [float(p + 1) for p in range(n) for _ in range(2)], x.grad

# reducescatter (n + 1 rows: rank 0 gets two). Average: the gradient is the allgather of the
# output gradients, unscaled (Horovod's definition); Sum: times the world size; scale
# factors: times them.
q, rem = divmod(n + 1, n)
mine = [q + (1 if k < rem else 0) for k in range(n)]
gathered = torch.cat([torch.full((mine[k], 1), float(k + 1)) for k in range(n)])
for op, pre, post, scale in ((hvd.Average, 1.0, 1.0, 1.0), (hvd.Sum, 1.0, 1.0, float(n)),
                             (hvd.Sum, 2.0, 0.5, float(n))):
    x = leaf(torch.arange(n + 1, dtype=torch.float32).reshape(n + 1, 1) * (r + 1))
    y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
    assert y.shape == (mine[r], 1)
    (y * (r + 1)).sum().backward()
    assert torch.allclose(x.grad, scale * gathered), (op, x.grad)

# Grouped variants: each tensor's gradient as for the single operation.
a, b = leaf(torch.full((2,), float(r))), leaf(torch.full((3,), 1.0))
ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum, name="grp")
((ya * (r + 1)).sum() + (yb * 2 * (r + 1)).sum()).backward()
assert torch.equal(a.grad, torch.full((2,), tri)) and torch.equal(b.grad, torch.full((3,), 2 * tri))

a, b = leaf(torch.full((r + 1,), float(r))), leaf(torch.full((1, 2), float(r)))
ga, gb = hvd.grouped_allgather([a, b])
assert ga.shape == (rows,) and gb.shape == (n, 2)
ca = torch.arange(rows, dtype=torch.float32)
((ga * (r + 1) * ca).sum() + (gb * (r + 1)).sum()).backward()
assert torch.allclose(a.grad, avg * ca[off:off + r + 1]), a.grad
assert torch.allclose(b.grad, torch.full((1, 2), avg)), b.grad

a = leaf(torch.arange(n + 1, dtype=torch.float32).reshape(n + 1, 1))
b = leaf(torch.ones(2 * n, 3))
ra, rb = hvd.grouped_reducescatter([a, b], op=hvd.Sum)
assert rb.shape == (2, 3) and torch.equal(rb.detach(), torch.full((2, 3), float(n)))
((ra * (r + 1)).sum() + (rb * (r + 1)).sum()).backward()
assert torch.allclose(a.grad, n * gathered), a.grad
assert torch.allclose(b.grad, n * torch.cat([torch.full((2, 3), float(k + 1)) for k in range(n)]))

# A chain of collectives in one graph: allgather(allreduce(x)).
x = leaf(torch.full((1, 2), float(r)))
z = hvd.allgather(hvd.allreduce(x, op=hvd.Sum))
(z * (r + 1) * torch.arange(n, dtype=torch.float32).reshape(n, 1)).sum().backward()
# d/dx: the allgather gives avg * r (this rank's row weight), the Sum allreduce sums that.
assert torch.allclose(x.grad, torch.full((1, 2), avg * sum(range(n)))), x.grad

hvd.shutdown()
print("ok", r, flush=True)
