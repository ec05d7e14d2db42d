"""Run by python/tests/test_numpy_collectives.py at world 2 (``dtgroup.run_group``): an async
all_reduce of 32 MiB that cannot finish before rank 1 (1 s late) arrives, while rank 0
computes; asserts the submission returned at once and compute ran meanwhile. Prints ``ok
overlap <rank> <compute steps>``."""

from __future__ import annotations

import time

import numpy as np

import dtcomm

dtcomm.init(verbose=False)
r = dtcomm.rank()
big = np.full(8 << 20, r + 1, dtype=np.float32)     # 32 MiB
# Rank 1 joins late: rank 0's call cannot finish before rank 1 arrives, and rank 0 computes
# meanwhile (the GIL is free: the call runs on dtcomm's worker thread).
if r == 1:
    time.sleep(1.0)
t0 = time.perf_counter()
work = dtcomm.all_reduce(big, async_op=True)
submitted = time.perf_counter() - t0
done_during_compute = work.is_completed()
acc, steps = 0.0, 0
a = np.random.default_rng(0).random((200, 200))
while time.perf_counter() - t0 < 0.5:
    acc += float((a @ a).sum())
    steps += 1
work.wait(timeout=60)
assert submitted < 0.2, f"async submit took {submitted:.3f}s"
assert steps > 3, steps
if r == 0:
    assert not done_during_compute, "rank 0's all_reduce finished before rank 1 joined"
assert np.all(big == 3.0), big[:4]
print("ok overlap", r, steps)
dtcomm.shutdown()
