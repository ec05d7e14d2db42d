"""Run by python/tests/test_native_rdzv.py as each member of a native-rendezvous job:
``dtcomm.init()``, an all_reduce of rank + 1; prints ``RESULT <rank> <size> <local rank>
<local size> <sum>``."""

from __future__ import annotations

import numpy as np

import dtcomm

dtcomm.init()
x = np.full(4, dtcomm.rank() + 1, dtype=np.int64)
dtcomm.all_reduce(x)
print("RESULT", dtcomm.rank(), dtcomm.size(), dtcomm.local_rank(), dtcomm.local_size(), int(x[0]),
      flush=True)
dtcomm.shutdown()
