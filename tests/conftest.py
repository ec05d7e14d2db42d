"""Fixtures shared by the Python test suites: a `dt-rdzv serve` process per test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# One launcher for both test trees: the binary lookup and stop-by-PID live with the native
# rendezvous tests' server fixture.
sys.path.insert(0, str(ROOT / "python" / "tests"))
from native_server import dt_rdzv_bin, stop_process  # noqa: E402


@dataclass
class RdzvServer:
    """A running `dt-rdzv serve` started by a test."""

    proc: subprocess.Popen[str]
    host: str
    port: int
    log_path: Path

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 10.0) -> bool:
        """Whether ``text`` shows up in the log within ``timeout`` (lines are written after
        the event they describe, from another thread of the server)."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Stops the server by PID and returns its exit code."""
        return stop_process(self.proc, sig, timeout)


def start_server(tmp_path: Path, *extra: str) -> RdzvServer:
    """Starts `dt-rdzv serve` on an ephemeral loopback port and waits for its ready line."""
    log_path = tmp_path / f"dt-rdzv-{len(list(tmp_path.glob('dt-rdzv-*.log')))}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--port", "0", "--native-port", "0",
         "--http-port", "0", "--no-auth", *extra],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "DTRDZV_LOG": os.environ.get("DTRDZV_LOG", "info")},
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("dt-rdzv listening tcpstore="):
        proc.kill()
        raise RuntimeError(f"dt-rdzv did not start: {line!r}\n{log_path.read_text()}")
    port = int(line.strip().rsplit(":", 1)[1])
    return RdzvServer(proc=proc, host="127.0.0.1", port=port, log_path=log_path)


@pytest.fixture
def rdzv(tmp_path: Path) -> Iterator[RdzvServer]:
    server = start_server(tmp_path)
    try:
        yield server
    finally:
        code = server.stop()
        if code != 0:
            sys.stderr.write(server.log())
        assert code == 0, f"dt-rdzv exited {code} on SIGTERM"
