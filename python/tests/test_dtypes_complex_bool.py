"""complex64, complex128 and bool tensors, and bitwise ``reduce``, through the torch backend at
world 2 (issue 44): every kind of call against the expected values and gloo, the reductions a
dtype lacks (complex MAX/MIN, bool AVG, bitwise on floats) refused on both ranks naming the
rank, op and dtype with no hang, and DDP over a model with a complex parameter bit-identical
to gloo. The worker is ``workers/torch_dtypes_complex_bool.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server, torch_env  # noqa: F401 (fixture)

pytest.importorskip("torch")


def test_complex_and_bool_through_torch(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "torch_dtypes_complex_bool.py", torch_env(server),
                    timeout=240)
    check(res)
    for r in res:
        for line in ("complex torch.complex64", "complex torch.complex128", "refused", "bool",
                     "bitwise reduce", "ddp-identical", "ok"):
            assert f"{line} {r.rank}" in r.out, r.out


def test_vocab_and_numpy_buffers() -> None:
    import torch

    from dtcomm._vocab import DType, ReduceOp

    for name in ("complex64", "complex128", "bool"):
        d = DType(name)
        assert DType.from_torch(getattr(torch, name)) is d
        assert DType.from_numpy(name) is d
        assert d.numpy_dtype == np.dtype(name)
    assert ReduceOp.from_torch(torch.distributed.ReduceOp.BXOR) is ReduceOp.BXOR
    assert ReduceOp.BAND.is_bitwise and not ReduceOp.SUM.is_bitwise
    dtcomm.init(verbose=False)
    try:
        c = np.array([1 + 2j, 3 - 4j], dtype=np.complex128)
        dtcomm.all_reduce(c)  # world 1: the buffer is read as complex128 and left as it is
        assert c.tolist() == [1 + 2j, 3 - 4j]
        bad = r"rank 0: invalid arguments to all_reduce: "
        with pytest.raises(ValueError, match=bad + ".*max.*complex64"):
            dtcomm.all_reduce(np.ones(2, dtype=np.complex64), op=dtcomm.MAX)
        with pytest.raises(ValueError, match=bad + ".*avg.*bool"):
            dtcomm.all_reduce(np.ones(2, dtype=bool), op=dtcomm.AVG)
        m = np.array([True, False])
        dtcomm.all_reduce(m)
        assert m.tolist() == [True, False]
    finally:
        dtcomm.shutdown()


def test_complex_and_bool_through_horovod(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "hvd_dtypes_complex_bool.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "60"})
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
