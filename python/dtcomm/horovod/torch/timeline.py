"""Horovod's timeline: a Chrome-trace JSON file (open it in chrome://tracing or Perfetto) with,
for every operation, its negotiation (``NEGOTIATE_ALLREDUCE``: from this rank's submission until
every rank had submitted it) and its run (``ALLREDUCE``: until it completed), one row per
tensor name; with ``mark_cycles``, an instant ``CYCLE_START`` event (global scope, as Horovod
writes them) at the start of every negotiation cycle, recorded by the Rust negotiator."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import IO

#: Takes the cycle marks recorded since the last call: (Unix µs list, how many were dropped).
MarkSource = Callable[[], "tuple[list[int], int]"]


class Timeline:
    """An open timeline file; events are appended as operations complete."""

    def __init__(self, path: str, rank: int, mark_cycles: bool = False,
                 marks: MarkSource | None = None) -> None:
        self._f: IO[str] | None = open(path, "w")
        self._f.write("[\n")
        self._first = True
        self._rank = rank
        self._tids: dict[str, int] = {}
        self._lock = threading.Lock()
        self.mark_cycles = mark_cycles
        self._marks = marks if mark_cycles else None

    def _event(self, ev: dict[str, object]) -> None:
        assert self._f is not None
        self._f.write(("" if self._first else ",\n") + json.dumps(ev))
        self._first = False

    def _write_marks(self) -> None:
        if self._marks is None:
            return
        ts, dropped = self._marks()
        for t in ts:
            self._event({"name": "CYCLE_START", "ph": "i", "ts": t, "s": "g", "pid": self._rank})
        if dropped:
            self._event({"name": "CYCLE_MARKS_DROPPED", "ph": "i", "ts": ts[-1] if ts else 0,
                         "s": "g", "pid": self._rank, "args": {"count": dropped}})

    def record(self, name: str, kind: str, times: tuple[int, int, int]) -> None:
        """One completed operation: its negotiation and its run (after the cycle marks
        recorded so far)."""
        submitted, negotiated, done = times
        if not (submitted and negotiated and done):
            return
        activity = kind.upper()
        with self._lock:
            if self._f is None:
                return
            self._write_marks()
            tid = self._tids.setdefault(name, len(self._tids) + 1)
            if tid == len(self._tids):
                self._event({"name": "thread_name", "ph": "M", "pid": self._rank, "tid": tid,
                             "args": {"name": name}})
            common = {"pid": self._rank, "tid": tid}
            self._event({"name": f"NEGOTIATE_{activity}", "ph": "B", "ts": submitted, **common})
            self._event({"name": f"NEGOTIATE_{activity}", "ph": "E", "ts": negotiated, **common})
            self._event({"name": activity, "ph": "B", "ts": negotiated, **common})
            self._event({"name": activity, "ph": "E", "ts": done, **common})
            self._f.flush()

    def close(self) -> None:
        """Ends the JSON array and closes the file."""
        with self._lock:
            if self._f is not None:
                self._write_marks()
                self._f.write("\n]\n")
                self._f.close()
                self._f = None
