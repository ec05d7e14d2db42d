"""The native path's data plane needs no TCPStore: `dtcomm.init()` members build their
communicator from the round's Welcome (addresses in `Join.addrs`, links proven with a secret
derived from the job token), so a job runs against `dt-rdzv serve --no-tcpstore`, and on a
normal server nothing of the job is readable through the TCPStore door."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import native_server as native_server_mod
from dtgroup import WORKERS, base_env
from native_server import NativeServer, Procs, dt_rdzv_bin, native_server, procs  # noqa: F401


def _run_pair(server: NativeServer, procs: Procs, tmp_path: Path, job: str) -> list[str]:
    script = WORKERS / "native_dataplane_init.py"
    env = base_env(server.client_env(job, DTCOMM_RDZV_MEMBERS="2", DTCOMM_TIMEOUT="30"))
    names = [f"{job}-m{i}" for i in range(2)]
    for n in names:
        procs.start(n, [sys.executable, str(script)], env)
    for n in names:
        assert procs.wait_exit(n, 60) == 0, procs.dump()
    lines = []
    for n in names:
        m = re.search(r"^RESULT (\d) 2 3 (.*)$", procs.out(n), re.M)
        assert m, f"{n}: no result\n{procs.dump()}"
        lines.append(m.group(2))
    return lines


def test_a_native_job_runs_on_a_server_without_tcpstore(procs: Procs, tmp_path: Path) -> None:
    server = native_server_mod.start(tmp_path, "--no-tcpstore", log_name="dt-rdzv-nostore.log")
    try:
        assert server.store == "off", server.store
        transports = _run_pair(server, procs, tmp_path, f"job-{uuid.uuid4().hex[:8]}")
        assert all("round 1" in t for t in transports), transports
        # Host records travel in the Join and come back in the Welcome's peer table: the
        # shared-memory set-up takes them from there instead of exchanging its own.
        assert all("hosts from the address book" in t for t in transports), transports
    finally:
        server.stop()


def test_no_key_of_a_native_job_is_readable_through_the_tcpstore_port(
    native_server: NativeServer, procs: Procs, tmp_path: Path
) -> None:
    job = f"job-{uuid.uuid4().hex[:8]}"
    _run_pair(native_server, procs, tmp_path, job)
    keys = subprocess.run(
        [dt_rdzv_bin(), "keys", "--endpoint", native_server.store],
        capture_output=True, text=True, timeout=30,
        env={**os.environ, "DTRDZV_TOKEN": native_server.token},
    )
    assert keys.returncode == 0, keys.stderr
    leaked = [k for k in keys.stdout.splitlines() if job in k or "dtcomm" in k]
    assert leaked == [], leaked


def test_dtrun_native_two_nodes_on_a_server_without_tcpstore(procs: Procs, tmp_path: Path) -> None:
    """Node 0's dtrun hosts the round's store for the workers; its address travels through
    the native protocol, so the server needs no TCPStore port."""
    server = native_server_mod.start(tmp_path, "--no-tcpstore", log_name="dt-rdzv-nostore.log")
    try:
        script = WORKERS / "native_dataplane_init.py"
        job = f"job-{uuid.uuid4().hex[:8]}"
        env = base_env({**server.client_env(job), "DTCOMM_TIMEOUT": "30"})
        del env["DTCOMM_RDZV_ENDPOINT"]
        cmd = [sys.executable, "-m", "dtcomm", "--rdzv-backend", "native", "--rdzv-endpoint",
               server.native, "--nnodes", "2", "--nproc-per-node", "1", str(script)]
        for n in ("A", "B"):
            procs.start(n, cmd, env)
        for n in ("A", "B"):
            assert procs.wait_exit(n, 60) == 0, procs.dump()
        got = sorted(m.group(1) for n in ("A", "B")
                     if (m := re.search(r"RESULT (\d) 2 3 ", procs.out(n))))
        assert got == ["0", "1"], procs.dump()
    finally:
        server.stop()
