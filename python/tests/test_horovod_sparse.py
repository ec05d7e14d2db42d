"""``hvd.sparse_allreduce_async`` and ``DistributedOptimizer(sparse_as_dense=..., groups=...)``
at 2 and 3 processes: sparse tensors summed/averaged from allgathered indices and values (a
rank with no entries included); sparse embedding gradients averaged either way; grouped
reductions named and formed as Horovod forms them, with the same result as ungrouped; a
gradient produced on only some ranks reduced with zeros from the others."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)

pytest.importorskip("torch")


@pytest.mark.parametrize("world", [2, 3])
def test_horovod_sparse_and_groups(tmp_path: Path, server: dtcomm.RdzvServer,
                                   world: int) -> None:
    res = run_group(tmp_path, world, WORKERS / "hvd_sparse.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
