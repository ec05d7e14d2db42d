"""Run by python/tests/test_flight_recorder.py at world 3: torch groups of ranks [0, 2] (two of
them) and the world, a few all_reduces on each; dtcomm's recorder names the subgroups with
global ranks and an id equal on both members and different between the two groups. Prints
``GROUPS <rank> <id> <id>`` and ``ok <rank>``."""

from __future__ import annotations

import torch
import torch.distributed as dist

import dtcomm
import dtcomm.torch_backend  # noqa: F401 (registers the backend)

dist.init_process_group("dtcomm")
r = dist.get_rank()
a = dist.new_group([0, 2])
b = dist.new_group([0, 2])
t = torch.ones(2)
dist.all_reduce(t)
if r in (0, 2):
    dist.all_reduce(t, group=a)
    dist.all_reduce(t, group=b)
dist.barrier()
ours = [e for e in dtcomm.debug.entries() if e["op"] == "all_reduce"]
world = [e for e in ours if e["group"] == 0]
assert len(world) == 1 and world[0]["rank"] == r, ours
if r in (0, 2):
    sub = [e for e in ours if e["group"] != 0]
    assert len(sub) == 2, ours
    ids = [e["group"] for e in sub]
    assert ids[0] != ids[1], ids
    # Global ranks, the group's size, and this rank's place in it.
    assert all(e["rank"] == r and e["group_size"] == 2 and e["group_rank"] == r // 2
               for e in sub), sub
    print(f"GROUPS {r} {ids[0]} {ids[1]}", flush=True)
print(f"ok {r}", flush=True)
dist.destroy_process_group()
