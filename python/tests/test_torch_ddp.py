"""DDP on dtcomm: gradients bit-identical to gloo for 5 steps on 2 ranks (default hook, one
bucket per parameter, a Python comm hook through get_future()); an injected failure surfaces
from Work.wait() and from DDP's backward."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server, torch_env  # noqa: F401 (fixture)

pytest.importorskip("torch")


def test_ddp_gradients_bit_identical_to_gloo(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "torch_ddp_vs_gloo.py", torch_env(server), timeout=240)
    check(res)
    for r in res:
        for v in ("default", "tiny-buckets", "future-hook"):
            assert f"bit-identical {v} {r.rank}" in r.out


def test_injected_failure_surfaces_from_wait_and_backward(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "torch_ddp_failure.py",
                    {**torch_env(server), "DTCOMM_TIMEOUT": "30"}, timeout=180)
    assert res[1].code == 5, res[1].out
    out = res[0].out
    assert res[0].code == 0, out
    line = out.split("BACKWARD:")[1].splitlines()[0] if "BACKWARD:" in out else ""
    assert "rank 1 was lost during all_reduce" in line, out
    assert "WAIT: PeerLostError" in out or "WAIT: DtcommError" in out, out
    assert "FUTURE:" in out, out
