"""``import dtcomm.horovod.torch as hvd``: Horovod's torch API on dtcomm's engine.

Covered: ``init``/``shutdown``/``is_initialized``, topology (``rank``, ``size``, ``local_*``,
``cross_*``, ``is_homogeneous``), build probes, the reduce ops, ``allreduce`` (``_async``,
``_``, ``_async_``) with ``prescale_factor``/``postscale_factor``, ``allgather`` (first
dimension per rank), ``broadcast`` (in place and not), ``poll``/``synchronize`` on integer
handles, ``barrier``, ``broadcast_parameters``, ``broadcast_object``, ``allgather_object``,
``HorovodInternalError``, process sets (``process_sets.py``: every operation takes
``process_set=``). The rest of Horovod's API is not built yet (``docs/horovod.md``).

While initialised, the Horovod layer owns dtcomm's group: do not call ``dtcomm.*``
collectives beside it.
"""

from __future__ import annotations

import atexit
import os
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.dlpack import to_dlpack

import dtcomm
from dtcomm import _api, _dtcomm, _state_codec

from .process_sets import ProcessSet, global_process_set, install_resolver
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
    "stop_timeline", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
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
    torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
}

@dataclass
class _SetState:
    """A registered process set on this rank: its global ranks, this rank's place in it, and
    (for members) its communicator and negotiation."""

    ps: ProcessSet
    ranks: list[int]
    set_rank: int | None
    neg: _dtcomm.Negotiator | None
    comm: _dtcomm.Communicator | None = None
    #: Unnamed operations of this set so far (names must agree among its members only).
    counter: int = 0

    @property
    def size(self) -> int:
        return len(self.ranks)

    def index(self, global_rank: int, what: str) -> int:
        """``global_rank``'s rank in the set (``what`` names it in the error)."""
        try:
            return self.ranks.index(int(global_rank))
        except ValueError:
            raise ValueError(f"{what} {global_rank} is not in process set "
                             f"{self.ps.process_set_id} (ranks {self.ranks})") from None


class _Pending(NamedTuple):
    """An operation the caller holds a handle to."""

    neg: _dtcomm.Negotiator
    h: int  # its handle in ``neg``
    dtype: torch.dtype
    shape: tuple[int, ...] | None  # of the result
    target: torch.Tensor | None  # the tensor the operation works in (in place), or None
    kind: str


_lock = threading.Lock()
_neg: _dtcomm.Negotiator | None = None


class _Cross(NamedTuple):
    """Where this rank sits among the ranks of the same local rank on other hosts."""

    rank: int
    size: int
    homogeneous: bool


_cross: _Cross | None = None


def cross_of(me: int, local: list[tuple[int, int]]) -> _Cross:
    """Horovod's cross communicator from every rank's ``(local_rank, local_size)``: the ranks
    sharing this rank's local rank, one per host, in rank order; homogeneous when every host
    runs as many ranks."""
    mine = local[me][0]
    peers = [r for r, (lr, _) in enumerate(local) if lr == mine]
    return _Cross(peers.index(me), len(peers), len({ls for _, ls in local}) == 1)


def _learn_cross() -> _Cross:
    """Every rank's local rank and size, all-gathered once per ``init``."""
    mine = np.array([dtcomm.local_rank(), dtcomm.local_size()], dtype=np.int64)
    every = dtcomm.all_gather(mine)
    return cross_of(dtcomm.rank(), [(int(a), int(b)) for a, b in every])
# Registered process sets by id; 0 is the global set (its negotiation is ``_neg``).
_sets: dict[int, _SetState] = {}
_next_set_id = 1
_dynamic = False
_hid = 0
_handles: dict[int, _Pending] = {}
_names: dict[int, str] = {}
_timeline: Timeline | None = None


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Joins the group (``dtcomm.init()``: launcher variables, ``dtrun``, Horovod's and MPI's
    rank variables) and starts the negotiation. ``HOROVOD_CYCLE_TIME`` (ms, default 1) and
    ``HOROVOD_FUSION_THRESHOLD`` (bytes, default 128 MiB) are honoured. ``process_sets``: a
    list of :class:`ProcessSet` to register (every rank passes the same list), or
    ``"dynamic"`` (as ``HOROVOD_DYNAMIC_PROCESS_SETS=1``) to allow ``add_process_set`` and
    ``remove_process_set`` later."""
    global _neg, _dynamic, _cross
    if _neg is not None and _neg.ended_by() is not None:
        # Another rank shut the negotiation down (or this one's shutdown was cut short): leave
        # this group too and start over (every rank does the same, so all meet again in
        # dtcomm.init()).
        shutdown()
    with _lock:
        if _neg is not None:
            return
        if not dtcomm.is_initialized():
            dtcomm.init(verbose=False)
        _cross = _learn_cross()
        _neg = _negotiator()
        # As Horovod: leaving the process shuts down, which ends every rank's negotiation in
        # the same cycle (their pending operations fail naming this rank, rather than waiting
        # for the stall deadline), before the communicator says goodbye.
        atexit.unregister(shutdown)
        atexit.register(shutdown)
        _handles.clear()
        _reset_sets(_neg)
        _dynamic = (process_sets == "dynamic"
                    or os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") == "1")
    if isinstance(process_sets, (list, tuple)):
        for ps in process_sets:
            _register(ps if isinstance(ps, ProcessSet) else ProcessSet(ps))
    # HOROVOD_TIMELINE=DYNAMIC: no file at start, hvd.start_timeline() later (Horovod's rule).
    if os.environ.get("HOROVOD_TIMELINE", "DYNAMIC") != "DYNAMIC" and dtcomm.rank() == 0:
        start_timeline(os.environ["HOROVOD_TIMELINE"],
                       mark_cycles=os.environ.get("HOROVOD_TIMELINE_MARK_CYCLES") == "1")


def _negotiator(comm: _dtcomm.Communicator | None = None) -> _dtcomm.Negotiator:
    cycle = float(os.environ.get("HOROVOD_CYCLE_TIME", "1"))
    threshold = int(os.environ.get("HOROVOD_FUSION_THRESHOLD", str(128 << 20)))
    n = _dtcomm.Negotiator(comm or dtcomm.communicator(), cycle, threshold)
    if comm is None and _timeline is not None and _timeline.mark_cycles:
        n.mark_cycles(True)
    return n


def _take_marks() -> tuple[list[int], int]:
    """The global negotiator's cycle marks since the last call (for the timeline)."""
    n = _neg
    return n.take_cycle_marks() if n is not None else ([], 0)


def _reset_sets(neg: _dtcomm.Negotiator | None) -> None:
    """Forgets every process set but the global one (called with ``_lock`` held), shutting
    their negotiations and communicators down; the global set gets ``neg``."""
    global _next_set_id
    for sid, st in list(_sets.items()):
        if sid != 0:
            _close_set(st)
    _sets.clear()
    _next_set_id = 1
    if neg is not None:
        global_process_set.ranks = list(range(dtcomm.size()))
        _sets[0] = _SetState(global_process_set, global_process_set.ranks, dtcomm.rank(), neg)


def _close_set(st: _SetState) -> None:
    st.ps.process_set_id = None
    if st.neg is not None:
        st.neg.shutdown()
    if st.comm is not None:
        st.comm.shutdown()


def _set_state(ps: ProcessSet | None) -> _SetState:
    """The registered state of ``ps`` (the global set when None)."""
    _n()
    sid = 0 if ps is None else ps.process_set_id
    st = _sets.get(sid) if sid is not None else None
    if st is None or (ps is not None and st.ps is not ps and st.ranks != ps.ranks):
        raise ValueError(f"{ps} is not registered: add it with hvd.add_process_set() (or "
                         f"hvd.init(process_sets=[...])) on every rank first")
    return st


install_resolver(_set_state)


def _group(ps: ProcessSet | None) -> _SetState:
    """The set an operation runs on; this rank must be in it."""
    st = _set_state(ps)
    if st.neg is None:
        raise ValueError(f"rank {dtcomm.rank()} is not in process set "
                         f"{st.ps.process_set_id} (ranks {st.ranks}): only its members may "
                         f"run operations on it")
    return st


def _register(ps: ProcessSet) -> ProcessSet:
    """Registers ``ps`` on every rank (collective over the global set, in the same order on
    every rank): its members build its communicator and negotiation."""
    global _next_set_id
    me, n = dtcomm.rank(), dtcomm.size()
    if not ps.ranks or any(not 0 <= r < n for r in ps.ranks):
        raise ValueError(f"process set ranks {ps.ranks} must be a non-empty subset of "
                         f"0..{n - 1}")
    for st in _sets.values():
        if st.ranks == ps.ranks:
            raise ValueError(f"a process set with ranks {ps.ranks} is already registered "
                             f"(id {st.ps.process_set_id})")
    sid = _next_set_id
    member = me in ps.ranks
    listener = _dtcomm.DataListener() if member else None
    info = allgather_object({"ranks": ps.ranks, "addr": listener.addr if listener else None,
                             "secret": secrets.token_hex(16)}, name=f"process_set.{sid}")
    for r, i in enumerate(info):
        if i["ranks"] != ps.ranks:
            raise ValueError(f"hvd.add_process_set: rank {r} registered ranks {i['ranks']} "
                             f"where rank {me} registered {ps.ranks}: every rank must add the "
                             f"same process sets in the same order")
    comm = neg = None
    if member:
        comm = _dtcomm.Communicator.from_welcome(
            listener, f"horovod.process_set.{sid}", 1, ps.ranks.index(me), len(ps.ranks),
            [info[r]["addr"] for r in ps.ranks], info[0]["secret"])
        neg = _negotiator(comm)
    with _lock:
        _next_set_id = sid + 1
        ps.process_set_id = sid
        _sets[sid] = _SetState(ps, list(ps.ranks), ps.ranks.index(me) if member else None,
                               neg, comm)
    return ps


def add_process_set(process_set: Any) -> ProcessSet:
    """Registers a process set (a :class:`ProcessSet` or a list of ranks) after ``init``; every
    rank must call it, in the same order. Needs ``HOROVOD_DYNAMIC_PROCESS_SETS=1`` or
    ``init(process_sets="dynamic")``."""
    _n()
    if not _dynamic:
        raise ValueError("process sets can be added after hvd.init() only with dynamic process "
                         "sets: set HOROVOD_DYNAMIC_PROCESS_SETS=1 or call "
                         "hvd.init(process_sets='dynamic')")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    return _register(ps)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregisters a process set added earlier (every rank calls it); False if it was not
    registered. The global set cannot be removed."""
    _n()
    if not _dynamic:
        raise ValueError("process sets can be removed only with dynamic process sets: set "
                         "HOROVOD_DYNAMIC_PROCESS_SETS=1 or call hvd.init(process_sets='dynamic')")
    sid = process_set.process_set_id
    if sid is None or sid == 0 or sid not in _sets:
        return False
    barrier()  # every rank is done with it
    with _lock:
        st = _sets.pop(sid)
    _close_set(st)
    return True


def _elastic_reset(reason: str) -> None:
    """``hvd.elastic``: stops this round's negotiation (pending operations are forgotten),
    joins the native rendezvous's next round (``dtcomm.elastic``'s renewal: survivors keep
    their ranks; the job is not left) and negotiates on its communicator. Unnamed operations
    count from zero again, as after ``init``."""
    global _neg, _cross
    with _lock:
        old, _neg = _neg, None
        _handles.clear()
        _names.clear()
        # Process sets were built on the old round: they are gone (register them again).
        _reset_sets(None)
    if old is not None:
        old.shutdown()  # returns at once when the round's communicator failed
    _api._renew(reason)
    cross = _learn_cross()
    with _lock:
        _cross = cross
        _neg = _negotiator()
        _reset_sets(_neg)


def shutdown() -> None:
    """Stops the negotiation and leaves the group; ``init()`` may be called again."""
    global _neg
    stop_timeline()  # (first: its last cycle marks are in the negotiator)
    with _lock:
        if _neg is None:
            return
        # Forgotten first: an exception raised while this waits (a signal handler's) must not
        # leave a stopped negotiator that the next init() would take for a running one.
        neg, _neg = _neg, None
        _handles.clear()
        try:
            _reset_sets(None)
            neg.shutdown()
        finally:
            dtcomm.shutdown()


def started() -> bool:
    """Whether ``init()`` ran and this rank has not shut down since (another rank may have
    ended the negotiation meanwhile: see :func:`is_initialized`)."""
    return _neg is not None


def is_initialized() -> bool:
    """Whether ``init()`` ran and neither this rank nor another has shut down since."""
    return _neg is not None and _neg.ended_by() is None


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


def _x() -> _Cross:
    _n()
    if _cross is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return _cross


def cross_rank() -> int:
    """This rank's index among the ranks of the same local rank (one per host)."""
    return _x().rank


def cross_size() -> int:
    """Ranks of this rank's local rank across hosts (the hosts, when every host runs as many)."""
    return _x().size


def is_homogeneous() -> bool:
    """Whether every host runs the same number of processes."""
    return _x().homogeneous


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


def _name(kind: str, name: str | None, g: _SetState) -> str:
    if name:
        return f"{kind}.{name}"
    g.counter += 1
    return f"{kind}.noname.{g.counter}"


def _dtype(t: torch.Tensor) -> str:
    if t.device.type != "cpu":
        raise ValueError(f"tensors on {t.device} are not supported yet (CPU only)")
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise ValueError(f"unsupported tensor dtype {t.dtype}") from None


def _payload(t: torch.Tensor) -> Any:
    """The tensor as the negotiator takes it: a DLPack capsule of its memory (read in place and
    copied once there, or lent for an in-place operation). ``to_dlpack`` costs a tenth of
    ``t.__dlpack__()``, which counts for a step of many small gradients."""
    if not t.is_contiguous():
        raise ValueError("tensor must be contiguous")
    t = t.detach()
    return to_dlpack(t.view(torch.int16) if t.dtype == torch.bfloat16 else t)


def _submit_raw(n: _dtcomm.Negotiator, *args: Any, **kw: Any) -> int:
    try:
        return int(n.submit(*args, **kw))
    except ValueError:
        raise
    except RuntimeError as e:  # the negotiation failed earlier (e.g. a peer was lost)
        raise _internal(e)  # __cause__: the communicator failure


def _handle(neg: _dtcomm.Negotiator, h: int, dtype: torch.dtype,
            shape: tuple[int, ...] | None, target: torch.Tensor | None, kind: str,
            name: str | None = None) -> int:
    """A handle for the caller (unique across process sets); ``_lock`` is held."""
    global _hid
    _hid += 1
    _handles[_hid] = _Pending(neg, h, dtype, shape, target, kind)
    if name is not None:
        _names[_hid] = name
    return _hid


def _submit(kind: str, t: torch.Tensor, name: str | None, out_shape: tuple[int, ...] | None,
            process_set: Any = None, **kw: Any) -> int:
    """An operation whose result comes back as new bytes (``t`` is copied in once)."""
    with _lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name(kind, name, g)
        h = _submit_raw(g.neg, full, kind, _dtype(t), list(t.shape), _payload(t), **kw)
        return _handle(g.neg, h, t.dtype, out_shape, None, kind, full)


def _submit_in_place(kind: str, t: torch.Tensor, name: str | None, process_set: Any = None,
                     **kw: Any) -> int:
    """An allreduce or broadcast that works in ``t``'s own memory (no copy in or out); the
    caller's tensor must not be touched until it is synchronized, as in Horovod."""
    with _lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name(kind, name, g)
        h = _submit_raw(g.neg, full, kind, _dtype(t), list(t.shape), _payload(t),
                        in_place=True, **kw)
        return _handle(g.neg, h, t.dtype, tuple(t.shape), t, kind, full)


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
            raise _internal(e)  # __cause__: the communicator failure
        return self.tensor


def _lend_allreduce(t: torch.Tensor, full_name: str, op: str, pre: float, post: float,
                    process_set: Any = None) -> _Lent:
    """Starts an in-place allreduce of ``t`` named ``full_name`` (``op`` as the negotiator
    names it, ``post`` already divided for an average); ``synchronize`` it, or call it."""
    neg = _group(process_set).neg
    assert neg is not None
    h = _submit_raw(neg, full_name, "allreduce", _dtype(t), list(t.shape), _payload(t), op=op,
                    prescale=pre, postscale=post, in_place=True)
    return _Lent(neg, h, t)


def _fresh(tensor: torch.Tensor, copy: bool = True) -> torch.Tensor:
    """A new contiguous tensor for an out-of-place result, holding ``tensor``'s values
    (``copy``) or not (a broadcast's non-root rank)."""
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous")
    t = tensor.detach()
    return t.clone() if copy else torch.empty_like(t)


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
    return _allreduce(tensor, None, average, name, op, prescale_factor, postscale_factor,
                      process_set)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: int | None = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0, process_set: Any = None) -> int:
    """Starts an in-place allreduce of ``tensor``; returns a handle."""
    return _allreduce(tensor, tensor, average, name, op, prescale_factor, postscale_factor,
                      process_set)


def _allreduce(tensor: torch.Tensor, target: torch.Tensor | None, average: bool | None,
               name: str | None, op: int | None, pre: float, post: float,
               process_set: Any = None) -> int:
    o = _op(op, average)
    if o == Average:
        post = post / _group(process_set).size
    return _submit_in_place("allreduce", target if target is not None else _fresh(tensor),
                            name, process_set, op=_OPS[o], prescale=float(pre),
                            postscale=float(post))


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: Any = None, op: int | None = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """Allreduces ``tensor`` (Average by default) into a new tensor."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor, process_set))


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: int | None = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """Allreduces ``tensor`` in place."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: Any = None) -> int:
    """Starts an allgather (concatenation along dimension 0, which may differ per rank)."""
    t = tensor if tensor.dim() > 0 else tensor.reshape(1)
    return _submit("allgather", t, name, (-1, *t.shape[1:]), process_set)


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: Any = None) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along dimension 0."""
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: Any = None) -> int:
    """Starts a broadcast of ``root_rank``'s ``tensor`` into a new tensor (``root_rank`` is a
    global rank, also with a process set)."""
    g = _group(process_set)
    root = g.index(root_rank, "root_rank")
    out = _fresh(tensor, copy=root == g.set_rank)
    return _submit_in_place("broadcast", out, name, process_set, root=root)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: Any = None) -> int:
    """Starts an in-place broadcast of ``root_rank``'s ``tensor``."""
    root = _group(process_set).index(root_rank, "root_rank")
    return _submit_in_place("broadcast", tensor, name, process_set, root=root)


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: Any = None) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: Any = None) -> torch.Tensor:
    """Copies ``root_rank``'s ``tensor`` into every rank's ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def poll(handle: Any) -> bool:
    """Whether the operation of ``handle`` has completed (an integer handle, or the callable
    one of ``sparse_allreduce_async``)."""
    if not isinstance(handle, int) and hasattr(handle, "poll"):
        return bool(handle.poll())
    _n()
    with _lock:
        neg, h = _handles[handle][:2]
    return neg.poll(h)


def synchronize(handle: Any) -> Any:
    """Waits for ``handle``'s operation and returns its output tensor; raises
    ``HorovodInternalError`` if the operation failed (e.g. the ranks disagreed about it). The
    callable handle of ``sparse_allreduce_async`` is called."""
    if not isinstance(handle, int) and callable(handle):
        return handle()
    _n()
    with _lock:
        n, h, dtype, shape, target, kind = _handles.pop(handle)
    try:
        data, counts, times = n.wait(h)
    except RuntimeError as e:
        raise _internal(e)  # __cause__: the communicator failure
    if _timeline is not None:
        _timeline.record(_names.pop(handle, f"handle.{handle}"), kind.split("_")[0], times)
    _names.pop(handle, None)
    if kind == "barrier":
        return torch.empty(0)
    if target is not None:  # worked in place: the result is there
        return target
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype if dtype != torch.bfloat16 else np.int16
    arr = np.frombuffer(data, dtype=np_dtype).copy()
    out = torch.from_numpy(arr)
    if dtype == torch.bfloat16:
        out = out.view(torch.bfloat16)
    out = out.reshape(shape) if shape is not None else out
    if kind == "alltoall_splits":
        row = 1
        for d in (shape or (-1,))[1:]:
            row *= d
        return out, torch.tensor([c // max(row, 1) for c in counts], dtype=torch.int32)
    return out


def barrier(process_set: Any = None) -> None:
    """Waits until every rank (of the process set) reaches it (other operations may still be
    pending)."""
    with _lock:
        g = _group(process_set)
        assert g.neg is not None
        # One name for every barrier, as Horovod's "barrier.noname": ranks whose counts of
        # unnamed operations differ (one failed part way through a step) still meet here.
        inner = _submit_raw(g.neg, "barrier.noname", "barrier", "uint8", [0], b"")
        h = _handle(g.neg, inner, torch.uint8, None, None, "barrier")
    synchronize(h)


def join(device: int = -1) -> int:
    """Declares that this rank has no more data: until every rank has joined, it contributes
    zeros to the others' allreduces (Average still divides by the full size) and takes part in
    their barriers; other operations that need it fail on the others. Returns the rank that
    joined last, the same on every rank."""
    with _lock:
        n = _n()
        h = _submit_raw(n, "join", "join", "uint8", [0], b"")
    try:
        _, counts, _times = n.wait(h)
    except RuntimeError as e:
        raise _internal(e)  # __cause__: the communicator failure
    return int(counts[0])


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing this rank's timeline (Chrome-trace JSON) to ``file_path``."""
    global _timeline
    n = _n()
    stop_timeline()
    _timeline = Timeline(file_path, dtcomm.rank(), mark_cycles, _take_marks)
    n.mark_cycles(mark_cycles)


def stop_timeline() -> None:
    """Finishes and closes the timeline file, if one is being written."""
    global _timeline
    if _timeline is not None:
        _timeline.close()
        _timeline = None
        if _neg is not None:
            _neg.mark_cycles(False)


def broadcast_parameters(params: Any, root_rank: int, prefix: str | None = None,
                         process_set: Any = None) -> None:
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
            handles.append(broadcast_async_(t, root_rank, name=f"{prefix or ''}{name}",
                                            process_set=process_set))
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
    format (None, numbers, strings, bytes, lists, tuples, sets, dicts, numpy arrays, torch
    tensors), never as pickles."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(_encode(obj)), dtype=torch.uint8)
        sz = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        sz = torch.tensor([0], dtype=torch.int64)
    sz = broadcast_(sz, root_rank, name=f"{name}.sz", process_set=process_set)
    if rank() != root_rank:
        payload = torch.zeros(int(sz.item()), dtype=torch.uint8)
    payload = broadcast_(payload, root_rank, name=f"{name}.t", process_set=process_set)
    return _decode(payload.numpy().tobytes())


def allgather_object(obj: Any, name: str | None = None, process_set: Any = None) -> list[Any]:
    """Every rank's ``obj``, in rank order (same format as :func:`broadcast_object`)."""
    name = name or type(obj).__name__
    data = _encode(obj)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64), name=f"{name}.sz",
                      process_set=process_set).tolist()
    blob = allgather(torch.frombuffer(bytearray(data), dtype=torch.uint8), name=f"{name}.t",
                     process_set=process_set)
    out, at = [], 0
    for sz in sizes:
        out.append(_decode(blob[at:at + sz].numpy().tobytes()))
        at += sz
    return out

def _splits(splits: Any, tensor: torch.Tensor, process_set: Any = None) -> list[int]:
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


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: Any = None) -> int:
    """Starts an alltoall: ``splits[p]`` rows of dimension 0 go to rank ``p`` (equal parts
    without ``splits``)."""
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    sp = _splits(splits, tensor, process_set)
    kind = "alltoall_splits" if splits is not None else "alltoall"
    with _lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name("alltoall", name, g)
        h = _submit_raw(g.neg, full, "alltoall", _dtype(tensor), list(tensor.shape),
                        _payload(tensor), splits=sp)
        return _handle(g.neg, h, tensor.dtype, (-1, *tensor.shape[1:]), None, kind, full)


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
             process_set: Any = None) -> Any:
    """Scatters slices of dimension 0 to every rank and gathers theirs; returns ``output``, or
    ``(output, received_splits)`` when ``splits`` is given."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, compression: Any = None,
                        op: int = Average, process_set: Any = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts a reduction whose dimension 0 is split over the ranks (remainder rows to the
    lowest ranks)."""
    if tensor.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    o = _op(op, None)
    g0 = _group(process_set)
    assert g0.set_rank is not None
    post = postscale_factor / g0.size if o == Average else postscale_factor
    q, rem = divmod(tensor.shape[0], g0.size)
    mine = q + (1 if g0.set_rank < rem else 0)
    with _lock:
        g = _group(process_set)
        assert g.neg is not None
        full = _name("reducescatter", name, g)
        h = _submit_raw(g.neg, full, "reducescatter", _dtype(tensor), list(tensor.shape),
                        _payload(tensor), op=_OPS[o], prescale=float(prescale_factor),
                        postscale=float(post))
        return _handle(g.neg, h, tensor.dtype, (mine, *tensor.shape[1:]), None,
                       "reducescatter", full)


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression: Any = None,
                  op: int = Average, process_set: Any = None, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over the ranks; each keeps its rows of dimension 0."""
    return synchronize(reducescatter_async(tensor, name, compression, op, process_set,
                                           prescale_factor, postscale_factor))


def _group_names(kind: str, name: str | None, count: int,
                 process_set: Any = None) -> list[str | None]:
    if name is None:
        g = _group(process_set)
        with _lock:
            g.counter += 1
            return [f"noname.{g.counter}.{i}" for i in range(count)]
    return [f"{name}.{i}" for i in range(count)]


def grouped_allreduce_async(tensors: list[torch.Tensor], average: bool | None = None,
                            name: str | None = None, op: int | None = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: Any = None) -> list[int]:
    """Starts one allreduce per tensor (fused as the threshold allows)."""
    names = _group_names("allreduce", name, len(tensors), process_set)
    return [allreduce_async(t, average, nm, op, prescale_factor, postscale_factor, process_set)
            for t, nm in zip(tensors, names)]


def grouped_allreduce_async_(tensors: list[torch.Tensor], average: bool | None = None,
                             name: str | None = None, op: int | None = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: Any = None) -> list[int]:
    """In-place :func:`grouped_allreduce_async`."""
    names = _group_names("allreduce", name, len(tensors), process_set)
    return [allreduce_async_(t, average, nm, op, prescale_factor, postscale_factor, process_set)
            for t, nm in zip(tensors, names)]


def grouped_allreduce(tensors: list[torch.Tensor], average: bool | None = None,
                      name: str | None = None, compression: Any = None, op: int | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: Any = None) -> list[torch.Tensor]:
    """Allreduces every tensor of the list; returns the new tensors."""
    return [synchronize(h) for h in grouped_allreduce_async(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set)]


def grouped_allreduce_(tensors: list[torch.Tensor], average: bool | None = None,
                       name: str | None = None, op: int | None = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: Any = None) -> list[torch.Tensor]:
    """Allreduces every tensor of the list in place."""
    return [synchronize(h) for h in grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set)]


def grouped_allgather_async(tensors: list[torch.Tensor], name: str | None = None,
                            process_set: Any = None) -> list[int]:
    """Starts one allgather per tensor."""
    return [allgather_async(t, nm, process_set) for t, nm in
            zip(tensors, _group_names("allgather", name, len(tensors), process_set))]


def grouped_allgather(tensors: list[torch.Tensor], name: str | None = None,
                      process_set: Any = None) -> list[torch.Tensor]:
    """Allgathers every tensor of the list."""
    return [synchronize(h) for h in grouped_allgather_async(tensors, name, process_set)]


def grouped_reducescatter_async(tensors: list[torch.Tensor], name: str | None = None,
                                compression: Any = None, op: int = Average,
                                process_set: Any = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> list[int]:
    """Starts one reducescatter per tensor."""
    return [reducescatter_async(t, nm, compression, op, process_set, prescale_factor,
                                postscale_factor)
            for t, nm in zip(tensors, _group_names("reducescatter", name, len(tensors),
                                                   process_set))]


def grouped_reducescatter(tensors: list[torch.Tensor], name: str | None = None,
                          compression: Any = None, op: int = Average, process_set: Any = None,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reducescatters every tensor of the list."""
    return [synchronize(h) for h in grouped_reducescatter_async(
        tensors, name, compression, op, process_set, prescale_factor, postscale_factor)]
