"""torchft's own process-group tests (``torchft/process_group_test.py`` from the installed
wheel) against :class:`dtcomm.torchft.ProcessGroupDtcomm`, with only the fixture swapped
(``dtcomm_swap.py`` adds a ``DtcommMultiPgTest`` beside their ``NormalGlooMultiPgTest``):
every collective at world 3, and the resiliency test that shuts the last rank down and
expects the survivors' call to fail and ``errored()`` to say the group aborted. gloo skips
alltoall_base and reduce_scatter; dtcomm runs them too."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytest.importorskip("torchft")
pytest.importorskip("parameterized")


def run_suite(module: str, expr: str, timeout: float = 270) -> tuple[dict[str, int], str]:
    """torchft's ``module`` with the fixtures swapped: counts and output. Each of its tests
    has 100 s, the whole run ``timeout`` (under this test's own 300 s, so that a hang is
    reported with the inner run's output rather than cut off)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE),
                                                       os.environ.get("PYTHONPATH", "")]))
    # Its own session, so that a run past the limit goes with every server it started.
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "dtcomm_swap", "-p",
                          "no:cacheprovider", "--timeout", "100", "--pyargs", module,
                          "-k", expr],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=HERE, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        pytest.fail(f"{module} ran past {timeout:.0f} s\n{stdout[-6000:]}{stderr[-2000:]}")
    tail = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|skipped)", tail)}
    return counts, stdout[-4000:] + stderr[-2000:]


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
