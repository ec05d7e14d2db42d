"""Namespace lifecycle through the real server: idle expiry, `dt-rdzv purge` and `dt-rdzv keys`."""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from conftest import RdzvServer, dt_rdzv_bin, start_server  # noqa: E402


def client(server: RdzvServer) -> dist.TCPStore:
    return dist.TCPStore(server.host, server.port, is_master=False,
                         timeout=timedelta(seconds=10))


def cli(server: RdzvServer, *args: str) -> str:
    out = subprocess.run([dt_rdzv_bin(), *args, "--endpoint", server.endpoint],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_idle_namespace_expires_after_ttl(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--namespace-ttl", "200ms")
    try:
        a = client(server)
        a.set("jobA/addr/0", b"10.0.0.1:1234")
        a.set("jobB/addr/0", b"10.0.0.2:1234")
        keeper = client(server)
        keeper.get("jobB/addr/0")  # jobB keeps a live client
        del a  # the only client of jobA leaves
        # Any client that touches jobA keeps it alive (even a CHECK), so look once, after the
        # TTL plus the server's timer tick (at most 1 s).
        time.sleep(2.5)
        assert not client(server).check(["jobA/addr/0"]), "jobA was not purged"
        assert keeper.get("jobB/addr/0") == b"10.0.0.2:1234"
        assert server.wait_log("namespace purged") and "jobA" in server.log(), server.log()
    finally:
        assert server.stop() == 0


def test_purge_and_keys_cli(rdzv: RdzvServer) -> None:
    s = client(rdzv)
    s.set("torch.rendezvous.run7", b"state")
    s.set("torch.rendezvous.run7.0/MASTER_ADDR", b"h")
    s.set("other/x", b"1")
    assert cli(rdzv, "keys").split() == [
        "/other/x", "/torch.rendezvous.run7", "/torch.rendezvous.run7.0/MASTER_ADDR"]
    assert "would delete /torch.rendezvous.run7" in cli(rdzv, "purge", "--rdzv-id", "run7", "--dry-run")
    assert s.check(["torch.rendezvous.run7"])
    assert "deleted 2 keys" in cli(rdzv, "purge", "--rdzv-id", "run7")
    assert not s.check(["torch.rendezvous.run7"])
    assert s.get("other/x") == b"1"
    assert "deleted 1 keys" in cli(rdzv, "purge", "--all")
    assert s.num_keys() == 0
