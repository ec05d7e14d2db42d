"""The store job's summary publisher (``dtcomm._progress.Publisher``) leaves no store call in
flight behind it: ``stop()`` waits for the call it may be in, and the interpreter's exit stops
every publisher a program never stopped (most never destroy their group). A daemon thread still
inside torch's store when the interpreter finalises is ended inside C++, which aborted a
Lightning run under dtrun after its work was done ("terminate called without an active
exception", exit 134)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from dtcomm import _progress


class SlowStore:
    """A store whose ``set`` blocks until ``release`` is set (a call in flight)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.sets = 0

    def set(self, key: str, value: object) -> None:
        self.sets += 1
        self.entered.set()
        assert self.release.wait(30), "never released"


def test_stop_waits_for_the_store_call_in_flight() -> None:
    store = SlowStore()
    p = _progress.Publisher(store, 1, 2).start()
    assert store.entered.wait(30)
    threading.Timer(0.3, store.release.set).start()
    t0 = time.monotonic()
    p.stop(wait=10)
    assert not p._thread.is_alive(), "stop() returned with the store call in flight"
    assert 0.2 <= time.monotonic() - t0 < 10
    assert p not in _progress._RUNNING


def test_stop_gives_up_on_a_store_that_does_not_answer() -> None:
    store = SlowStore()
    p = _progress.Publisher(store, 1, 2).start()
    assert store.entered.wait(30)
    t0 = time.monotonic()
    p.stop(wait=0.2)
    assert time.monotonic() - t0 < 5 and p._thread.is_alive()
    store.release.set()
    p._thread.join(10)
    assert not p._thread.is_alive()


def test_an_abort_does_not_wait_and_the_exit_still_does() -> None:
    store = SlowStore()
    p = _progress.Publisher(store, 1, 2).start()
    assert store.entered.wait(30)
    t0 = time.monotonic()
    p.stop(wait=0)
    assert time.monotonic() - t0 < 0.5 and p._thread.is_alive()
    assert p in _progress._RUNNING, "the exit hook must still wait for it"
    threading.Timer(0.3, store.release.set).start()
    _progress._stop_all()
    assert not p._thread.is_alive() and p not in _progress._RUNNING


EXITS_WITHOUT_STOPPING = """
import atexit, sys, threading, time
seen = {}
# Registered before dtcomm's hook, so it runs after it (atexit runs in reverse order).
atexit.register(lambda: print("ALIVE AT EXIT", seen["p"]._thread.is_alive(), flush=True))
from dtcomm import _progress

class Store:
    def set(self, key, value):
        time.sleep(0.05)

seen["p"] = _progress.Publisher(Store(), 0, 2).start()
time.sleep(0.3)
print("EXITING", flush=True)
"""


def test_the_interpreters_exit_stops_a_publisher_nobody_stopped() -> None:
    out = subprocess.run([sys.executable, "-c", EXITS_WITHOUT_STOPPING], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "EXITING" in out.stdout and "ALIVE AT EXIT False" in out.stdout, out.stdout
