"""Run by python/tests/test_flight_recorder.py at world 2: a dtcomm process group in torch,
a few collectives; torch's own Flight Recorder (the hook torch attaches to backends that do
not record themselves) lists them as ``dtcomm:`` entries, and dtcomm's recorder has them too.
Prints ``ok <rank>``, or ``skip: <why>`` when this torch has no such hook."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

import dtcomm
import dtcomm.torch_backend  # noqa: F401 (registers the backend)

dist.init_process_group("dtcomm")
r = dist.get_rank()
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
dist.barrier()
c10d = torch._C._distributed_c10d
ours = [e for e in dtcomm.debug.entries() if e["op"] == "all_reduce"]
assert len(ours) >= 3, ours
try:
    # The hook records into the recorder instance of the group's backend name.
    raw = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False, backend="dtcomm")
except TypeError as e:
    print(f"skip: this torch ({torch.__version__}) has no per-backend recorder: {e}", flush=True)
    os._exit(0)
names = [e.get("profiling_name", "") for e in json.loads(raw).get("entries", [])]
assert sum(n == "dtcomm:all_reduce" for n in names) >= 3, names
assert "dtcomm:barrier" in names, names
print(f"ok {r}", flush=True)
dist.destroy_process_group()
