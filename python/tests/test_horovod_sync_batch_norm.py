"""``hvd.SyncBatchNorm`` at 2 and 3 processes, each rank with a batch of a different size:
outputs, input gradients, running statistics (momentum and cumulative average) and the summed
weight/bias gradients equal a single-process ``torch.nn.BatchNorm1d/2d`` over the
concatenated batch; evaluation mode is local; without running statistics the batch
statistics are still global."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)

pytest.importorskip("torch")


@pytest.mark.parametrize("world", [2, 3])
def test_sync_batch_norm(tmp_path: Path, server: dtcomm.RdzvServer, world: int) -> None:
    res = run_group(tmp_path, world, WORKERS / "hvd_sync_batch_norm.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
