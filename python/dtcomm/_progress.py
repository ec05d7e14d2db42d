"""Store jobs' summaries of their calls: where ranks meet through a store (torchrun's static
rendezvous, ``env://``), each rank writes its flight recorder's summary under
``dtcomm/progress/<rank>`` once a second, so that ``dt-rdzv status --hang --store HOST:PORT``
(or any reader of the store) says which rank the others wait for, with no help from rank 0.
Members of native rounds send the same summary on their heartbeats instead (``docs/hang.md``).

One daemon thread per process, started with the world group; it stops at the group's
shutdown, and at the first store error (a store that went away: nothing left to tell).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from . import _dtcomm

#: Seconds between two summaries.
EVERY = 1.0
WORLD_KEY = "dtcomm/progress/world"

_log = logging.getLogger(__name__)


def _root_store(store: Any) -> Any:
    """The store under torch's ``PrefixStore`` wrappers: summaries live at its root, where a
    reader that knows only the store's address finds them."""
    under = store
    while hasattr(under, "underlying_store"):
        under = under.underlying_store
    return under


class Publisher:
    """Writes this rank's summary to ``store`` every :data:`EVERY` seconds until stopped."""

    def __init__(self, store: Any, rank: int, world: int) -> None:
        self._store = _root_store(store)
        self._rank = rank
        self._world = world
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"dtcomm-progress-{rank}", daemon=True
        )

    def start(self) -> Publisher:
        """Starts the thread (after one summary written at once)."""
        self._thread.start()
        return self

    def _publish(self) -> None:
        record = _dtcomm.progress_record(self._rank)
        self._store.set(f"dtcomm/progress/{self._rank}", record)

    def _run(self) -> None:
        try:
            if self._rank == 0:
                self._store.set(WORLD_KEY, str(self._world))
            while True:
                self._publish()
                if self._stop.wait(EVERY):
                    return
        except Exception as e:  # noqa: BLE001 - the store went away: nothing left to tell
            _log.debug("dtcomm: rank %d stops publishing its calls: %s", self._rank, e)

    def stop(self) -> None:
        """Stops the thread (at most one store call later)."""
        self._stop.set()
