"""``hvd.elastic`` state and sampler at 2 processes (no member lost): ``TorchState`` syncs
model, optimizer, sampler and plain values from rank 0, commits and restores them, tracks a
newly assigned model, runs reset callbacks; ``ElasticSampler`` partitions the epoch's
permutation (``random.Random(seed + epoch)``), pads evenly, skips processed samples after a
reset (``record_batch`` and ``record_indices``), and ``set_epoch`` starts afresh;
``hvd.elastic.run`` refuses to run without the native rendezvous."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)

pytest.importorskip("torch")


def test_horovod_elastic_state_and_sampler(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "hvd_elastic_state.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
