"""Run by python/tests/test_native_dataplane.py as each member of a native-rendezvous job
(directly or under ``dtrun --rdzv-backend native``): ``dtcomm.init()``, an all_reduce of
rank + 1; prints ``RESULT <rank> <size> <sum> <transport description>``."""

from __future__ import annotations

import numpy as np

import dtcomm

dtcomm.init()
x = np.full(4, dtcomm.rank() + 1, dtype=np.int64)
dtcomm.all_reduce(x)
print("RESULT", dtcomm.rank(), dtcomm.size(), int(x[0]), dtcomm.communicator().transport(), flush=True)
dtcomm.shutdown()
