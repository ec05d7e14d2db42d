"""A pytest plugin that runs torchft's own tests (from the installed wheel) against dtcomm
with only the fixtures swapped: ``ProcessGroupDtcomm`` where they build
``ProcessGroupGloo``, and (``DTCOMM_TORCHFT_LIGHTHOUSE=dt-rdzv``) a ``dt-rdzv serve
--torchft-port`` where they start torchft's ``LighthouseServer``. Their code stays in the
wheel; ``tests/torchft/run_torchft_suite.py`` drives it.

Use: ``pytest -p dtcomm_swap --pyargs torchft.process_group_test`` with this folder on
``PYTHONPATH``."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import tempfile
import weakref
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The binary lookup lives with the native rendezvous tests' server fixture.
sys.path.insert(0, str(ROOT / "python" / "tests"))
from native_server import serve  # noqa: E402


class DtRdzvLighthouse:
    """torchft's ``LighthouseServer`` interface over a ``dt-rdzv serve --torchft-port``
    process (stopped by PID in ``shutdown()``)."""

    def __init__(self, bind: str, min_replicas: int, join_timeout_ms: int | None = None,
                 quorum_tick_ms: int | None = None,
                 heartbeat_timeout_ms: int | None = None) -> None:
        # ``LighthouseServer``'s own defaults for what a test leaves out (100 ms, 100 ms, 5 s),
        # not the server's (its ``torchft_lighthouse`` command's join timeout is 60 s; with it
        # a test that holds one replica back at a barrier waits for that replica).
        join_timeout_ms = 100 if join_timeout_ms is None else join_timeout_ms
        quorum_tick_ms = 100 if quorum_tick_ms is None else quorum_tick_ms
        heartbeat_timeout_ms = 5000 if heartbeat_timeout_ms is None else heartbeat_timeout_ms
        args = ["--host", "127.0.0.1", "--port", "0", "--no-http", "--no-native",
                "--torchft-port", "0", "--torchft-min-replicas", str(min_replicas)]
        for flag, v in (("--torchft-join-timeout-ms", join_timeout_ms),
                        ("--torchft-quorum-tick-ms", quorum_tick_ms),
                        ("--torchft-heartbeat-timeout-ms", heartbeat_timeout_ms)):
            args += [flag, str(v)]
        fd, log = tempfile.mkstemp(prefix="dt-rdzv-torchft-", suffix=".log")
        os.close(fd)
        self._proc, addr = serve(args, "torchft", Path(log))
        self._addr = f"http://{addr}"
        # torchft's own tests drop some servers without shutdown() (its LighthouseServer stops
        # when collected): stop ours then too, or at the latest when the interpreter exits.
        weakref.finalize(self, _stop, self._proc)

    def address(self) -> str:
        return self._addr

    def shutdown(self) -> None:
        _stop(self._proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stops a server by its PID: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _patch_process_group_test(mod: Any) -> None:
    from dtcomm.torchft import ProcessGroupDtcomm

    base = mod.MultiPgBaseTest
    create = base._create_pg.__func__

    def _create_pg(cls: Any, backend: str) -> Any:
        if backend == "dtcomm":
            return ProcessGroupDtcomm(timeout=timedelta(seconds=10), lighthouse="")
        return create(cls, backend)

    base._create_pg = classmethod(_create_pg)
    skip: list[str] = []
    collectives = [c for c in mod._ALL_COLLECTIVES if c not in skip]

    class DtcommMultiPgTest(base):  # type: ignore[misc, valid-type]
        BACKEND = "dtcomm"
        WORLD_SIZE = 3

        @mod.parameterized.expand(collectives)
        def test_collective(self, collective: str) -> None:
            self._run_parallel(collective, device="cpu")

        @mod.parameterized.expand(collectives)
        def test_collective_with_resiliency(self, collective: str) -> None:
            self._run_with_resiliency(collective, device="cpu")

    DtcommMultiPgTest.__module__ = mod.__name__
    mod.DtcommMultiPgTest = DtcommMultiPgTest


def _swap_names(mod: Any) -> None:
    from dtcomm.torchft import ProcessGroupDtcomm

    if hasattr(mod, "ProcessGroupGloo"):
        mod.ProcessGroupGloo = ProcessGroupDtcomm
    ours = os.environ.get("DTCOMM_TORCHFT_LIGHTHOUSE") == "dt-rdzv"
    if ours and hasattr(mod, "LighthouseServer"):
        mod.LighthouseServer = DtRdzvLighthouse


def pytest_configure(config: pytest.Config) -> None:
    for name in ("torchft.process_group_test", "torchft.lighthouse_test",
                 "torchft.manager_integ_test", "torchft.local_sgd_integ_test"):
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            sys.stderr.write(f"dtcomm_swap: {name}: {e}\n")
            continue
        if name == "torchft.process_group_test":
            _patch_process_group_test(mod)
        else:
            _swap_names(mod)
