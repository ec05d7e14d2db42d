"""The emulated cluster's userspace wire (`emu_wire`, docs/emulated-cluster.md): two hosts made
by `scripts/emu_cluster.sh` with `EMU_WIRE=1` carry TCP data intact, every round trip takes at
least the four link delays it crosses (a lower bound: the emulation must add its delay; no
upper bound is asserted), and `down` stops the wire by its PID. Skips where network
namespaces or TAP devices cannot be made (not root, no /dev/net/tun, no iproute2)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from emu_hosts import EMU, emulated_hosts
DELAY_US = 250

ECHO = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 29398)); s.listen(1); s.settimeout(60); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (b := c.recv(1 << 16)):
    c.sendall(b)
"""

CLIENT = """
import hashlib, os, socket, sys, time
for _ in range(200):
    try:
        c = socket.create_connection(("10.77.0.2", 29398), timeout=10); break
    except OSError:
        time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(20):
    t = time.perf_counter(); c.sendall(b"x"); assert c.recv(1) == b"x"
    rtts.append(time.perf_counter() - t)
data = os.urandom(2 << 20)
got = bytearray()
import threading
threading.Thread(target=c.sendall, args=(data,), daemon=True).start()
while len(got) < len(data):
    b = c.recv(1 << 16)
    assert b, "connection closed early"
    got += b
print(min(rtts) * 1e6, hashlib.sha256(data).hexdigest() == hashlib.sha256(got).hexdigest())
"""


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def cluster() -> Iterator[dict[str, str]]:
    with emulated_hosts(2, "1gbit", f"{DELAY_US}us") as env:
        yield env


def test_two_hosts_carry_data_intact_with_at_least_the_link_delays(
        cluster: dict[str, str]) -> None:
    pid = int(Path(os.environ.get("TMPDIR", "/tmp"), "dtc-emu-wire.pid").read_text())
    assert alive(pid), "the wire runs"
    srv = subprocess.Popen([str(EMU), "exec", "1", sys.executable, "-c", ECHO], env=cluster)
    try:
        out = subprocess.run([str(EMU), "exec", "0", sys.executable, "-c", CLIENT], env=cluster,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        rtt_us, intact = out.stdout.split()
        print(f"min round trip {float(rtt_us):.0f} us over links of {DELAY_US} us")
        assert intact == "True", "2 MiB echoed back differ from what was sent"
        # host to host crosses two links each way: four delays per round trip
        assert float(rtt_us) >= 4 * DELAY_US, f"round trip {rtt_us} us < {4 * DELAY_US} us"
    finally:
        srv.kill()
        srv.wait()
    subprocess.run([str(EMU), "down"], env=cluster, timeout=120, check=True)
    for _ in range(100):  # (SIGTERM is delivered, not waited for)
        if not alive(pid):
            break
        time.sleep(0.05)
    assert not alive(pid), "down stopped the wire"
    assert "dtc-h0" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout
