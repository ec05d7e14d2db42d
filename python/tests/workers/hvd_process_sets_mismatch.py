"""Run by python/tests/test_horovod_process_sets.py at world 3 (``dtgroup.run_group``): rank 0
registers process set [0, 1], the others [0, 2]; every rank's ``hvd.init`` must raise
``ValueError`` saying the sets must be the same everywhere. Prints ``ok <rank>``."""

from __future__ import annotations

import os

import dtcomm.horovod.torch as hvd

r = int(os.environ["DTCOMM_RANK"])
try:
    hvd.init(process_sets=[hvd.ProcessSet([0, 1] if r == 0 else [0, 2])])
    raise SystemExit("different sets on different ranks accepted")
except ValueError as e:
    assert "every rank must add the same process sets in the same order" in str(e), e
hvd.shutdown()
print("ok", r, flush=True)
