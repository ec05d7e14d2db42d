"""dtcomm under a real Slurm across two emulated hosts: the controller on this host's bridge,
one ``slurmd`` per network namespace (``scripts/emu_cluster.sh``; nodes ``dtc-h0`` and
``dtc-h1``, which resolve inside the hosts as a cluster's DNS would). ``srun -N 2`` tasks form
one world with no endpoint and no ``MASTER_ADDR`` (rank 0 hosts the store on the first node of
the step's node list; ``--mpi=pmix``: its address through Slurm's PMIx server), DDP trains
across the hosts, ``dtrun`` as a one-task-per-node step starts every node's workers, and a task
killed on one host fails the other naming it.
Skips without root, /dev/net/tun, iproute2 or Slurm."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from emu_hosts import ROOT, emulated_hosts

sys.path.insert(0, str(ROOT / "python" / "tests"))
from dtgroup import base_env  # noqa: E402
from slurm_cluster import DAEMONS, Node, Slurm, _stop, start  # noqa: E402

WORKERS = ROOT / "python" / "tests" / "workers"
EMU_WORKERS = Path(__file__).resolve().parent / "workers"
PY = sys.executable
TASK = r"RESULT rank=(\d+) world=(\d+) local=(\d+) sum=([\d.]+) gathered=\[([\d, ]*)\]"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    import shutil

    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing)")
    pytest.importorskip("torch")
    with emulated_hosts(2, "10gbit", "50us"):
        # Tasks talk across the emulated NICs (the tests' default is loopback).
        env = {**base_env(), "DTCOMM_SOCKET_IFNAME": "eth0"}
        nodes = [Node(f"dtc-h{i}", f"10.77.0.{i + 1}", f"dtc-h{i}") for i in range(2)]
        s, pids = start(tmp_path_factory.mktemp("slurm2"), env, nodes, ctld_addr="10.77.0.254")
        try:
            yield s
        finally:
            for pid in reversed(pids):
                _stop(pid)


def _four_tasks(out: str) -> list[tuple[int, int, int]]:
    """(rank, world, local rank) of each task that summed 1+2+3+4 and gathered every rank."""
    got = []
    for r, w, local, total, gathered in re.findall(TASK, out):
        assert float(total) == 10 and gathered == "0, 1, 2, 3", out
        got.append((int(r), int(w), int(local)))
    return sorted(got)


@pytest.mark.parametrize("mpi", ["none", "pmix"])
def test_srun_across_two_hosts_forms_one_world(slurm: Slurm, mpi: str) -> None:
    p = slurm.run("srun", "-N", "2", "--ntasks-per-node=2", f"--mpi={mpi}",
                  "--export=ALL,DTCOMM_TIMEOUT=60", PY, str(WORKERS / "slurm_task.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    # Block distribution: ranks 0-1 on dtc-h0, 2-3 on dtc-h1.
    assert _four_tasks(p.stdout) == [(0, 4, 0), (1, 4, 1), (2, 4, 0), (3, 4, 1)], p.stdout
    source = ("Slurm's PMIx server (srun --mpi=pmix)" if mpi == "pmix"
              else "Slurm: first host of the step's node list")
    assert f"RDZV {source}" in p.stdout, p.stdout


def test_ddp_trains_across_two_hosts(slurm: Slurm) -> None:
    p = slurm.run("srun", "-N", "2", "--ntasks-per-node=2",
                  "--export=ALL,DTCOMM_TIMEOUT=90,BACKEND=dtcomm",
                  PY, str(WORKERS / "slurm_ddp.py"), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    lines = re.findall(r"DDP rank=(\d) world=4 local=\S+ first=([\d.]+) last=([\d.]+) "
                       r"checksum=(-?[\d.]+)", p.stdout)
    assert sorted(int(r) for r, *_ in lines) == [0, 1, 2, 3], p.stdout
    assert all(float(last) < float(first) / 10 for _, first, last, _ in lines), p.stdout
    assert len({c for *_, c in lines}) == 1, f"ranks ended with different parameters: {lines}"


def test_dtrun_one_agent_per_node_across_two_hosts(slurm: Slurm) -> None:
    p = slurm.run("srun", "-N", "2", "--ntasks-per-node=1", "--export=ALL,DTCOMM_TIMEOUT=60",
                  PY, "-m", "dtcomm", "--nproc-per-node", "2", str(WORKERS / "slurm_task.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    assert _four_tasks(p.stdout) == [(0, 4, 0), (1, 4, 1), (2, 4, 0), (3, 4, 1)], p.stdout
    for node in (0, 1):
        assert f"node {node} of 2" in p.stderr, p.stderr


def test_workers_run_on_both_hosts(slurm: Slurm, tmp_path: Path) -> None:
    """The tasks really are in two network namespaces (hosts), not one."""
    p = slurm.run("srun", "-N", "2", "-n", "2", "/bin/sh", "-c",
                  "echo NETNS $SLURMD_NODENAME $(readlink /proc/self/ns/net)")
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    seen = dict(re.findall(r"NETNS (\S+) (\S+)", p.stdout))
    assert set(seen) == {"dtc-h0", "dtc-h1"} and len(set(seen.values())) == 2, p.stdout


def test_a_task_killed_on_one_host_fails_the_other_host_naming_it(slurm: Slurm) -> None:
    """A task lost mid-job (SIGKILL on dtc-h1) is an error on dtc-h0 naming the lost rank, well
    before the 120 s deadline; no task hangs."""
    t = time.monotonic()
    p = slurm.run("srun", "-N", "2", "--ntasks-per-node=1", "--export=ALL,DTCOMM_TIMEOUT=120",
                  PY, str(EMU_WORKERS / "slurm_lose_host.py"), timeout=100)
    took = time.monotonic() - t
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    # (the task's own line can be cut off when Slurm ends the step; its error log is not)
    assert re.search(r"rank 0: rank 1 was lost during all_reduce\(seq \d+", out), out + slurm.logs()
    assert "dtc-h0: task 0: Exited with exit code 3" in p.stderr, out
    assert took < 60, f"the survivor took {took:.0f} s to fail (deadline 120 s)"
