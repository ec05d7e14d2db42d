"""``hvd.DistributedOptimizer`` and ``hvd.broadcast_optimizer_state``: gradients allreduced by
name as each one is ready (hooks), waited for in ``step()``."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from . import _core as hvd
from .compression import Compression


class _DistributedMixin:
    """Mixed into the wrapped optimizer's class (as Horovod does)."""

    def _hvd_setup(self, named_parameters: Any, compression: Any, backward_passes_per_step: int,
                   op: int, gradient_predivide_factor: float, groups: Any,
                   sparse_as_dense: bool) -> None:
        if op == hvd.Adasum:
            raise NotImplementedError("Adasum is not supported by dtcomm's Horovod API")
        if gradient_predivide_factor != 1.0 and op != hvd.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step
        params = [p for g in self.param_groups for p in g["params"]]  # type: ignore[attr-defined]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(n, tuple) for n in named):
                raise ValueError("named_parameters should be a sequence of tuples (name, parameter)")
            names = [n for n, _ in named]
            if len(set(names)) != len(names):
                raise ValueError("Parameter names in named_parameters must be unique")
            self._names = {p: n for n, p in named}
            missing = [p for p in params if p not in self._names]
            if missing:
                raise ValueError(
                    "named_parameters was specified, but one or more model parameters were not "
                    "named. Python object ids: " + ", ".join(str(id(p)) for p in missing))
        else:
            self._names = {p: f"allreduce.noname.{i}" for i, p in enumerate(params)}
        self._handles: dict[torch.Tensor, tuple[int | None, Any]] = {}
        self._delay = {p: backward_passes_per_step for p in params}
        self._should_sync = True
        self._synchronized = False
        self._hooks = []
        if hvd.size() > 1:
            for p in params:
                if p.requires_grad:
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._hook))

    def _allreduce_grad_async(self, p: torch.Tensor) -> tuple[int, Any]:
        name = self._names[p]
        tensor = p.grad
        if self._op == hvd.Average:
            pre, post = 1.0 / self._predivide, self._predivide / hvd.size()
            op = hvd.Sum
        else:
            pre, post, op = 1.0, 1.0, self._op
        compressed, ctx = self._compression.compress(tensor)
        h = hvd.allreduce_async_(compressed, name=name, op=op, prescale_factor=pre,
                                 postscale_factor=post)
        return h, (ctx, compressed)

    def _hook(self, p: torch.Tensor) -> None:
        if p in self._handles and self._handles[p][0] is not None:
            if self._delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
        self._delay[p] -= 1
        if self._delay[p] == 0:
            self._handles[p] = self._allreduce_grad_async(p)
        else:
            self._handles.setdefault(p, (None, None))

    def synchronize(self) -> None:
        """Waits for every gradient's allreduce (starting those whose hook did not run)."""
        for p, (h, _) in list(self._handles.items()):
            if h is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (h, (ctx, compressed)) in self._handles.items():
            out = hvd.synchronize(h)
            self._delay[p] = self.backward_passes_per_step
            p.grad.copy_(self._compression.decompress(out, ctx).reshape(p.grad.shape))
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Use after an explicit ``synchronize()``: the next ``step()`` does not wait again."""
        self._should_sync = False
        try:
            yield
        finally:
            self._should_sync = True

    def step(self, closure: Any = None) -> Any:
        if self._should_sync:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(). This can cause training slowdown.",
                              stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)  # type: ignore[misc]

    def zero_grad(self, *args: Any, **kwargs: Any) -> Any:
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize().")
        return super().zero_grad(*args, **kwargs)  # type: ignore[misc]


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters: Any = None,
                         compression: Any = Compression.none, backward_passes_per_step: int = 1,
                         op: int = 0, gradient_predivide_factor: float = 1.0,
                         num_groups: int = 0, groups: Any = None,
                         sparse_as_dense: bool = False, process_set: Any = None) -> Any:
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged over every rank
    (allreduced by parameter name as each becomes ready during ``backward()``)."""
    cls = type(optimizer.__class__.__name__, (_DistributedMixin, optimizer.__class__), {})
    opt = cls.__new__(cls)
    opt.__dict__.update(optimizer.__dict__)
    opt._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor, groups, sparse_as_dense)
    return opt


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              model: Any = None) -> None:
    """Makes every rank's optimizer state (hyper-parameters and per-parameter state) equal to
    ``root_rank``'s."""
    state = hvd.broadcast_object(optimizer.state_dict(), root_rank=root_rank,
                                 name="optimizer_state")
    optimizer.load_state_dict(state)
