"""Run by python/tests/test_flight_recorder.py at world 3 under ``env://`` (rank 0 hosts torch's
own TCPStore, as under ``mp.spawn``) with a 3 s process-group timeout and
TORCH_FR_DUMP_ON_TIMEOUT set: a few all_reduces, then rank 2 calls nothing more while ranks 0 and
1 enter the next all_reduce and time out. Their publishers post the ask to the store; rank 2's
publisher (its thread, while the main thread sleeps) sees it and dumps rank 2's trace. The
others wait for that file before exiting. Prints ``ok <rank>``."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import dtcomm.torch_backend  # noqa: F401 (registers the backend)

dist.init_process_group("dtcomm", timeout=timedelta(seconds=3))
r = dist.get_rank()
x = torch.ones(4)
for _ in range(4):
    dist.all_reduce(x)
dist.barrier()
prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]


def wait_for(path: str, what: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


if r == 2:
    # In no call: only the publisher thread can dump here.
    wait_for(f"{prefix}2", "no dump here on the others' ask through the store")
else:
    try:
        dist.all_reduce(x)
    except Exception as e:  # noqa: BLE001 - torch wraps the engine's error
        print(f"rank {r} failed: {e}", flush=True)
    else:
        raise AssertionError("the all_reduce without rank 2 completed")
    assert os.path.exists(f"{prefix}{r}"), "no dump on the timeout"
    wait_for(f"{prefix}2", "rank 2 never dumped on the ask")
print(f"ok {r}", flush=True)
os._exit(0)
