"""Slurm's ``srun``, emulated on this host (the variables ``srun -N 2 -n 4`` gives each task,
both "nodes" this host): ``dtcomm.init()`` with no endpoint and no ``MASTER_ADDR`` forms one
world of 4 (ranks from ``SLURM_PROCID``, local ranks from ``SLURM_LOCALID`` and the step's
task counts, rank 0's store on the first host of the step's node list, on a port derived from
the job and step ids), where it used to run four worlds of one silently; variables that
disagree are refused at start-up naming them, before anything listens. A real ``slurmd`` is
not used here yet (see docs/launchers.md)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dtgroup import base_env

WORKER = Path(__file__).parent / "workers" / "slurm_task.py"


def srun_env(procid: int, job: int, **over: str) -> dict[str, str]:
    node, local = divmod(procid, 2)
    env = base_env({
        "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
        "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": str(job),
        "SLURM_STEP_NODELIST": "localhost,localhost", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "DTCOMM_TIMEOUT": "60",
    })
    env.update(over)
    return env


def test_srun_tasks_form_one_world() -> None:
    job = random.randrange(10**6, 10**7)
    procs = [subprocess.Popen([sys.executable, str(WORKER)], env=srun_env(r, job),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(4)]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append(out)
        assert p.returncode == 0, out
    got = sorted(re.search(r"RESULT (.*)", o).group(1) for o in outs)  # type: ignore[union-attr]
    assert got == [f"rank={r} world=4 local={r % 2} sum=10 gathered=[0, 1, 2, 3]"
                   for r in range(4)], outs


@pytest.mark.parametrize("over,needle", [
    ({"SLURM_PROCID": "7"}, "SLURM_PROCID=7 is not below SLURM_NTASKS=4"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2,1"}, "counts 3 tasks but SLURM_NTASKS=4"),
    ({"SLURM_STEP_NODELIST": "node[01-02"}, "'[' without ']'"),
])
def test_slurm_variables_that_disagree_are_refused_at_start(over: dict[str, str],
                                                            needle: str) -> None:
    p = subprocess.run([sys.executable, str(WORKER)], env=srun_env(1, 5, **over),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and needle in p.stderr, p.stdout + p.stderr
    assert "RESULT" not in p.stdout
