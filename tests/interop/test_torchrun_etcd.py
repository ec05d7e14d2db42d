"""torchrun's `etcd-v2` and `etcd` rendezvous backends, unmodified, against
`dt-rdzv serve --etcd-v2-port` (2 agents, gloo all_reduce), twice with the same id; and the
same commands against real etcd 3.4 (`--enable-v2`) as the reference."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("etcd")

from etcd_servers import V2Server, door, etcd_binary, start_door, start_etcd  # noqa: F401 (fixture)  # noqa: E402

WORKERS = Path(__file__).resolve().parent / "workers"
BACKENDS = ["etcd-v2", "etcd"]


def run_job(server: V2Server, backend: str, rdzv_id: str, tmp_path: Path,
            tag: str) -> tuple[list[int], list[str], float]:
    """Two torchrun agents, one worker each; (exit codes, logs, seconds)."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           f"--rdzv-backend={backend}", f"--rdzv-endpoint={server.endpoint}",
           f"--rdzv-id={rdzv_id}", "--local-addr=127.0.0.1", "--monitor-interval=0.1",
           str(WORKERS / "torchrun_worker.py")]
    logs = [tmp_path / f"{tag}-agent{i}.log" for i in range(2)]
    start = time.monotonic()
    agents = [subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
              for log in logs]
    try:
        codes = [a.wait(timeout=120) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    return codes, [log.read_text(errors="replace") for log in logs], time.monotonic() - start


@pytest.mark.parametrize("backend", BACKENDS)
def test_torchrun_twice_with_the_same_id(door: V2Server, backend: str, tmp_path: Path) -> None:
    for attempt in ("first", "second"):
        codes, texts, took = run_job(door, backend, "same-id", tmp_path, f"{backend}-{attempt}")
        joined = "\n\n".join(texts)
        assert codes == [0, 0], f"{attempt} run: {codes}\n{joined}\n\nserver:\n{door.log()}"
        assert joined.count("sum=3") == 2, joined
        print(f"{backend} {attempt} run against dt-rdzv: {took:.1f} s")
    assert "purged its keys" in door.log(), door.log()


@pytest.mark.skipif(etcd_binary() is None, reason="etcd not installed")
@pytest.mark.parametrize("backend", BACKENDS)
def test_reference_real_etcd(backend: str, tmp_path: Path) -> None:
    """The same commands against etcd 3.4: the first run works; the second, with the same id,
    finds the closed rendezvous of the first (the keys live for 2 h) and fails."""
    etcd = start_etcd(tmp_path)
    try:
        codes, texts, took = run_job(etcd, backend, "same-id", tmp_path, f"{backend}-first")
        assert codes == [0, 0], "\n\n".join(texts)
        print(f"{backend} first run against etcd 3.4: {took:.1f} s")
        codes, texts, took = run_job(etcd, backend, "same-id", tmp_path, f"{backend}-second")
        joined = "\n\n".join(texts)
        assert codes != [0, 0] and "RendezvousClosedError" in joined, joined
        print(f"{backend} second run against etcd 3.4: exits {codes} (RendezvousClosedError)")
    finally:
        etcd.stop()
