"""Run by python/tests/test_numpy_collectives.py at world 2 with plain env:// (``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``; rank 0 hosts the store): ``dtcomm.init(verbose=True)``
prints dtcomm's configuration line, then an asserted all_reduce."""

from __future__ import annotations

import numpy as np

import dtcomm

dtcomm.init(verbose=True)            # plain env://: rank 0 hosts the store at MASTER_ADDR:MASTER_PORT
x = np.full(2, dtcomm.rank() + 1, dtype=np.int64)
dtcomm.all_reduce(x)
assert x.tolist() == [3, 3], x
dtcomm.shutdown()
