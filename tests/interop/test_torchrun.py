"""Unmodified torchrun agents rendezvous through dt-rdzv serve, twice with the same --rdzv-id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import RdzvServer  # noqa: E402

WORKERS = Path(__file__).resolve().parent / "workers"


def run_job(rdzv: RdzvServer, rdzv_id: str, tmp_path: Path, tag: str) -> list[str]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv.endpoint}", f"--rdzv-id={rdzv_id}",
           "--rdzv-conf=is_host=false", "--local-addr=127.0.0.1", "--monitor-interval=0.1",
           str(WORKERS / "torchrun_worker.py")]
    logs = [tmp_path / f"{tag}-agent{i}.log" for i in range(2)]
    agents = [subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
              for log in logs]
    try:
        codes = [a.wait(timeout=180) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
    texts = [log.read_text(errors="replace") for log in logs]
    assert codes == [0, 0], "\n\n".join(texts) + "\n\nserver:\n" + rdzv.log()
    return texts


def test_torchrun_twice_with_same_rdzv_id(rdzv: RdzvServer, tmp_path: Path) -> None:
    for attempt in ("first", "second"):
        texts = run_job(rdzv, "same-id", tmp_path, attempt)
        workers = "".join(texts)
        assert workers.count("sum=3") == 2, workers
        assert "RendezvousClosedError" not in workers
    assert rdzv.wait_log("a new torchelastic run started"), rdzv.log()
