"""dtrun: torchrun's environment, rank-prefixed output, the group stopped when one worker
fails with dtrun exiting that worker's code, several nodes joining a running dt-rdzv."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import dtcomm
from dtgroup import WORKERS, base_env, server  # noqa: F401 (fixture)

DTRUN = [sys.executable, "-m", "dtcomm"]


def dtrun(args: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DTRUN, *args], env=base_env(), capture_output=True, text=True, timeout=timeout
    )


def test_environment_prefixes_and_a_collective() -> None:
    s = WORKERS / "dtrun_env.py"
    p = dtrun(["--nproc-per-node", "3", "--rdzv-id", "envtest", str(s), "--lr", "0.1"])
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(3):
        line = next(l for l in p.stdout.splitlines() if l.startswith(f"[rank{r}]: RANK="))
        assert f"RANK={r} LOCAL_RANK={r} WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0" in line, line
        assert "MASTER_ADDR=127.0.0.1 MASTER_PORT=" in line and "TORCHELASTIC_RUN_ID=envtest" in line
        assert "ARGS=--lr,0.1" in line
        assert f"[rank{r}]: SUM 3 LOCAL {r} 3" in p.stdout
        assert f"[rank{r}]: to stderr" in p.stderr
    assert "[dtrun] rendezvous 127.0.0.1:" in p.stderr and "(embedded)" in p.stderr
    # One node: the agent drew the links' secret and handed it to every worker (the loopback
    # store, readable by any local user, never holds it).
    secrets = set(re.findall(r"LINKSECRET (\S+)", p.stdout))
    assert len(secrets) == 1 and re.fullmatch(r"[0-9a-f]{64}", secrets.pop()), p.stdout


def test_a_failing_worker_stops_the_group_and_sets_the_exit_code() -> None:
    s = WORKERS / "dtrun_fail.py"
    t0 = time.monotonic()
    p = dtrun(["--nproc-per-node", "3", str(s)])
    took = time.monotonic() - t0
    assert p.returncode == 3, p.stdout + p.stderr
    assert "[rank1]: rank 1 fails" in p.stdout
    assert "[dtrun] rank 1 exited with code 3; stopped the others; exiting 3" in p.stderr
    assert took < 60, took


def test_unchanged_torch_scripts_run_on_dtcomm_and_gloo() -> None:
    s = WORKERS / "dtrun_torch.py"
    p = dtrun(["--nproc-per-node", "2", str(s), "dtcomm"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("BACKEND dtcomm SUM 1.0") == 2, p.stdout
    p = dtrun(["--nproc-per-node", "2", str(s), "gloo"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("BACKEND gloo SUM 1.0") == 2, p.stdout


def test_two_nodes_join_a_running_server_twice_with_one_run_id(server: dtcomm.RdzvServer) -> None:
    s = WORKERS / "dtrun_env.py"
    for attempt in range(2):
        args = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", server.endpoint,
                "--rdzv-id", "twonodes", "--rdzv-timeout", "60", str(s)]
        nodes = [
            subprocess.Popen([*DTRUN, *args], env=base_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [n.communicate(timeout=120) for n in nodes]
        for n, (out, err) in zip(nodes, outs):
            assert n.returncode == 0, out + err
            assert f"generation {attempt + 1}, node" in err, err
        allout = "".join(o for o, _ in outs)
        for r in range(4):
            assert f"[rank{r}]: SUM 6 LOCAL {r % 2} 2" in allout, allout


def test_torchruns_pet_variables_and_an_indexed_jobs_index_are_defaults() -> None:
    """A Kubeflow PyTorchJob sets torchrun's ``PET_*``; an Indexed Job sets
    ``JOB_COMPLETION_INDEX``: dtrun takes them as defaults (after its own ``DTRUN_*``)."""
    s = WORKERS / "dtrun_env.py"
    env = {**base_env(), "PET_NPROC_PER_NODE": "2", "PET_NNODES": "1", "PET_RDZV_ID": "petjob",
           "JOB_COMPLETION_INDEX": "0"}
    p = subprocess.run([*DTRUN, str(s)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(2):
        assert f"[rank{r}]: SUM 1 LOCAL {r} 2" in p.stdout, p.stdout
    assert "TORCHELASTIC_RUN_ID=petjob" in p.stdout
    # An index past the job's nodes, and a torchrun value dtrun cannot take, are refused.
    for extra, needle in (({"PET_NNODES": "2", "JOB_COMPLETION_INDEX": "2"},
                           "JOB_COMPLETION_INDEX=2 is past the job's 2 nodes"),
                          ({"PET_NPROC_PER_NODE": "gpu"}, "PET_NPROC_PER_NODE='gpu' is not a number")):
        q = subprocess.run([*DTRUN, str(s)], env={**base_env(), **extra}, capture_output=True,
                           text=True, timeout=60)
        assert q.returncode != 0 and needle in q.stderr, q.stdout + q.stderr
