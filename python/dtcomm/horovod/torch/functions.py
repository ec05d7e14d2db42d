"""Differentiable collectives: ``hvd.allreduce``, ``allgather``, ``broadcast``, ``alltoall``,
``reducescatter`` and the grouped variants are ``torch.autograd.Function`` s with Horovod's
backward passes (``horovod/torch/mpi_ops.py``):

* allreduce: the gradient is allreduced with the same op and scale factors;
* allgather: the gradient is averaged over the ranks, then this rank's rows are kept;
* broadcast: the gradient is averaged over the ranks; it is zero except on the root;
* alltoall: the gradient goes back with an alltoall whose splits are the received splits;
* reducescatter: the gradient (times the world size for Sum, times the scale factors) is
  allgathered.

Backward passes submit unnamed operations on the forward's process set, so every rank of it
must run the same backward graph (as in Horovod). Without ``requires_grad`` these are plain
collectives.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _core
from ._collectives import Splits
from .compression import Compression, Compressor
from .process_sets import ProcessSet


def _c(t: torch.Tensor) -> torch.Tensor:
    # Gradients arriving in backward are often expanded views; the engine wants contiguous.
    return t.contiguous()


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce; backward: allreduce of the gradient with the same op and scales."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, average: bool | None, name: str | None,
                op: int | None, prescale_factor: float, postscale_factor: float,
                process_set: ProcessSet | None) -> torch.Tensor:
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return _core.synchronize(_core.allreduce_async(
            tensor, average, name, op, prescale_factor, postscale_factor, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        average, op, pre, post, ps = ctx.args
        g = allreduce(_c(grad), average=average, op=op, prescale_factor=pre,
                      postscale_factor=post, process_set=ps)
        return g, None, None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: int | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet | None = None) -> torch.Tensor:
    """Allreduces ``tensor`` (Average by default) into a new tensor; differentiable."""
    compressed, cctx = compression.compress(tensor)
    out = HorovodAllreduce.apply(compressed, average, name, op, prescale_factor,
                                 postscale_factor, process_set)
    return compression.decompress(out, cctx)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Allreduce of a list; backward: grouped allreduce of the gradients."""

    @staticmethod
    def forward(ctx: Any, average: bool | None, name: str | None, op: int | None,
                prescale_factor: float, postscale_factor: float, process_set: ProcessSet | None,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        hs = _core.grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                           postscale_factor, process_set)
        return tuple(_core.synchronize(h) for h in hs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        average, op, pre, post, ps = ctx.args
        gs = grouped_allreduce([_c(g) for g in grads], average=average, op=op,
                               prescale_factor=pre, postscale_factor=post, process_set=ps)
        return (None, None, None, None, None, None, *gs)


def grouped_allreduce(tensors: list[torch.Tensor], average: bool | None = None,
                      name: str | None = None, compression: type[Compressor] = Compression.none,
                      op: int | None = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet | None = None) -> list[torch.Tensor]:
    """Allreduces every tensor of the list into new tensors; differentiable."""
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                         process_set, *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs, strict=True)]


def _my_offset(rows: int, process_set: ProcessSet | None) -> int:
    """Sum of the first dimensions of the lower ranks of the set (an allgather of every
    rank's rows)."""
    dims = _core.allgather(torch.tensor([rows], dtype=torch.int32), process_set=process_set)
    return int(dims[:_core._group(process_set).set_rank].sum().item())


class HorovodAllgather(torch.autograd.Function):
    """Allgather; backward: the averaged gradient's rows of this rank."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None,
                process_set: ProcessSet | None) -> torch.Tensor:
        ctx.shape, ctx.ps = tensor.shape, process_set
        return _core.synchronize(_core.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        reduced = allreduce(_c(grad), op=_core.Average, process_set=ctx.ps)
        rows = ctx.shape[0] if len(ctx.shape) else 1
        offset = _my_offset(rows, ctx.ps)
        return reduced.narrow(0, offset, rows).reshape(ctx.shape), None, None


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet | None = None) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along dimension 0; differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set)


class HorovodGroupedAllgather(torch.autograd.Function):
    """Allgather of a list; backward as :class:`HorovodAllgather`, per tensor."""

    @staticmethod
    def forward(ctx: Any, name: str | None, process_set: ProcessSet | None,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.shapes, ctx.ps = [t.shape for t in tensors], process_set
        return tuple(_core.synchronize(h)
                     for h in _core.grouped_allgather_async(list(tensors), name, process_set))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        reduced = grouped_allreduce([_c(g) for g in grads], op=_core.Average,
                                    process_set=ctx.ps)
        rows = [s[0] if len(s) else 1 for s in ctx.shapes]
        dims = _core.grouped_allgather([torch.tensor([r], dtype=torch.int32) for r in rows],
                                       process_set=ctx.ps)
        me = _core._group(ctx.ps).set_rank
        out = [g.narrow(0, int(d[:me].sum().item()), r).reshape(s)
               for g, d, r, s in zip(reduced, dims, rows, ctx.shapes, strict=True)]
        return (None, None, *out)


def grouped_allgather(tensors: list[torch.Tensor], name: str | None = None,
                      process_set: ProcessSet | None = None) -> list[torch.Tensor]:
    """Allgathers every tensor of the list; differentiable."""
    if not tensors:
        return []
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast; backward: the gradient averaged over the ranks, zero except on the root."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None,
                process_set: ProcessSet | None) -> torch.Tensor:
        ctx.root_rank, ctx.ps = root_rank, process_set
        return _core.synchronize(_core.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        reduced = allreduce(_c(grad), op=_core.Average, process_set=ctx.ps)
        if _core.rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet | None = None) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank; differentiable."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall; backward: alltoall of the gradient with the received splits."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Splits | None, name: str | None,
                process_set: ProcessSet | None) -> Any:
        if splits is None:
            # Equal parts, asked for explicitly so that the received splits come back too.
            _core._splits(None, tensor, process_set)
            n = _core._group(process_set).size
            parts = [tensor.shape[0] // n] * n
            out, received = _core.alltoall(tensor, parts, name, process_set)
        else:
            out, received = _core.alltoall(tensor, splits, name, process_set)
        ctx.received, ctx.ps = received, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_dead: Any) -> tuple[torch.Tensor | None, ...]:
        g, _ = alltoall(_c(grad), splits=ctx.received, process_set=ctx.ps)
        return g, None, None, None


def alltoall(tensor: torch.Tensor, splits: Splits | None = None, name: str | None = None,
             process_set: ProcessSet | None = None) -> Any:
    """Scatters slices of dimension 0 to every rank and gathers theirs; returns ``output``, or
    ``(output, received_splits)`` when ``splits`` is given; differentiable."""
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    if splits is not None:
        _core._splits(splits, tensor, process_set)
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


def _scatter_grad(grad: torch.Tensor, op: int, pre: float, post: float,
                  process_set: ProcessSet | None) -> torch.Tensor:
    g = _c(grad)
    if op == _core.Sum:
        g = g * _core._group(process_set).size
    if pre != 1.0:
        g = g * pre
    if post != 1.0:
        g = g * post
    return g


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter; backward: allgather of the gradient (times the world size for Sum,
    times the scale factors), as Horovod defines it."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: int,
                prescale_factor: float, postscale_factor: float,
                process_set: ProcessSet | None) -> torch.Tensor:
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return _core.synchronize(_core.reducescatter_async(
            tensor, name, Compression.none, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        g = allgather(_scatter_grad(grad, *ctx.args), process_set=ctx.args[-1])
        return g, None, None, None, None, None


def reducescatter(tensor: torch.Tensor, name: str | None = None,
                  compression: type[Compressor] = Compression.none, op: int = _core.Average,
                  process_set: ProcessSet | None = None, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over the ranks; each keeps its rows of dimension 0; differentiable."""
    compressed, cctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, prescale_factor, postscale_factor,
                                     process_set)
    return compression.decompress(out, cctx)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Reducescatter of a list; backward as :class:`HorovodReducescatter`, per tensor."""

    @staticmethod
    def forward(ctx: Any, name: str | None, op: int, prescale_factor: float,
                postscale_factor: float, process_set: ProcessSet | None,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        hs = _core.grouped_reducescatter_async(list(tensors), name, Compression.none, op,
                                               process_set, prescale_factor, postscale_factor)
        return tuple(_core.synchronize(h) for h in hs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gs = grouped_allgather([_scatter_grad(g, *ctx.args) for g in grads],
                               process_set=ctx.args[-1])
        return (None, None, None, None, None, *gs)


def grouped_reducescatter(tensors: list[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: int = _core.Average,
                          process_set: ProcessSet | None = None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reducescatters every tensor of the list; differentiable."""
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = HorovodGroupedReducescatter.apply(name, op, prescale_factor, postscale_factor,
                                             process_set, *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs, strict=True)]


__all__ = [
    "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
    "HorovodGroupedAllgather", "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter",
    "HorovodGroupedReducescatter", "allreduce", "grouped_allreduce", "allgather",
    "grouped_allgather", "broadcast", "alltoall", "reducescatter", "grouped_reducescatter",
]
