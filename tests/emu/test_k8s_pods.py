"""Kubernetes pods emulated on two hosts (network namespaces of ``scripts/emu_cluster.sh``), with
the names a cluster's DNS would give them: ``dt-rdzv`` (the server's Service, on this host's
bridge), ``dtcomm-train`` (the training job's headless Service: both pods' addresses, pod 1's
first) and ``dtcomm-train-I.dtcomm-train`` (each pod).

* An Indexed Job's pods running ``python train.py`` with ``dtcomm.init()``: the rank from
  ``JOB_COMPLETION_INDEX``, the store at ``MASTER_ADDR=dtcomm-train``, a name whose first
  address is the pod that does not host it (the client tries each address).
* The Indexed Job manifest's own container command (``deploy/k8s/train-indexed-job.yaml``:
  ``dtrun`` on the native rendezvous at ``dt-rdzv``, the job's own token and the fingerprint from
  the job's Secret, ``deploy/make-secret.sh --job``) in each pod, against the server started as
  ``deploy/k8s/dt-rdzv.yaml``'s container, training ``examples/train_ddp.py`` across the hosts.

Skips without root, /dev/net/tun, iproute2, torch or openssl."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from emu_hosts import ROOT, emulated_hosts

sys.path.insert(0, str(ROOT / "tests" / "deploy"))
sys.path.insert(0, str(ROOT / "python" / "tests"))
from dtgroup import run_all  # noqa: E402
from test_manifests import (  # noqa: E402
    base_env,
    pods_of,
    ready_lines,
    resolve_env,
    start_container,
    the,
)

PY = sys.executable
HOSTS = ["10.77.0.1", "10.77.0.2"]
NAMES = {
    "dt-rdzv": ["10.77.0.254"],
    "dtcomm-train": [HOSTS[1], HOSTS[0]],
    **{f"dtcomm-train-{i}.dtcomm-train": [a] for i, a in enumerate(HOSTS)},
}


@pytest.fixture(scope="module")
def pods() -> Iterator[None]:
    pytest.importorskip("torch")
    with emulated_hosts(2, "10gbit", "50us", NAMES):
        yield


def in_pod(i: int, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", f"dtc-h{i}", *argv]


def test_indexed_job_pods_meet_at_a_headless_service_name(pods: None) -> None:
    port = str(random.randrange(20_000, 40_000))
    env = {**base_env(), "DTCOMM_WORLD_SIZE": "2", "MASTER_ADDR": "dtcomm-train",
           "MASTER_PORT": port, "DTCOMM_SOCKET_IFNAME": "eth0", "DTCOMM_TIMEOUT": "60",
           "PYTHONUNBUFFERED": "1"}
    task = str(ROOT / "python" / "tests" / "workers" / "slurm_task.py")
    got = run_all([(in_pod(i, [PY, task]), {**env, "JOB_COMPLETION_INDEX": str(i)})
                   for i in range(2)])
    out = "".join(o + e for _, o, e in got)
    assert all(rc == 0 for rc, _, _ in got), out
    results = sorted(re.findall(r"RESULT rank=(\d) world=(\d) local=\d sum=([\d.]+)", out))
    assert results == [("0", "2", "3"), ("1", "2", "3")], out
    assert "RDZV MASTER_ADDR, MASTER_PORT" in out, out


def test_the_indexed_job_manifest_trains_across_two_pods(pods: None, tmp_path: Path) -> None:
    """The manifests' own commands: the server's container on the bridge, then one ``dtrun`` per
    pod with the Indexed Job container's arguments and environment."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: deploy/make-secret.sh needs it")
    secret = tmp_path / "secret"
    subprocess.run(["bash", str(ROOT / "deploy" / "make-secret.sh"), str(secret)], check=True,
                   capture_output=True, text=True, timeout=60)
    job = the("train-indexed-job.yaml", "Job")
    # The job's own Secret beside the server's (test_manifests.resolve_env finds it by name).
    subprocess.run(["bash", str(ROOT / "deploy" / "make-secret.sh"), "--job",
                    job["metadata"]["name"], str(secret),
                    str(tmp_path / f"dt-rdzv-job-{job['metadata']['name']}")],
                   check=True, capture_output=True, text=True, timeout=60)
    server = the("dt-rdzv.yaml", "Deployment")["spec"]["template"]["spec"]
    binary = os.environ.get("DT_RDZV_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "dt-rdzv")
    log = tmp_path / "dt-rdzv.log"
    proc = start_container(binary, server, server["containers"][0], secret, log,
                           {"DTRDZV_HOST": "10.77.0.254"})
    try:
        native_port = ready_lines(proc, log)["native"].rsplit(":", 1)[1]
        spec = job["spec"]["template"]["spec"]
        c = spec["containers"][0]
        args = list(c["args"])
        endpoint = args[args.index("--rdzv-endpoint") + 1]
        assert endpoint.split(":")[0] == "dt-rdzv", endpoint
        args[args.index("--rdzv-endpoint") + 1] = f"dt-rdzv:{native_port}"
        args[-1] = str(ROOT / "examples" / "train_ddp.py")
        env = {**base_env(), **resolve_env(spec, c, secret, {
            "DTCOMM_RDZV_JOIN_TIMEOUT": "90", "DEMO_STEPS": "20",
            "DTCOMM_SOCKET_IFNAME": "eth0", "PYTHONUNBUFFERED": "1"})}
        got = run_all([(in_pod(i, [PY, "-m", "dtcomm", *args]),
                        {**env, "JOB_COMPLETION_INDEX": str(i)})
                       for i in range(pods_of(job))], timeout=240)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out = "\n---\n".join(o + e for _, o, e in got)
    assert all(rc == 0 for rc, _, _ in got), out + log.read_text()[-3000:]
    losses = [float(x) for x in re.findall(r"step +\d+ +loss ([\d.]+)", out)]
    assert len(losses) >= 2 and losses[-1] < losses[0], out
    assert "all_reduce 16 MiB float32 over dtcomm, world 2" in out, out
