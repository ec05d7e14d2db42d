"""The torch.distributed backend: every collective against the expected values, loaded through
the entry point (no `import dtcomm` in the workers), subgroups, functional collectives."""

from __future__ import annotations

from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server, torch_env  # noqa: F401 (fixture)

pytest.importorskip("torch")


def test_every_collective_through_init_process_group(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 3, WORKERS / "torch_backend_all.py", torch_env(server), timeout=240)
    check(res)
