"""The C ABI resolves the launcher environment in Rust (``dtcomm::launch``); ``dtcomm.init()``
resolves it in Python (``dtcomm._config``). They must agree, value and source, on every
environment a launcher sets, and refuse the same bad ones."""

from __future__ import annotations

import pytest

from dtcomm import _config, _dtcomm

T = "torchrun"
CASES: list[tuple[str, dict[str, str], dict[str, object]]] = [
    ("nothing", {}, {}),
    ("dtcomm vars", {"DTCOMM_RANK": "1", "DTCOMM_WORLD_SIZE": "3", "DTCOMM_RDZV_ENDPOINT": "rdzv",
                     "DTCOMM_RUN_ID": "j", "RANK": "0", "WORLD_SIZE": "9"}, {}),
    (T, {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
         "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job7"}, {}),
    ("torchrun rank 1", {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "::1", "MASTER_PORT": "5"}, {}),
    ("agent store", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "5",
                     "TORCHELASTIC_USE_AGENT_STORE": "True"}, {}),
    ("horovod", {"HOROVOD_RANK": "2", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "0",
                 "HOROVOD_LOCAL_SIZE": "2", "DTCOMM_RDZV_ENDPOINT": "[::1]:7"}, {}),
    ("open mpi", {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                  "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                  "DTCOMM_RDZV_ENDPOINT": "h:29400"}, {}),
    ("mpirun on one host", {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                            "OMPI_MCA_orte_jobfam_session_dir": "/tmp/ompi.vm.0/pid.9"}, {}),
    ("mpirun 5 on one host", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                              "OMPI_COMM_WORLD_LOCAL_SIZE": "3", "PMIX_SERVER_TMPDIR": "/tmp/p"}, {}),
    ("mpirun across hosts", {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3",
                             "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
                             "PMIX_NAMESPACE": "1161560065", "PMIX_RANK": "2"}, {}),
    ("mpiexec.hydra", {"PMI_RANK": "1", "PMI_SIZE": "3", "PMI_FD": "6", "MPI_LOCALRANKID": "1",
                       "MPI_LOCALNRANKS": "3"}, {}),
    ("pmi", {"PMI_RANK": "0", "PMI_SIZE": "2", "DTCOMM_RDZV_ENDPOINT": "h:1", "DTCOMM_RDZV_HOST": "1"}, {}),
    ("oci main", {"OCI__MODE": "MAIN", "OCI__WORKER_COUNT": "3"}, {}),
    ("oci worker", {"OCI__MODE": "WORKER", "OCI__WORKER_COUNT": "3", "DTCOMM_RDZV_ENDPOINT": "m"}, {}),
    ("native", {"DTCOMM_RDZV_ENDPOINT": "rdzv:29401"}, {}),
    ("native pinned", {"DTCOMM_RDZV_ENDPOINT": "rdzv", "DTCOMM_RDZV_FINGERPRINT": "sha256:ab"}, {}),
    ("native under a launcher", {"DTCOMM_RDZV_ENDPOINT": "rdzv:29401", "RANK": "0", "WORLD_SIZE": "1"}, {}),
    ("explicit", {"RANK": "1", "WORLD_SIZE": "2", "DTCOMM_RUN_ID": "x"},
     {"rank": 0, "world_size": 3, "rdzv_endpoint": "e:9", "run_id": "r"}),
]
BAD: list[dict[str, str]] = [
    {"RANK": "1"},
    {"MASTER_ADDR": "h"},
    {"PMI_RANK": "x", "PMI_SIZE": "2"},
    {"RANK": "2", "WORLD_SIZE": "2"},
    {"RANK": "0", "WORLD_SIZE": "2"},
    {"DTCOMM_RDZV_ENDPOINT": "h:1", "DTCOMM_RDZV_BACKEND": "zk"},
    {"LOCAL_RANK": "0"},
    # mpirun across hosts with no endpoint (the hint names mpirun -x)
    {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
     "OMPI_MCA_orte_jobfam_session_dir": "/tmp/s"},
]


@pytest.mark.parametrize("name,env,explicit", CASES, ids=[c[0] for c in CASES])
def test_rust_and_python_resolve_launchers_alike(name: str, env: dict[str, str],
                                                 explicit: dict[str, object]) -> None:
    py = _config.resolve(env=env, **explicit)  # type: ignore[arg-type]
    rs = _dtcomm.resolve_launch(env, **explicit)  # type: ignore[arg-type]
    want = {
        "rank": (py.rank.value, py.rank.source),
        "world_size": (py.world_size.value, py.world_size.source),
        "local_rank": (py.local_rank.value, py.local_rank.source),
        "local_size": (py.local_size.value, py.local_size.source),
        "endpoint": (py.endpoint.value, py.endpoint.source),
        "run_id": (py.run_id.value, py.run_id.source),
        "host_store": (py.host_store.value, py.host_store.source),
        "native": (py.native.value, py.native.source),
    }
    assert rs == want


@pytest.mark.parametrize("env", BAD)
def test_rust_and_python_refuse_the_same_environments(env: dict[str, str]) -> None:
    with pytest.raises(_config.ConfigError) as py:
        _config.resolve(env=env)
    with pytest.raises(ValueError) as rs:
        _dtcomm.resolve_launch(env)
    assert str(rs.value) == str(py.value)
