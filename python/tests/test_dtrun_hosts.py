"""``dtrun -H host:slots,... -np N`` (horovodrun's placement): processes fill the hosts' slots in
order, one dtrun per host (this machine directly, the others through ``DTRUN_SSH``: here a
stand-in for ssh that records what it was asked and runs it on this machine), ranks numbered
host by host (hosts of different sizes), a failing host stops the job with its exit code, and
bad host lists are refused naming the entry."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dtcomm.launcher import hosts
from dtgroup import WORKERS

pytest.importorskip("torch")


def _run(tmp_path: Path, args: list[str], **env: str) -> tuple[subprocess.CompletedProcess[str], str]:
    script, ssh, log = WORKERS / "dtrun_hosts_hvd.py", WORKERS / "fake_ssh.py", tmp_path / "ssh.log"
    e = {k: v for k, v in os.environ.items() if not k.startswith(("DTCOMM_", "DTRUN_"))}
    e.update(FAKE_SSH_LOG=str(log), DTRUN_SSH=f"{sys.executable} {ssh} -o BatchMode=yes",
             DTCOMM_TIMEOUT="60", **env)
    p = subprocess.run([sys.executable, "-m", "dtcomm", "--horovod", *args, str(script)],
                       cwd=tmp_path, env=e, capture_output=True, text=True, timeout=180)
    return p, log.read_text() if log.exists() else ""


def test_processes_fill_the_slots_in_order_and_remote_hosts_go_through_ssh(tmp_path: Path) -> None:
    p, ssh_log = _run(tmp_path, ["-np", "3", "-H", "localhost:2,node-b:2,node-c:4"])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    got = sorted(re.findall(r"H (\d) (\d) (\d) (\d) (\d)", out))
    # (rank, size, local rank, local size, sum of ranks): 2 on localhost, 1 on node-b, node-c
    # unused.
    assert got == [("0", "3", "0", "2", "3"), ("1", "3", "1", "2", "3"),
                   ("2", "3", "0", "1", "3")], out
    lines = ssh_log.strip().splitlines()
    assert [l.split("\t")[0] for l in lines] == ["node-b"], ssh_log
    cmd = lines[0].split("\t")[1]
    assert cmd.startswith(f"cd {tmp_path} && env "), cmd
    for part in ("--node-rank 1", "--nproc-per-node 1", "--rank-offset 2", "--world-size 3",
                 "--horovod", "DTCOMM_TIMEOUT=60"):
        assert part in cmd, (part, cmd)
    assert "DTRUN_SSH" in cmd and "DTRUN_HOSTS" not in cmd, cmd


def test_a_failing_host_stops_the_job_with_its_exit_code(tmp_path: Path) -> None:
    p, _ = _run(tmp_path, ["-H", "localhost:1,node-b:1"], FAIL_RANK="1", FAIL_RANK_CODE="7")
    out = p.stdout + p.stderr
    assert p.returncode == 7, out
    assert "host node-b exited 7" in out, out


def test_bad_host_lists_are_refused_naming_the_entry() -> None:
    assert hosts.parse("a:2, b ,c:3") == [("a", 2), ("b", 1), ("c", 3)]
    for text, words in (("a:x", "slots 'x' is not a number"), ("a:0", "at least one slot"),
                        ("a:1,a:2", "host 'a' twice"), (",", "names no host")):
        with pytest.raises(SystemExit, match=re.escape(words)):
            hosts.parse(text)
    with pytest.raises(SystemExit, match=re.escape("-np 5 is more than the 4 slots")):
        hosts.place([("a", 2), ("b", 2)], 5)
    placed = hosts.place([("a", 1), ("b", 3), ("c", 2)], 3)
    assert [(h.name, h.procs, h.first) for h in placed] == [("a", 1, 0), ("b", 2, 1)]


def test_remote_hosts_reach_this_machine_by_name_when_it_holds_the_store() -> None:
    placed = hosts.place([("localhost", 1), ("node-b", 1)], None)
    local, remote = hosts.commands(placed, ["train.py"], "run", 29999)
    endpoint = local[local.index("--rdzv-endpoint") + 1]
    assert endpoint.startswith(socket.getfqdn() + ":"), endpoint
    assert "--rdzv-host" in local and f"--rdzv-endpoint {endpoint}" in remote[-1]
    all_here = hosts.commands(hosts.place([("localhost", 2)], None), ["t.py"], "r", 29999)
    assert "127.0.0.1:29999" in all_here[0]
