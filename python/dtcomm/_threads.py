"""Fitting torch's intra-op threads to the cores a rank shares with the others on its host.

torch gives every process as many intra-op (OpenMP) threads as the machine has cores. With
several ranks on one host that is ranks x cores threads for the cores, and OpenMP's workers
spin-wait between parallel regions (libgomp's default): while a rank's communication is fast,
its team never stops spinning and takes the cores the other ranks' main threads need, so every
small operator waits for a time slice. torchrun and Accelerate set ``OMP_NUM_THREADS=1`` for
this reason; ``torch.multiprocessing.spawn``, Lightning and plain ``python`` do not.

When a communicator is built, :func:`fit_torch_threads` lowers torch's thread count to the
rank's share of the usable cores (at least 1), unless the user chose a count
(``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` set) or turned the fit off
(``DTCOMM_FIT_THREADS=0``). Either way the engine learns the count, so that its waits do not
spin while threads outnumber cores (``collectives/src/spin.rs``). ``docs/waiting.md`` has the
measurements.

torch's count is per thread (OpenMP's ``nthreads-var`` belongs to the calling thread): set on a
thread other than the main one it would change only that thread. A communicator built off the
main thread (torchft's ``Manager`` reconfigures its process group on its quorum thread) defers
the fit: the first collective the main thread calls applies it there
(:func:`apply_deferred_fit`), and until then the engine is told the count the threads really
have.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping

from . import _dtcomm

log = logging.getLogger("dtcomm")

_OFF = ("0", "false", "no", "off")


def fitted(threads: int, host_ranks: int, cores: int, env: Mapping[str, str]) -> int | None:
    """The thread count a rank should use instead of `threads`, or None to keep it.

    Pure: `host_ranks` ranks share `cores` usable cores; `env` is the process environment.
    """
    if env.get("DTCOMM_FIT_THREADS", "1").strip().lower() in _OFF:
        return None
    if env.get("OMP_NUM_THREADS") or env.get("MKL_NUM_THREADS"):
        return None
    share = max(1, cores // max(1, host_ranks))
    return share if threads > share else None


_deferred: tuple[int, int] | None = None
"""(host ranks, rank) of the last communicator built off the main thread, not fitted yet."""


def fit_torch_threads(host_ranks: int, rank: int) -> int | None:
    """Applies :func:`fitted` to torch (when imported) and tells the engine the thread count.
    Returns the count set, or None when it was kept (or deferred: called off the main thread,
    see the module docs)."""
    global _deferred
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if threading.current_thread() is not threading.main_thread():
        _deferred = (host_ranks, rank)
        _dtcomm.set_compute_threads(int(torch.get_num_threads()))
        return None
    _deferred = None
    threads = int(torch.get_num_threads())
    cores = _dtcomm.usable_cores()
    new = fitted(threads, host_ranks, cores, os.environ)
    if new is not None:
        torch.set_num_threads(new)
        log.warning(
            "dtcomm: rank %d: %d ranks share %d cores on this host; torch's intra-op threads "
            "set from %d to %d (as torchrun's OMP_NUM_THREADS=1; set OMP_NUM_THREADS or "
            "DTCOMM_FIT_THREADS=0 to choose)",
            rank, host_ranks, cores, threads, new,
        )
        threads = new
    _dtcomm.set_compute_threads(threads)
    return new


def apply_deferred_fit() -> int | None:
    """On the main thread, applies a fit deferred by a communicator built on another thread
    (once); elsewhere, or with none deferred, nothing. Cheap enough for every collective."""
    d = _deferred
    if d is None or threading.current_thread() is not threading.main_thread():
        return None
    return fit_torch_threads(*d)
