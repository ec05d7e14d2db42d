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


def test_overlap_rules_without_a_group() -> None:
    """The overlap check: chunks of one buffer and interleaved columns pass, shared elements
    and an expanded view are named; the local fold of a list follows gloo's bool rules."""
    from dtcomm import _torch_lists as lists
    from dtcomm._vocab import ReduceOp

    buf = torch.zeros(12)
    lists.no_overlap(0, "all_gather", list(buf.chunk(4)))
    grid = torch.zeros(3, 4)
    lists.no_overlap(0, "all_gather", list(grid.unbind(1)))
    with pytest.raises(ValueError, match=r"rank 0: all_gather: outputs\[1\] overlaps outputs\[0\]"):
        lists.no_overlap(0, "all_gather", [buf[0:5], buf[4:9]])
    with pytest.raises(ValueError, match=r"outputs\[2\] overlaps outputs\[0\]"):
        lists.no_overlap(0, "all_gather", [grid[:, 0], grid[:, 1], grid[1, :]])
    with pytest.raises(ValueError, match=r"outputs\[0\] overlaps itself"):
        lists.no_overlap(0, "all_gather", [torch.zeros(1).expand(4)])
    with pytest.raises(ValueError, match=r"tensors\[1\] has dtype torch.float64"):
        lists.alike(3, "all_reduce", [torch.ones(2), torch.ones(2, dtype=torch.float64)])
    a = torch.tensor([True, False, False])
    acc = a.clone()
    lists.fold(ReduceOp.PROD, acc, [torch.tensor([True, True, False])])
    assert acc.tolist() == [True, False, False]
    acc = a.clone()
    lists.fold(ReduceOp.SUM, acc, [torch.tensor([False, True, False])])
    assert acc.tolist() == [True, True, False]
    view = torch.zeros(3, 2).t()
    s, back = lists.staged(view)
    assert s.is_contiguous() and back is not None
    s.fill_(7)
    back()
    assert bool((view == 7).all())
    c = torch.zeros(4)
    same, none = lists.staged(c)
    assert none is None and same.data_ptr() == c.data_ptr()  # contiguous: no copy
