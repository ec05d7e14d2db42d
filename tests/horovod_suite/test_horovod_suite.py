"""Horovod's own test suite (``run_horovod_suite.py``) at worlds 2 and 3, when its source is given
(``DTCOMM_HOROVOD_SRC``; ``scripts/horovod_suite.sh``). CI has no copy of Horovod's repository
(it is not on PyPI with its tests, and not kept here), so there it skips, saying so; the
behaviours the suite found are checked without it by
``python/tests/test_horovod_suite_regressions.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import run_horovod_suite  # noqa: E402

SRC = os.environ.get("DTCOMM_HOROVOD_SRC")


@pytest.mark.skipif(not SRC or not (Path(SRC) / run_horovod_suite.SUITE).is_file(),
                    reason="DTCOMM_HOROVOD_SRC does not name a Horovod checkout "
                           "(scripts/horovod_suite.sh says how to get one)")
@pytest.mark.timeout(2 * 1300)
def test_horovods_torch_suite_passes_at_worlds_2_and_3(tmp_path: Path) -> None:
    assert run_horovod_suite.main(["--horovod-src", str(SRC), "--out", str(tmp_path)]) == 0, \
        (tmp_path / "summary.md").read_text()
