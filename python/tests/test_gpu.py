"""The GPU test set: real CUDA tensors through ``init_process_group("dtcomm")``. Marked
``gpu``; every test skips (saying so) unless torch sees a CUDA device. ``scripts/test_gpu.sh``
runs this file and the CUDA benchmark on a GPU machine.

With one GPU, NCCL refuses two ranks on one device ("duplicate GPU"), so a single-GPU machine
tests NCCL at world 1 and host staging at world 2 and 3 (the ranks agree on staging because
they share the GPU); a machine with more GPUs also runs NCCL at world 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dtcomm
from dtgroup import WORKERS, check, run_group, server, torch_env  # noqa: F401 (fixture)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"),
]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_collectives_stream_ordering_and_ddp_on_cuda(tmp_path: Path, server: dtcomm.RdzvServer, world: int) -> None:
    gpus = torch.cuda.device_count()
    per_rank = {r: {"GPU": str(r % gpus)} for r in range(world)}
    res = run_group(tmp_path, world, WORKERS / "gpu_collectives.py",
                    {**torch_env(server), "DTCOMM_TIMEOUT": "60"}, per_rank=per_rank)
    check(res)
    shared = world > gpus
    for r in res:
        assert f"OK {r.rank} {world}" in r.out, r.out
        if shared:
            assert "share a GPU" in r.out and "host staging" in r.out, r.out
        elif world > 1:
            assert "device buffers go by NCCL" in r.out, r.out


def test_nccl_forced_on_a_shared_gpu_fails_every_rank_saying_why(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    if torch.cuda.device_count() > 1:
        pytest.skip("this machine has a GPU per rank")
    res = run_group(
        tmp_path, 2, WORKERS / "gpu_forced_nccl.py",
        {**torch_env(server), "DTCOMM_CUDA": "nccl", "DTCOMM_TIMEOUT": "30"}
    )
    check(res)
    for r in res:
        assert "DEVICE:" in r.out and "share a GPU, which NCCL refuses" in r.out, r.out


def test_a_killed_rank_fails_the_survivor_fast(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "gpu_abort.py",
                    {**torch_env(server), "DTCOMM_TIMEOUT": "60"})
    out = res[0].out
    assert "FAILED after" in out and "rank 1" in out, out
    secs = float(out.split("FAILED after ")[1].split("s:")[0])
    assert secs < 30, f"the survivor waited {secs}s: not told of the loss"
