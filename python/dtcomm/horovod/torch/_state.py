"""What the Horovod layer holds between calls: the global negotiation, the registered process
sets, the handles the caller holds, the timeline (one :class:`Runtime`, :data:`rt`), and the
lookups every operation starts with."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

import dtcomm
from dtcomm import _dtcomm
from dtcomm._vocab import DType

from .process_sets import ProcessSet, install_resolver
from .timeline import Timeline


class HorovodInternalError(RuntimeError):
    """An operation failed on every rank (ranks disagreed about it, or the group failed).
    When the communicator failed (a peer lost, the round ended), ``__cause__`` is dtcomm's
    typed error (``PeerLostError``, ``RoundEndedError``, ...); ``hvd.elastic.run`` retries
    on those."""


def _failure_or(e: RuntimeError) -> BaseException:
    """The ``__cause__`` of the :class:`HorovodInternalError` that reports ``e``: the
    communicator's failure if it failed (a peer lost, the round ended), else ``e``."""
    failure = None
    try:
        failure = dtcomm.communicator().failure()
    except Exception:  # no group (shut down): nothing more to say
        pass
    return failure if failure is not None else e


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
    dtype: DType
    shape: tuple[int, ...] | None  # of the result
    target: torch.Tensor | None  # the tensor the operation works in (in place), or None
    kind: str


class _Cross(NamedTuple):
    """Where this rank sits among the ranks of the same local rank on other hosts."""

    rank: int
    size: int
    homogeneous: bool


def cross_of(me: int, local: list[tuple[int, int]]) -> _Cross:
    """Horovod's cross communicator from every rank's ``(local_rank, local_size)``: the ranks
    sharing this rank's local rank, one per host, in rank order; homogeneous when every host
    runs as many ranks."""
    mine = local[me][0]
    peers = [r for r, (lr, _) in enumerate(local) if lr == mine]
    return _Cross(peers.index(me), len(peers), len({ls for _, ls in local}) == 1)


@dataclass
class Runtime:
    """The Horovod layer's state in this process (one: :data:`rt`). ``lock`` guards the
    tables; ``neg`` is None before ``init`` and after ``shutdown``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The global set's negotiation.
    neg: _dtcomm.Negotiator | None = None
    cross: _Cross | None = None
    #: Registered process sets by id; 0 is the global set (its negotiation is ``neg``).
    sets: dict[int, _SetState] = field(default_factory=dict)
    next_set_id: int = 1
    #: Whether sets may be added and removed after ``init``.
    dynamic: bool = False
    #: The last handle given out, and the operations behind the handles the caller holds.
    hid: int = 0
    handles: dict[int, _Pending] = field(default_factory=dict)
    #: The full name of each handle's operation (for the timeline).
    names: dict[int, str] = field(default_factory=dict)
    timeline: Timeline | None = None


rt = Runtime()


def _n() -> _dtcomm.Negotiator:
    """The global negotiation; ValueError before ``init``."""
    if rt.neg is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return rt.neg


def _set_state(ps: ProcessSet | None) -> _SetState:
    """The registered state of ``ps`` (the global set when None)."""
    _n()
    sid = 0 if ps is None else ps.process_set_id
    st = rt.sets.get(sid) if sid is not None else None
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
