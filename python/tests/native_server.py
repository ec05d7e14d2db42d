"""A `dt-rdzv serve` process with its native port, for the native rendezvous tests: ephemeral
ports (TCPStore, native QUIC, HTTP), a join token from the environment, the certificate
fingerprint read from its ready lines, stopped by PID. `dt_rdzv_bin` and `stop_process` also
serve the interop tests in `tests/`."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dt_rdzv_bin() -> str:
    """$DT_RDZV_BIN, else the debug build in the cargo target dir."""
    if os.environ.get("DT_RDZV_BIN"):
        return os.environ["DT_RDZV_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    return str(Path(target) / "debug" / "dt-rdzv")


def serve(args: list[str], door: str, log_path: Path,
          limit: float = 20.0) -> tuple[subprocess.Popen[str], str]:
    """Starts ``dt-rdzv serve ARGS`` (stderr to ``log_path``) and returns it with the address
    of ``door`` from its ``dt-rdzv listening DOOR=HOST:PORT`` line; killed, and the log
    raised, if that line does not come within ``limit`` seconds."""
    proc = subprocess.Popen(
        [dt_rdzv_bin(), "serve", *args], stdout=subprocess.PIPE, stderr=open(log_path, "w"),
        text=True, env={**os.environ, "DTRDZV_LOG": os.environ.get("DTRDZV_LOG", "info")})
    assert proc.stdout is not None
    prefix = f"dt-rdzv listening {door}="
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return proc, line.strip()[len(prefix):]
    proc.kill()
    proc.wait()
    raise RuntimeError(f"dt-rdzv did not open its {door} port\n{log_path.read_text()}")


def stop_process(proc: subprocess.Popen[str], sig: int = signal.SIGTERM,
                 timeout: float = 15.0) -> int:
    """Stops a server by PID (``sig``, then SIGKILL past ``timeout``); its exit code."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return proc.returncode


@dataclass
class NativeServer:
    """A running `dt-rdzv serve`."""

    proc: subprocess.Popen[str]
    store: str
    native: str
    fingerprint: str
    token: str
    log_path: Path
    http: str | None = None

    def client_env(self, job: str, **extra: str) -> dict[str, str]:
        """What a member needs: endpoint, trust, token, the TCPStore port, the job."""
        return {
            "DTCOMM_RDZV_ENDPOINT": self.native,
            "DTCOMM_RDZV_FINGERPRINT": self.fingerprint,
            "DTCOMM_RDZV_TOKEN": self.token,
            "DTCOMM_RDZV_STORE": self.store,
            "DTCOMM_RUN_ID": job,
            **extra,
        }

    def cli(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Runs a `dt-rdzv` client command against this server."""
        env = {**os.environ, "DTRDZV_TOKEN": self.token}
        return subprocess.run(
            [dt_rdzv_bin(), *args, "--native", self.native, "--fingerprint", self.fingerprint],
            env=env, capture_output=True, text=True, timeout=timeout,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def restart(self, tmp_path: Path, *extra: str) -> NativeServer:
        """Stops this server (SIGTERM) and starts another on the same ports with the same
        token and ``extra`` flags (pass ``--tls-cert``/``--tls-key`` files to keep the
        fingerprint members pinned)."""
        self.stop()
        port = lambda addr: int(addr.rsplit(":", 1)[1])  # noqa: E731
        return start(tmp_path, *extra, token=self.token, store_port=port(self.store),
                     native_port=port(self.native), log_name="dt-rdzv-native-restarted.log")

    def stop(self, timeout: float = 15.0) -> int:
        return stop_process(self.proc, timeout=timeout)


def start(tmp_path: Path, *extra: str, token: str | None = None, store_port: int = 0,
          native_port: int = 0, log_name: str = "dt-rdzv-native.log",
          heartbeat_timeout: str = "4s") -> NativeServer:
    log_path = tmp_path / log_name
    token = token or secrets.token_hex(16)
    proc = subprocess.Popen(
        [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--port", str(store_port),
         "--native-port", str(native_port), "--http-port", "0",
         "--heartbeat-timeout", heartbeat_timeout,
         *extra],
        stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True,
        env={**os.environ, "DTRDZV_TOKEN": token,
             "DTRDZV_LOG": os.environ.get("DTRDZV_LOG", "info")},
    )
    store = native = fingerprint = http = None
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while (store is None or native is None or http is None) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("dt-rdzv listening tcpstore="):
            store = line.strip().split("=", 1)[1]
        elif line.startswith("dt-rdzv listening native="):
            parts = dict(p.split("=", 1) for p in line.split()[2:])
            native, fingerprint = parts["native"], parts["fingerprint"]
        elif line.startswith("dt-rdzv listening http="):
            http = line.strip().split("=", 1)[1]
    if store is None or native is None or fingerprint is None:
        proc.kill()
        raise RuntimeError(f"dt-rdzv did not start:\n{log_path.read_text()}")
    return NativeServer(proc, store, native, fingerprint, token, log_path,
                        None if http in (None, "off") else http)


@pytest.fixture
def native_server(tmp_path: Path) -> Iterator[NativeServer]:
    s = start(tmp_path)
    try:
        yield s
    finally:
        code = s.stop()
        if code != 0:
            sys.stderr.write(s.log())


class Procs:
    """Processes of one test, each in its own session, killed by PID at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, cmd: list[str], env: dict[str, str],
              sigint_ignored: bool = False) -> subprocess.Popen[bytes]:
        """Starts ``cmd`` (with SIGINT ignored, as a CI runner or ``nohup`` leaves it, when
        ``sigint_ignored``)."""
        log = self.tmp / f"{name}.log"
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
        p = subprocess.Popen(cmd, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=ignore)
        self.procs.append((name, p, log))
        return p

    def out(self, name: str) -> str:
        return next(l for n, _, l in self.procs if n == name).read_text(errors="replace")

    def dump(self) -> str:
        return "\n".join(f"--- {n} (exit {p.poll()}):\n{l.read_text(errors='replace')}"
                         for n, p, l in self.procs)

    def wait_for(self, what: str, cond: object, timeout: float) -> None:
        """Polls ``cond()`` until true; fails with every process's output at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():  # type: ignore[operator]
                return
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{self.dump()}")

    def wait_exit(self, name: str, timeout: float) -> int:
        p = next(p for n, p, _ in self.procs if n == name)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Python processes run with PYTHONFAULTHANDLER=1: SIGABRT dumps every thread's stack
            os.kill(p.pid, signal.SIGABRT)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            pytest.fail(f"{name} still running after {timeout:.0f}s\n{self.dump()}")

    def kill_group(self, name: str) -> None:
        p = next(p for n, p, _ in self.procs if n == name)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)

    def close(self) -> None:
        for _, p, _ in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    ps = Procs(tmp_path)
    try:
        yield ps
    finally:
        ps.close()
