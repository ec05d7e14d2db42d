"""Run by python/tests/test_horovod_sparse.py at world 2 and 3 (``dtgroup.run_group``):
``hvd.sparse_allreduce_async`` (Sum and Average, 1-D and 2-D, a rank with no entries),
``DistributedOptimizer`` with a sparse embedding (``sparse_as_dense`` either way), ``groups``
(same step as ungrouped, names as Horovod forms them, read from the timeline), bad
arguments refused, and a gradient only rank 0 produces. Prints ``ok <rank>`` at the end."""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
import warnings

import torch

import dtcomm.horovod.torch as hvd

warnings.simplefilter("error", UserWarning)
hvd.init()
r, n = hvd.rank(), hvd.size()


def dense_of(k: int) -> torch.Tensor:
    # Rank k's entries: rows k and k + 1 (2-D, with a dense dimension of 2); the last rank
    # has none.
    d = torch.zeros(n + 2, 2)
    if k != n - 1:
        d[k] = float(k + 1)
        d[k + 1] = 10.0 * (k + 1)
    return d


mine = dense_of(r).to_sparse(1)
assert mine._values().shape[0] == (0 if r == n - 1 else 2)
total = sum(dense_of(k) for k in range(n))

h = hvd.sparse_allreduce_async(mine, name="sp.sum", op=hvd.Sum)
deadline = time.monotonic() + 60
while not hvd.poll(h):
    assert time.monotonic() < deadline, "sparse allreduce did not complete"
    time.sleep(0.01)
s = hvd.synchronize(h)
assert s.is_sparse and s.shape == (n + 2, 2)
# Every rank's entries, uncoalesced (an index on two ranks appears twice).
assert s._values().shape[0] == 2 * (n - 1), s
assert torch.equal(s.to_dense(), total), s.to_dense()

a = hvd.sparse_allreduce_async(mine, name="sp.avg", op=hvd.Average)()
assert torch.allclose(a.to_dense(), total / n)

# Fully sparse 1-D tensors, int64 values.
v = torch.zeros(5, dtype=torch.int64)
v[r] = r + 1
s1 = hvd.sparse_allreduce_async(v.to_sparse(), name="sp.1d", op=hvd.Sum)()
assert s1.to_dense().tolist() == [k + 1 if k < n else 0 for k in range(5)]
try:
    hvd.sparse_allreduce_async(v, name="dense", op=hvd.Sum)
    raise SystemExit("dense tensor accepted")
except ValueError:
    pass


# DistributedOptimizer with a sparse embedding: rank r looks up rows {r, r + 1, r + 1}. The
# averaged gradient is the mean of every rank's dense gradient, sent sparse (allgather) or
# dense (sparse_as_dense).
def emb_grad(k: int) -> torch.Tensor:
    e = torch.nn.Embedding(n + 2, 3, sparse=True)
    e(torch.tensor([k, k + 1, k + 1])).sum().backward()
    return e.weight.grad.to_dense()


want = sum(emb_grad(k) for k in range(n)) / n
for as_dense in (False, True):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(n + 2, 3, sparse=True)
    w0 = emb.weight.detach().clone()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=as_dense)
    emb(torch.tensor([r, r + 1, r + 1])).sum().backward()
    opt.synchronize()
    assert emb.weight.grad.is_sparse, as_dense
    assert torch.allclose(emb.weight.grad.to_dense(), want), (as_dense, emb.weight.grad)
    with opt.skip_synchronize():
        opt.step()
    assert torch.allclose(emb.weight.detach(), w0 - 0.5 * want), as_dense
    opt.zero_grad()

# groups: the same averaged step as without groups; names as Horovod forms them (rank 0's
# parameter order, `groups` consecutive chunks, or the listed parameters plus one group per
# parameter left out), seen in the timeline.
torch.manual_seed(1)
base = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


def data(k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(5, 3, generator=g)


ref = copy.deepcopy(base)
grads = []
for k in range(n):
    m = copy.deepcopy(base)
    m(data(k)).pow(2).sum().backward()
    grads.append([p.grad for p in m.parameters()])
avg = [sum(gs) / n for gs in zip(*grads)]
want_w = [p.detach() - 0.1 * g for p, g in zip(ref.parameters(), avg)]

named = dict(base.named_parameters())
for groups, expect in ((2, {"0.weight.0", "0.weight.1", "1.weight.0", "1.weight.1"}),
                       ([[named["0.weight"], named["1.bias"]]],
                        {"0.weight.0", "0.weight.1", "0.bias.0", "1.weight.0"})):
    model = copy.deepcopy(base)
    groups_here = groups if isinstance(groups, int) else \
        [[dict(model.named_parameters())[k] for k in ("0.weight", "1.bias")]]
    path = os.path.join(tempfile.gettempdir(), f"hvd-groups-{os.getpid()}.json")
    hvd.start_timeline(path)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=groups_here)
    model(data(r)).pow(2).sum().backward()
    opt.step()
    hvd.stop_timeline()
    for p, w in zip(model.parameters(), want_w):
        assert torch.allclose(p.detach(), w, atol=1e-6), (groups, p, w)
    names = {e.get("args", {}).get("name") for e in json.load(open(path))}
    os.unlink(path)
    got = {nm[len("allreduce."):] for nm in names if nm and nm.startswith("allreduce.")}
    assert expect <= got, (groups, got)
    opt.zero_grad()

for bad in (-1, [[1.0]], [[named["0.bias"], named["0.bias"]]]):
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(base.parameters(), lr=0.1), groups=bad)
        raise SystemExit(f"groups={bad!r} accepted")
    except ValueError:
        pass
try:
    hvd.DistributedOptimizer(torch.optim.SGD(base.parameters(), lr=0.1),
                             backward_passes_per_step=0)
    raise SystemExit("backward_passes_per_step=0 accepted")
except ValueError:
    pass

# A gradient only rank 0 produces (a branch the others skip): the others send zeros.
torch.manual_seed(2)
a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
b0 = b.weight.detach().clone()
opt = hvd.DistributedOptimizer(torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=1.0))
x = torch.ones(1, 2)
out = a(x) + (b(x) if r == 0 else 0)
out.sum().backward()
opt.step()
assert torch.allclose(b.weight.detach(), b0 - 1.0 / n), (b.weight, b0)

hvd.shutdown()
print("ok", r, flush=True)
