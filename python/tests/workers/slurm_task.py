"""One task of an emulated ``srun -n 4``: ``dtcomm.init()`` with no endpoint and no
``MASTER_ADDR``, then an allreduce and an allgather; prints what it resolved."""

from __future__ import annotations

import numpy as np

import dtcomm
from dtcomm import _config

dtcomm.init(verbose=False)
r, n = dtcomm.rank(), dtcomm.size()
x = np.full(3, float(r + 1), dtype=np.float32)
dtcomm.all_reduce(x)
ranks = dtcomm.all_gather(np.array([r], dtype=np.int64))
print(f"RESULT rank={r} world={n} local={dtcomm.local_rank()} sum={x[0]:g} "
      f"gathered={ranks.ravel().tolist()}", flush=True)
if r == 0:
    print(f"RDZV {_config.resolve().endpoint.source}", flush=True)
dtcomm.shutdown()
