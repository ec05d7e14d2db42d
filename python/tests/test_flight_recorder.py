"""The flight recorder from Python (``dtcomm.debug``): 3 ranks run collectives, rank 2 stops
calling, ranks 0 and 1 time out and dump their traces on the timeout
(``TORCH_FR_DUMP_ON_TIMEOUT``), rank 2 dumps its own (in a native round, on the server's ask;
under ``env://``, on the ask the others post to the store; in neither does it call anything);
torch's analyzer (``torchfrtrace``) reads the directory unmodified
and names rank 2. Also: torch's own recorder hook on a dtcomm
process group still records."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import native_server as native_server_mod
import pytest
from dtgroup import WORKERS, base_env, check, run_group, server  # noqa: F401 (fixture)
from native_server import Procs, procs  # noqa: F401 (fixture)

import dtcomm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_hang_is_dumped_in_flight_recorder_format_and_torchfrtrace_names_the_rank(
        tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    dumps = tmp_path / "fr"
    dumps.mkdir()
    prefix = str(dumps / "trace_")
    res = run_group(tmp_path, 3, WORKERS / "flight_hang.py", {
        "DTCOMM_RDZV_ENDPOINT": server.endpoint, "DTCOMM_TIMEOUT": "3", "DTCOMM_SETUP_TIMEOUT": "60",
        "TORCH_FR_DUMP_ON_TIMEOUT": "1", "TORCH_FR_DUMP_TEMP_FILE": prefix,
    }, timeout=90)
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
    check_dumps_and_torchfrtrace(tmp_path, dumps)


def test_in_a_native_round_the_rank_in_no_call_dumps_on_the_servers_ask(
        tmp_path: Path, procs: Procs) -> None:  # noqa: F811 (fixture)
    native = native_server_mod.start(tmp_path)
    try:
        dumps = tmp_path / "fr"
        dumps.mkdir()
        job = "fr-asked"
        env = base_env(native.client_env(
            job, DTCOMM_RDZV_MEMBERS="3", DTCOMM_TIMEOUT="3", DTCOMM_SETUP_TIMEOUT="60",
            TORCH_FR_DUMP_ON_TIMEOUT="1",
            TORCH_FR_DUMP_TEMP_FILE=str(dumps / "trace_"), FR_ASKED="1"))
        for i in range(3):
            procs.start(f"{job}-m{i}", [sys.executable, str(WORKERS / "flight_hang.py")], env)
        procs.wait_for("every member done",
                       lambda: all("ok " in procs.out(f"{job}-m{i}") for i in range(3)), 90)
        outs = [procs.out(f"{job}-m{i}") for i in range(3)]
        asked = [o for o in outs if "ok 2" in o]
        assert asked, outs
        # Rank 2's trace was written by its rendezvous session on rank 0's or 1's ask.
        assert "calls dumped to" in asked[0] and "asked: rank " in asked[0], asked[0]
    finally:
        native.stop()
    check_dumps_and_torchfrtrace(tmp_path, dumps)


def test_under_env_init_the_rank_in_no_call_dumps_on_an_ask_through_the_store(
        tmp_path: Path) -> None:
    """torchrun's or ``mp.spawn``'s job: no rendezvous session, so the ask goes through the
    store (torch's own TCPStore on rank 0 here, under torch's ``exception_dump`` key)."""
    pytest.importorskip("torch")
    dumps = tmp_path / "fr"
    dumps.mkdir()
    res = run_group(tmp_path, 3, WORKERS / "flight_store_asked.py", {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
        "DTCOMM_SETUP_TIMEOUT": "60", "TORCH_FR_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": str(dumps / "trace_"),
    }, timeout=120)
    check(res)
    assert all(f"ok {r.rank}" in r.out for r in res)
    # Rank 2's trace was written on rank 0's or 1's ask, which it read from the store.
    assert "calls dumped to" in res[2].out and " asked: " in res[2].out, res[2].out
    check_dumps_and_torchfrtrace(tmp_path, dumps)


def check_dumps_and_torchfrtrace(tmp_path: Path, dumps: Path) -> None:
    """Three dumps in Flight Recorder's format; torch's analyzer names rank 2."""
    assert sorted(os.listdir(dumps)) == ["trace_0", "trace_1", "trace_2"]
    for r in range(3):
        with open(dumps / f"trace_{r}", "rb") as f:
            d = pickle.load(f)
        assert d["version"] == "2.10"
        assert "0" in d["pg_config"] and d["pg_config"]["0"]["ranks"] == "[0, 1, 2]"
        seqs = [e["collective_seq_id"] for e in d["entries"]]
        assert seqs == list(range(1, len(seqs) + 1)), seqs
        status = d["pg_status"]["0"]
        assert status["last_completed_collective"] == 5, status
        assert status["last_enqueued_collective"] == (5 if r == 2 else 6), status
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(dumps),
         "--prefix", "trace_"],
        env=base_env(), capture_output=True, text=True, timeout=120)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    # torch's analyzer finds the all_reduce of seq 6 that ranks 0 and 1 entered and rank 2
    # did not, and names rank 2.
    assert "Not all ranks joining collective, sequence number: 6" in report, report
    assert "collective: dtcomm:all_reduce" in report, report
    assert "missing ranks: {2}" in report, report
    (tmp_path / "torchfrtrace.txt").write_text(report)


def test_torch_recorder_hook_on_a_dtcomm_group_still_records(tmp_path: Path,
                                                             server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 2, WORKERS / "flight_torch_hook.py", {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }, timeout=120)
    check(res)
    for r in res:
        if "skip:" in r.out:
            pytest.skip(r.out.split("skip:", 1)[1].strip())
        assert f"ok {r.rank}" in r.out, r.out


def test_torch_new_groups_are_recorded_as_themselves_with_global_ranks(
        tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 3, WORKERS / "flight_torch_groups.py", {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }, timeout=120)
    check(res)
    groups = {}
    for r in res:
        assert f"ok {r.rank}" in r.out, r.out
        for line in r.out.splitlines():
            if line.startswith("GROUPS "):
                _, rank, a, b = line.split()
                groups[int(rank)] = (a, b)
    # Both members derived the same two ids.
    assert set(groups) == {0, 2} and groups[0] == groups[2], groups
