"""Run by python/tests/test_reinit.py: ``cycles`` rounds of ``dtcomm.init()``, an all_reduce
checked against the world's sum, and ``dtcomm.shutdown()``, as a training script that
re-forms its group does. Ranks listed in ``--late`` sleep a little before some inits (the
seeded choice is the same on every rank), so that rank 0's shutdown and the others' next init
overlap both ways. Prints ``ok <cycles>``."""

from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np

import dtcomm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cycles", type=int)
    ap.add_argument("--late", type=int, nargs="*", default=[])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for cycle in range(a.cycles):
        late = rng.random() < 0.3
        delay = rng.uniform(0.05, 0.4)
        if late and _me() in a.late:
            time.sleep(delay)
        dtcomm.init(verbose=False)
        world = dtcomm.size()
        x = np.full(16, dtcomm.rank() + cycle, dtype=np.int64)
        dtcomm.all_reduce(x)
        want = world * (world - 1) // 2 + world * cycle
        assert np.all(x == want), f"cycle {cycle}: rank {dtcomm.rank()} got {x[0]}, want {want}"
        dtcomm.shutdown()
    print(f"ok {a.cycles}", flush=True)


def _me() -> int:
    """The launcher's number for this process (``REINIT_ME``: under the native rendezvous
    the server assigns ranks, so the test numbers its processes itself)."""
    return int(os.environ["REINIT_ME"])


if __name__ == "__main__":
    main()
