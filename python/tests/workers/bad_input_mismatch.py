"""Run by python/tests/test_bad_input.py in 3 processes (``dtgroup.run_group``): rank 1 calls
``all_reduce`` with an array that does not match the others' (``CASE=dtype``: int32 against
float32; ``CASE=count``: 5 elements against 4).

Prints ``MISMATCH: <message>`` and ``ATTRS: <result_code> <result_name> <rank> <op> <seq>``
when the call raises ``MismatchError`` (``OTHER: ...`` for another dtcomm error), then
``LATER: <message>`` for the ``barrier`` that fails at once on the failed communicator."""

from __future__ import annotations

import os

import numpy as np

import dtcomm

dtcomm.init(verbose=False)
r = dtcomm.rank()
case = os.environ["CASE"]
if case == "dtype":
    x = np.ones(4, np.int32) if r == 1 else np.ones(4, np.float32)
else:
    x = np.ones(5 if r == 1 else 4, np.float32)
try:
    dtcomm.all_reduce(x)
except dtcomm.MismatchError as e:
    print("MISMATCH:", e)
    print("ATTRS:", e.result_code, e.result_name, e.rank, e.op, e.seq)
except dtcomm.DtcommError as e:
    print("OTHER:", type(e).__name__, e)
else:
    raise AssertionError("mismatched all_reduce succeeded")
# the communicator is failed now: later calls raise at once, naming the first error
try:
    dtcomm.barrier()
except dtcomm.DtcommError as e:
    print("LATER:", e)
else:
    raise AssertionError("barrier on a failed communicator succeeded")
