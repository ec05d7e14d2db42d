"""A Kubernetes Indexed Job's pods run ``python train.py`` with ``dtcomm.init()``: the rank from
``JOB_COMPLETION_INDEX``, the world from ``DTCOMM_WORLD_SIZE`` (the job's completions), rank 0
hosting the store at ``MASTER_ADDR`` (a headless Service's name for pod 0); an index past the
completions is refused at start-up naming both variables. A Kubeflow PyTorchJob's pods started
without torchrun: the rank from ``PET_NODE_RANK``, the world from ``PET_NNODES``, pod 0 hosting
the store at ``PET_MASTER_ADDR``/``PET_MASTER_PORT``; several processes per pod started alone
are refused."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from dtgroup import base_env, run_all

WORKER = Path(__file__).parent / "workers" / "slurm_task.py"


def pod_env(index: int, completions: int, port: int) -> dict[str, str]:
    return base_env({
        "JOB_COMPLETION_INDEX": str(index), "DTCOMM_WORLD_SIZE": str(completions),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "DTCOMM_TIMEOUT": "60",
    })


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_world_of_three(envs: list[dict[str, str]]) -> str:
    """Runs the worker once per environment (the pods, started together); checks they formed
    one world of 3 that summed and gathered every rank; returns their output."""
    outs = []
    for rc, out, err in run_all([([sys.executable, str(WORKER)], e) for e in envs]):
        assert rc == 0, out + err
        outs.append(out)
    got = sorted(re.sub(r" local=\d+", "", m) for o in outs for m in re.findall(r"RESULT (.*)", o))
    assert got == [f"rank={r} world=3 sum=6 gathered=[0, 1, 2]" for r in range(3)], outs
    return "".join(outs)


def test_indexed_job_pods_form_one_world() -> None:
    port = free_port()
    one_world_of_three([pod_env(i, 3, port) for i in (2, 0, 1)])


def test_an_index_past_the_completions_is_refused() -> None:
    p = subprocess.run([sys.executable, str(WORKER)], env=pod_env(3, 3, free_port()),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "JOB_COMPLETION_INDEX=3 is not below DTCOMM_WORLD_SIZE=3" in p.stderr, p.stderr


def pet_env(node: int, nnodes: int, port: int, **over: str) -> dict[str, str]:
    return base_env({
        "PET_NNODES": str(nnodes), "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(node),
        "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port), "DTCOMM_TIMEOUT": "60",
        **over,
    })


def test_pytorchjob_pods_without_torchrun_form_one_world() -> None:
    port = free_port()
    out = one_world_of_three([pet_env(n, 3, port) for n in (1, 2, 0)])
    assert "RDZV PET_MASTER_ADDR, PET_MASTER_PORT" in out, out


def test_a_pytorchjob_pod_of_several_processes_started_alone_is_refused() -> None:
    p = subprocess.run([sys.executable, str(WORKER)],
                       env=pet_env(0, 2, free_port(), PET_NPROC_PER_NODE="4"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "PET_NPROC_PER_NODE='4' asks for 4 processes per pod" in p.stderr, p.stderr
