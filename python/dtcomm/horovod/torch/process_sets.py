"""Horovod's process sets: collectives among a subset of the ranks, each set with its own
communicator and its own negotiation (so that disjoint sets never wait for each other).

A set is registered collectively over every rank of the job (``hvd.init(process_sets=[...])``,
or ``hvd.add_process_set`` after ``init`` with ``HOROVOD_DYNAMIC_PROCESS_SETS=1`` /
``init(process_sets="dynamic")``), in the same order everywhere, which gives it the same id on
every rank. Its members bind a data listener, exchange the addresses and a link secret over the
global set, and build the set's communicator from them (the native path's
``Communicator.from_welcome``: no store, links proven with the secret).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NoReturn, Protocol, SupportsInt


class Registered(Protocol):
    """What a set's registered state tells it (``_state._SetState``)."""

    @property
    def ranks(self) -> list[int]:
        """The set's global ranks."""
        ...

    @property
    def set_rank(self) -> int | None:
        """This process's rank in the set; None outside it."""
        ...


def _not_initialized(ps: ProcessSet) -> NoReturn:
    raise ValueError("Horovod has not been initialized; use hvd.init().")


#: How a set finds its registered state: installed by ``_state`` (which holds the registry and
#: imports this module, never the other way round).
_state_of: Callable[[ProcessSet], Registered] = _not_initialized


def install_resolver(resolve: Callable[[ProcessSet], Registered]) -> None:
    """Makes ``resolve`` the lookup of every set's registered state (``_state`` calls it)."""
    global _state_of
    _state_of = resolve


class ProcessSet:
    """A set of global ranks (``hvd.ProcessSet([0, 2])``). ``process_set_id`` is set when it
    is registered; ``hvd.global_process_set`` (id 0) holds every rank."""

    def __init__(self, ranks: Iterable[SupportsInt]) -> None:
        self.ranks: list[int] = sorted({int(r) for r in ranks})
        self.process_set_id: int | None = None

    def _registered(self) -> Registered:
        return _state_of(self)

    def size(self) -> int:
        """Ranks in the set."""
        return len(self._registered().ranks)

    def rank(self) -> int:
        """This process's rank within the set, -1 when it is not in it."""
        s = self._registered()
        return s.set_rank if s.set_rank is not None else -1

    def included(self) -> bool:
        """Whether this process is in the set."""
        return self._registered().set_rank is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self) -> int:
        return hash(tuple(self.ranks))

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


#: Every rank of the job (id 0); its ranks are filled by ``hvd.init``.
global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
