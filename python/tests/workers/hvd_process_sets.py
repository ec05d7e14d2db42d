"""Run by python/tests/test_horovod_process_sets.py at world 4 (``dtgroup.run_group``):
Horovod process sets {0,1}, {2,3} and {0,2} registered at ``init``, then dynamic ones. Each
collective on a set is asserted to give the set's result; a rank outside a set is refused
naming it; sets of one rank; removal; the differentiable forms and ``DistributedOptimizer`` on
a set. Prints ``ok <rank>`` when every check passed."""

from __future__ import annotations

import torch

import dtcomm.horovod.torch as hvd

lo, hi, even = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3]), hvd.ProcessSet([0, 2])
hvd.init(process_sets=[lo, hi, even])
r, n = hvd.rank(), hvd.size()
assert n == 4
assert (lo.process_set_id, hi.process_set_id, even.process_set_id) == (1, 2, 3)
assert hvd.global_process_set.ranks == [0, 1, 2, 3] and hvd.global_process_set.size() == 4
mine = lo if r < 2 else hi
assert mine.included() and mine.size() == 2 and mine.rank() == r % 2
assert even.included() == (r % 2 == 0) and even.rank() == (r // 2 if r % 2 == 0 else -1)

# Allreduce: Sum and Average over the set only.
x = torch.tensor([float(r + 1)])
s = hvd.allreduce(x, op=hvd.Sum, process_set=mine)
assert s.item() == (3.0 if r < 2 else 7.0), s
a = hvd.allreduce(x, name="avg", process_set=mine)
assert a.item() == (1.5 if r < 2 else 3.5), a
# Unnamed operations counted per set: the low set runs two more than the high one, then both
# run one more, which must still match within each set.
if r < 2:
    hvd.allreduce(x, process_set=lo)
    hvd.allreduce(x, process_set=lo)
t = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, process_set=mine)
assert t.item() == 2.0, t

# Allgather (first dimension per rank), broadcast with a global root, alltoall, reducescatter.
g = hvd.allgather(torch.full((r + 1, 2), float(r)), process_set=mine)
rows = [0, 1] if r < 2 else [2, 3]
assert g.shape == (sum(k + 1 for k in rows), 2), g.shape
assert g[:, 0].tolist() == [float(k) for k in rows for _ in range(k + 1)], g
root = 1 if r < 2 else 3
b = hvd.broadcast(torch.tensor([float(r)]), root_rank=root, process_set=mine)
assert b.item() == float(root), b
try:
    hvd.broadcast(torch.tensor([0.0]), root_rank=(2 if r < 2 else 0), process_set=mine)
    raise SystemExit("a root outside the set accepted")
except ValueError as e:
    assert "root_rank" in str(e) and "not in process set" in str(e), e
at = hvd.alltoall(torch.tensor([10.0 * r, 10.0 * r + 1]), process_set=mine)
peers = [0, 1] if r < 2 else [2, 3]
assert at.tolist() == [10.0 * k + (r % 2) for k in peers], at
rs = hvd.reducescatter(torch.tensor([1.0, 2.0, 3.0]) * (r + 1), op=hvd.Sum, process_set=mine)
f = sum(k + 1 for k in peers)
assert rs.tolist() == ([1.0 * f, 2.0 * f] if r % 2 == 0 else [3.0 * f]), rs

# The set across the halves: only its members; the others are refused, naming the set.
if even.included():
    e = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=even)
    assert e.item() == 2.0, e
    assert hvd.broadcast_object({"from": r}, root_rank=2, process_set=even) == {"from": 2}
    assert hvd.allgather_object(r, process_set=even) == [0, 2]
    hvd.barrier(process_set=even)
else:
    try:
        hvd.allreduce(torch.tensor([1.0]), process_set=even)
        raise SystemExit("a rank outside the set ran an operation on it")
    except ValueError as err:
        assert f"rank {r} is not in process set 3" in str(err), err

# Differentiable forms on the set: the gradient of an allreduce is allreduced over the set.
w = torch.tensor([float(r + 1)], requires_grad=True)
hvd.allreduce(w, op=hvd.Sum, process_set=mine).sum().backward()
assert w.grad.item() == 2.0, w.grad

# DistributedOptimizer on a set: the step averages over the set's two ranks.
torch.manual_seed(0)
lin = torch.nn.Linear(1, 1, bias=False)
torch.nn.init.constant_(lin.weight, 1.0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=1.0),
                               named_parameters=lin.named_parameters(), process_set=mine)
lin(torch.tensor([[float(r + 1)]])).sum().backward()
opt.step()
grads = [k + 1 for k in peers]
assert torch.allclose(lin.weight.detach(), torch.tensor([[1.0 - sum(grads) / 2]])), lin.weight

# Sets cannot be added after init without dynamic process sets.
try:
    hvd.add_process_set([1, 3])
    raise SystemExit("a set was added after init without dynamic sets")
except ValueError as e:
    assert "HOROVOD_DYNAMIC_PROCESS_SETS" in str(e), e
hvd.shutdown()

# Dynamic sets: add (the same ones, in the same order, everywhere), use, remove.
hvd.init(process_sets="dynamic")
odd = hvd.add_process_set([1, 3])
assert odd.process_set_id == 1
if r in (1, 3):
    o = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=odd)
    assert o.item() == 4.0, o
try:
    hvd.add_process_set(hvd.ProcessSet([3, 1]))
    raise SystemExit("the same set registered twice")
except ValueError as e:
    assert "already registered" in str(e), e
# Sets of one rank each: every rank registers all of them; each runs alone on its own.
singles = [hvd.add_process_set([k]) for k in range(n)]
own = singles[r]
assert own.size() == 1 and own.rank() == 0 and [s.included() for s in singles].count(True) == 1
assert hvd.allreduce(torch.tensor([float(r)]), process_set=own).item() == float(r)
assert hvd.allgather(torch.tensor([r]), process_set=own).tolist() == [r]
assert hvd.broadcast(torch.tensor([r]), root_rank=r, process_set=own).item() == r
hvd.barrier(process_set=own)
for s in singles:
    assert hvd.remove_process_set(s)
assert hvd.remove_process_set(odd)
assert not hvd.remove_process_set(odd)
try:
    hvd.allreduce(torch.tensor([1.0]), process_set=odd)
    raise SystemExit("a removed set was used")
except ValueError as e:
    assert "not registered" in str(e), e
hvd.shutdown()
print("ok", r, flush=True)
