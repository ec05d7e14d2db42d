"""Run by python/tests/test_horovod.py at world 2 and 3 (``dtgroup.run_group``):
``dtcomm.horovod.torch`` with Horovod's semantics, each checked by an assert: reduce ops and
scale factors, names completing in any order, duplicate names, allgather, broadcast, a
mismatch failing every rank, alltoall, reducescatter, grouped variants, objects and
parameters, ``DistributedOptimizer`` (compression, accumulation), ``join``, the timeline, and
``hvd.init()`` after ``hvd.shutdown()``. Prints ``ok <rank>`` when every check passed."""

from __future__ import annotations

import json
import os
import tempfile

import torch

import dtcomm.horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert 0 <= hvd.local_rank() < hvd.local_size() and hvd.is_homogeneous() in (True, False)
assert hvd.gloo_built() and not hvd.mpi_built()

# Average (default), Sum, Min, Max, Product; scale factors in Horovod's precisions.
x = torch.full((5,), float(r + 1))
assert torch.equal(hvd.allreduce(x, name="avg"), torch.full((5,), (n + 1) / 2))
assert torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full((5,), n * (n + 1) / 2))
assert hvd.allreduce(x, op=hvd.Max)[0].item() == n
assert hvd.allreduce(x, op=hvd.Min)[0].item() == 1
i = torch.full((3,), r + 1, dtype=torch.int32)
got = hvd.allreduce(i, op=hvd.Sum, prescale_factor=1.5, postscale_factor=0.5)
# each rank: int(trunc((r+1)*1.5)), summed, then *0.5 truncated
want = int(sum(int((k + 1) * 1.5) for k in range(n)) * 0.5)
assert got.tolist() == [want] * 3, (got, want)
y = x.clone()
assert hvd.allreduce_(y, op=hvd.Sum) is y  # reduced in the tensor's own memory
assert y[0].item() == n * (n + 1) / 2
# Out of place: the input is left as it was, the result is a tensor of its own.
out = hvd.allreduce(x, op=hvd.Sum)
assert out.data_ptr() != x.data_ptr() and torch.equal(x, torch.full((5,), float(r + 1)))
assert torch.equal(out, y)

# Names complete in any order: each rank submits them in its own order.
names = [f"t{k}" for k in range(6)]
order = names[r:] + names[:r]
hs = {nm: hvd.allreduce_async(torch.full((2,), float(k)), name=nm, op=hvd.Sum)
      for k, nm in sorted(enumerate(names), key=lambda kv: order.index(kv[1]))}
for k, nm in enumerate(names):
    assert hvd.synchronize(hs[nm]).tolist() == [float(k * n)] * 2

# A duplicate pending name is a ValueError at submission.
if r == 0:
    h = hvd.allreduce_async(torch.ones(1), name="dup")
    try:
        hvd.allreduce_async(torch.ones(1), name="dup")
        raise SystemExit("duplicate accepted")
    except ValueError:
        pass
else:
    h = hvd.allreduce_async(torch.ones(1), name="dup")
hvd.synchronize(h)

# allgather: first dimension per rank.
g = hvd.allgather(torch.full((r + 1, 2), float(r)))
assert g.shape == (n * (n + 1) // 2, 2), g.shape
assert g[:, 0].tolist() == [float(k) for k in range(n) for _ in range(k + 1)]

# broadcast, in place and not.
src = torch.full((3,), float(r))
b = hvd.broadcast(src, root_rank=n - 1)
assert b.tolist() == [float(n - 1)] * 3 and src.tolist() == [float(r)] * 3
bb = torch.full((3,), float(r))
hvd.broadcast_(bb, root_rank=0)
assert bb.tolist() == [0.0] * 3

# A mismatch fails on every rank; later operations work.
try:
    hvd.allreduce(torch.ones(4 if r == 0 else 5), name="bad")
    raise SystemExit("mismatch not reported")
except hvd.HorovodInternalError as e:
    assert "shape" in str(e), e
assert hvd.allreduce(torch.ones(1), name="after", op=hvd.Sum).item() == n

# alltoall: equal split, and with splits (rank r sends p + 1 rows to rank p).
eq = hvd.alltoall(torch.arange(2 * n, dtype=torch.float32) + 100 * r)
assert eq.tolist() == [float(100 * p + 2 * r + k) for p in range(n) for k in range(2)], eq
rows = torch.cat([torch.full((p + 1, 2), float(10 * r + p)) for p in range(n)])
out, got = hvd.alltoall(rows, splits=torch.tensor([p + 1 for p in range(n)], dtype=torch.int32))
assert got.tolist() == [r + 1] * n, got
assert out.shape == (n * (r + 1), 2)
assert out[:, 0].tolist() == [float(10 * p + r) for p in range(n) for _ in range(r + 1)]
try:
    hvd.alltoall(rows, splits=torch.tensor([1] * n, dtype=torch.int64))
    raise SystemExit("int64 splits accepted")
except ValueError:
    pass

# reducescatter: remainder rows to the lowest ranks; Average by default.
rs = hvd.reducescatter(torch.arange(n + 1, dtype=torch.float32).reshape(n + 1, 1) * (r + 1))
q, rem = divmod(n + 1, n)
first = r * q + min(r, rem)
mine = q + (1 if r < rem else 0)
avg = (n + 1) / 2
assert rs.flatten().tolist() == [float(k) * avg for k in range(first, first + mine)], rs

# Grouped variants.
gs = hvd.grouped_allreduce([torch.ones(2) * r, torch.ones(3)], op=hvd.Sum, name="grp")
assert gs[0].tolist() == [float(sum(range(n)))] * 2 and gs[1].tolist() == [float(n)] * 3
ga = hvd.grouped_allgather([torch.full((1,), float(r)), torch.full((2,), float(r))])
assert ga[0].tolist() == [float(k) for k in range(n)] and len(ga[1]) == 2 * n

# Objects and parameters.
assert hvd.broadcast_object({"from": r}, root_rank=0) == {"from": 0}
assert hvd.allgather_object(r * 10) == [k * 10 for k in range(n)]
model = torch.nn.Linear(3, 2)
torch.nn.init.constant_(model.weight, float(r))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
assert torch.all(model.weight == 0.0)

# DistributedOptimizer: gradients averaged over ranks, by name, as each is ready; fp16
# compression; gradient accumulation over two backward passes.
for compression, passes in ((hvd.Compression.none, 1), (hvd.Compression.fp16, 1),
                            (hvd.Compression.none, 2)):
    torch.manual_seed(r)
    model = torch.nn.Linear(4, 1, bias=False)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    w0 = model.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression, backward_passes_per_step=passes)
    for _ in range(passes):
        model(torch.full((8, 4), float(r + 1))).sum().backward()
    opt.step()
    # d/dw of sum(x @ w) over 8 rows of (r+1): 8(r+1) per coordinate, accumulated `passes`
    # times, averaged over ranks.
    grad = passes * 8 * (n + 1) / 2
    assert torch.allclose(model.weight, w0 - 0.01 * grad), (model.weight, w0, grad)
    weights = hvd.allgather_object(model.weight.detach().tolist(), name=f"w.{passes}.{compression.__name__}")
    assert all(w == weights[0] for w in weights), weights
    opt.zero_grad()

# join: the last rank keeps training alone-ish; the others contribute zeros.
if r != n - 1:
    last = hvd.join()
else:
    for k in range(3):
        got = hvd.allreduce(torch.full((2,), 3.0), name=f"solo.{k}", op=hvd.Average)
        assert got.tolist() == [3.0 / n] * 2, got
    last = hvd.join()
assert last == n - 1, last

# The timeline: Chrome-trace JSON with each operation's negotiation and run.
path = os.path.join(tempfile.gettempdir(), f"hvd-timeline-{os.getpid()}.json")
hvd.start_timeline(path)
hvd.allreduce(torch.ones(3), name="traced")
hvd.allgather(torch.ones(1), name="traced_ag")
hvd.stop_timeline()
events = json.load(open(path))
names = {e["name"] for e in events}
assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "NEGOTIATE_ALLGATHER", "ALLGATHER"} <= names, names
assert any(e.get("args", {}).get("name") == "allreduce.traced" for e in events), events
assert not any(e["name"] == "CYCLE_START" for e in events), "cycles are marked only when asked"
# With mark_cycles: an instant CYCLE_START (global scope) per negotiation cycle, in between
# the operations' own events.
# Each of 5 operations, submitted after the previous one completed, runs in a later cycle, so
# there are at least 5 marks whatever the machine's speed.
hvd.start_timeline(path, mark_cycles=True)
for k in range(5):
    hvd.allreduce(torch.ones(3), name=f"traced_cycles.{k}")
hvd.stop_timeline()
events = json.load(open(path))
marks = [e for e in events if e["name"] == "CYCLE_START"]
assert len(marks) >= 5 and all(m["ph"] == "i" and m["s"] == "g" for m in marks), len(marks)
assert sorted(m["ts"] for m in marks) == [m["ts"] for m in marks]
# Each operation ran in a cycle that started after the previous one ran: a mark in between.
runs = [e["ts"] for e in events if e["name"] == "ALLREDUCE" and e["ph"] == "B"]
assert len(runs) == 5 and marks[0]["ts"] <= runs[0], (marks[0], runs)
for a, b in zip(runs, runs[1:]):
    assert any(a < m["ts"] <= b for m in marks), (a, b, [m["ts"] for m in marks])
os.unlink(path)

hvd.barrier()
hvd.shutdown()
# init after shutdown works.
hvd.init()
assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [float(n)] * 2
hvd.shutdown()
print("ok", r, flush=True)
