"""Horovod process sets at world 4: sets registered at ``init`` and dynamically, each with its
own communicator and negotiation. Collectives on {0,1}, {2,3} and {0,2} give exactly the
set's result (Average divides by the set's size, broadcast roots are global ranks, alltoall
and reducescatter split over the set); disjoint sets run at the same time without waiting for
each other (different unnamed-operation counts per set included); a rank outside a set is
refused naming the set; registering needs the same sets in the same order on every rank;
adding after ``init`` needs dynamic sets; sets of one rank work; a removed set is refused;
the differentiable forms and ``DistributedOptimizer`` work on a set."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)

pytest.importorskip("torch")


def test_horovod_process_sets(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 4, WORKERS / "hvd_process_sets.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"}, timeout=180)
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)


def test_horovod_process_sets_must_match_on_every_rank(tmp_path: Path,
                                                       server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 3, WORKERS / "hvd_process_sets_mismatch.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
