"""Run by python/tests/test_flight_recorder.py at world 3 with a short DTCOMM_TIMEOUT and
TORCH_FR_DUMP_ON_TIMEOUT set: a few collectives, then rank 2 stops calling while ranks 0 and 1
enter the next all_reduce and time out (their traces dumped by the engine on the timeout).
Rank 2, alive but in no call, dumps its own trace once theirs are there (torch's watchdog
would tell it to through the store). With ``FR_ASKED=1`` (a native round) rank 2 calls nothing:
the timed-out ranks ask the rendezvous server, which asks every rank to dump, and rank 2's
session writes its trace; the others wait for it before exiting. Prints ``ok <rank>``."""

from __future__ import annotations

import os
import pickle
import time

import numpy as np

import dtcomm

dtcomm.init(verbose=False)
r, w = dtcomm.rank(), dtcomm.size()
assert w == 3, w
x = np.ones(4, dtype=np.float32)
for _ in range(4):
    dtcomm.all_reduce(x)
dtcomm.barrier()
prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
asked = os.environ.get("FR_ASKED") == "1"


def wait_for_dumps(ranks: tuple[int, ...], what: str) -> None:
    deadline = time.monotonic() + 60
    while not all(os.path.exists(f"{prefix}{p}") for p in ranks):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


if r == 2:
    wait_for_dumps((0, 1, 2) if asked else (0, 1),
                   "no dump here on the others' ask" if asked else "the others never dumped")
    s = dtcomm.debug.summary(2)
    assert not s["pending"] and s["idle_ms"] is not None, s
    if not asked:
        assert dtcomm.debug.dump() == f"{prefix}2"
else:
    try:
        dtcomm.all_reduce(x)
    except dtcomm.DtcommError as e:
        print(f"rank {r} failed: {e}", flush=True)
    else:
        raise AssertionError("the all_reduce without rank 2 completed")
    assert os.path.exists(f"{prefix}{r}"), "no dump on the timeout"
    with open(f"{prefix}{r}", "rb") as f:
        t = pickle.load(f)  # the dump this rank wrote itself, read as torch's analyzer does
    last = t["entries"][-1]
    assert last["profiling_name"] == "dtcomm:all_reduce" and last["state"] == "started", last
    if asked:
        wait_for_dumps((2,), "rank 2 never dumped on the ask")
print(f"ok {r}", flush=True)
os._exit(0)
