"""Store jobs' summaries of their calls: where ranks meet through a store (torchrun's static
rendezvous, ``env://``), each rank writes its flight recorder's summary under
``dtcomm/progress/<rank>`` once a second, so that ``dt-rdzv status --hang --store HOST:PORT``
(or any reader of the store) says which rank the others wait for, with no help from rank 0.
Members of native rounds send the same summary on their heartbeats instead (``docs/hang.md``).

One daemon thread per process, started with the world group; it stops at the group's
shutdown, at the first store error (a store that went away: nothing left to tell), and at the
interpreter's exit (``atexit``), which most programs reach without destroying the group: a
daemon thread still calling torch's store when the interpreter finalises is ended inside C++
(``pthread_exit`` unwinding through torch's frames), which aborts the process ("terminate
called without an active exception") after the program's work is done.

With ``TORCH_FR_DUMP_ON_TIMEOUT`` set, the same thread carries asks to dump (:class:`DumpAsks`):
a rank whose call timed out (and dumped its own trace) posts the ask to the store, and every
rank that sees it dumps its trace too, the rank in no call, the usual culprit, included, as
torch's watchdogs do through the same ``exception_dump`` key (so a job mixing torch's NCCL
groups with dtcomm's answers either's ask). Members of native rounds hear asks from the
rendezvous server instead.
"""

from __future__ import annotations

import atexit
import logging
import struct
import threading
from typing import Any

from . import _dtcomm

#: Seconds between two summaries.
EVERY = 1.0
#: Longest :meth:`Publisher.stop` waits for a store call in flight (one takes microseconds;
#: a store that stopped answering is left to its own timeout).
JOIN = 2.0
WORLD_KEY = "dtcomm/progress/world"
#: torch's key, at the store's root: a rank whose watchdog caught a timeout sets it (its rank,
#: 4 bytes little-endian) and every rank's monitor that sees it dumps its flight recorder.
TORCH_DUMP_KEY = "exception_dump"
#: dtcomm's count of asks (``add``) and the last ask's asker and words (``<rank>\n<why>``).
ASKS_KEY = "dtcomm/dump/asks"
WHY_KEY = "dtcomm/dump/why"

_log = logging.getLogger(__name__)


def _root_store(store: Any) -> Any:
    """The store under torch's ``PrefixStore`` wrappers: summaries live at its root, where a
    reader that knows only the store's address finds them."""
    under = store
    while hasattr(under, "underlying_store"):
        under = under.underlying_store
    return under


class DumpAsks:
    """One rank's side of the asks to dump that travel through ``store`` (its root): what
    :meth:`step` does once a second on the publisher's thread. Asks made before this group
    started (the same store, an earlier group) are not answered."""

    def __init__(self, store: Any, rank: int) -> None:
        self._store = store
        self._rank = rank
        self._seen = int(store.add(ASKS_KEY, 0))
        self._torch_seen = bool(store.check([TORCH_DUMP_KEY]))

    def step(self) -> None:
        """Posts this process's ask if a call timed out; dumps on another rank's new ask."""
        ask = _dtcomm.flight_take_dump_ask()
        if ask is not None:
            asker, why = ask
            # The words first, then the count the others watch, then torch's key.
            self._store.set(WHY_KEY, f"{asker}\n{why}")
            self._store.add(ASKS_KEY, 1)
            self._store.set(TORCH_DUMP_KEY, struct.pack("<i", asker))
        n = int(self._store.add(ASKS_KEY, 0))
        if n > self._seen:
            self._seen = n
            self._torch_seen = True  # set with ours; one ask, one dump
            asker_s, _, why = self._store.get(WHY_KEY).decode(errors="replace").partition("\n")
            self._dump(int(asker_s) if asker_s.isdigit() else None, why)
        elif not self._torch_seen and self._store.check([TORCH_DUMP_KEY]):
            self._torch_seen = True
            raw = bytes(self._store.get(TORCH_DUMP_KEY))
            asker = struct.unpack("<i", raw)[0] if len(raw) == 4 else -1
            self._dump(asker if asker >= 0 else None,
                       "a collective timed out (torch's exception_dump)")

    def _dump(self, asker: int | None, why: str) -> None:
        _log.debug("dtcomm: rank %d: rank %s asked every rank to dump: %s", self._rank, asker,
                   why)
        _dtcomm.flight_dump_asked(self._rank, asker, why)


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
        with _LOCK:
            _RUNNING.add(self)
        self._thread.start()
        return self

    def _publish(self) -> None:
        record = _dtcomm.progress_record(self._rank)
        self._store.set(f"dtcomm/progress/{self._rank}", record)

    def _run(self) -> None:
        try:
            if self._rank == 0:
                self._store.set(WORLD_KEY, str(self._world))
            asks = DumpAsks(self._store, self._rank) if _dtcomm.flight_dumps_on_timeout() else None
            while True:
                self._publish()
                if asks is not None:
                    asks.step()
                if self._stop.wait(EVERY):
                    return
        except Exception as e:  # noqa: BLE001 - the store went away: nothing left to tell
            _log.debug("dtcomm: rank %d stops publishing its calls: %s", self._rank, e)
        finally:
            with _LOCK:
                _RUNNING.discard(self)

    def stop(self, wait: float = JOIN) -> None:
        """Stops the thread and waits (at most ``wait`` seconds) for the store call it may be
        in, so that none is in flight once the group is gone. With ``wait=0`` (an abort, which
        must not wait on a store that may be gone) it returns at once; the thread stays listed
        until it ends, so the interpreter's exit still waits for it."""
        self._stop.set()
        if wait > 0 and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait)
            if self._thread.is_alive():
                _log.debug("dtcomm: rank %d: the store call of its summary did not end within "
                           "%.0fs", self._rank, wait)


_LOCK = threading.Lock()
#: The publishers whose thread has not ended.
_RUNNING: set[Publisher] = set()


def _stop_all() -> None:
    """At the interpreter's exit: every publisher stops, out of any store call (see the
    module's doc)."""
    with _LOCK:
        running = list(_RUNNING)
    for p in running:
        p.stop()


atexit.register(_stop_all)
