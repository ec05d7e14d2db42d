"""A two-replica torchft training run (``examples/torchft_train.py``: Manager, DDP,
Optimizer over ``ProcessGroupDtcomm``, the Lighthouse served by ``dt-rdzv serve
--torchft-port``) loses a replica, killed or frozen inside the gradients' allreduce, and the
survivor commits a step without it long before the collective timeout (60 s here): the
watch on the Lighthouse door aborts the collective the survivor waits in. The trial is
``benches/python/torchft_recovery.py``'s; the benchmark measures it, this checks it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("torchft")


def bench() -> object:
    spec = importlib.util.spec_from_file_location(
        "torchft_recovery", ROOT / "benches" / "python" / "torchft_recovery.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["torchft_recovery"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", ["stop:inside", "kill:inside"])
def test_survivor_commits_without_a_lost_replica_before_the_timeout(fault: str,
                                                                    tmp_path: Path) -> None:
    b = bench()
    kind, where = fault.split(":")
    stack = next(s for s in b.STACKS if s.name == "dt-rdzv+dtcomm")  # type: ignore[attr-defined]
    r = b.trial(stack, 2, kind, where, fault_step=15, timeout=60.0,  # type: ignore[attr-defined]
                limit=150.0, work=tmp_path)
    logs = "\n".join(f"{p.name}: {p.read_text()[-2000:]}" for p in sorted(tmp_path.iterdir())
                     if p.name.startswith(("out", "lighthouse")))
    assert r.get("error") is None, f"{r}\n{logs}"
    got = r.get("recovery_s")
    # The collective timeout is 60 s; the watch answers within the heartbeat timeout (2 s).
    assert got is not None and got < 20.0, f"{r}\n{logs}"
