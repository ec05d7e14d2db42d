"""A launcher's agent relays its workers' summaries of their calls to the native server.

Where the agents (one per node) are a native job's members and their workers meet through a
store (``dtrun --rdzv-backend native``, ``torchrun --rdzv-backend=dtcomm``), the workers write
their flight recorder's summary there once a second (``dtcomm/progress/<rank>``,
``dtcomm._progress``); each agent reads its own workers' records and sends them on the native
connection it already holds (``ClientMsg::Relay``), so that ``dt-rdzv status --hang JOB`` and
``/v1/jobs/JOB/hang`` diagnose the workers, with no help from any one rank or node
(``docs/hang.md``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Protocol

from . import _dtcomm

#: Seconds between two relays.
EVERY = 1.0
#: Where rank 0's publisher writes the workers' world size (``dtcomm._progress``).
WORLD_KEY = "dtcomm/progress/world"


class _Member(Protocol):
    def relay_records(self, world: int, records: list[bytes]) -> int: ...


class Relay:
    """Relays, at most once a second (:meth:`step`), the records of this node's workers: the
    global ranks ``ranks(world)`` gives for the workers' world size (``world``, or read from
    the store when ``None``), read from the store ``store()`` opens (``None``: not reachable
    yet). A store or server that does not answer only skips that relay."""

    def __init__(self, member: _Member, store: Callable[[], _dtcomm.StoreClient | None],
                 ranks: Callable[[int], list[int]], world: int | None = None) -> None:
        self._member = member
        self._open = store
        self._store: _dtcomm.StoreClient | None = None
        self._ranks = ranks
        self._world = world
        self._last = 0.0
        self._failed = False

    def step(self) -> None:
        """Relays the records present now, if a second has passed since the last relay."""
        now = time.monotonic()
        if now - self._last < EVERY:
            return
        self._last = now
        try:
            if self._store is None:
                self._store = self._open()
                if self._store is None:
                    return
            world = self._world
            if world is None:
                if not self._store.check([WORLD_KEY]):
                    return
                world = int(bytes(self._store.get(WORLD_KEY, 5.0)).decode() or 0)
            keys = [f"dtcomm/progress/{r}" for r in self._ranks(world)]
            records = [bytes(self._store.get(k, 5.0)) for k in keys if self._store.check([k])]
            if records:
                self._member.relay_records(world, records)
            self._failed = False
        # Whatever goes wrong (a store or server that does not answer, a record that does not
        # parse), a relay only skips this second: it must never stop the agent that calls it
        # (torch's elastic agent calls it from its monitor loop).
        except Exception as e:  # noqa: BLE001
            self._store = None
            if not self._failed:
                self._failed = True
                print(f"[dtcomm] relaying the workers' summaries failed (trying again each "
                      f"second): {e}", file=sys.stderr, flush=True)


def opened(store: _dtcomm.StoreClient) -> Callable[[], _dtcomm.StoreClient | None]:
    """A store already open, for :class:`Relay`."""
    return lambda: store


def fixed(ranks: list[int]) -> Callable[[int], list[int]]:
    """Ranks known beforehand, whatever the world, for :class:`Relay`."""
    return lambda _world: ranks
