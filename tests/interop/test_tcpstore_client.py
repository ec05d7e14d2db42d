"""Every method of torch's own TCPStore client, unmodified, against `dt-rdzv serve`."""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from conftest import RdzvServer  # noqa: E402


def client(rdzv: RdzvServer, timeout: float = 10.0, **kw: object) -> dist.TCPStore:
    return dist.TCPStore(
        rdzv.host, rdzv.port, is_master=False, timeout=timedelta(seconds=timeout), **kw
    )


def test_every_method(rdzv: RdzvServer) -> None:
    s = client(rdzv)
    s.set("k", b"v")
    assert s.get("k") == b"v"
    assert s.add("c", 5) == 5
    assert s.add("c", -2) == 3
    assert s.get("c") == b"3"
    assert s.add("c", 0) == 3
    assert s.check(["k", "c"])
    assert not s.check(["k", "zz"])
    assert s.compare_set("m1", b"", b"new") == b"new"
    assert s.compare_set("m2", b"x", b"new") == b"x"  # missing key: expected echoed
    assert s.compare_set("m1", b"new", b"newer") == b"newer"
    assert s.compare_set("m1", b"bogus", b"zzz") == b"newer"
    assert s.num_keys() == 3
    assert s.delete_key("k")
    assert not s.delete_key("k")
    s.append("a", b"x")
    s.append("a", b"y")
    assert s.get("a") == b"xy"
    s.multi_set(["p", "q"], [b"1", b"22"])
    assert s.multi_get(["p", "q"]) == [b"1", b"22"]
    assert sorted(s.list_keys()) == ["a", "c", "m1", "p", "q"]
    s.queue_push("qq", b"item1")
    s.queue_push("qq", b"item2")
    assert s.queue_len("qq") == 2
    assert s.queue_pop("qq", False) == b"item1"
    assert s.queue_pop("qq") == b"item2"
    assert s.queue_len("qq") == 0
    with pytest.raises(Exception, match="(?i)empty"):
        s.queue_pop("qq", False)
    s.set("empty", b"")
    assert s.get("empty") == b""
    s.wait(["p", "q"])
    s.wait(["p"], timedelta(seconds=1))
    s.barrier("bar", 1, timedelta(seconds=5))
    s2 = s.clone()
    assert s2.get("p") == b"1"


def test_wait_timeout_cancels_and_connection_stays_usable(rdzv: RdzvServer) -> None:
    s = client(rdzv)
    t0 = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="wait timeout"):
        s.wait(["never"], timedelta(milliseconds=300))
    assert time.monotonic() - t0 >= 0.29
    with pytest.raises(dist.DistStoreError):
        s.wait(["never2"], timedelta(milliseconds=100))
    s.set("after", b"1")
    assert s.get("after") == b"1"


def test_wait_released_by_other_client(rdzv: RdzvServer) -> None:
    waiter, setter = client(rdzv), client(rdzv)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(waiter.get("go")))
    t.start()
    time.sleep(0.2)
    assert t.is_alive()
    setter.set("go", b"now")
    t.join(10)
    assert got == [b"now"]


def test_blocking_queue_pop_released_by_push(rdzv: RdzvServer) -> None:
    popper, pusher = client(rdzv), client(rdzv)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(popper.queue_pop("jobs")))
    t.start()
    time.sleep(0.2)
    pusher.queue_push("jobs", b"task")
    t.join(10)
    assert got == [b"task"]


def test_two_client_barrier(rdzv: RdzvServer) -> None:
    a, b = client(rdzv), client(rdzv)
    done: list[str] = []
    t = threading.Thread(target=lambda: (a.barrier("b2", 2, timedelta(seconds=20)), done.append("a")))
    t.start()
    time.sleep(0.2)
    assert not done
    b.barrier("b2", 2, timedelta(seconds=20))
    t.join(10)
    assert done == ["a"]


def test_world_size_client_counts_itself(rdzv: RdzvServer) -> None:
    client(rdzv, world_size=2)
    s = client(rdzv)
    # torch's client adds 1 to the raw key "init/" when world_size is given
    assert s.num_keys() == 1
    assert s.list_keys() == []  # raw keys without "/" are hidden by the client


def test_size_limits(rdzv: RdzvServer) -> None:
    bystander = client(rdzv)
    bystander.set("safe", b"1")
    s = client(rdzv)
    s.set("big", b"x" * (8 * 1024 * 1024))  # 8 MiB exactly is accepted
    assert len(s.get("big")) == 8 * 1024 * 1024
    with pytest.raises(dist.DistNetworkError):
        s.set("too-big", b"x" * (9 * 1024 * 1024))
        s.get("safe")  # the server closed the connection; the next reply never comes
    assert bystander.get("safe") == b"1"
    assert not bystander.check(["too-big"])


def test_bad_add_closes_only_that_client(rdzv: RdzvServer) -> None:
    bystander = client(rdzv)
    s = client(rdzv)
    s.set("word", b"xyz")
    with pytest.raises(dist.DistNetworkError):
        s.add("word", 1)
    assert bystander.get("word") == b"xyz"


def test_silent_and_garbage_peers_do_not_disturb_clients(rdzv: RdzvServer) -> None:
    s = client(rdzv)
    silent = socket.create_connection((rdzv.host, rdzv.port))
    garbage = socket.create_connection((rdzv.host, rdzv.port))
    garbage.sendall(b"GET / HTTP/1.1\r\n\r\n")
    garbage.settimeout(10)
    assert garbage.recv(10) == b""  # closed: 'G' is not an opcode
    s.set("still", b"works")
    assert s.get("still") == b"works"
    silent.close()
    garbage.close()
    assert rdzv.wait_log("bad request: unknown opcode 0x47"), rdzv.log()
