"""Run by python/tests/test_native_rdzv.py as each member of a native-rendezvous job while
its server restarts or fails over: ``STEPS`` (environment) all_reduce steps, each asserting
that the round did not change, printing ``STEP <step>``; then ``DONE rank <r> round <round>
first <first round>``."""

from __future__ import annotations

import os
import time

import numpy as np

import dtcomm

dtcomm.init()
first = dtcomm._api._g("test").member.welcome.round
for step in range(1, int(os.environ["STEPS"]) + 1):
    x = np.ones(4, dtype=np.float32)
    dtcomm.all_reduce(x)
    assert x[0] == dtcomm.size(), x
    assert not dtcomm._api._round_changed(), "the round changed"
    print(f"STEP {step}", flush=True)
    time.sleep(0.05)
w = dtcomm._api._g("test").member.welcome
print(f"DONE rank {dtcomm.rank()} round {w.round} first {first}", flush=True)
dtcomm.barrier()
dtcomm.shutdown()
