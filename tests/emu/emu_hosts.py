"""Emulated hosts for a test: ``scripts/emu_cluster.sh up`` with the userspace wire
(``EMU_WIRE=1``), ``down`` afterwards, and one test at a time on this machine.

The hosts are machine-wide (namespaces ``dtc-h0``.., bridge ``dtcbr0``) and ``up`` first tears
down whatever a previous ``up`` made, so two tests in parallel workers would pull each other's
hosts away mid-run: each holds an exclusive lock on ``$TMPDIR/dtc-emu-cluster.lock`` (``flock``,
released by the kernel if the worker dies) from ``up`` to ``down``."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMU = ROOT / "scripts" / "emu_cluster.sh"
LOCK = Path(tempfile.gettempdir()) / "dtc-emu-cluster.lock"
#: How long a test waits for another test's hosts to go away.
LOCK_WAIT_S = 900.0


def wire_bin() -> Path:
    """The userspace switch (``dt-bench``'s ``emu_wire``), built if needed."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    subprocess.run(["cargo", "build", "-q", "-p", "dt-bench", "--bin", "emu_wire"], cwd=ROOT,
                   check=True, timeout=600)
    return target / "debug" / "emu_wire"


def skip_unless_possible() -> None:
    """Skips the test where namespaces and TAP interfaces cannot be made."""
    if os.geteuid() != 0 or not Path("/dev/net/tun").exists() or shutil.which("ip") is None:
        pytest.skip("needs root, /dev/net/tun and iproute2 for network namespaces and TAPs")


@contextmanager
def _exclusive() -> Iterator[None]:
    with open(LOCK, "w") as f:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    why = f"another test held {LOCK} for {LOCK_WAIT_S:.0f} s"
                    raise TimeoutError(why) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def add_names(n: int, names: dict[str, list[str]]) -> None:
    """Makes each name resolve to its addresses inside all ``n`` hosts, in that order (lines
    appended to each host's ``/etc/hosts``, as a cluster's DNS would answer: a name with
    several addresses is a headless Service's)."""
    lines = "".join(f"{a} {name}\n" for name, addrs in names.items() for a in addrs)
    for i in range(n):
        with open(f"/etc/netns/dtc-h{i}/hosts", "a") as f:
            f.write(lines)


@contextmanager
def emulated_hosts(n: int, rate: str, delay: str,
                   names: dict[str, list[str]] | None = None) -> Iterator[dict[str, str]]:
    """``n`` hosts ``dtc-h0``.. at 10.77.0.1.. joined at ``rate`` / ``delay`` per link, where
    ``names`` resolve as well; yields the environment to run ``emu_cluster.sh`` with. Skips
    where hosts cannot be made here."""
    skip_unless_possible()
    env = {**os.environ, "EMU_WIRE": "1", "EMU_WIRE_BIN": str(wire_bin())}
    with _exclusive():
        up = subprocess.run([str(EMU), "up", str(n), rate, delay], env=env,
                            capture_output=True, text=True, timeout=120)
        try:
            if up.returncode == 3:
                pytest.skip(f"emu_cluster cannot make hosts here: {up.stderr.strip()}")
            assert up.returncode == 0, up.stderr
            add_names(n, names or {})
            yield env
        finally:
            subprocess.run([str(EMU), "down"], env=env, timeout=120)
