"""Run by python/tests/test_dtrun_hosts.py under ``dtrun --horovod -H ...``: an unmodified
Horovod script. Prints ``H <rank> <size> <local rank> <local size> <sum of ranks>`` after an
allreduce; the rank ``FAIL_RANK`` exits with ``FAIL_RANK_CODE`` when that is set and not 0."""

from __future__ import annotations

import os
import sys

import torch
import horovod.torch as hvd

hvd.init()
t = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)
print("H", hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), int(t.item()), flush=True)
code = int(os.environ.get("FAIL_RANK_CODE", "0"))
if code and hvd.rank() == int(os.environ["FAIL_RANK"]):
    sys.exit(code)
hvd.shutdown()
