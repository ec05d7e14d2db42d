"""A real Slurm for tests: Debian's ``munged``, ``slurmctld`` and ``slurmd`` (installed by
``scripts/setup.sh``), configured in a temporary directory, started by the test and stopped by
PID. One node on this host by default; or one ``slurmd`` per emulated host (a network namespace
of ``scripts/emu_cluster.sh``, entered with ``ip netns exec``), the controller on the bridge.
Each node declares 8 CPUs whatever the host has (``SlurmdParameters=config_overrides``), so
``srun -n 4`` runs oversubscribed on a 2-core VM. Skips, saying why, without the daemons or
without root (``slurmd`` launches tasks as their user)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pid(path: Path, deadline: float) -> int:
    while time.monotonic() < deadline:
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            time.sleep(0.05)
    raise RuntimeError(f"no pid file {path}")


def _stop(pid: int, timeout: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our child (slurmd -D): reaped
                return
        except ChildProcessError:  # a daemon that forked away: gone when kill finds none
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class Node:
    """A compute node: its Slurm name, the address its ``slurmd`` listens on, and the network
    namespace it runs in (``None``: this host's)."""

    name: str
    addr: str
    netns: str | None = None


@dataclass
class Slurm:
    """A running cluster: ``env`` points the client commands at it."""

    dir: Path
    nodes: list[Node]
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 180.0,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), env={**self.env, **(env or {})}, capture_output=True,
                              text=True, timeout=timeout)

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", *(f"slurmd-{n.name}.log" for n in self.nodes)):
            p = self.dir / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-30:]))
        return "\n".join(out)


def _enter(netns: str) -> list[str]:
    """The command prefix that runs in network namespace ``netns`` with its ``/etc/hosts``
    (``/etc/netns/NAME/hosts`` where one is, as ``ip netns exec`` mounts it). Not ``ip netns
    exec`` itself: that remounts ``/sys``, and ``slurmd`` then finds no cgroup hierarchy."""
    hosts = Path("/etc/netns") / netns / "hosts"
    prefix = ["nsenter", f"--net=/run/netns/{netns}"]
    if not hosts.exists():
        return prefix
    return [*prefix, "unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
            str(hosts)]


def start(tmp: Path, base_env: dict[str, str], nodes: list[Node] | None = None,
          ctld_addr: str = "127.0.0.1") -> tuple[Slurm, list[int]]:
    """Starts munge, the controller (on ``ctld_addr``) and a ``slurmd`` per node (default: one
    on this host); returns the cluster and the daemons' PIDs, to stop in reverse order."""
    host = socket.gethostname().split(".")[0]
    nodes = nodes or [Node(host, "127.0.0.1")]
    for d in ("state", "spool", "munge", *(f"tmpfs/{n.name}" for n in nodes)):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    key, sock = tmp / "munge" / "key", tmp / "munge" / "sock"
    subprocess.run(["mungekey", "-c", "-k", str(key), "-b", "1024"], check=True,
                   capture_output=True, timeout=30)
    key.chmod(0o600)
    pids: list[int] = []
    deadline = time.monotonic() + 30
    subprocess.run(["munged", f"--key-file={key}", f"--socket={sock}",
                    f"--pid-file={tmp / 'munge' / 'pid'}", f"--log-file={tmp / 'munge' / 'log'}",
                    f"--seed-file={tmp / 'munge' / 'seed'}", "--force"],
                   check=True, capture_output=True, timeout=30)
    pids.append(_pid(tmp / "munge" / "pid", deadline))
    conf = tmp / "slurm.conf"
    # Job ids start at a random number: the store port of a step derives from its job id, and
    # two clusters of parallel test workers numbering jobs from 1 would collide on it.
    nodelines = "\n".join(f"NodeName={n.name} NodeAddr={n.addr} CPUs=8 State=UNKNOWN"
                          for n in nodes)
    conf.write_text(f"""ClusterName=dtcomm
FirstJobId={random.randrange(1_000, 5_000_000)}
SlurmctldHost={host}({ctld_addr})
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={tmp / 'state'}
SlurmdSpoolDir={tmp / 'spool'}/%n
SlurmctldPidFile={tmp / 'slurmctld.pid'}
SlurmdPidFile={tmp / 'slurmd'}-%n.pid
TmpFS={tmp / 'tmpfs'}/%n
SlurmctldLogFile={tmp / 'slurmctld.log'}
SlurmdLogFile={tmp / 'slurmd'}-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MailProg=/bin/true
{nodelines}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    env = {**base_env, "SLURM_CONF": str(conf)}
    # -i: ignore any state a previous run left (the directory is fresh anyway).
    subprocess.run(["slurmctld", "-f", str(conf), "-i"], check=True, env=env,
                   capture_output=True, timeout=30)
    pids.append(_pid(tmp / "slurmctld.pid", deadline))
    for n in nodes:
        # -D: in the foreground, so the PID is the daemon's (every wrapper below execs).
        enter = _enter(n.netns) if n.netns else []
        d = subprocess.Popen([*enter, "slurmd", "-D", "-f", str(conf), "-N", n.name], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        pids.append(d.pid)
    slurm = Slurm(tmp, nodes, env)
    while time.monotonic() < deadline:
        p = slurm.run("sinfo", "-h", "-o", "%t", timeout=10)
        if p.returncode == 0 and set(p.stdout.split()) == {"idle"}:
            return slurm, pids
        time.sleep(0.2)
    for pid in reversed(pids):
        _stop(pid)
    raise RuntimeError(f"the Slurm nodes never became idle:\n{slurm.logs()}")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing; scripts/setup.sh "
                    "installs slurm-wlm and munge)")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to launch tasks")
    from dtgroup import base_env

    s, pids = start(tmp_path_factory.mktemp("slurm"), base_env())
    try:
        yield s
    finally:
        for pid in reversed(pids):
            _stop(pid)
