"""What Horovod's own test suite found (``tests/horovod_suite``, ``docs/horovod.md``), as
dtcomm's checks that CI runs without Horovod's source: int16 and the other integer types,
a barrier among in-flight async operations, one-rank process sets added and removed after
other operations, ``hvd.init()`` again and again in one process, a DistributedOptimizer on a
set the rank is not in, sets through ``allgather_object``, a new optimizer's state broadcast,
``HOROVOD_TIMELINE=DYNAMIC``; and a rank that leaves a negotiation: the others' waits fail
within the stall deadline naming it and the tensor, and the next ``hvd.init()`` works."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)

pytest.importorskip("torch")


@pytest.mark.parametrize("world", [2, 3])
def test_what_horovods_suite_found(tmp_path: Path, server: dtcomm.RdzvServer, world: int) -> None:
    res = run_group(tmp_path, world, WORKERS / "hvd_suite_regressions.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60",
                     "HOROVOD_DYNAMIC_PROCESS_SETS": "1"}, timeout=150)
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)


@pytest.mark.parametrize("case,deadline", [("stall", 4), ("shutdown", 60), ("crash", 60)])
def test_a_rank_that_leaves_a_negotiation_is_named_and_nobody_hangs(
        tmp_path: Path, server: dtcomm.RdzvServer, case: str, deadline: int) -> None:
    world = 3
    res = run_group(tmp_path, world, WORKERS / "hvd_rank_leaves.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": str(deadline),
                     # The stall deadline is short; the set-up's is not (ranks that start
                     # seconds apart on a loaded machine must still meet).
                     "DTCOMM_SETUP_TIMEOUT": "60", "HVD_CASE": case}, timeout=90)
    survivors = res if case != "crash" else res[:-1]
    check(survivors)
    assert all(f"ok {r.rank}" in r.out for r in survivors)
    if case == "crash":
        assert res[-1].code != 0 and "user code failed mid-step" in res[-1].out
