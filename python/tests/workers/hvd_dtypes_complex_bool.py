"""Run by python/tests/test_dtypes_complex_bool.py at world 2 (``dtgroup.run_group``):
``dtcomm.horovod.torch`` with complex64, complex128 and bool tensors (allreduce Sum and
Average, in place and not, broadcast, allgather), and a complex Max failing on every rank
naming the op and dtype, the job going on. Prints ``ok <rank>``."""

from __future__ import annotations

import torch

import dtcomm.horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2

for dt in (torch.complex64, torch.complex128):
    x = torch.tensor([1 + 2j, -3 + 0.5j], dtype=dt) * (r + 1)
    total = torch.tensor([1 + 2j, -3 + 0.5j], dtype=dt) * 3
    got = hvd.allreduce(x, op=hvd.Sum, name=f"sum.{dt}")
    assert got.dtype == dt and torch.equal(got, total), got
    assert torch.equal(hvd.allreduce(x, name=f"avg.{dt}"), total / 2)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, name=f"sum_.{dt}")
    assert torch.equal(y, total), y
    b = x.clone()
    hvd.broadcast_(b, root_rank=1, name=f"bcast.{dt}")
    assert torch.equal(b, torch.tensor([1 + 2j, -3 + 0.5j], dtype=dt) * 2), b
    g = hvd.allgather(x.reshape(1, 2), name=f"gather.{dt}")
    assert torch.equal(g, torch.stack([x / (r + 1), x / (r + 1) * 2])), g

mask = torch.tensor([True, r == 0, False])
assert hvd.allreduce(mask, op=hvd.Sum, name="bool.sum").tolist() == [True, True, False]
assert hvd.allreduce(mask, op=hvd.Min, name="bool.min").tolist() == [True, False, False]
m = mask.clone()
hvd.broadcast_(m, root_rank=1, name="bool.bcast")
assert m.tolist() == [True, False, False], m
assert hvd.allgather(mask, name="bool.gather").tolist() == [True, True, False, True, False, False]

try:
    hvd.allreduce(torch.ones(2, dtype=torch.complex64), op=hvd.Max, name="cmax")
    raise SystemExit("complex max accepted")
except (hvd.HorovodInternalError, ValueError) as e:
    assert "max" in str(e) and "complex64" in str(e), e
assert hvd.allreduce(torch.ones(1), name="after", op=hvd.Sum).item() == n
hvd.shutdown()
print("ok", r, flush=True)
