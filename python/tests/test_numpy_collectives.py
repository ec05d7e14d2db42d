"""Every collective and dtype on numpy arrays across 3 processes, against numpy's answer;
async handles; an async call overlapping with compute."""

from __future__ import annotations

from pathlib import Path

import dtcomm
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)


def test_every_collective_and_dtype_matches_numpy(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 3, WORKERS / "numpy_collectives.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)


def test_async_overlaps_with_compute(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    check(run_group(tmp_path, 2, WORKERS / "numpy_overlap.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint}))


def test_shutdown_then_second_init(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    check(run_group(tmp_path, 2, WORKERS / "numpy_second_init.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint}))


def test_plain_env_rank0_hosts_the_store(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "DTCOMM_TIMEOUT": "60"}
    per_rank = {r: {"DTCOMM_RANK": "", "DTCOMM_WORLD_SIZE": ""} for r in range(2)}
    res = run_group(tmp_path, 2, WORKERS / "numpy_env_rank0.py", env, per_rank=per_rank)
    check(res)
    assert "host_store=True (rank 0 of env://)" in res[0].out, res[0].out
    assert "rank=1 (RANK)" in res[1].out and "host_store=False" in res[1].out, res[1].out
