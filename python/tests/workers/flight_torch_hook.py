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
    raw = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
except Exception as e:  # noqa: BLE001 (whatever this torch says)
    print(f"skip: torch cannot dump its recorder here: {e}", flush=True)
    os._exit(0)
entries = json.loads(raw).get("entries", [])
names = [e.get("profiling_name", "") for e in entries]
if not names:
    print(f"skip: torch's recorder holds nothing for a dtcomm group (torch {torch.__version__})",
          flush=True)
    os._exit(0)
assert sum(n == "dtcomm:all_reduce" for n in names) >= 3, names
print(f"ok {r}", flush=True)
dist.destroy_process_group()
