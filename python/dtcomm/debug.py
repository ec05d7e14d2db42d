"""What this process's ranks are doing: the engine's flight recorder (every call, in a ring of
``DTCOMM_FR_BUFFER_SIZE`` calls, default 2,000; ``0`` turns it off).

* :func:`dump` writes the trace in torch's Flight Recorder format (a pickle that torch's
  analyzer, ``torchfrtrace DIR --prefix PREFIX``, reads unmodified), one file per rank;
* :func:`entries` the raw entries, :func:`summary` what a rank's heartbeats tell the
  rendezvous server. (The package unpickles nothing; read a dump with torch's analyzer.)

A call that times out dumps its rank's trace by itself when ``TORCH_FR_DUMP_ON_TIMEOUT`` (or
``DTCOMM_FR_DUMP_ON_TIMEOUT``) is set, to ``TORCH_FR_DUMP_TEMP_FILE`` (or
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, default ``/tmp/nccl_trace_rank_``) + the global rank.
See ``docs/flight-recorder.md``.
"""

from __future__ import annotations

import os
from typing import Any

from . import _dtcomm

__all__ = ["capacity", "dump", "dump_file", "entries", "summary"]


def capacity() -> int:
    """Calls the recorder keeps (0: it is off)."""
    return _dtcomm.flight_capacity()


def entries() -> list[dict[str, Any]]:
    """The recorded calls of every rank of this process, oldest first: ``record_id``,
    ``group`` (0: the world), ``group_size``, ``rank`` (global), ``group_rank``, ``seq`` (from
    1; collectives per group, point to point per pair), ``op``, ``p2p``, ``peer``, ``dtype``,
    ``in_count``, ``out_count``, ``state`` (``scheduled``, ``started``, ``completed``,
    ``failed``), ``time_queued_ns`` / ``time_started_ns`` / ``time_ended_ns`` (Unix epoch),
    ``duration_ns``, ``waiting_for`` (global ranks not heard from when it last parked),
    ``waiting_total``, ``timeout_ms``."""
    return _dtcomm.flight_entries()


def summary(rank: int, round: int = 0) -> dict[str, Any]:
    """Global rank `rank`'s summary, as its heartbeats carry it: ``pending`` (the oldest
    pending call per group), ``groups`` (the last completed collective per group),
    ``idle_ms`` (in no call since; None while in one), ``calls``."""
    return _dtcomm.flight_summary(rank, round)


def _rank_of(rank: int | None) -> int | None:
    if rank is not None:
        return rank
    from . import _api

    return _api.rank() if _api.is_initialized() else None


def dump_file(rank: int) -> str:
    """Where a dump on timeout of global rank `rank` goes: ``TORCH_FR_DUMP_TEMP_FILE`` (or
    ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, default ``/tmp/nccl_trace_rank_``) + the rank."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get(
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/nccl_trace_rank_")
    return f"{prefix}{rank}"


def dump(path: str | os.PathLike[str] | None = None, rank: int | None = None) -> str:
    """Writes global rank `rank`'s trace (default: this process's rank under ``dtcomm.init()``)
    in torch's Flight Recorder format to `path` (default: :func:`dump_file` of the rank), in
    one piece (a temporary file renamed into place). Returns the path. Name the files of a
    job ``PREFIX<rank>`` in one directory and ``torchfrtrace DIR --prefix PREFIX`` reads them."""
    r = _rank_of(rank)
    if path is None:
        if r is None:
            raise ValueError("dump(): give a path or a rank (no dtcomm.init() in this process)")
        path = dump_file(r)
    out = os.fspath(path)
    _dtcomm.flight_dump(out, r)
    return out
