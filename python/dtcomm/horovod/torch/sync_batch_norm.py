"""``hvd.SyncBatchNorm``: batch normalisation whose training-mode statistics cover every
rank's batch, as Horovod's (``horovod/torch/sync_batch_norm.py``).

Forward: each rank's element count, mean and inverse standard deviation per channel are
allgathered (names ``sync_batch_norm.count`` / ``.mean`` / ``.invstd``) and combined into the
global mean and biased variance; running statistics are updated with the global mean and the
unbiased global variance (``var * N / (N - 1)``). Backward: ``sum(dy)`` and
``sum(dy * (x - mean))`` are Sum-allreduced (``sync_batch_norm.sum_dy`` / ``.sum_dy_xmu``) for
the input gradient; the weight and bias gradients stay local (the optimizer averages them).
Evaluation mode with running statistics is local.

Horovod calls torch's CUDA-only ``batch_norm_stats`` family; this computes the same
quantities with ordinary tensor operations, so CPU tensors work.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from . import _core


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor | None,
                bias: torch.Tensor | None, running_mean: torch.Tensor | None,
                running_var: torch.Tensor | None, eps: float,
                momentum: float) -> torch.Tensor:
        x = input.contiguous().to(_compute_dtype(input))
        c = x.shape[1]
        dims = [0, *range(2, x.dim())]
        view = [1, c] + [1] * (x.dim() - 2)
        count = x.numel() // c
        # An empty local batch contributes count 0 (and finite stand-ins for its statistics).
        mean = x.sum(dims) / max(count, 1)
        var = ((x - mean.view(view)) ** 2).sum(dims) / max(count, 1)
        invstd = torch.rsqrt(var + eps)

        hc = _core.allgather_async(torch.tensor([[count]], dtype=torch.int64),
                                   name="sync_batch_norm.count")
        hm = _core.allgather_async(mean.unsqueeze(0), name="sync_batch_norm.mean")
        hi = _core.allgather_async(invstd.unsqueeze(0), name="sync_batch_norm.invstd")
        counts = _core.synchronize(hc).view(-1).to(x.dtype)
        means = _core.synchronize(hm)
        invstds = _core.synchronize(hi)

        total = counts.sum()
        n = counts.view(-1, 1)
        g_mean = (n * means).sum(0) / total
        variances = 1.0 / invstds ** 2 - eps
        g_var = (n * (variances + (means - g_mean) ** 2)).sum(0) / total
        g_invstd = torch.rsqrt(g_var + eps)

        if running_mean is not None and running_var is not None:
            with torch.no_grad():
                unbiased = g_var * total / (total - 1) if total > 1 else g_var
                running_mean.mul_(1 - momentum).add_(
                    g_mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype),
                                                    alpha=momentum)

        ctx.save_for_backward(x, weight, g_mean, g_invstd)
        ctx.total = total
        ctx.out_dtype = input.dtype
        y = (x - g_mean.view(view)) * g_invstd.view(view)
        if weight is not None:
            y = y * weight.to(x.dtype).view(view)
        if bias is not None:
            y = y + bias.to(x.dtype).view(view)
        return y.to(input.dtype)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, mean, invstd = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]
        c = x.shape[1]
        dims = [0, *range(2, x.dim())]
        view = [1, c] + [1] * (x.dim() - 2)
        dy = grad_output.contiguous().to(x.dtype)
        xmu = x - mean.view(view)
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)

        grad_input = grad_weight = grad_bias = None
        if weight is not None and need_weight:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if weight is not None and need_bias:
            grad_bias = sum_dy.to(weight.dtype)
        if need_input:
            h1 = _core.allreduce_async(sum_dy, op=_core.Sum, name="sync_batch_norm.sum_dy")
            h2 = _core.allreduce_async(sum_dy_xmu, op=_core.Sum,
                                       name="sync_batch_norm.sum_dy_xmu")
            g_sum_dy = _core.synchronize(h1)
            g_sum_dy_xmu = _core.synchronize(h2)
            total = ctx.total
            scale = invstd if weight is None else invstd * weight.to(x.dtype)
            grad_input = (dy - (g_sum_dy / total).view(view)
                          - xmu * (invstd ** 2 * g_sum_dy_xmu / total).view(view)
                          ) * scale.view(view)
            grad_input = grad_input.to(ctx.out_dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation over every rank's batch in training mode (see the module docs);
    ``num_features`` is ``C`` of an ``(N, C, ...)`` input."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _factor(self) -> float:
        if self.momentum is not None:
            return float(self.momentum)
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            return 1.0 / float(self.num_batches_tracked.item())  # cumulative moving average
        return 0.0

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        factor = self._factor()
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or _core.size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, use_batch_stats, factor, self.eps)
        running = self.training and self.track_running_stats
        return _SyncBatchNormFn.apply(
            input, self.weight, self.bias, self.running_mean if running else None,
            self.running_var if running else None, self.eps, factor)
