"""Resolution of rank, world size, local rank and the rendezvous from launcher variables."""

from __future__ import annotations

from dtcomm._config import resolve


def test_precedence_explicit_then_dtcomm_then_torchrun_then_horovod_mpi_pmi() -> None:
    env = {
        "DTCOMM_RANK": "1", "DTCOMM_WORLD_SIZE": "4",
        "RANK": "2", "WORLD_SIZE": "8",
        "HOROVOD_RANK": "3", "HOROVOD_SIZE": "16",
        "OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "32",
        "PMI_RANK": "5", "PMI_SIZE": "64",
        "DTCOMM_RDZV_ENDPOINT": "h:1",
    }
    c = resolve(rank=0, world_size=2, env=env)
    assert (c.rank.value, c.rank.source, c.world_size.source) == (0, "explicit", "explicit")
    steps = [
        ("DTCOMM_RANK", 1, 4),
        ("RANK", 2, 8),
        ("HOROVOD_RANK", 3, 16),
        ("OMPI_COMM_WORLD_RANK", 4, 32),
        ("PMI_RANK", 5, 64),
    ]
    for var, r, w in steps:
        c = resolve(env=env)
        assert (c.rank.value, c.world_size.value, c.rank.source) == (r, w, var)
        size_var = {"DTCOMM_RANK": "DTCOMM_WORLD_SIZE", "RANK": "WORLD_SIZE"}.get(
            var, var.replace("RANK", "SIZE")
        )
        del env[var], env[size_var]
    c = resolve(env={})
    assert (c.rank.value, c.world_size.value, c.rank.source) == (0, 1, "default")


def test_endpoint_local_rank_run_id_and_store_host() -> None:
    env = {
        "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job7",
    }
    c = resolve(env=env)
    assert c.endpoint.value == "10.0.0.5:29500" and c.endpoint.source == "MASTER_ADDR, MASTER_PORT"
    assert (c.local_rank.value, c.local_size.value, c.local_size.source) == (0, 2, "LOCAL_WORLD_SIZE")
    assert (c.run_id.value, c.run_id.source) == ("job7", "TORCHELASTIC_RUN_ID")
    assert c.host_store.value is True  # rank 0 of env:// hosts, as torch's TCPStore does
    c = resolve(env={**env, "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert c.host_store.value is False
    c = resolve(env={**env, "DTCOMM_RDZV_ENDPOINT": "rdzv.local"})
    assert c.endpoint.value == "rdzv.local:29400" and c.host_store.value is False
    line = c.log_line()
    assert "rank=0 (RANK)" in line and "rdzv=rdzv.local:29400 (DTCOMM_RDZV_ENDPOINT)" in line
    c = resolve(env={"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                     "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                     "DTCOMM_RDZV_ENDPOINT": "[::1]:5"})
    assert (c.local_rank.value, c.local_rank.source) == (1, "OMPI_COMM_WORLD_LOCAL_RANK")
    assert c.endpoint.value == "[::1]:5"


def test_oci_main_hosts_and_workers_are_assigned() -> None:
    c = resolve(env={"OCI__MODE": "MAIN", "OCI__WORKER_COUNT": "3", "OCI__TIMEOUT": "60"})
    assert (c.rank.value, c.world_size.value) == (0, 4)
    assert c.host_store.value is True and c.endpoint.value == "0.0.0.0:29400"
    assert c.timeout.value == 60.0 and c.timeout.source == "OCI__TIMEOUT"
    c = resolve(env={"OCI__MODE": "WORKER", "OCI__WORKER_COUNT": "3",
                     "DTCOMM_RDZV_ENDPOINT": "main:29400"})
    assert c.rank.value is None and c.world_size.value == 4 and c.host_store.value is False


def test_the_setup_deadline_follows_horovodruns_gloo_timeout_unless_dtcomm_says() -> None:
    """``horovodrun --gloo-timeout-seconds`` (``HOROVOD_GLOO_TIMEOUT_SECONDS``: how long gloo
    waits for every rank to connect) sets dtcomm's set-up deadline; ``DTCOMM_SETUP_TIMEOUT``
    and an explicit timeout still win, and the call deadline is not touched. In a child: the
    engine reads its own environment."""
    import os
    import subprocess
    import sys

    code = ("from dtcomm import _dtcomm; import sys; "
            "print(_dtcomm.engine_setup_timeout(float(sys.argv[1]) if sys.argv[1] else None))")

    def setup(extra: dict[str, str], timeout: str = "") -> float:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DTCOMM_", "HOROVOD_"))}
        env.update(extra)
        out = subprocess.run([sys.executable, "-c", code, timeout], env=env, check=True,
                             capture_output=True, text=True, timeout=120)
        return float(out.stdout.strip())

    assert setup({}) == 300.0
    assert setup({"HOROVOD_GLOO_TIMEOUT_SECONDS": "2000"}) == 2000.0
    assert setup({"HOROVOD_GLOO_TIMEOUT_SECONDS": "2000", "DTCOMM_SETUP_TIMEOUT": "7"}) == 7.0
    assert setup({"HOROVOD_GLOO_TIMEOUT_SECONDS": "2000", "DTCOMM_TIMEOUT": "9"}) == 2000.0
    assert setup({"DTCOMM_TIMEOUT": "9"}) == 9.0
