"""The Horovod layer's life: ``init`` (the group, the negotiation, the process sets),
``shutdown``, the elastic move to a new round, process-set registration and the timeline."""

from __future__ import annotations

import atexit
import os
import secrets
from collections.abc import Sequence
from typing import Literal, TypeAlias

import numpy as np

import dtcomm
from dtcomm import _api, _dtcomm

from ._collectives import barrier
from ._objects import allgather_object
from ._state import _Cross, _n, _SetState, cross_of, rt
from .process_sets import ProcessSet, global_process_set
from .timeline import Timeline

#: What ``init`` and ``add_process_set`` take for a process set: one, or its global ranks.
ProcessSetLike: TypeAlias = "ProcessSet | Sequence[int]"


def init(comm: object = None,
         process_sets: Sequence[ProcessSetLike] | Literal["dynamic"] | None = None) -> None:
    """Joins the group (``dtcomm.init()``: launcher variables, ``dtrun``, Horovod's and MPI's
    rank variables) and starts the negotiation. ``HOROVOD_CYCLE_TIME`` (ms, default 1) and
    ``HOROVOD_FUSION_THRESHOLD`` (bytes, default 128 MiB) are honoured. ``process_sets``: a
    list of :class:`ProcessSet` to register (every rank passes the same list), or
    ``"dynamic"`` (as ``HOROVOD_DYNAMIC_PROCESS_SETS=1``) to allow ``add_process_set`` and
    ``remove_process_set`` later. ``comm`` (Horovod's MPI communicator) is not used."""
    if rt.neg is not None and rt.neg.ended_by() is not None:
        # Another rank shut the negotiation down (or this one's shutdown was cut short): leave
        # this group too and start over (every rank does the same, so all meet again in
        # dtcomm.init()).
        shutdown()
    with rt.lock:
        if rt.neg is not None:
            return
        if not dtcomm.is_initialized():
            dtcomm.init(verbose=False)
        rt.cross = _learn_cross()
        rt.neg = _negotiator()
        # As Horovod: leaving the process shuts down, which ends every rank's negotiation in
        # the same cycle (their pending operations fail naming this rank, rather than waiting
        # for the stall deadline), before the communicator says goodbye.
        atexit.unregister(shutdown)
        atexit.register(shutdown)
        rt.handles.clear()
        _reset_sets(rt.neg)
        rt.dynamic = (process_sets == "dynamic"
                      or os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") == "1")
    if isinstance(process_sets, (list, tuple)):
        for ps in process_sets:
            _register(ps if isinstance(ps, ProcessSet) else ProcessSet(ps))
    # HOROVOD_TIMELINE=DYNAMIC: no file at start, hvd.start_timeline() later (Horovod's rule).
    if os.environ.get("HOROVOD_TIMELINE", "DYNAMIC") != "DYNAMIC" and dtcomm.rank() == 0:
        start_timeline(os.environ["HOROVOD_TIMELINE"],
                       mark_cycles=os.environ.get("HOROVOD_TIMELINE_MARK_CYCLES") == "1")


def _learn_cross() -> _Cross:
    """Every rank's local rank and size, all-gathered once per ``init``."""
    mine = np.array([dtcomm.local_rank(), dtcomm.local_size()], dtype=np.int64)
    every = dtcomm.all_gather(mine)
    return cross_of(dtcomm.rank(), [(int(a), int(b)) for a, b in every])


def _negotiator(comm: _dtcomm.Communicator | None = None) -> _dtcomm.Negotiator:
    """A negotiation over ``comm`` (the group's communicator when None), with Horovod's cycle
    time and fusion threshold."""
    cycle = float(os.environ.get("HOROVOD_CYCLE_TIME", "1"))
    threshold = int(os.environ.get("HOROVOD_FUSION_THRESHOLD", str(128 << 20)))
    n = _dtcomm.Negotiator(comm or dtcomm.communicator(), cycle, threshold)
    if comm is None and rt.timeline is not None and rt.timeline.mark_cycles:
        n.mark_cycles(True)
    return n


def _take_marks() -> tuple[list[int], int]:
    """The global negotiator's cycle marks since the last call (for the timeline)."""
    n = rt.neg
    return n.take_cycle_marks() if n is not None else ([], 0)


def _reset_sets(neg: _dtcomm.Negotiator | None) -> None:
    """Forgets every process set but the global one (called with ``rt.lock`` held), shutting
    their negotiations and communicators down; the global set gets ``neg``."""
    for sid, st in list(rt.sets.items()):
        if sid != 0:
            _close_set(st)
    rt.sets.clear()
    rt.next_set_id = 1
    if neg is not None:
        global_process_set.ranks = list(range(dtcomm.size()))
        rt.sets[0] = _SetState(global_process_set, global_process_set.ranks, dtcomm.rank(), neg)


def _close_set(st: _SetState) -> None:
    st.ps.process_set_id = None
    if st.neg is not None:
        st.neg.shutdown()
    if st.comm is not None:
        st.comm.shutdown()


def _register(ps: ProcessSet) -> ProcessSet:
    """Registers ``ps`` on every rank (collective over the global set, in the same order on
    every rank): its members build its communicator and negotiation."""
    me, n = dtcomm.rank(), dtcomm.size()
    if not ps.ranks or any(not 0 <= r < n for r in ps.ranks):
        raise ValueError(f"process set ranks {ps.ranks} must be a non-empty subset of "
                         f"0..{n - 1}")
    for st in rt.sets.values():
        if st.ranks == ps.ranks:
            raise ValueError(f"a process set with ranks {ps.ranks} is already registered "
                             f"(id {st.ps.process_set_id})")
    sid = rt.next_set_id
    listener = _dtcomm.DataListener() if me in ps.ranks else None
    info = allgather_object({"ranks": ps.ranks, "addr": listener.addr if listener else None,
                             "secret": secrets.token_hex(16)}, name=f"process_set.{sid}")
    for r, i in enumerate(info):
        if i["ranks"] != ps.ranks:
            raise ValueError(f"hvd.add_process_set: rank {r} registered ranks {i['ranks']} "
                             f"where rank {me} registered {ps.ranks}: every rank must add the "
                             f"same process sets in the same order")
    comm = neg = None
    if listener is not None:  # a member
        comm = _dtcomm.Communicator.from_welcome(
            listener, f"horovod.process_set.{sid}", 1, ps.ranks.index(me), len(ps.ranks),
            [info[r]["addr"] for r in ps.ranks], info[0]["secret"])
        neg = _negotiator(comm)
    with rt.lock:
        rt.next_set_id = sid + 1
        ps.process_set_id = sid
        rt.sets[sid] = _SetState(ps, list(ps.ranks),
                                 ps.ranks.index(me) if listener is not None else None, neg, comm)
    return ps


def add_process_set(process_set: ProcessSetLike) -> ProcessSet:
    """Registers a process set (a :class:`ProcessSet` or a list of ranks) after ``init``; every
    rank must call it, in the same order. Needs ``HOROVOD_DYNAMIC_PROCESS_SETS=1`` or
    ``init(process_sets="dynamic")``."""
    _n()
    if not rt.dynamic:
        raise ValueError("process sets can be added after hvd.init() only with dynamic process "
                         "sets: set HOROVOD_DYNAMIC_PROCESS_SETS=1 or call "
                         "hvd.init(process_sets='dynamic')")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    return _register(ps)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregisters a process set added earlier (every rank calls it); False if it was not
    registered. The global set cannot be removed."""
    _n()
    if not rt.dynamic:
        raise ValueError("process sets can be removed only with dynamic process sets: set "
                         "HOROVOD_DYNAMIC_PROCESS_SETS=1 or call hvd.init(process_sets='dynamic')")
    sid = process_set.process_set_id
    if sid is None or sid == 0 or sid not in rt.sets:
        return False
    barrier()  # every rank is done with it
    with rt.lock:
        st = rt.sets.pop(sid)
    _close_set(st)
    return True


def _elastic_reset(reason: str) -> None:
    """``hvd.elastic``: stops this round's negotiation (pending operations are forgotten),
    joins the native rendezvous's next round (``dtcomm.elastic``'s renewal: survivors keep
    their ranks; the job is not left) and negotiates on its communicator. Unnamed operations
    count from zero again, as after ``init``."""
    with rt.lock:
        old, rt.neg = rt.neg, None
        rt.handles.clear()
        rt.names.clear()
        # Process sets were built on the old round: they are gone (register them again).
        _reset_sets(None)
    if old is not None:
        old.shutdown()  # returns at once when the round's communicator failed
    _api._renew(reason)
    cross = _learn_cross()
    with rt.lock:
        rt.cross = cross
        rt.neg = _negotiator()
        _reset_sets(rt.neg)


def shutdown() -> None:
    """Stops the negotiation and leaves the group; ``init()`` may be called again."""
    stop_timeline()  # (first: its last cycle marks are in the negotiator)
    with rt.lock:
        if rt.neg is None:
            return
        # Forgotten first: an exception raised while this waits (a signal handler's) must not
        # leave a stopped negotiator that the next init() would take for a running one.
        neg, rt.neg = rt.neg, None
        rt.handles.clear()
        try:
            _reset_sets(None)
            neg.shutdown()
        finally:
            dtcomm.shutdown()


def started() -> bool:
    """Whether ``init()`` ran and this rank has not shut down since (another rank may have
    ended the negotiation meanwhile: see :func:`is_initialized`)."""
    return rt.neg is not None


def is_initialized() -> bool:
    """Whether ``init()`` ran and neither this rank nor another has shut down since."""
    return rt.neg is not None and rt.neg.ended_by() is None


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing this rank's timeline (Chrome-trace JSON) to ``file_path``."""
    n = _n()
    stop_timeline()
    rt.timeline = Timeline(file_path, dtcomm.rank(), mark_cycles, _take_marks)
    n.mark_cycles(mark_cycles)


def stop_timeline() -> None:
    """Finishes and closes the timeline file, if one is being written."""
    if rt.timeline is not None:
        rt.timeline.close()
        rt.timeline = None
        if rt.neg is not None:
            rt.neg.mark_cycles(False)
