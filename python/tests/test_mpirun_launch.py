"""``hvd.init()`` and ``dtcomm.init()`` under a real ``mpirun`` (Open MPI, from Debian's
``openmpi-bin``) on one host with no rendezvous endpoint: the ranks meet in the job's session
directory (the engine's ``dtcomm_launch::mpi_session``), several init/shutdown cycles in one process; and under
MPICH's ``mpiexec.hydra`` (Debian's ``mpich``), where they meet through its PMI-1 socket."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from dtgroup import WORKERS

MPIRUN = shutil.which("mpirun")
HYDRA = shutil.which("mpiexec.hydra")
needs_mpirun = pytest.mark.skipif(
    MPIRUN is None, reason="Open MPI's mpirun is not installed (scripts/setup.sh installs openmpi-bin)")
needs_hydra = pytest.mark.skipif(
    HYDRA is None, reason="MPICH's mpiexec.hydra is not installed (scripts/setup.sh installs mpich)")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DTCOMM_RDZV_ENDPOINT", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
           and not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env.update(DTCOMM_SOCKET_IFNAME="lo", DTCOMM_TIMEOUT="30")
    return env


def _horovod_cycles_under(launcher: list[str], source: str) -> None:
    """``workers/mpi_hvd_cycles.py`` as 3 ranks under ``launcher``: three cycles, every rank's
    sum, the rendezvous from ``source``."""
    pytest.importorskip("torch")
    p = subprocess.run([*launcher, sys.executable, str(WORKERS / "mpi_hvd_cycles.py")],
                       env=_env(), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    for cycle in range(3):
        for r in range(3):
            assert (f"cycle {cycle} rank {r} of 3 local {r}/3 sum [6.0, 6.0, 6.0, 6.0] "
                    f"rdzv from {source}" in p.stdout), p.stdout + p.stderr


@needs_mpirun
def test_horovod_scripts_run_under_mpirun_on_one_host() -> None:
    assert MPIRUN is not None
    _horovod_cycles_under([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "3"],
                          "Open MPI session directory (one host)")


@needs_mpirun
def test_rank_0_missing_is_named_with_the_file() -> None:
    # Ranks 1 and 2 init; rank 0 never does: they fail at their deadline naming the file.
    script = ("import os, dtcomm\n"
              "if os.environ['OMPI_COMM_WORLD_RANK'] != '0':\n"
              "    dtcomm.init(timeout=2)\n")
    assert MPIRUN is not None
    p = subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "3",
                        sys.executable, "-c", script],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "rank 0 did not leave its store's address" in p.stderr, p.stderr
    assert "dtcomm-dtcomm-1.endpoint is missing" in p.stderr, p.stderr


@needs_hydra
def test_horovod_scripts_run_under_mpiexec_hydra() -> None:
    assert HYDRA is not None
    _horovod_cycles_under([HYDRA, "-n", "3"], "Hydra's PMI-1 socket (mpiexec.hydra)")


@needs_hydra
def test_a_rank_that_never_inits_under_hydra_fails_the_others_at_their_deadline() -> None:
    script = ("import os, time, dtcomm\n"
              "if os.environ['PMI_RANK'] == '2':\n"
              "    time.sleep(30)\n"
              "else:\n"
              "    dtcomm.init(timeout=3)\n")
    assert HYDRA is not None
    t = time.monotonic()
    p = subprocess.run([HYDRA, "-n", "3", sys.executable, "-c", script],
                       env=_env(), capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t
    assert p.returncode != 0
    assert "meeting rank 0 through PMI-1 (mpiexec.hydra)" in p.stderr, p.stderr
    assert "not every rank reached its init" in p.stderr, p.stderr
    assert took < 25, f"the others waited {took:.0f} s, past their 3 s deadline"
