"""``import dtcomm.horovod.torch as hvd``: Horovod's torch API on dtcomm's engine.

Covered: ``init``/``shutdown``/``is_initialized``, topology (``rank``, ``size``, ``local_*``,
``cross_*``, ``is_homogeneous``), build probes, the reduce ops, ``allreduce`` (``_async``,
``_``, ``_async_``) with ``prescale_factor``/``postscale_factor``, ``allgather`` (first
dimension per rank), ``broadcast`` (in place and not), ``poll``/``synchronize`` on integer
handles, ``barrier``, ``broadcast_parameters``, ``broadcast_object``, ``allgather_object``,
``HorovodInternalError``. The rest of Horovod's API is not built yet (``docs/horovod.md``).

While initialised, the Horovod layer owns dtcomm's group: do not call ``dtcomm.*``
collectives beside it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

import dtcomm
from dtcomm import _api, _dtcomm, _state_codec

from .timeline import Timeline

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "HorovodInternalError",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled", "gloo_built",
    "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "mpi_threads_supported", "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "allgather", "allgather_async", "broadcast", "broadcast_async", "broadcast_",
    "broadcast_async_", "poll", "synchronize", "barrier", "broadcast_parameters",
    "broadcast_object", "allgather_object", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "join", "start_timeline",
    "stop_timeline",
]

# Horovod's ReduceOp values.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_OPS = {Sum: "sum", Average: "sum", Min: "min", Max: "max", Product: "prod"}


class HorovodInternalError(RuntimeError):
    """An operation failed on every rank (ranks disagreed about it, or the group failed).
    When the communicator failed (a peer lost, the round ended), ``__cause__`` is dtcomm's
    typed error (``PeerLostError``, ``RoundEndedError``, ...); ``hvd.elastic.run`` retries
    on those."""


def _internal(e: RuntimeError) -> HorovodInternalError:
    """``e`` as a HorovodInternalError, caused by the communicator's failure if it failed."""
    failure = None
    try:
        failure = dtcomm.communicator().failure()
    except Exception:  # no group (shut down): nothing more to say
        pass
    err = HorovodInternalError(str(e))
    err.__cause__ = failure if failure is not None else e
    return err


_DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int8: "int8", torch.uint8: "uint8",
    torch.int32: "int32", torch.int64: "int64",
}

_lock = threading.Lock()
_neg: _dtcomm.Negotiator | None = None
_counter = 0
# handle -> (dtype, shape of the result, in-place target or None, op kind)
_handles: dict[int, tuple[torch.dtype, tuple[int, ...] | None, torch.Tensor | None, str]] = {}
_names: dict[int, str] = {}
_timeline: Timeline | None = None


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Joins the group (``dtcomm.init()``: launcher variables, ``dtrun``, Horovod's and MPI's
    rank variables) and starts the negotiation. ``HOROVOD_CYCLE_TIME`` (ms, default 1) and
    ``HOROVOD_FUSION_THRESHOLD`` (bytes, default 128 MiB) are honoured."""
    global _neg, _counter
    with _lock:
        if _neg is not None:
            return
        if not dtcomm.is_initialized():
            dtcomm.init(verbose=False)
        _neg = _negotiator()
        _counter = 0
        _handles.clear()
    if os.environ.get("HOROVOD_TIMELINE") and dtcomm.rank() == 0:
        start_timeline(os.environ["HOROVOD_TIMELINE"],
                       mark_cycles=os.environ.get("HOROVOD_TIMELINE_MARK_CYCLES") == "1")


def _negotiator() -> _dtcomm.Negotiator:
    cycle = float(os.environ.get("HOROVOD_CYCLE_TIME", "1"))
    threshold = int(os.environ.get("HOROVOD_FUSION_THRESHOLD", str(128 << 20)))
    return _dtcomm.Negotiator(dtcomm.communicator(), cycle, threshold)


def _elastic_reset(reason: str) -> None:
    """``hvd.elastic``: stops this round's negotiation (pending operations are forgotten),
    joins the native rendezvous's next round (``dtcomm.elastic``'s renewal: survivors keep
    their ranks; the job is not left) and negotiates on its communicator. Unnamed operations
    count from zero again, as after ``init``."""
    global _neg, _counter
    with _lock:
        old, _neg = _neg, None
        _handles.clear()
        _names.clear()
        _counter = 0
    if old is not None:
        old.shutdown()  # returns at once when the round's communicator failed
    _api._renew(reason)
    with _lock:
        _neg = _negotiator()


def shutdown() -> None:
    """Stops the negotiation and leaves the group; ``init()`` may be called again."""
    global _neg
    with _lock:
        if _neg is None:
            return
        _neg.shutdown()
        _neg = None
        _handles.clear()
    stop_timeline()
    dtcomm.shutdown()


def is_initialized() -> bool:
    """Whether ``init()`` ran (and ``shutdown()`` not since)."""
    return _neg is not None


def _n() -> _dtcomm.Negotiator:
    if _neg is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return _neg


def rank() -> int:
    """This process's rank."""
    _n()
    return dtcomm.rank()


def size() -> int:
    """Ranks in the job."""
    _n()
    return dtcomm.size()


def local_rank() -> int:
    """Rank among the processes of this host."""
    _n()
    return dtcomm.local_rank()


def local_size() -> int:
    """Processes on this host."""
    _n()
    return dtcomm.local_size()


def cross_rank() -> int:
    """Index of this host."""
    return rank() // max(local_size(), 1)


def cross_size() -> int:
    """Hosts in the job."""
    return max(size() // max(local_size(), 1), 1)


def is_homogeneous() -> bool:
    """Whether every host runs the same number of processes."""
    return size() % max(local_size(), 1) == 0


def mpi_built() -> bool:
    """False: dtcomm does not use MPI."""
    return False


def mpi_enabled() -> bool:
    """False: dtcomm does not use MPI."""
    return False


def mpi_threads_supported() -> bool:
    """False: dtcomm does not use MPI."""
    return False


def gloo_built() -> bool:
    """True: CPU collectives (dtcomm's TCP and shared-memory engine take gloo's place)."""
    return True


def gloo_enabled() -> bool:
    """True: CPU collectives run on dtcomm's engine."""
    return True


def nccl_built() -> int:
    """0: CUDA tensors are not carried by this front end yet."""
    return 0


def ddl_built() -> bool:
    """False."""
    return False


def ccl_built() -> bool:
    """False."""
    return False


def cuda_built() -> bool:
    """False: CUDA tensors are not carried by this front end yet."""
    return False


def rocm_built() -> bool:
    """False."""
    return False


def _name(kind: str, name: str | None) -> str:
    global _counter
    if name:
        return f"{kind}.{name}"
    _counter += 1
    return f"{kind}.noname.{_counter}"


def _dtype(t: torch.Tensor) -> str:
    if t.device.type != "cpu":
        raise ValueError(f"tensors on {t.device} are not supported yet (CPU only)")
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise ValueError(f"unsupported tensor dtype {t.dtype}") from None


def _bytes(t: torch.Tensor) -> bytes:
    if not t.is_contiguous():
        raise ValueError("tensor must be contiguous")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def _submit_raw(n: _dtcomm.Negotiator, *args: Any, **kw: Any) -> int:
    try:
        return int(n.submit(*args, **kw))
    except ValueError:
        raise
    except RuntimeError as e:  # the negotiation failed earlier (e.g. a peer was lost)
        raise _internal(e)  # __cause__: the communicator failure


def _submit(kind: str, t: torch.Tensor, name: str | None, target: torch.Tensor | None,
            out_shape: tuple[int, ...] | None, **kw: Any) -> int:
    with _lock:
        n = _n()
        full = _name(kind, name)
        h = _submit_raw(n, full, kind, _dtype(t), list(t.shape), _bytes(t), **kw)
        _handles[h] = (t.dtype, out_shape, target, kind)
        _names[h] = full
    return h


def _op(op: int | None, average: bool | None) -> int:
    if op is None:
        return Sum if average is False else Average
    if average is not None:
        raise ValueError("The op parameter supersedes average; use only one of them.")
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by dtcomm's Horovod API")
    if op not in _OPS:
        raise ValueError(f"unknown reduce op {op}")
    return op


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: int | None = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0, process_set: Any = None) -> int:
    """Starts an allreduce of ``tensor`` into a new tensor; returns a handle."""
    return _allreduce(tensor, None, average, name, op, prescale_factor, postscale_factor)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: int | None = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0, process_set: Any = None) -> int:
    """Starts an in-place allreduce of ``tensor``; returns a handle."""
    return _allreduce(tensor, tensor, average, name, op, prescale_factor, postscale_factor)


def _allreduce(tensor: torch.Tensor, target: torch.Tensor | None, average: bool | None,
               name: str | None, op: int | None, pre: float, post: float) -> int:
    o = _op(op, average)
    if o == Average:
        post = post / size()
    return _submit("allreduce", tensor, name, target, tuple(tensor.shape), op=_OPS[o],
                   prescale=float(pre), postscale=float(post))


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: Any = None, op: int | None = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """Allreduces ``tensor`` (Average by default) into a new tensor."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor))


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: int | None = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """Allreduces ``tensor`` in place."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor))


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: Any = None) -> int:
    """Starts an allgather (concatenation along dimension 0, which may differ per rank)."""
    t = tensor if tensor.dim() > 0 else tensor.reshape(1)
    return _submit("allgather", t, name, None, (-1, *t.shape[1:]))


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: Any = None) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along dimension 0."""
    return synchronize(allgather_async(tensor, name))


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: Any = None) -> int:
    """Starts a broadcast of ``root_rank``'s ``tensor`` into a new tensor."""
    return _submit("broadcast", tensor, name, None, tuple(tensor.shape), root=int(root_rank))


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: Any = None) -> int:
    """Starts an in-place broadcast of ``root_rank``'s ``tensor``."""
    return _submit("broadcast", tensor, name, tensor, tuple(tensor.shape), root=int(root_rank))


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: Any = None) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank."""
    return synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: Any = None) -> torch.Tensor:
    """Copies ``root_rank``'s ``tensor`` into every rank's ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name))


def poll(handle: Any) -> bool:
    """Whether the operation of ``handle`` has completed (an integer handle, or the callable
    one of ``sparse_allreduce_async``)."""
    if not isinstance(handle, int) and hasattr(handle, "poll"):
        return bool(handle.poll())
    return _n().poll(handle)


def synchronize(handle: Any) -> Any:
    """Waits for ``handle``'s operation and returns its output tensor; raises
    ``HorovodInternalError`` if the operation failed (e.g. the ranks disagreed about it). The
    callable handle of ``sparse_allreduce_async`` is called."""
    if not isinstance(handle, int) and callable(handle):
        return handle()
    n = _n()
    with _lock:
        dtype, shape, target, kind = _handles.pop(handle)
    try:
        data, counts, times = n.wait(handle)
    except RuntimeError as e:
        raise _internal(e)  # __cause__: the communicator failure
    if _timeline is not None:
        _timeline.record(_names.pop(handle, f"handle.{handle}"), kind.split("_")[0], times)
    _names.pop(handle, None)
    if kind == "barrier":
        return torch.empty(0)
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype if dtype != torch.bfloat16 else np.int16
    arr = np.frombuffer(data, dtype=np_dtype).copy()
    out = torch.from_numpy(arr)
    if dtype == torch.bfloat16:
        out = out.view(torch.bfloat16)
    out = out.reshape(shape) if shape is not None else out
    if target is not None:
        target.copy_(out.reshape(target.shape))
        return target
    if kind == "alltoall_splits":
        row = 1
        for d in (shape or (-1,))[1:]:
            row *= d
        return out, torch.tensor([c // max(row, 1) for c in counts], dtype=torch.int32)
    return out


def barrier(process_set: Any = None) -> None:
    """Waits until every rank reaches it (other operations may still be pending)."""
    with _lock:
        n = _n()
        h = _submit_raw(n, _name("barrier", None), "barrier", "uint8", [0], b"")
        _handles[h] = (torch.uint8, None, None, "barrier")
    synchronize(h)


def join(device: int = -1) -> int:
    """Declares that this rank has no more data: until every rank has joined, it contributes
    zeros to the others' allreduces (Average still divides by the full size) and takes part in
    their barriers; other operations that need it fail on the others. Returns the rank that
    joined last, the same on every rank."""
    with _lock:
        n = _n()
        h = _submit_raw(n, "join", "join", "uint8", [0], b"")
        _handles[h] = (torch.uint8, None, None, "join")
    try:
        _, counts, _times = n.wait(h)
    except RuntimeError as e:
        raise _internal(e)  # __cause__: the communicator failure
    finally:
        with _lock:
            _handles.pop(h, None)
    return int(counts[0])


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing this rank's timeline (Chrome-trace JSON) to ``file_path``."""
    global _timeline
    _n()
    stop_timeline()
    _timeline = Timeline(file_path, dtcomm.rank(), mark_cycles)


def stop_timeline() -> None:
    """Finishes and closes the timeline file, if one is being written."""
    global _timeline
    if _timeline is not None:
        _timeline.close()
        _timeline = None


def broadcast_parameters(params: Any, root_rank: int, prefix: str | None = None) -> None:
    """Broadcasts a ``state_dict()`` or ``named_parameters()`` from ``root_rank`` in place."""
    items: Iterable[tuple[str, Any]]
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    handles = []
    for name, p in items:
        if isinstance(p, torch.Tensor):
            t = p.data if isinstance(p, torch.nn.Parameter) else p
            handles.append(broadcast_async_(t, root_rank, name=f"{prefix or ''}{name}"))
    for h in handles:
        synchronize(h)


_TENSOR = "__dtcomm_torch_tensor__"


def _to_wire(v: Any) -> Any:
    """Torch tensors as tagged numpy arrays (the state codec carries numpy, not torch)."""
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return (_TENSOR, "bfloat16", t.view(torch.int16).numpy())
        return (_TENSOR, str(t.dtype), t.numpy())
    if isinstance(v, dict):
        return {k: _to_wire(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        out = [_to_wire(x) for x in v]
        return out if isinstance(v, list) else tuple(out)
    return v


def _from_wire(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 3 and v[0] == _TENSOR:
        t = torch.from_numpy(np.array(v[2]))
        return t.view(torch.bfloat16) if v[1] == "bfloat16" else t
    if isinstance(v, dict):
        return {k: _from_wire(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        out = [_from_wire(x) for x in v]
        return out if isinstance(v, list) else tuple(out)
    return v


def _encode(obj: Any) -> bytes:
    # Never pickle: what other ranks send is only parsed (dtcomm._state_codec: JSON with numpy
    # arrays, bytes and tuples), so a payload cannot run code.
    return _state_codec.encode(_to_wire(obj))


def _decode(data: bytes) -> Any:
    return _from_wire(_state_codec.decode(data))


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: Any = None) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank. Objects travel in dtcomm's code-free
    format (None, numbers, strings, bytes, lists, tuples, dicts, numpy arrays, torch
    tensors), never as pickles."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(_encode(obj)), dtype=torch.uint8)
        sz = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        sz = torch.tensor([0], dtype=torch.int64)
    sz = broadcast_(sz, root_rank, name=f"{name}.sz")
    if rank() != root_rank:
        payload = torch.zeros(int(sz.item()), dtype=torch.uint8)
    payload = broadcast_(payload, root_rank, name=f"{name}.t")
    return _decode(payload.numpy().tobytes())


def allgather_object(obj: Any, name: str | None = None, process_set: Any = None) -> list[Any]:
    """Every rank's ``obj``, in rank order (same format as :func:`broadcast_object`)."""
    name = name or type(obj).__name__
    data = _encode(obj)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64), name=f"{name}.sz").tolist()
    blob = allgather(torch.frombuffer(bytearray(data), dtype=torch.uint8), name=f"{name}.t")
    out, at = [], 0
    for sz in sizes:
        out.append(_decode(blob[at:at + sz].numpy().tobytes()))
        at += sz
    return out

def _splits(splits: Any, tensor: torch.Tensor) -> list[int]:
    if splits is None:
        if tensor.shape[0] % size() != 0:
            raise ValueError(f"alltoall: {tensor.shape[0]} rows do not split equally over "
                             f"{size()} ranks; pass splits")
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError("alltoall: splits must be an int32 tensor")
        values = [int(v) for v in splits.tolist()]
    else:
        values = [int(v) for v in splits]
    if len(values) != size():
        raise ValueError(f"alltoall: {len(values)} splits for {size()} ranks")
    if any(v < 0 for v in values) or sum(values) > tensor.shape[0]:
        raise ValueError(f"alltoall: splits {values} do not fit {tensor.shape[0]} rows")
    return values


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: Any = None) -> int:
    """Starts an alltoall: ``splits[p]`` rows of dimension 0 go to rank ``p`` (equal parts
    without ``splits``)."""
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    sp = _splits(splits, tensor)
    kind = "alltoall_splits" if splits is not None else "alltoall"
    with _lock:
        n = _n()
        h = _submit_raw(n, _name("alltoall", name), "alltoall", _dtype(tensor), list(tensor.shape),
                     _bytes(tensor), splits=sp)
        _handles[h] = (tensor.dtype, (-1, *tensor.shape[1:]), None, kind)
    return h


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
             process_set: Any = None) -> Any:
    """Scatters slices of dimension 0 to every rank and gathers theirs; returns ``output``, or
    ``(output, received_splits)`` when ``splits`` is given."""
    return synchronize(alltoall_async(tensor, splits, name))


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, compression: Any = None,
                        op: int = Average, process_set: Any = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts a reduction whose dimension 0 is split over the ranks (remainder rows to the
    lowest ranks)."""
    if tensor.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    o = _op(op, None)
    post = postscale_factor / size() if o == Average else postscale_factor
    r, w = rank(), size()
    q, rem = divmod(tensor.shape[0], w)
    mine = q + (1 if r < rem else 0)
    with _lock:
        n = _n()
        h = _submit_raw(n, _name("reducescatter", name), "reducescatter", _dtype(tensor),
                     list(tensor.shape), _bytes(tensor), op=_OPS[o],
                     prescale=float(prescale_factor), postscale=float(post))
        _handles[h] = (tensor.dtype, (mine, *tensor.shape[1:]), None, "reducescatter")
    return h


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression: Any = None,
                  op: int = Average, process_set: Any = None, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over the ranks; each keeps its rows of dimension 0."""
    return synchronize(reducescatter_async(tensor, name, compression, op, process_set,
                                           prescale_factor, postscale_factor))


def _group_names(kind: str, name: str | None, count: int) -> list[str | None]:
    global _counter
    if name is None:
        _counter += 1
        return [f"noname.{_counter}.{i}" for i in range(count)]
    return [f"{name}.{i}" for i in range(count)]


def grouped_allreduce_async(tensors: list[torch.Tensor], average: bool | None = None,
                            name: str | None = None, op: int | None = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: Any = None) -> list[int]:
    """Starts one allreduce per tensor (fused as the threshold allows)."""
    names = _group_names("allreduce", name, len(tensors))
    return [allreduce_async(t, average, nm, op, prescale_factor, postscale_factor)
            for t, nm in zip(tensors, names)]


def grouped_allreduce_async_(tensors: list[torch.Tensor], average: bool | None = None,
                             name: str | None = None, op: int | None = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: Any = None) -> list[int]:
    """In-place :func:`grouped_allreduce_async`."""
    names = _group_names("allreduce", name, len(tensors))
    return [allreduce_async_(t, average, nm, op, prescale_factor, postscale_factor)
            for t, nm in zip(tensors, names)]


def grouped_allreduce(tensors: list[torch.Tensor], average: bool | None = None,
                      name: str | None = None, compression: Any = None, op: int | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: Any = None) -> list[torch.Tensor]:
    """Allreduces every tensor of the list; returns the new tensors."""
    return [synchronize(h) for h in grouped_allreduce_async(
        tensors, average, name, op, prescale_factor, postscale_factor)]


def grouped_allreduce_(tensors: list[torch.Tensor], average: bool | None = None,
                       name: str | None = None, op: int | None = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: Any = None) -> list[torch.Tensor]:
    """Allreduces every tensor of the list in place."""
    return [synchronize(h) for h in grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor)]


def grouped_allgather_async(tensors: list[torch.Tensor], name: str | None = None,
                            process_set: Any = None) -> list[int]:
    """Starts one allgather per tensor."""
    return [allgather_async(t, nm) for t, nm in
            zip(tensors, _group_names("allgather", name, len(tensors)))]


def grouped_allgather(tensors: list[torch.Tensor], name: str | None = None,
                      process_set: Any = None) -> list[torch.Tensor]:
    """Allgathers every tensor of the list."""
    return [synchronize(h) for h in grouped_allgather_async(tensors, name)]


def grouped_reducescatter_async(tensors: list[torch.Tensor], name: str | None = None,
                                compression: Any = None, op: int = Average,
                                process_set: Any = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> list[int]:
    """Starts one reducescatter per tensor."""
    return [reducescatter_async(t, nm, compression, op, None, prescale_factor, postscale_factor)
            for t, nm in zip(tensors, _group_names("reducescatter", name, len(tensors)))]


def grouped_reducescatter(tensors: list[torch.Tensor], name: str | None = None,
                          compression: Any = None, op: int = Average, process_set: Any = None,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reducescatters every tensor of the list."""
    return [synchronize(h) for h in grouped_reducescatter_async(
        tensors, name, compression, op, None, prescale_factor, postscale_factor)]
