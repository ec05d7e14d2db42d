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

from dtgroup import base_env, run_all

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
    outs = []
    for rc, out, err in run_all([([sys.executable, str(WORKER)], srun_env(r, job))
                                 for r in range(4)]):
        assert rc == 0, out + err
        outs.append(out)
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


def agent_env(node: int, job: int, tasks_per_node: str = "1(x2)", ntasks: str = "2",
              nodelist: str = "localhost,localhost") -> dict[str, str]:
    """What ``srun -N 2 --ntasks-per-node=1 dtrun ...`` gives each agent (both "nodes" this
    host)."""
    return base_env({
        "SLURM_PROCID": str(node), "SLURM_LOCALID": "0", "SLURM_NODEID": str(node),
        "SLURM_NTASKS": ntasks, "SLURM_STEP_ID": "0", "SLURM_JOB_ID": str(job),
        "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "DTCOMM_TIMEOUT": "60",
    })


def test_dtrun_agents_under_srun_take_nodes_and_rendezvous_from_slurm() -> None:
    """One dtrun per node, no --nnodes/--node-rank/--rdzv-endpoint: node 0's agent hosts the
    rendezvous on the step's first host at the derived port; their workers form one world."""
    job = random.randrange(10**6, 10**7)
    cmd = [sys.executable, "-m", "dtcomm", "--nproc-per-node", "2", str(WORKER)]
    outs = []
    for rc, out, err in run_all([(cmd, agent_env(n, job)) for n in (1, 0)]):
        assert rc == 0, out + err
        outs.append((out, err))
    got = sorted(m for out, _ in outs for m in re.findall(r"RESULT (.*)", out))
    assert got == [f"rank={r} world=4 local={r % 2} sum=10 gathered=[0, 1, 2, 3]"
                   for r in range(4)], outs
    errs = "".join(err for _, err in outs)
    assert f"Slurm step slurm-{job}.0: node 0 of 2" in errs and "(hosted here)" in errs, errs
    assert f"Slurm step slurm-{job}.0: node 1 of 2" in errs and "(on node 0)" in errs, errs


def test_dtrun_refuses_several_agents_on_one_node() -> None:
    p = subprocess.run([sys.executable, "-m", "dtcomm", "--nproc-per-node", "2", str(WORKER)],
                       env=agent_env(0, 7, tasks_per_node="2", ntasks="2", nodelist="localhost"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "run one per node" in p.stderr, p.stdout + p.stderr
