"""``dtcomm.horovod.torch`` in 2 and 3 processes: Horovod's semantics as its own tests check
them (names negotiated in any order, Average and scale factors, allgather with a first dimension
per rank, broadcast in place and not, errors on every rank for a mismatch and the job going on,
duplicate names, objects, parameters, init after shutdown)."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, base_env, check, run_group, server  # noqa: F401 (fixture)

pytest.importorskip("torch")


@pytest.mark.parametrize("world", [2, 3])
def test_horovod_api(tmp_path: Path, server: dtcomm.RdzvServer, world: int) -> None:
    res = run_group(tmp_path, world, WORKERS / "hvd_api.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)


def test_dtrun_horovod_runs_an_unmodified_horovod_script() -> None:
    import subprocess
    import sys

    script = WORKERS / "hvd_unmodified.py"
    env = {k: v for k, v in base_env().items() if not k.startswith("HOROVOD_")}
    p = subprocess.run([sys.executable, "-m", "dtcomm", "--horovod", "-np", "2", str(script)],
                       capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "HVD-OK size=2" in p.stdout, p.stdout + p.stderr
    # Without --horovod there is no `horovod` module (nothing named horovod is installed).
    q = subprocess.run([sys.executable, "-c", "import horovod"], capture_output=True, text=True)
    assert q.returncode != 0


def test_the_cross_communicator_is_horovods_on_uneven_hosts() -> None:
    from dtcomm.horovod.torch._core import cross_of

    # Two ranks on host A (local 0, 1), one on host B (local 0).
    local = [(0, 2), (1, 2), (0, 1)]
    assert [tuple(cross_of(r, local)) for r in range(3)] == [(0, 2, False), (0, 1, False),
                                                             (1, 2, False)]
    # Two hosts of two, ranks interleaved by host (round robin placement).
    even = [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert [tuple(cross_of(r, even)) for r in range(4)] == [(0, 2, True), (1, 2, True),
                                                            (0, 2, True), (1, 2, True)]
    assert tuple(cross_of(0, [(0, 1)])) == (0, 1, True)
