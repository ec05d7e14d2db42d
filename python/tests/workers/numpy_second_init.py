"""Run by python/tests/test_numpy_collectives.py at world 2 (``dtgroup.run_group``): two
``dtcomm.init()`` / ``dtcomm.shutdown()`` cycles, an all_reduce in each, and a call after each
shutdown raising ``ShutdownError``. Prints ``ok``."""

from __future__ import annotations

import numpy as np

import dtcomm

for round in range(2):
    dtcomm.init(verbose=False)
    x = np.full(4, dtcomm.rank() + round, dtype=np.int32)
    dtcomm.all_reduce(x)
    assert np.all(x == 1 + 2 * round), x
    dtcomm.shutdown()
    try:
        dtcomm.all_reduce(x)
    except dtcomm.ShutdownError as e:
        assert "init" in str(e), e
    else:
        raise AssertionError("all_reduce after shutdown did not raise")
print("ok")
