"""Re-initialisation: 20 ``dtcomm.init()`` / ``all_reduce`` / ``shutdown()`` cycles at worlds
2 and 3, some ranks late on some cycles, the ways users start it: ``env://`` with rank 0
hosting the store (``mp.spawn``, plain ``python``), Slurm's variables (rank 0 of the step
hosts it), and the native rendezvous of a ``dt-rdzv serve``. Rank 0's store is a new server at
every init; a rank that reached the previous one while rank 0 was stopping it used to count
its generation there and wait out the whole deadline with "never published its address"."""

from __future__ import annotations

import random
import socket
import sys
from pathlib import Path

import pytest

from dtgroup import WORKERS, base_env, run_all
from native_server import NativeServer, native_server  # noqa: F401 (fixture)

WORKER = WORKERS / "reinit_cycles.py"
CYCLES = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check(results: list[tuple[int, str, str]]) -> None:
    for r, (rc, out, err) in enumerate(results):
        assert rc == 0 and f"ok {CYCLES}" in out, f"rank {r} exited {rc}:\n{out}\n{err}"


def cycle(envs: list[dict[str, str]], late: list[int], seed: int) -> None:
    argv = [sys.executable, str(WORKER), str(CYCLES), "--seed", str(seed),
            "--late", *map(str, late)]
    check(run_all([(argv, e) for e in envs], timeout=240))


@pytest.mark.parametrize("world,late", [(2, [1]), (3, [1]), (3, [0, 2])])
def test_env_rank0_hosting_reinit_cycles(world: int, late: list[int]) -> None:
    port = free_port()
    envs = [base_env({"RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), "DTCOMM_TIMEOUT": "60", "REINIT_ME": str(r)})
            for r in range(world)]
    cycle(envs, late, seed=world)


@pytest.mark.parametrize("world", [2, 3])
def test_slurm_variables_reinit_cycles(world: int) -> None:
    job = random.randrange(10**6, 10**7)
    envs = [base_env({
        "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r), "SLURM_NODEID": "0",
        "SLURM_NTASKS": str(world), "SLURM_STEP_ID": "0", "SLURM_JOB_ID": str(job),
        "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": str(world),
        "DTCOMM_TIMEOUT": "60", "REINIT_ME": str(r)}) for r in range(world)]
    cycle(envs, [1], seed=world + 10)


@pytest.mark.parametrize("world", [2, 3])
def test_native_server_reinit_cycles(native_server: NativeServer,  # noqa: F811
                                     world: int) -> None:
    job = f"reinit-{world}-{random.randrange(10**6)}"
    envs = [base_env(native_server.client_env(job, DTCOMM_RDZV_MEMBERS=str(world),
                                              DTCOMM_TIMEOUT="60", REINIT_ME=str(r)))
            for r in range(world)]
    cycle(envs, [1], seed=world + 20)


def test_rank0_that_never_reinits_is_named(tmp_path: Path) -> None:
    """A guest whose rank 0 does not init again fails within its deadline, saying so."""
    port = free_port()
    envs = [base_env({"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), "DTCOMM_TIMEOUT": "5"}) for r in range(2)]
    code = ("import numpy as np, dtcomm, os, time\n"
            "dtcomm.init(verbose=False); dtcomm.all_reduce(np.ones(2)); dtcomm.shutdown()\n"
            "if os.environ['RANK'] == '0': time.sleep(8)\n"
            "else: dtcomm.init(verbose=False)\n")
    (rc0, _, err0), (rc1, _, err1) = run_all([([sys.executable, "-c", code], e) for e in envs],
                                             timeout=60)
    assert rc0 == 0, err0
    assert rc1 != 0 and "rank 1" in err1 and f"127.0.0.1:{port}" in err1, err1


@pytest.mark.parametrize("world,init_method", [(2, "env://"), (3, "env://"), (2, "dtcomm://")])
def test_torch_backend_reinit_cycles(world: int, init_method: str) -> None:
    """``init_process_group("dtcomm")`` / ``destroy_process_group()`` cycles with rank 0
    hosting torch's own store (``env://``, as under ``mp.spawn``) or dtcomm's (``dtcomm://``):
    a rank that left first used to reach the old store at its next init."""
    pytest.importorskip("torch")
    port = free_port()
    envs = [base_env({"RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), "DTCOMM_TIMEOUT": "60"}) for r in range(world)]
    argv = [sys.executable, str(WORKERS / "torch_reinit_cycles.py"), str(CYCLES),
            "--init-method", init_method]
    check(run_all([(argv, e) for e in envs], timeout=240))
