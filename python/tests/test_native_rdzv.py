"""The native rendezvous from Python: `dtcomm.init()` joining a job on dt-rdzv's QUIC port
(plain and OCI-mapped), a wrong token refused, a job token opening its own job only,
`dt-rdzv stop` ending a job its members see, and `dtcomm.elastic.run` surviving a SIGKILLed
member with its state restored."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, base_env
import native_server as native_server_mod
from native_server import NativeServer, Procs, dt_rdzv_bin, native_server, procs  # noqa: F401 (fixtures)


def _job() -> str:
    return f"job-{uuid.uuid4().hex[:8]}"


def _results(procs: Procs, names: list[str]) -> list[tuple[int, int, int, int, int]]:
    out = []
    for n in names:
        m = re.search(r"^RESULT (\d+) (\d+) (\d+) (\d+) (\d+)$", procs.out(n), re.M)
        assert m, f"{n} printed no result\n{procs.dump()}"
        out.append(tuple(int(g) for g in m.groups()))
    return out  # type: ignore[return-value]


def test_init_three_members_allreduce(native_server: NativeServer, procs: Procs, tmp_path: Path) -> None:
    script = str(WORKERS / "native_init.py")
    job = _job()
    env = base_env(native_server.client_env(job, DTCOMM_RDZV_MEMBERS="3", DTCOMM_TIMEOUT="60"))
    names = [f"m{i}" for i in range(3)]
    for n in names:
        procs.start(n, [sys.executable, script], env)
    for n in names:
        assert procs.wait_exit(n, 120) == 0, procs.dump()
    res = _results(procs, names)
    assert sorted(r[0] for r in res) == [0, 1, 2]
    assert all(r[1] == 3 and r[3] == 3 and r[4] == 1 + 2 + 3 for r in res), res
    assert sorted(r[2] for r in res) == [0, 1, 2]  # one node: local ranks 0..2
    line = next(l for l in procs.out("m0").splitlines() if l.startswith("dtcomm: "))
    assert "native rendezvous" in line and f"job={job} (DTCOMM_RUN_ID)" in line, line
    assert "members=3 (DTCOMM_RDZV_MEMBERS)" in line, line


def test_init_oci_main_and_workers(native_server: NativeServer, procs: Procs, tmp_path: Path) -> None:
    """OCI__MODE / OCI__WORKER_COUNT / OCI__TIMEOUT / JOB_OCID mapped onto the native job: the
    main member is rank 0, the world is the workers plus the main."""
    script = str(WORKERS / "native_init.py")
    job = f"ocid1.datasciencejob.{uuid.uuid4().hex[:8]}"
    common = native_server.client_env(job, DTCOMM_TIMEOUT="60")
    del common["DTCOMM_RUN_ID"]
    common.update(OCI__WORKER_COUNT="2", OCI__TIMEOUT="120", JOB_OCID=job, OCI__EPHEMERAL="None")
    # the workers first: rank 0 still goes to the main member
    for n in ("w1", "w2"):
        procs.start(n, [sys.executable, script], base_env({**common, "OCI__MODE": "WORKER"}))
    procs.start("main", [sys.executable, script], base_env({**common, "OCI__MODE": "MAIN"}))
    for n in ("main", "w1", "w2"):
        assert procs.wait_exit(n, 120) == 0, procs.dump()
    res = dict(zip(("main", "w1", "w2"), _results(procs, ["main", "w1", "w2"])))
    assert res["main"][0] == 0
    assert sorted(r[0] for r in res.values()) == [0, 1, 2]
    assert all(r[1] == 3 and r[4] == 6 for r in res.values()), res
    line = next(l for l in procs.out("main").splitlines() if l.startswith("dtcomm: "))
    assert f"job={job} (JOB_OCID)" in line and "main=True (OCI__MODE)" in line, line
    assert "members=3 (OCI__WORKER_COUNT + 1 (main))" in line, line
    assert "join_timeout=120s (OCI__TIMEOUT)" in line, line


def test_wrong_token_refused(native_server: NativeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    c = dtcomm.NativeClient(native_server.native, "not-the-token",
                            fingerprint=native_server.fingerprint, timeout=20)
    with pytest.raises(dtcomm.RdzvRefusedError) as e:
        c.join("tok-job", "m1", "n1", min_members=1, max_members=1)
    assert e.value.code == "bad_token", e.value
    assert "tok-job" in str(e.value) and "m1" in str(e.value)
    # the same through dtcomm.init(): a clear error, nothing joined
    for k, v in native_server.client_env("tok-job", DTCOMM_RDZV_TOKEN="wrong").items():
        monkeypatch.setenv(k, v)
    for k in ("RANK", "WORLD_SIZE", "DTCOMM_RANK", "DTCOMM_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(dtcomm.RdzvRefusedError, match="tok-job") as e2:
        dtcomm.init(verbose=False)
    assert e2.value.code == "bad_token"
    assert not dtcomm.is_initialized()
    # a wrong fingerprint: the connection itself fails
    with pytest.raises(dtcomm.RdzvConnectError):
        dtcomm.NativeClient(native_server.native, native_server.token,
                            fingerprint="sha256:" + "00" * 32, timeout=10)


def test_job_token_opens_its_own_job_only(native_server: NativeServer,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    jt = dtcomm.job_token(native_server.token, "jt-own")
    assert jt.startswith("dtj1_") and jt == dtcomm.job_token(native_server.token, "jt-own")
    # dtcomm.init() with the job's own token: a world of one, formed and usable
    for k, v in native_server.client_env("jt-own", DTCOMM_RDZV_TOKEN=jt,
                                         DTCOMM_RDZV_MEMBERS="1").items():
        monkeypatch.setenv(k, v)
    for k in ("RANK", "WORLD_SIZE", "DTCOMM_RANK", "DTCOMM_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    dtcomm.init(verbose=False)
    try:
        assert (dtcomm.rank(), dtcomm.size()) == (0, 1)
    finally:
        dtcomm.shutdown()
    # another job: refused, naming it
    c = dtcomm.NativeClient(native_server.native, jt, fingerprint=native_server.fingerprint,
                            timeout=20)
    with pytest.raises(dtcomm.RdzvRefusedError, match="jt-other") as e:
        c.join("jt-other", "m1", "n1", min_members=1, max_members=1)
    assert e.value.code == "bad_token"
    with pytest.raises(ValueError):
        dtcomm.job_token("", "jt-own")


def test_training_goes_on_while_the_server_restarts(tmp_path: Path, procs: Procs) -> None:
    """SIGTERM to dt-rdzv mid-training, a new one on the same ports: the members reconnect,
    the new server rebuilds their round from their resumes, and no round changes."""
    tls = ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    server = native_server_mod.start(tmp_path, *tls)
    try:
        script = WORKERS / "native_restart.py"
        env = base_env(server.client_env("restart-job", DTCOMM_RDZV_MEMBERS="2", STEPS="80"))
        for n in ("a", "b"):
            procs.start(n, [sys.executable, str(script)], {**env, "DTCOMM_RDZV_MEMBER": n})
        procs.wait_for("training under way", lambda: all("STEP 10" in procs.out(n) for n in "ab"), 90)
        server = server.restart(tmp_path, *tls)
        for n in ("a", "b"):
            assert procs.wait_exit(n, 120) == 0, procs.dump()
            out = procs.out(n)
            assert "DONE" in out and "round 1 first 1" in out, out
        procs.wait_for("the new server to log the resumed round",
                       lambda: "resumed after a server restart" in server.log(), 10)
    finally:
        server.stop()


def test_training_goes_on_when_its_server_is_killed_and_another_takes_over(
        tmp_path: Path, procs: Procs) -> None:
    """Two servers (same certificate and token) in the members' endpoint list: SIGKILL the
    one they use mid-training (both members use the same one: they order the list by their
    job); they notice it went silent, rejoin through the other, which rebuilds their round from
    their resumes, and no round changes."""
    tls = ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    a = native_server_mod.start(tmp_path, *tls)
    b = native_server_mod.start(tmp_path, *tls, token=a.token, log_name="dt-rdzv-native-b.log")
    try:
        assert a.fingerprint == b.fingerprint
        script = WORKERS / "native_restart.py"
        env = base_env(a.client_env("failover-job", DTCOMM_RDZV_MEMBERS="2", STEPS="200"))
        env["DTCOMM_RDZV_ENDPOINT"] = f"{a.native},{b.native}"
        for n in ("a", "b"):
            procs.start(n, [sys.executable, str(script)], {**env, "DTCOMM_RDZV_MEMBER": n})
        procs.wait_for("training under way",
                       lambda: all("STEP 10" in procs.out(n) for n in "ab"), 90)
        formed = [s for s in (a, b) if "round complete" in s.log()]
        assert len(formed) == 1, "the members of one job meet on one server"
        used, other = (a, b) if formed[0] is a else (b, a)
        killed = time.monotonic()
        used.proc.kill()
        procs.wait_for("the other server to rebuild the round",
                       lambda: "resumed after a server restart" in other.log(), 30)
        print(f"failover: round rebuilt on the other server {time.monotonic() - killed:.2f} s "
              "after SIGKILL of the one in use")
        for n in ("a", "b"):
            assert procs.wait_exit(n, 120) == 0, procs.dump()
            out = procs.out(n)
            assert "DONE" in out and "round 1 first 1" in out, out
    finally:
        a.stop()
        b.stop()


def test_stop_ends_the_job(native_server: NativeServer, procs: Procs, tmp_path: Path) -> None:
    script = str(WORKERS / "native_stop.py")
    job = _job()
    env = base_env(native_server.client_env(job, DTCOMM_RDZV_MEMBERS="2", DTCOMM_TIMEOUT="60"))
    for n in ("a", "b"):
        procs.start(n, [sys.executable, script], env)
    procs.wait_for("both members joined",
                   lambda: all("JOINED" in procs.out(n) for n in ("a", "b")), 90)
    st = native_server.cli("status", job)
    assert st.returncode == 0 and "running" in st.stdout, st.stdout + st.stderr
    p = native_server.cli("stop", job, "--reason", "test says stop")
    assert p.returncode == 0, p.stdout + p.stderr
    for n in ("a", "b"):
        assert procs.wait_exit(n, 60) == 3, procs.dump()
        out = procs.out(n)
        assert "test says stop" in out, out
        assert f"JOBENDED stopped {job}" in out or (
            "ROUNDENDED removed" in out and f'job "{job}" ended: stopped' in out), out
    # later joins are refused, saying how the job ended
    c = dtcomm.NativeClient(native_server.native, native_server.token,
                            fingerprint=native_server.fingerprint, timeout=20)
    with pytest.raises((dtcomm.RdzvRefusedError, dtcomm.RdzvJobEndedError)) as e:
        c.join(job, "late", "n", min_members=2, max_members=2)
        c.wait_welcome(10)
    assert "stop" in str(e.value), e.value


def test_elastic_run_survives_a_sigkilled_member(
    native_server: NativeServer, procs: Procs, tmp_path: Path
) -> None:
    script = str(WORKERS / "native_elastic.py")
    job = _job()
    steps = 150
    env = base_env(native_server.client_env(
        job, DTCOMM_RDZV_MEMBERS="2:3", DTCOMM_RDZV_LAST_CALL="10", DTCOMM_TIMEOUT="60",
        STEPS=str(steps)))
    names = ["e0", "e1", "e2"]
    for n in names:
        procs.start(n, [sys.executable, script], env)

    def rank_of(n: str) -> int | None:
        m = re.findall(r"^STEP (\d+) rank (\d) world 3 ", procs.out(n), re.M)
        return int(m[-1][1]) if m and int(m[-1][0]) >= 5 else None

    procs.wait_for("all three members training in a round of 3",
                   lambda: all(rank_of(n) is not None for n in names), 120)
    ranks = {n: rank_of(n) for n in names}
    victim = next(n for n in names if ranks[n] == 1)
    procs.kill_group(victim)
    survivors = [n for n in names if n != victim]
    for n in survivors:
        assert procs.wait_exit(n, 150) == 0, procs.dump()
    done = {}
    for n in survivors:
        m = re.search(r"^DONE rank (\d) world (\d) steps (\d+) total (\d+)", procs.out(n), re.M)
        assert m, procs.dump()
        done[n] = tuple(int(g) for g in m.groups())
    # survivors: rank 0 kept 0, rank 2 took the freed 1; world 2
    assert {n: d[0] for n, d in done.items()} == {
        n: (0 if ranks[n] == 0 else 1) for n in survivors}, (ranks, done)
    assert all(d[1] == 2 and d[2] == steps for d in done.values()), done
    # the state went back to the last commit and was the same everywhere: every committed step
    # counted its world once, some with 3 members, the rest with 2
    totals = {d[3] for d in done.values()}
    assert len(totals) == 1, done
    with3 = totals.pop() - 2 * steps
    assert 1 <= with3 < steps, done
    for n in survivors:
        assert re.search(r"new round \d+ .*rank \d of 2", procs.out(n)), procs.out(n)


def _same_secret_then_a_new_one(a: str, b: str, procs: Procs, after: bool = False) -> None:
    """The agents handed their workers one DTCOMM_LINK_SECRET per round (derived from the job
    token and the round, so the workers' store never holds it); the survivor's next round
    got another."""
    sa = re.findall(r"LINKSECRET (\S+)", procs.out(a))
    sb = re.findall(r"LINKSECRET (\S+)", procs.out(b))
    assert sa and sb and sa[0] == sb[0] != "none" and len(sa[0]) == 16, (sa, sb)
    if after:
        assert len(sa) >= 2 and sa[-1] not in (sa[0], "none"), sa


def test_torchrun_two_agents_one_sigkilled(
    native_server: NativeServer, procs: Procs, tmp_path: Path
) -> None:
    """torchrun --rdzv-backend=dtcomm (the torchrun.handlers entry point): two agents train
    together; one agent and its worker are SIGKILLed; the survivor carries on alone in a new
    round and finishes."""
    script = str(WORKERS / "native_agent_worker.py")
    job = _job()
    env = base_env({"DTCOMM_RDZV_TOKEN": native_server.token, "DTCOMM_TIMEOUT": "60",
                    "PYTHONFAULTHANDLER": "1", "LOGLEVEL": "INFO"})
    conf = (f"fingerprint={native_server.fingerprint},store={native_server.store},"
            "last_call_timeout=10,join_timeout=120")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc-per-node=1",
           "--max-restarts=2", "--monitor-interval=0.5", "--rdzv-backend=dtcomm",
           f"--rdzv-endpoint={native_server.native}", f"--rdzv-id={job}", f"--rdzv-conf={conf}",
           "--local-addr=127.0.0.1", script]
    for n in ("A", "B"):
        procs.start(n, cmd, env)

    def group_in_two(n: str) -> int | None:
        m = re.findall(r"STEP (\d+) rank \d world 2 group (\d)", procs.out(n))
        return int(m[-1][1]) if m and int(m[-1][0]) >= 5 else None

    procs.wait_for("both agents' workers training in a world of 2",
                   lambda: all(group_in_two(n) is not None for n in ("A", "B")), 150)
    assert {group_in_two("A"), group_in_two("B")} == {0, 1}
    _same_secret_then_a_new_one("A", "B", procs)
    procs.kill_group("B")
    assert procs.wait_exit("A", 60) == 0, procs.dump()
    out = procs.out("A")
    assert re.search(r"STEP 20 rank 0 world 1 group 0", out) and "FINISHED alone" in out, out
    _same_secret_then_a_new_one("A", "B", procs, after=True)
    st = native_server.cli("status", job)
    assert st.returncode == 0, st.stderr
    # The agents' store was hosted by group rank 0's agent, not the server's TCPStore port:
    # nothing of the job is readable there without its token.
    keys = subprocess.run([dt_rdzv_bin(), "keys", "--endpoint", native_server.store],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "DTRDZV_TOKEN": native_server.token})
    assert keys.returncode == 0, keys.stderr
    leaked = [k for k in keys.stdout.splitlines() if job in k or "torchrun" in k]
    assert leaked == [], leaked


def test_dtrun_native_two_nodes_one_sigkilled(
    native_server: NativeServer, procs: Procs, tmp_path: Path
) -> None:
    """dtrun --rdzv-backend native: one member per node; a SIGKILLed dtrun (and its worker)
    ends the round, the surviving dtrun restarts its worker into the next round, alone."""
    script = str(WORKERS / "native_agent_worker.py")
    job = _job()
    env = base_env({**native_server.client_env(job, DTCOMM_RDZV_LAST_CALL="10"),
                    "DTCOMM_TIMEOUT": "60", "PYTHONFAULTHANDLER": "1"})
    del env["DTCOMM_RDZV_ENDPOINT"]
    cmd = [sys.executable, "-m", "dtcomm", "--rdzv-backend", "native", "--rdzv-endpoint",
           native_server.native, "--nnodes", "1:2", "--nproc-per-node", "1",
           "--max-restarts", "1", script]
    for n in ("A", "B"):
        procs.start(n, cmd, env)

    def group_in_two(n: str) -> int | None:
        m = re.findall(r"STEP (\d+) rank \d world 2 group (\d)", procs.out(n))
        return int(m[-1][1]) if m and int(m[-1][0]) >= 5 else None

    procs.wait_for("both nodes' workers training in a world of 2",
                   lambda: all(group_in_two(n) is not None for n in ("A", "B")), 120)
    survivor, victim = ("A", "B") if group_in_two("A") == 0 else ("B", "A")
    _same_secret_then_a_new_one(survivor, victim, procs)
    procs.kill_group(victim)
    for pid_line in re.findall(r"^\[dtrun\] worker pid (\d+)", procs.out(victim), re.M):
        try:
            os.kill(int(pid_line), signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert procs.wait_exit(survivor, 120) == 0, procs.dump()
    out = procs.out(survivor)
    assert re.search(r"STEP 20 rank 0 world 1 group 0", out) and "FINISHED alone" in out, out
    assert re.search(r"native rendezvous .* round \d+ \(member .* lost", out), out
    _same_secret_then_a_new_one(survivor, victim, procs, after=True)


def test_a_native_join_answers_sigint(
    native_server: NativeServer, procs: Procs, tmp_path: Path
) -> None:
    """The native member's wait for a round (the engine's, up to the join timeout) stops at
    Ctrl-C within a slice of it."""
    script = str(WORKERS / "native_sigint.py")
    env = base_env(native_server.client_env(_job(), DTCOMM_RDZV_MEMBERS="2",
                                            DTCOMM_TIMEOUT="60"))
    procs.start("m", [sys.executable, script], env, sigint_ignored=True)
    assert procs.wait_exit("m", 60) == 0, procs.dump()
    m = re.search(r"INTERRUPTED after ([\d.]+) s", procs.out("m"))
    assert m and float(m.group(1)) < 3.0, procs.out("m")
