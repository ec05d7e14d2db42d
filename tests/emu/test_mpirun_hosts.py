"""``hvd.init()`` and the C ABI's ``dtcomm_comm_init`` under a real ``mpirun`` (Open MPI), and
``hvd.init()`` under MPICH's ``mpiexec.hydra``, across two emulated hosts with no
rendezvous endpoint: the ranks share no session directory, so rank 0's address travels through
the job's PMIx server, or Hydra's PMI-1 socket (``dtcomm_launch::mpi_hosts``). The hosts are network namespaces made by
``scripts/emu_cluster.sh`` (``EMU_WIRE=1``); ``mpirun`` starts its daemon on the second host
through an ``ssh`` stand-in that enters the namespace (``plm_rsh_agent``). Skips without root,
/dev/net/tun, iproute2 or ``mpirun``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from emu_hosts import ROOT, emulated_hosts, skip_unless_possible

MPIRUN = shutil.which("mpirun")
WORKERS = Path(__file__).resolve().parent / "workers"

# Open MPI runs `AGENT host cmd...` for each remote daemon, Hydra `AGENT -x host cmd...`, as
# they would run ssh.
AGENT = """#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
exec ip netns exec "dtc-h$(( ${host##*.} - 1 ))" /bin/sh -c "$*"
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[str]]:
    """Two emulated hosts; yields the mpirun command prefix that runs from the first."""
    skip_unless_possible()
    if MPIRUN is None:
        pytest.skip("Open MPI's mpirun is not installed (scripts/setup.sh installs openmpi-bin)")
    pytest.importorskip("torch")
    with emulated_hosts(2, "10gbit", "50us"):
        agent = tmp_path / "netns_rsh"
        agent.write_text(AGENT)
        agent.chmod(0o755)
        yield ["ip", "netns", "exec", "dtc-h0", MPIRUN, "--allow-run-as-root",
               "--mca", "plm_rsh_agent", str(agent), "-x", "PATH", "-x", "DTCOMM_TIMEOUT",
               "-H", "10.77.0.1:2,10.77.0.2:1"]


def _env(timeout: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DTCOMM_RDZV_ENDPOINT", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                        "DTCOMM_SOCKET_IFNAME")
           and not k.startswith(("OMPI_", "PMIX_"))}
    env["DTCOMM_TIMEOUT"] = timeout
    return env


def _horovod_cycles_under(launcher: list[str], source: str) -> None:
    """``workers/mpi_hvd_hosts.py`` as 3 ranks under ``launcher`` (two on the first host, one
    on the second: heterogeneous, so the cross communicator differs per local rank)."""
    p = subprocess.run([*launcher, sys.executable, str(WORKERS / "mpi_hvd_hosts.py")],
                       env=_env("60"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    expect = {0: "local 0/2 cross 0/2", 1: "local 1/2 cross 0/1", 2: "local 0/1 cross 1/2"}
    for cycle in range(3):
        for r in range(3):
            line = (f"cycle {cycle} rank {r} of 3 {expect[r]} homogeneous False "
                    "sum [6.0, 6.0, 6.0, 6.0] gather [0, 1, 1, 2, 2, 2] "
                    f"rdzv from {source}")
            assert line in p.stdout, p.stdout + p.stderr


def test_horovod_meets_across_hosts_through_pmix(hosts: list[str]) -> None:
    _horovod_cycles_under([*hosts, "-np", "3"], "Open MPI's PMIx server (across hosts)")


def test_a_rank_that_never_inits_fails_the_others_at_their_deadline(
        hosts: list[str]) -> None:
    script = ("import os, time, dtcomm\n"
              "if os.environ['OMPI_COMM_WORLD_RANK'] == '2':\n"
              "    time.sleep(30)\n"
              "else:\n"
              "    dtcomm.init()\n")
    t = time.monotonic()
    p = subprocess.run([*hosts, "-np", "3",
                        sys.executable, "-c", script],
                       env=_env("4"), capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t
    assert p.returncode != 0
    assert "meeting rank 0 through PMIx" in p.stderr, p.stderr
    assert "not every rank reached its init" in p.stderr, p.stderr
    assert took < 30, f"the others waited {took:.0f} s, past their 4 s deadline"


def test_the_c_abi_meets_across_hosts_through_pmix(hosts: list[str], tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
    subprocess.run(["cargo", "build", "-q", "-p", "dtcomm-ffi"], cwd=ROOT, check=True,
                   timeout=600)
    exe = tmp_path / "allreduce"
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-I", str(ROOT / "ffi" / "include"),
                    str(ROOT / "ffi" / "examples" / "allreduce.c"), "-L", str(target),
                    f"-Wl,-rpath,{target}", "-ldtcomm_ffi", "-o", str(exe)], check=True)
    p = subprocess.run([*hosts, "-np", "3", str(exe)],
                       env=_env("60"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(3):
        assert f"ALLREDUCE OK rank {r} of 3" in p.stdout, p.stdout + p.stderr
    assert "Open MPI's PMIx server (across hosts)" in p.stderr, p.stderr


def test_horovod_meets_across_hosts_under_hydra(hosts: list[str]) -> None:
    hydra = shutil.which("mpiexec.hydra")
    if hydra is None:
        pytest.skip("MPICH's mpiexec.hydra is not installed (scripts/setup.sh installs mpich)")
    agent = hosts[hosts.index("plm_rsh_agent") + 1]
    _horovod_cycles_under(["ip", "netns", "exec", "dtc-h0", hydra, "-launcher", "ssh",
                           "-launcher-exec", agent, "-hosts", "10.77.0.1:2,10.77.0.2:1",
                           "-n", "3"], "Hydra's PMI-1 socket (mpiexec.hydra)")
