"""Run by python/tests/test_fast_failure.py as each member of a native-rendezvous job:
``dtcomm.elastic.run`` around a loop of ``all_reduce`` steps up to ``STEPS`` (environment),
committing the state after each.

Prints ``ROUND <round> rank <r> world <n> t=<time>`` when a round starts, ``STEP <step> rank
<r> round <round> world <n>`` after each step, ``FAILED t=<time> <error type>: <message>``
when a collective fails (then re-raised: ``elastic.run`` goes on in a new round), ``DONE steps
<steps> world <n>`` at the end, or ``GAVE UP <error type>: <message>`` and exit code 3 when
``elastic.run`` gives up. With ``FALSE_REPORT`` set, rank 0 reports rank 1's link as reset in
round 1 (a false report) and prints ``REPORTED``."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import dtcomm
from dtcomm import elastic

STEPS = int(os.environ["STEPS"])
state = elastic.ObjectState(step=0)


@elastic.run
def train(state: elastic.ObjectState) -> elastic.ObjectState:
    m = dtcomm._api._g("test").member
    w = m.welcome
    print(f"ROUND {w.round} rank {dtcomm.rank()} world {dtcomm.size()} t={time.time():.3f}",
          flush=True)
    if os.environ.get("FALSE_REPORT") and dtcomm.rank() == 0 and w.round == 1:
        m.report(w.round, 1, "test: a made-up connection reset")
        print("REPORTED", flush=True)
    while state.step < STEPS:
        x = np.ones(4, dtype=np.float32)
        try:
            dtcomm.all_reduce(x)
        except Exception as e:
            print(f"FAILED t={time.time():.3f} {type(e).__name__}: {e}", flush=True)
            raise
        state.step += 1
        print(f"STEP {state.step} rank {dtcomm.rank()} round {w.round} world {dtcomm.size()}",
              flush=True)
        time.sleep(0.02)
        state.commit()
    return state


try:
    train(state)
except Exception as e:
    print(f"GAVE UP {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
print(f"DONE steps {state.step} world {dtcomm.size()}", flush=True)
dtcomm.shutdown()
