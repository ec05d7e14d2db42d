"""Several tensors per call and strided tensors through the torch backend, beside gloo
(issue 44): the same calls on a gloo group and on the dtcomm group in one 2-rank run give
equal results, bad input is refused on both ranks naming the tensor and the rule, and the
device map is known to torch at import. The worker is ``workers/torch_lists_strided.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server, torch_env  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")


def test_lists_and_strided_beside_gloo(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "torch_lists_strided.py", torch_env(server),
                    timeout=240)
    check(res)
    for r in res:
        for line in ("allreduce lists", "broadcast lists", "allgather lists", "sparse lists",
                     "strided", "refused", "ok"):
            assert f"{line} {r.rank}" in r.out, r.out


def test_first_group_from_torchs_default_device_map(
    tmp_path: Path, server: dtcomm.RdzvServer
) -> None:
    """A fresh process: ``import dtcomm`` after torch.distributed leaves dtcomm in torch's
    tables; a first group whose backend comes from torch's default device map works."""
    res = run_group(tmp_path, 2, WORKERS / "torch_device_map.py", torch_env(server), timeout=120)
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res), [r.out for r in res]


def test_import_registers_the_backend() -> None:
    code = (
        "import torch.distributed as dist, dtcomm; B = dist.Backend; "
        "print(B.backend_type_map['dtcomm'], B.backend_capability['dtcomm'], "
        "'DTCOMM' in B._plugins)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "BackendType.CUSTOM ['cpu', 'cuda'] True" in out.stdout, out.stdout
