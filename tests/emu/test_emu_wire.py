"""The emulated cluster's userspace wire (`emu_wire`, docs/emulated-cluster.md): two hosts made
by `scripts/emu_cluster.sh` with `EMU_WIRE=1` carry TCP data intact, every round trip takes at
least the four link delays it crosses (a lower bound: the emulation must add its delay; no
upper bound is asserted), and `down` stops the wire by its PID. Skips where network
namespaces or TAP devices cannot be made (not root, no /dev/net/tun, no iproute2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from emu_hosts import EMU, emulated_hosts

WORKERS = Path(__file__).resolve().parent / "workers"
DELAY_US = 250


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
    srv = subprocess.Popen([str(EMU), "exec", "1", sys.executable, str(WORKERS / "wire_echo.py")],
                           env=cluster)
    try:
        out = subprocess.run(
            [str(EMU), "exec", "0", sys.executable, str(WORKERS / "wire_client.py")],
            env=cluster, capture_output=True, text=True, timeout=120)
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
