"""Run by python/tests/test_horovod_sync_batch_norm.py at world 2 and 3
(``dtgroup.run_group``), rank k with a batch of k + 2 samples: ``hvd.SyncBatchNorm`` against a
single-process ``torch.nn.BatchNorm1d/2d`` over the concatenated batch (outputs, input
gradients, summed weight/bias gradients, running statistics, evaluation mode), asserted.
Prints ``ok <rank>`` at the end."""

from __future__ import annotations

import torch
from torch.nn.modules.batchnorm import _BatchNorm

import dtcomm.horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
sizes = [k + 2 for k in range(n)]          # rank k has k + 2 samples
lo, hi = sum(sizes[:r]), sum(sizes[:r + 1])


def case(ref_cls: type[_BatchNorm], tail: tuple[int, ...], dtype: torch.dtype, tol: float,
         momentum: float | None = 0.1, steps: int = 3, track: bool = True) -> None:
    c = 3
    ref = ref_cls(c, momentum=momentum, track_running_stats=track).to(dtype)
    bn = hvd.SyncBatchNorm(c, momentum=momentum, track_running_stats=track).to(dtype)
    assert isinstance(bn, _BatchNorm)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        ref.weight.copy_(torch.rand(c, generator=g, dtype=dtype) + 0.5)
        ref.bias.copy_(torch.randn(c, generator=g, dtype=dtype))
    bn.load_state_dict(ref.state_dict())
    for step in range(steps):
        full = torch.randn(sum(sizes), c, *tail, generator=g, dtype=dtype) * (step + 1) + step
        w = torch.randn(full.shape, generator=g, dtype=dtype)
        xr = full.clone().requires_grad_(True)
        yr = ref(xr)
        (yr * w).sum().backward()
        x = full[lo:hi].clone().requires_grad_(True)
        bn.zero_grad()
        y = bn(x)
        (y * w[lo:hi]).sum().backward()
        assert torch.allclose(y, yr[lo:hi], atol=tol, rtol=tol), (y - yr[lo:hi]).abs().max()
        assert torch.allclose(x.grad, xr.grad[lo:hi], atol=tol, rtol=tol), \
            (x.grad - xr.grad[lo:hi]).abs().max()
        # Weight and bias gradients are local; their sum over ranks is the full batch's.
        gw = hvd.allreduce(bn.weight.grad, op=hvd.Sum)
        gb = hvd.allreduce(bn.bias.grad, op=hvd.Sum)
        assert torch.allclose(gw, ref.weight.grad, atol=tol, rtol=tol), (gw, ref.weight.grad)
        assert torch.allclose(gb, ref.bias.grad, atol=tol, rtol=tol), (gb, ref.bias.grad)
        ref.zero_grad()
        if track:
            assert torch.allclose(bn.running_mean, ref.running_mean, atol=tol, rtol=tol), \
                (bn.running_mean, ref.running_mean)
            assert torch.allclose(bn.running_var, ref.running_var, atol=tol, rtol=tol), \
                (bn.running_var, ref.running_var)
            assert int(bn.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
    # Evaluation: local, with the (equal) running statistics, or the batch's own without.
    bn.eval(); ref.eval()
    x = torch.randn(sizes[r], c, *tail, generator=torch.Generator().manual_seed(r), dtype=dtype)
    with torch.no_grad():
        if track:
            assert torch.allclose(bn(x), ref(x), atol=tol, rtol=tol)
        else:
            full = torch.cat(hvd.allgather_object(x))
            assert torch.allclose(bn(x), ref(full)[lo:hi], atol=tol, rtol=tol)


case(torch.nn.BatchNorm1d, (), torch.float64, 1e-10)
case(torch.nn.BatchNorm1d, (5,), torch.float64, 1e-10)
case(torch.nn.BatchNorm2d, (4, 3), torch.float64, 1e-10)
case(torch.nn.BatchNorm2d, (4, 3), torch.float32, 1e-4)
case(torch.nn.BatchNorm1d, (5,), torch.float64, 1e-10, momentum=None)
case(torch.nn.BatchNorm1d, (5,), torch.float64, 1e-10, track=False, steps=1)

try:
    hvd.SyncBatchNorm(3)(torch.ones(3))
    raise SystemExit("1-D input accepted")
except ValueError:
    pass
hvd.shutdown()
print("ok", r, flush=True)
