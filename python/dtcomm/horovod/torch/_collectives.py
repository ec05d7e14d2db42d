"""Horovod's collectives on the negotiator: every operation is submitted by name (unnamed
ones count per process set) and returns an integer handle for ``poll`` / ``synchronize``;
``allreduce``, ``allgather``, ``broadcast``, ``alltoall``, ``reducescatter``, ``barrier``,
``join`` and the grouped forms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias, cast

import numpy as np
import torch
from torch.utils.dlpack import to_dlpack

from dtcomm import _dtcomm
from dtcomm._vocab import HOROVOD_ADASUM, DType, ReduceOp

from ._state import HorovodInternalError, _failure_or, _group, _n, _Pending, _SetState, rt
from .compression import Compression, Compressor
from .process_sets import ProcessSet

# Horovod's ReduceOp values.
Average = ReduceOp.AVG.horovod
Sum = ReduceOp.SUM.horovod
Adasum = HOROVOD_ADASUM
Min = ReduceOp.MIN.horovod
Max = ReduceOp.MAX.horovod
Product = ReduceOp.PROD.horovod


class CallableHandle(Protocol):
    """A handle that waits when called (``sparse_allreduce_async``'s, the optimizer's lent
    allreduces); ``poll`` and ``synchronize`` take it beside the integer handles."""

    def poll(self) -> bool:
        """Whether the operation has completed."""
        ...

    def __call__(self) -> torch.Tensor:
        """Waits for the operation; its result."""
        ...


#: What ``poll`` and ``synchronize`` take.
Handle: TypeAlias = "int | CallableHandle"
#: How ``alltoall`` splits dimension 0: rows per rank (an int32 tensor or a sequence).
Splits: TypeAlias = "torch.Tensor | Sequence[int]"


def _name(kind: str, name: str | None, g: _SetState) -> str:
    """The full name of an operation (unnamed ones count per set)."""
    if name:
        return f"{kind}.{name}"
    g.counter += 1
    return f"{kind}.noname.{g.counter}"


def _dtype(t: torch.Tensor) -> DType:
    """The element type of a CPU tensor; ValueError for other devices and unsupported types."""
    if t.device.type != "cpu":
        raise ValueError(f"tensors on {t.device} are not supported yet (CPU only)")
    return DType.from_torch(t.dtype)


def _payload(t: torch.Tensor) -> object:
    """The tensor as the negotiator takes it: a DLPack capsule of its memory (read in place and
    copied once there, or lent for an in-place operation). ``to_dlpack`` costs a tenth of
    ``t.__dlpack__()``, which counts for a step of many small gradients."""
    if not t.is_contiguous():
        raise ValueError("tensor must be contiguous")
    t = t.detach()
    return to_dlpack(t.view(torch.int16) if t.dtype == torch.bfloat16 else t)


def _submit_raw(n: _dtcomm.Negotiator, *args: Any, **kw: Any) -> int:
    """``n.submit(*args, **kw)``; a failed negotiation raises :class:`HorovodInternalError`."""
    try:
        return int(n.submit(*args, **kw))
    except ValueError:
        raise
    except RuntimeError as e:  # the negotiation failed earlier (e.g. a peer was lost)
        raise HorovodInternalError(str(e)) from _failure_or(e)


def _handle(neg: _dtcomm.Negotiator, h: int, dtype: DType,
            shape: tuple[int, ...] | None, target: torch.Tensor | None, kind: str,
            name: str | None = None) -> int:
    """A handle for the caller (unique across process sets); ``rt.lock`` is held."""
    rt.hid += 1
    rt.handles[rt.hid] = _Pending(neg, h, dtype, shape, target, kind)
    if name is not None:
        rt.names[rt.hid] = name
    return rt.hid


def _submit(kind: str, t: torch.Tensor, name: str | None, out_shape: tuple[int, ...] | None,
            process_set: ProcessSet | None = None, **kw: Any) -> int:
    """An operation whose result comes back as new bytes (``t`` is copied in once)."""
    with rt.lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name(kind, name, g)
        dtype = _dtype(t)
        h = _submit_raw(g.neg, full, kind, dtype.value, list(t.shape), _payload(t), **kw)
        return _handle(g.neg, h, dtype, out_shape, None, kind, full)


def _submit_in_place(kind: str, t: torch.Tensor, name: str | None,
                     process_set: ProcessSet | None = None, **kw: Any) -> int:
    """An allreduce or broadcast that works in ``t``'s own memory (no copy in or out); the
    caller's tensor must not be touched until it is synchronized, as in Horovod."""
    with rt.lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name(kind, name, g)
        dtype = _dtype(t)
        h = _submit_raw(g.neg, full, kind, dtype.value, list(t.shape), _payload(t),
                        in_place=True, **kw)
        return _handle(g.neg, h, dtype, tuple(t.shape), t, kind, full)


class _Lent:
    """A handle (callable, as ``sparse_allreduce_async``'s) of an allreduce working in a
    tensor's own memory, outside the handle table: the ``DistributedOptimizer``'s path for
    each gradient, a few microseconds instead of the general one's ten or more."""

    __slots__ = ("neg", "h", "tensor")

    def __init__(self, neg: _dtcomm.Negotiator, h: int, tensor: torch.Tensor) -> None:
        self.neg, self.h, self.tensor = neg, h, tensor

    def poll(self) -> bool:
        return bool(self.neg.poll(self.h))

    def __call__(self) -> torch.Tensor:
        try:
            self.neg.wait(self.h)
        except RuntimeError as e:
            raise HorovodInternalError(str(e)) from _failure_or(e)
        return self.tensor


def _lend_allreduce(t: torch.Tensor, full_name: str, op: ReduceOp, pre: float, post: float,
                    process_set: ProcessSet | None = None) -> _Lent:
    """Starts an in-place allreduce of ``t`` named ``full_name`` (``post`` already divided for
    an average); ``synchronize`` it, or call it."""
    neg = _group(process_set).neg
    assert neg is not None
    h = _submit_raw(neg, full_name, "allreduce", _dtype(t).value, list(t.shape), _payload(t),
                    op=_engine_op(op), prescale=pre, postscale=post, in_place=True)
    return _Lent(neg, h, t)


def _fresh(tensor: torch.Tensor, copy: bool = True) -> torch.Tensor:
    """A new contiguous tensor for an out-of-place result, holding ``tensor``'s values
    (``copy``) or not (a broadcast's non-root rank)."""
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous")
    t = tensor.detach()
    return t.clone() if copy else torch.empty_like(t)


def _op(op: int | None, average: bool | None) -> ReduceOp:
    """The operator of Horovod's ``op`` / ``average`` arguments (Average by default)."""
    if op is None:
        return ReduceOp.SUM if average is False else ReduceOp.AVG
    if average is not None:
        raise ValueError("The op parameter supersedes average; use only one of them.")
    return ReduceOp.from_horovod(op)


def _engine_op(op: ReduceOp) -> str:
    """The negotiator's name of ``op``: an average is a sum whose postscale factor the caller
    divided by the number of ranks (as Horovod does it, also for integers)."""
    return ReduceOp.SUM.engine_name if op is ReduceOp.AVG else op.engine_name


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: int | None = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0, process_set: ProcessSet | None = None) -> int:
    """Starts an allreduce of ``tensor`` into a new tensor; returns a handle."""
    return _allreduce(tensor, None, average, name, op, prescale_factor, postscale_factor,
                      process_set)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: int | None = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0, process_set: ProcessSet | None = None) -> int:
    """Starts an in-place allreduce of ``tensor``; returns a handle."""
    return _allreduce(tensor, tensor, average, name, op, prescale_factor, postscale_factor,
                      process_set)


def _allreduce(tensor: torch.Tensor, target: torch.Tensor | None, average: bool | None,
               name: str | None, op: int | None, pre: float, post: float,
               process_set: ProcessSet | None = None) -> int:
    """An allreduce in ``target`` (in place), or in a copy of ``tensor`` when None."""
    o = _op(op, average)
    if o is ReduceOp.AVG:
        post = post / _group(process_set).size
    return _submit_in_place("allreduce", target if target is not None else _fresh(tensor),
                            name, process_set, op=_engine_op(o), prescale=float(pre),
                            postscale=float(post))


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: int | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet | None = None) -> torch.Tensor:
    """Allreduces ``tensor`` (Average by default) into a new tensor."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor, process_set))


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: int | None = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0,
               process_set: ProcessSet | None = None) -> torch.Tensor:
    """Allreduces ``tensor`` in place."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: ProcessSet | None = None) -> int:
    """Starts an allgather (concatenation along dimension 0, which may differ per rank)."""
    t = tensor if tensor.dim() > 0 else tensor.reshape(1)
    return _submit("allgather", t, name, (-1, *t.shape[1:]), process_set)


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet | None = None) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along dimension 0."""
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet | None = None) -> int:
    """Starts a broadcast of ``root_rank``'s ``tensor`` into a new tensor (``root_rank`` is a
    global rank, also with a process set)."""
    g = _group(process_set)
    root = g.index(root_rank, "root_rank")
    out = _fresh(tensor, copy=root == g.set_rank)
    return _submit_in_place("broadcast", out, name, process_set, root=root)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet | None = None) -> int:
    """Starts an in-place broadcast of ``root_rank``'s ``tensor``."""
    root = _group(process_set).index(root_rank, "root_rank")
    return _submit_in_place("broadcast", tensor, name, process_set, root=root)


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet | None = None) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet | None = None) -> torch.Tensor:
    """Copies ``root_rank``'s ``tensor`` into every rank's ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def poll(handle: Handle) -> bool:
    """Whether the operation of ``handle`` has completed (an integer handle, or the callable
    one of ``sparse_allreduce_async``)."""
    if not isinstance(handle, int) and hasattr(handle, "poll"):
        return bool(handle.poll())
    key = cast(int, handle)  # (hasattr does not narrow the union)
    _n()
    with rt.lock:
        neg, h = rt.handles[key][:2]
    return neg.poll(h)


def synchronize(handle: Handle) -> Any:
    """Waits for ``handle``'s operation and returns its output tensor; raises
    ``HorovodInternalError`` if the operation failed (e.g. the ranks disagreed about it). The
    callable handle of ``sparse_allreduce_async`` is called."""
    if not isinstance(handle, int) and callable(handle):
        return handle()
    _n()
    with rt.lock:
        n, h, dtype, shape, target, kind = rt.handles.pop(handle)
    try:
        data, counts, times = n.wait(h)
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from _failure_or(e)
    timeline = rt.timeline
    if timeline is not None:
        timeline.record(rt.names.pop(handle, f"handle.{handle}"), kind.split("_")[0], times)
    rt.names.pop(handle, None)
    if kind == "barrier":
        return torch.empty(0)
    if target is not None:  # worked in place: the result is there
        return target
    arr = np.frombuffer(data, dtype=dtype.numpy_dtype).copy()
    out = torch.from_numpy(arr)
    if dtype is DType.BFLOAT16:
        out = out.view(torch.bfloat16)
    out = out.reshape(shape) if shape is not None else out
    if kind == "alltoall_splits":
        row = 1
        for d in (shape or (-1,))[1:]:
            row *= d
        return out, torch.tensor([c // max(row, 1) for c in counts], dtype=torch.int32)
    return out


def barrier(process_set: ProcessSet | None = None) -> None:
    """Waits until every rank (of the process set) reaches it (other operations may still be
    pending)."""
    with rt.lock:
        g = _group(process_set)
        assert g.neg is not None
        # One name for every barrier, as Horovod's "barrier.noname": ranks whose counts of
        # unnamed operations differ (one failed part way through a step) still meet here.
        inner = _submit_raw(g.neg, "barrier.noname", "barrier", DType.UINT8.value, [0], b"")
        h = _handle(g.neg, inner, DType.UINT8, None, None, "barrier")
    synchronize(h)


def join(device: int = -1) -> int:
    """Declares that this rank has no more data: until every rank has joined, it contributes
    zeros to the others' allreduces (Average still divides by the full size) and takes part in
    their barriers; other operations that need it fail on the others. Returns the rank that
    joined last, the same on every rank."""
    with rt.lock:
        n = _n()
        h = _submit_raw(n, "join", "join", DType.UINT8.value, [0], b"")
    try:
        _, counts, _times = n.wait(h)
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from _failure_or(e)
    return int(counts[0])


def _splits(splits: Splits | None, tensor: torch.Tensor,
            process_set: ProcessSet | None = None) -> list[int]:
    """``splits`` as rows per rank of the set ([] for equal parts), checked against
    ``tensor``."""
    n = _group(process_set).size
    if splits is None:
        if tensor.shape[0] % n != 0:
            raise ValueError(f"alltoall: {tensor.shape[0]} rows do not split equally over "
                             f"{n} ranks; pass splits")
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError("alltoall: splits must be an int32 tensor")
        values = [int(v) for v in splits.tolist()]
    else:
        values = [int(v) for v in splits]
    if len(values) != n:
        raise ValueError(f"alltoall: {len(values)} splits for {n} ranks")
    if any(v < 0 for v in values) or sum(values) > tensor.shape[0]:
        raise ValueError(f"alltoall: splits {values} do not fit {tensor.shape[0]} rows")
    return values


def alltoall_async(tensor: torch.Tensor, splits: Splits | None = None, name: str | None = None,
                   process_set: ProcessSet | None = None) -> int:
    """Starts an alltoall: ``splits[p]`` rows of dimension 0 go to rank ``p`` (equal parts
    without ``splits``)."""
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    sp = _splits(splits, tensor, process_set)
    kind = "alltoall_splits" if splits is not None else "alltoall"
    with rt.lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name("alltoall", name, g)
        dtype = _dtype(tensor)
        h = _submit_raw(g.neg, full, "alltoall", dtype.value, list(tensor.shape),
                        _payload(tensor), splits=sp)
        return _handle(g.neg, h, dtype, (-1, *tensor.shape[1:]), None, kind, full)


def alltoall(tensor: torch.Tensor, splits: Splits | None = None, name: str | None = None,
             process_set: ProcessSet | None = None) -> Any:
    """Scatters slices of dimension 0 to every rank and gathers theirs; returns ``output``, or
    ``(output, received_splits)`` when ``splits`` is given."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor: torch.Tensor, name: str | None = None,
                        compression: type[Compressor] = Compression.none,
                        op: int = Average, process_set: ProcessSet | None = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts a reduction whose dimension 0 is split over the ranks (remainder rows to the
    lowest ranks)."""
    if tensor.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    o = _op(op, None)
    g0 = _group(process_set)
    assert g0.set_rank is not None
    post = postscale_factor / g0.size if o is ReduceOp.AVG else postscale_factor
    q, rem = divmod(tensor.shape[0], g0.size)
    mine = q + (1 if g0.set_rank < rem else 0)
    with rt.lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name("reducescatter", name, g)
        dtype = _dtype(tensor)
        h = _submit_raw(g.neg, full, "reducescatter", dtype.value, list(tensor.shape),
                        _payload(tensor), op=_engine_op(o), prescale=float(prescale_factor),
                        postscale=float(post))
        return _handle(g.neg, h, dtype, (mine, *tensor.shape[1:]), None,
                       "reducescatter", full)


def reducescatter(tensor: torch.Tensor, name: str | None = None,
                  compression: type[Compressor] = Compression.none, op: int = Average,
                  process_set: ProcessSet | None = None, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over the ranks; each keeps its rows of dimension 0."""
    return synchronize(reducescatter_async(tensor, name, compression, op, process_set,
                                           prescale_factor, postscale_factor))


def _group_names(kind: str, name: str | None, count: int,
                 process_set: ProcessSet | None = None) -> list[str | None]:
    """The names of a grouped operation's ``count`` parts (unnamed: counted per set)."""
    if name is None:
        g = _group(process_set)
        with rt.lock:
            g.counter += 1
            return [f"noname.{g.counter}.{i}" for i in range(count)]
    return [f"{name}.{i}" for i in range(count)]


def grouped_allreduce_async(tensors: list[torch.Tensor], average: bool | None = None,
                            name: str | None = None, op: int | None = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet | None = None) -> list[int]:
    """Starts one allreduce per tensor (fused as the threshold allows)."""
    names = _group_names("allreduce", name, len(tensors), process_set)
    return [allreduce_async(t, average, nm, op, prescale_factor, postscale_factor, process_set)
            for t, nm in zip(tensors, names, strict=True)]


def grouped_allreduce_async_(tensors: list[torch.Tensor], average: bool | None = None,
                             name: str | None = None, op: int | None = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet | None = None) -> list[int]:
    """In-place :func:`grouped_allreduce_async`."""
    names = _group_names("allreduce", name, len(tensors), process_set)
    return [allreduce_async_(t, average, nm, op, prescale_factor, postscale_factor, process_set)
            for t, nm in zip(tensors, names, strict=True)]


def grouped_allreduce(tensors: list[torch.Tensor], average: bool | None = None,
                      name: str | None = None, compression: type[Compressor] = Compression.none,
                      op: int | None = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet | None = None) -> list[torch.Tensor]:
    """Allreduces every tensor of the list; returns the new tensors."""
    return [synchronize(h) for h in grouped_allreduce_async(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set)]


def grouped_allreduce_(tensors: list[torch.Tensor], average: bool | None = None,
                       name: str | None = None, op: int | None = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet | None = None) -> list[torch.Tensor]:
    """Allreduces every tensor of the list in place."""
    return [synchronize(h) for h in grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set)]


def grouped_allgather_async(tensors: list[torch.Tensor], name: str | None = None,
                            process_set: ProcessSet | None = None) -> list[int]:
    """Starts one allgather per tensor."""
    names = _group_names("allgather", name, len(tensors), process_set)
    return [allgather_async(t, nm, process_set) for t, nm in zip(tensors, names, strict=True)]


def grouped_allgather(tensors: list[torch.Tensor], name: str | None = None,
                      process_set: ProcessSet | None = None) -> list[torch.Tensor]:
    """Allgathers every tensor of the list."""
    return [synchronize(h) for h in grouped_allgather_async(tensors, name, process_set)]


def grouped_reducescatter_async(tensors: list[torch.Tensor], name: str | None = None,
                                compression: type[Compressor] = Compression.none, op: int = Average,
                                process_set: ProcessSet | None = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> list[int]:
    """Starts one reducescatter per tensor."""
    names = _group_names("reducescatter", name, len(tensors), process_set)
    return [reducescatter_async(t, nm, compression, op, process_set, prescale_factor,
                                postscale_factor)
            for t, nm in zip(tensors, names, strict=True)]


def grouped_reducescatter(tensors: list[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: int = Average,
                          process_set: ProcessSet | None = None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reducescatters every tensor of the list."""
    return [synchronize(h) for h in grouped_reducescatter_async(
        tensors, name, compression, op, process_set, prescale_factor, postscale_factor)]
