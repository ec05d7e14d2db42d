"""Run by python/tests/test_torch_conformance.py at world 3 (``dtgroup.run_group``): what
torch's own suite expects of a backend through ``init_process_group("dtcomm")``:
``Work.is_completed``, subgroup backend names, ``batch_isend_irecv`` in both orders, sparse
all_reduce, ``all_gather_coalesced``, ``monitored_barrier``'s messages and a timeout in torch's
words. Prints ``ok <rank>``."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("dtcomm", timeout=timedelta(seconds=60))
r, w = dist.get_rank(), dist.get_world_size()
assert w == 3

# is_completed: true once the call completed (torch's holder hides the backend's own flag)
t = torch.ones(4)
work = dist.all_reduce(t, async_op=True)
work.wait()
assert work.is_completed(), "async all_reduce not completed after wait()"
if r == 0:
    reqs = [dist.isend(torch.full((3,), float(p)), p) for p in (1, 2)]
else:
    x = torch.empty(3)
    reqs = [dist.irecv(x, 0)]
for q in reqs:
    q.wait()
    assert q.is_completed(), "isend/irecv not completed after wait()"

# subgroup: the backend keeps its name (torch asserts on it), object collectives work
sub = dist.new_group([0, 1])
if r < 2:
    assert sub._get_backend(torch.device("cpu")).name() == "dtcomm"
    objs = [None, None]
    dist.all_gather_object(objs, {"r": r}, group=sub)
    assert objs == [{"r": 0}, {"r": 1}], objs

# batch_isend_irecv: every rank receives first, from every peer, with tags and sizes that
# differ per pair; then a batch in the opposite order
for flip in (False, True):
    ops, got = [], {}
    peers = [p for p in range(w) if p != r]
    for p in peers:
        got[p] = torch.full((p + 1, 2), -1.0)
        ops.append(dist.P2POp(dist.irecv, got[p], p, tag=p))
    for p in peers:
        ops.append(dist.P2POp(dist.isend, torch.full((r + 1, 2), float(r * 10 + p)), p, tag=r))
    if flip:
        ops.reverse()
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    for p in peers:
        assert torch.equal(got[p], torch.full((p + 1, 2), float(p * 10 + r))), (flip, p, got[p])

# sparse COO all_reduce: the sum, coalesced
i = torch.tensor([[r, 2], [0, r]])
v = torch.tensor([1.0 + r, 10.0])
s = torch.sparse_coo_tensor(i, v, (3, 3))
dense_sum = sum(torch.sparse_coo_tensor(torch.tensor([[p, 2], [0, p]]), torch.tensor([1.0 + p, 10.0]), (3, 3)).to_dense() for p in range(w))
dist.all_reduce(s)
assert s.is_sparse and torch.equal(s.to_dense(), dense_sum), s

# all_gather_coalesced: shapes that differ, one empty (torch wants one dtype)
ins = [torch.full((2, 2), float(r)), torch.arange(3, dtype=torch.float32) + r, torch.empty(0)]
outs = [[torch.empty_like(x) for x in ins] for _ in range(w)]
dist.all_gather_coalesced(outs, ins)
for p in range(w):
    assert torch.equal(outs[p][0], torch.full((2, 2), float(p))) and torch.equal(outs[p][1], torch.arange(3) + p)

# monitored_barrier: passes; then rank 2 stays away: rank 0 names it, rank 1 learns it
dist.monitored_barrier(timeout=timedelta(seconds=10))
dist.monitored_barrier(timeout=timedelta(seconds=10), wait_all_ranks=True)
if r != 2:
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=1))
    except RuntimeError as e:
        want = "Rank 2 failed to pass monitoredBarrier in 1000 ms" if r == 0 else (
            "Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0")
        assert want in str(e), e
    else:
        raise AssertionError("monitored_barrier passed without rank 2")
# ranks 1 and 2 stay away: wait_all_ranks names both
if r == 0:
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=0.5), wait_all_ranks=True)
    except RuntimeError as e:
        assert "Ranks 1, 2 failed to pass monitoredBarrier in 500 ms" in str(e), e
    else:
        raise AssertionError("monitored_barrier passed without ranks 1, 2")
dist.barrier()

# a timeout in torch's words, with dtcomm's detail (the group is broken afterwards)
late = dist.new_group([0, 1], timeout=timedelta(seconds=1))
if r == 0:
    t0 = time.monotonic()
    try:
        dist.barrier(group=late)
    except Exception as e:
        assert re.search(" (Timed out|closed|timeout) ", str(e)), e
        assert "rank 0" in str(e), e
    else:
        raise AssertionError("barrier without rank 1 passed")
    assert time.monotonic() - t0 < 30
dist.barrier()
print("ok", r)
