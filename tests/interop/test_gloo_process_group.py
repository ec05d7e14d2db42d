"""torch.distributed with gloo, using dt-rdzv as the store (no rank hosts a TCPStore)."""

from __future__ import annotations

import multiprocessing as mp
import os
from datetime import timedelta

import pytest

pytest.importorskip("torch")

from conftest import RdzvServer  # noqa: E402


def _worker(rank: int, world: int, host: str, port: int, q: "mp.Queue[tuple[int, float]]") -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch
    import torch.distributed as dist

    store = dist.PrefixStore(
        "job-gloo/0",
        dist.TCPStore(host, port, is_master=False, wait_for_workers=False,
                      timeout=timedelta(seconds=60)),
    )
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    dist.barrier()
    q.put((rank, float(t[0])))
    dist.destroy_process_group()


def test_gloo_all_reduce_through_dt_rdzv(rdzv: RdzvServer) -> None:
    ctx = mp.get_context("spawn")
    q: mp.Queue[tuple[int, float]] = ctx.Queue()
    world = 2
    procs = [ctx.Process(target=_worker, args=(r, world, rdzv.host, rdzv.port, q)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    results = dict(q.get(timeout=5) for _ in range(world))
    assert results == {0: 3.0, 1: 3.0}
