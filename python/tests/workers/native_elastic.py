"""Run by python/tests/test_native_rdzv.py as each member of a native-rendezvous job
(``2:3`` members) one of which is SIGKILLed: ``dtcomm.elastic.run`` around ``STEPS``
(environment) all_reduce steps, committing after each. Prints ``STEP <step> rank <r> world
<n> round <round>`` per step and ``DONE rank <r> world <n> steps <steps> total <sum of the
world sizes of the committed steps> rounds <[(round, rank, size), ...]>``."""

from __future__ import annotations

import os
import time

import numpy as np

import dtcomm
from dtcomm import elastic

STEPS = int(os.environ["STEPS"])
state = elastic.ObjectState(step=0, total=0, rounds=[])


@elastic.run
def train(state: elastic.ObjectState) -> elastic.ObjectState:
    w = dtcomm._api._g("test").member.welcome
    state.rounds = state.rounds + [(w.round, dtcomm.rank(), dtcomm.size())]
    while state.step < STEPS:
        x = np.ones(1, dtype=np.int64)
        dtcomm.all_reduce(x)                 # PeerLostError when a member dies
        state.total += int(x[0])             # the world size of every committed step
        state.step += 1
        print(f"STEP {state.step} rank {dtcomm.rank()} world {dtcomm.size()} round {w.round}",
              flush=True)
        time.sleep(0.05)
        state.commit()
    return state


train(state)
print(f"DONE rank {dtcomm.rank()} world {dtcomm.size()} steps {state.step} total {state.total} "
      f"rounds {state.rounds}", flush=True)
dtcomm.shutdown()
