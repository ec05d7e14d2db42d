"""``dtcomm.horovod.torch``'s collectives are differentiable as Horovod's are (2 and 3
processes): every rank weights the result differently, and each input gradient is compared
with the value Horovod's backward definition gives, worked out by hand below."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)

pytest.importorskip("torch")


@pytest.mark.parametrize("world", [2, 3])
def test_horovod_autograd(tmp_path: Path, server: dtcomm.RdzvServer, world: int) -> None:
    res = run_group(tmp_path, world, WORKERS / "hvd_autograd.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
