"""Horovod's own PyTorch examples, unchanged, under ``dtrun --horovod -np 2``:
``pytorch_mnist.py`` on MNIST files generated here in MNIST's idx format (nothing is
downloaded; the data is learnable, so the loss must fall) and ``pytorch_synthetic_benchmark.py``
(its SyncBatchNorm model, fp32 and fp16 compression).

The scripts are Horovod's code and are not kept in this repository: ``scripts/horovod_examples.sh``
fetches them from GitHub at a pinned commit (and torchvision, which they import) and runs this
file with ``DTCOMM_HOROVOD_EXAMPLES`` naming their folder. Without it, or without torchvision,
every test skips saying so (CI has no GitHub access).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dtgroup import base_env

EXAMPLES = os.environ.get("DTCOMM_HOROVOD_EXAMPLES")
pytestmark = [
    pytest.mark.skipif(not EXAMPLES, reason="DTCOMM_HOROVOD_EXAMPLES is not set (scripts/horovod_examples.sh)"),
]


def write_mnist(root: Path, n_train: int, n_test: int) -> None:
    """A learnable stand-in for MNIST in its idx files: each label has a prototype image, each
    sample is its prototype plus noise."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    protos = rng.integers(0, 256, size=(10, 28, 28), dtype=np.uint8)
    for name, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        noise = rng.integers(0, 64, size=(n, 28, 28), dtype=np.uint8)
        images = (protos[labels] // 2 + noise).astype(np.uint8)
        (raw / f"{name}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (raw / f"{name}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


def dtrun_horovod(script: str, *args: str, cwd: Path) -> str:
    pytest.importorskip("torchvision", reason="Horovod's examples import torchvision")
    path = Path(EXAMPLES or "") / script
    if not path.is_file():
        pytest.skip(f"{path} is not there (scripts/horovod_examples.sh fetches it)")
    env = {k: v for k, v in base_env().items() if not k.startswith("HOROVOD_")}
    p = subprocess.run([sys.executable, "-m", "dtcomm", "--horovod", "-np", "2", str(path), *args],
                       capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_horovods_mnist_example_trains_unchanged(tmp_path: Path) -> None:
    write_mnist(tmp_path / "data", 6400, 1000)
    out = dtrun_horovod("pytorch_mnist.py", "--epochs", "2", "--log-interval", "20",
                        "--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    tests = [(float(l), float(a)) for l, a in
             re.findall(r"Test set: Average loss: ([\d.]+), Accuracy: ([\d.]+)%", out)]
    assert len(tests) == 2, out
    assert tests[1][0] < tests[0][0] and tests[1][1] > tests[0][1], tests
    for rank in (0, 1):
        losses = [float(x) for x in re.findall(rf"\[rank{rank}\]: Train Epoch: \d+ .*Loss: ([\d.]+)", out)]
        assert len(losses) >= 4 and losses[-1] < losses[0], (rank, losses)
    print("mnist test loss/accuracy per epoch:", tests)


@pytest.mark.parametrize("extra", [[], ["--fp16-allreduce"]])
def test_horovods_synthetic_benchmark_runs_unchanged(tmp_path: Path, extra: list[str]) -> None:
    out = dtrun_horovod("pytorch_synthetic_benchmark.py", "--model", "resnet18", "--batch-size", "4",
                        "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "3",
                        *extra, cwd=tmp_path)
    assert "Number of CPUs: 2" in out, out
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+ \+-[\d.]+", out), out
    print(out.strip().splitlines()[-1])
