"""Bad input raises a Python exception naming what is wrong and the rank; nothing hangs."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import dtcomm
from dtcomm import _config
from dtgroup import WORKERS, check, run_group, server  # noqa: F401 (fixture)


@pytest.mark.parametrize("case", ["dtype", "count"])
def test_mismatch_across_ranks_names_ranks(tmp_path: Path, server: dtcomm.RdzvServer, case: str) -> None:
    # World 3: rank 2 is a bystander of the mismatch between ranks 0 and 1 (in the count case)
    # and must raise MismatchError too, naming both ranks and both calls.
    res = run_group(
        tmp_path, 3, WORKERS / "bad_input_mismatch.py",
        {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "CASE": case, "DTCOMM_TIMEOUT": "20"}
    )
    check(res)
    mism = [r for r in res if "MISMATCH:" in r.out]
    assert len(mism) == 3, [r.out for r in res]
    for r in mism:
        attrs = next(l for l in r.out.splitlines() if l.startswith("ATTRS:")).split()
        assert attrs[1:3] == ["5", "mismatch"] and attrs[4] == "all_reduce", attrs
    line = next(l for l in mism[0].out.splitlines() if l.startswith("MISMATCH:"))
    assert "rank 0" in line and "rank 1" in line, line
    want = ("float" in line and "int32" in line) if case == "dtype" else ("x 4" in line and "x 5" in line)
    assert want, line
    assert all("LATER:" in r.out for r in res)


def test_unsupported_device_dtype_and_layout() -> None:
    torch = pytest.importorskip("torch")
    dtcomm.init(verbose=False)
    try:
        with pytest.raises(ValueError, match=r"rank 0: all_reduce: .*device meta"):
            dtcomm.all_reduce(torch.empty(4, device="meta"))
        with pytest.raises(TypeError, match=r"rank 0: all_reduce: .*torch.uint16"):
            dtcomm.all_reduce(torch.zeros(4, dtype=torch.uint16))
        with pytest.raises(ValueError, match="not contiguous"):
            dtcomm.all_reduce(torch.zeros(4, 4)[:, 1])
        with pytest.raises(ValueError, match="not contiguous"):
            dtcomm.all_reduce(np.zeros((4, 4))[::2])
        with pytest.raises(TypeError, match="neither a torch tensor nor a numpy array"):
            dtcomm.all_reduce([1.0, 2.0])
        with pytest.raises(TypeError, match="input is float but output is double"):
            dtcomm.all_gather(np.zeros(2, np.float32), np.zeros(2, np.float64))
        with pytest.raises(ValueError, match="invalid arguments to all_gather"):
            dtcomm.all_gather(np.zeros(2, np.float32), np.zeros(3, np.float32))
        with pytest.raises(ValueError, match="root 5 is not in a world of 1"):
            dtcomm.broadcast(np.zeros(2), 5)
        ro = np.zeros(3)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            dtcomm.all_reduce(ro)
        # requires_grad tensors work in place (same memory)
        t = torch.ones(3, requires_grad=True)
        dtcomm.all_reduce(t)
        assert t.detach().tolist() == [1.0, 1.0, 1.0]
    finally:
        dtcomm.shutdown()
    with pytest.raises(dtcomm.ShutdownError, match="after dtcomm.shutdown"):
        dtcomm.all_reduce(np.zeros(2))


def test_unknown_reduce_op_lists_the_engines() -> None:
    """An op number the engine lacks is refused naming every operator and its number (the
    list comes from the engine's table, ``ReduceOp::ALL``)."""
    dtcomm.init(verbose=False)
    try:
        with pytest.raises(ValueError, match=r"^rank 0: all_reduce: unknown reduce op 9 \(sum=1, "
                           r"prod=2, min=3, max=4, avg=5, band=6, bor=7, bxor=8\)$"):
            dtcomm.all_reduce(np.zeros(2), op=9)  # type: ignore[arg-type]
        # Numbers outside a byte too, rather than an integer overflow (pyo3's conversion).
        for v in (256, -1):
            with pytest.raises(ValueError, match=rf"^rank 0: all_reduce: unknown reduce op {v} "):
                dtcomm.all_reduce(np.zeros(2), op=v)  # type: ignore[arg-type]
    finally:
        dtcomm.shutdown()


@pytest.mark.parametrize(
    "env, match",
    [
        ({"RANK": "1"}, "RANK='1' is set but WORLD_SIZE is not"),
        ({"WORLD_SIZE": "4"}, "WORLD_SIZE='4' is set but RANK is not"),
        ({"DTCOMM_RANK": "0"}, "DTCOMM_RANK='0' is set but DTCOMM_WORLD_SIZE is not"),
        ({"HOROVOD_SIZE": "2"}, "HOROVOD_SIZE='2' is set but HOROVOD_RANK is not"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_ADDR='h' is set but MASTER_PORT"),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "rank 1: a world of 2 .* needs a rendezvous endpoint"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        ({"LOCAL_RANK": "0"}, "LOCAL_RANK='0' is set but LOCAL_WORLD_SIZE is not"),
    ],
)
def test_half_set_and_bad_environment(env: dict[str, str], match: str) -> None:
    with pytest.raises(_config.ConfigError, match=match):
        _config.resolve(env=env)


def test_missing_endpoint_raises_in_init(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DTCOMM_RANK", "1")
    monkeypatch.setenv("DTCOMM_WORLD_SIZE", "2")
    for v in ("DTCOMM_RDZV_ENDPOINT", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(dtcomm.ConfigError, match="DTCOMM_RDZV_ENDPOINT"):
        dtcomm.init()
    assert not dtcomm.is_initialized()


def test_unreachable_endpoint_fails_within_the_deadline() -> None:
    t0 = time.monotonic()
    with pytest.raises(dtcomm.SetupError, match="rank 1: cannot reach the rendezvous store at 127.0.0.1:9"):
        dtcomm.Communicator.connect("127.0.0.1:9", 1, 2, timeout=1.0)
    assert time.monotonic() - t0 < 15


def test_missing_peer_times_out_naming_it(server: dtcomm.RdzvServer) -> None:
    t0 = time.monotonic()
    # The message names the missing rank itself ("ranks [1] never ..."), not just any "1".
    with pytest.raises(dtcomm.SetupError, match=r"rank 0: .*ranks \[\"?1\"?\] never"):
        dtcomm.Communicator.connect(server.endpoint, 0, 2, prefix="alone", timeout=1.5)
    assert time.monotonic() - t0 < 15


def test_dead_peer_surfaces_from_wait(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "bad_input_dies.py",
                    {"DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "30"})
    assert res[1].code == 7
    assert res[0].code == 0, res[0].out
    assert "LOST: rank 0:" in res[0].out and "rank 1" in res[0].out, res[0].out
