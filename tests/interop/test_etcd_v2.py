"""`dt-rdzv serve --etcd-v2-port` against real etcd 3.4 (`--enable-v2`): the same requests
give the same answers (indexes relative to each server's start, children sorted, expiration
times left out), `python-etcd` works against both, and torch's `etcd` and `etcd-v2`
rendezvous backends run unchanged against dt-rdzv, twice with the same id."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etcd_servers import V2Server, door, etcd_binary, start_door, start_etcd  # noqa: F401 (fixture)

needs_etcd = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd not installed (scripts/setup.sh installs etcd-server)")


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[V2Server]:
    if etcd_binary() is None:
        pytest.skip("etcd not installed (scripts/setup.sh installs etcd-server)")
    s = start_etcd(tmp_path)
    try:
        yield s
    finally:
        s.stop()


Params = dict[str, Any]


def call(server: V2Server, method: str, path: str, params: Params | None = None,
         query: Params | None = None, timeout: float = 10,
         headers: dict[str, str] | None = None) -> tuple[int, int, Any]:
    """One request; (status, X-Etcd-Index, JSON body or text)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    q = dict(query or {})
    body = None
    hdrs = dict(headers or {})
    if method in ("PUT", "POST"):
        body = urllib.parse.urlencode(params or {})
        hdrs["Content-Type"] = "application/x-www-form-urlencoded"
    else:
        q.update(params or {})
    url = path + ("?" + urllib.parse.urlencode(q) if q else "")
    conn.request(method, url, body=body, headers=hdrs)
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = text
    return r.status, int(r.getheader("X-Etcd-Index") or 0), data


def normalize(value: Any, base: int) -> Any:
    """Indexes made relative to ``base``, expiration times out, children sorted."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "expiration":
                out[k] = "<time>"
            elif k == "ttl":
                out[k] = "<ttl>"
            elif k in ("modifiedIndex", "createdIndex", "index") and isinstance(v, int) and v:
                out[k] = v - base
            elif k == "key" and isinstance(v, str):
                # In-order keys are named by their absolute index.
                out[k] = re.sub(r"/(\d{20})$", lambda m: f"/<{int(m[1]) - base}>", v)
            elif k == "nodes":
                out[k] = sorted((normalize(n, base) for n in v), key=lambda n: n.get("key", ""))
            elif k == "cause" and isinstance(v, str):
                out[k] = re.sub(r"\[(\d+) != (\d+)\]",
                                lambda m: f"[{int(m[1]) - base} != {int(m[2]) - base}]", v)
            else:
                out[k] = normalize(v, base)
        return out
    return value


# (method, path, form/query params, query-only params); ("@", N) in a value stands for the
# modifiedIndex step N answered with, on each server.
SCRIPT: list[tuple[str, str, Params, Params]] = [
    ("GET", "/v2/keys/", {}, {}),
    ("PUT", "/v2/keys/a/b", {"value": "1"}, {}),
    ("PUT", "/v2/keys/a/b", {"value": "2", "prevExist": "false"}, {}),
    ("GET", "/v2/keys/a", {"recursive": "maybe"}, {}),
    ("PUT", "/v2/keys/a/c", {"value": "3", "ttl": "abc"}, {}),
    ("PUT", "/v2/keys/a/c", {"value": "3", "ttl": "100"}, {}),
    ("GET", "/v2/keys/a", {"recursive": "true", "sorted": "true"}, {}),
    ("GET", "/v2/keys/a", {}, {}),
    ("PUT", "/v2/keys/a/b", {"value": "9", "prevIndex": ("@", 1)}, {}),
    ("PUT", "/v2/keys/a/b", {"value": "9", "prevValue": "nope"}, {}),
    ("PUT", "/v2/keys/a/b", {"value": "9", "prevValue": "nope", "prevIndex": ("@", 1)}, {}),
    ("PUT", "/v2/keys/a/b", {"value": "10", "prevExist": "true"}, {}),
    ("PUT", "/v2/keys/zz", {"value": "1", "prevExist": "true"}, {}),
    ("PUT", "/v2/keys/a/c", {"ttl": "50", "refresh": "true", "prevExist": "true"}, {}),
    ("PUT", "/v2/keys/a/c", {"ttl": "50", "refresh": "true", "value": "3"}, {}),
    ("PUT", "/v2/keys/a/c", {"refresh": "true", "prevExist": "true"}, {}),
    ("DELETE", "/v2/keys/a", {}, {}),
    ("DELETE", "/v2/keys/a", {"dir": "true"}, {}),
    ("DELETE", "/v2/keys/a/b", {"prevValue": "zzz"}, {}),
    ("DELETE", "/v2/keys/a/b", {"prevIndex": ("@", 11)}, {}),
    ("PUT", "/v2/keys/d", {"dir": "true", "ttl": "30"}, {}),
    ("PUT", "/v2/keys/d", {"dir": "true", "prevExist": "false"}, {}),
    ("PUT", "/v2/keys/d", {"value": "1"}, {}),
    ("PUT", "/v2/keys/d", {"dir": "true", "prevExist": "true", "ttl": "20"}, {}),
    ("POST", "/v2/keys/q", {"value": "x"}, {}),
    ("POST", "/v2/keys/q", {"value": "y"}, {}),
    ("GET", "/v2/keys/q", {"recursive": "true"}, {}),
    ("DELETE", "/v2/keys/a", {"recursive": "true"}, {}),
    ("GET", "/v2/keys/a/b", {"wait": "true", "waitIndex": ("@", 1)}, {}),
    ("GET", "/v2/keys/a", {"wait": "true", "waitIndex": ("@", 5), "recursive": "true"}, {}),
    ("PUT", "/v2/keys/", {"value": "1"}, {}),
    ("PUT", "/v2/keys/f", {"value": "1"}, {}),
    ("PUT", "/v2/keys/f", {"dir": "true"}, {}),
    ("PUT", "/v2/keys/f/g", {"value": "1"}, {}),
    ("GET", "/v2/keys/f/g/h", {}, {}),
    ("PUT", "/v2/keys/f/g/h", {"value": "1"}, {}),
    ("PUT", "/v2/keys/n", {}, {}),
    ("PUT", "/v2/keys/n", {"value": "r"}, {"value": "q"}),
    ("GET", "/v2/keys/nope", {}, {}),
    ("DELETE", "/v2/keys/nope", {}, {}),
    ("PUT", "/v2/keys/p", {"value": "1", "prevValue": ""}, {}),
    ("GET", "/v2/keys/p", {"wait": "true", "waitIndex": "abc"}, {}),
    ("PUT", "/v2/keys/p", {"value": "1", "prevExist": "maybe"}, {}),
    ("PUT", "/v2/keys/_hidden", {"value": "h"}, {}),
    ("GET", "/v2/keys/_hidden", {}, {}),
    ("PUT", "/v2/keys/t", {"value": "1", "ttl": ""}, {}),
    ("PUT", "/v2/keys/d2", {"dir": "true"}, {}),
    ("DELETE", "/v2/keys/d2", {"dir": "true"}, {}),
    ("PUT", "/v2/keys/x/z/", {"value": "clean"}, {}),
    ("GET", "/v2/keys/x/z", {}, {}),
    ("PUT", "/v2/keys/u", {"value": "1", "unknownParam": "ignored"}, {}),
    ("GET", "/v2/keys/", {"recursive": "true"}, {}),
]


def run_script(server: V2Server) -> list[tuple[int, Any]]:
    _, base, _ = call(server, "GET", "/v2/keys/")
    answers: list[tuple[int, Any]] = []
    raw: list[Any] = []

    def resolve(p: Params) -> Params:
        out = {}
        for k, v in p.items():
            if isinstance(v, tuple):
                out[k] = str(raw[v[1]]["node"]["modifiedIndex"])
            else:
                out[k] = v
        return out

    for method, path, params, query in SCRIPT:
        status, index, data = call(server, method, path, resolve(params), query)
        raw.append(data)
        answers.append((status, normalize(data, base)))
    return answers


@needs_etcd
def test_same_answers_as_etcd(door: V2Server, etcd: V2Server) -> None:
    ours, theirs = run_script(door), run_script(etcd)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"step {step} {SCRIPT[step][:3]}:\n dt-rdzv {a}\n etcd    {b}"


def watch_then_write(server: V2Server) -> tuple[Any, Any]:
    """A recursive watch answered by a later write, and a watch answered by an expiry."""
    _, base, _ = call(server, "GET", "/v2/keys/")
    got: dict[str, Any] = {}

    def watch(name: str, path: str, **q: str) -> threading.Thread:
        def go() -> None:
            got[name] = call(server, "GET", path, {"wait": "true", **q}, timeout=20)
        t = threading.Thread(target=go)
        t.start()
        return t

    t1 = watch("dir", "/v2/keys/w", recursive="true")
    time.sleep(0.5)
    assert "dir" not in got, "a watch must wait for the next event"
    call(server, "PUT", "/v2/keys/w/x", {"value": "1", "ttl": "1"})
    t1.join(10)
    t2 = watch("expire", "/v2/keys/w/x")
    t2.join(10)
    assert not t1.is_alive() and not t2.is_alive()
    return normalize(got["dir"][2], base), normalize(got["expire"][2], base)


@needs_etcd
def test_watches_and_expiry_as_etcd(door: V2Server, etcd: V2Server) -> None:
    ours, theirs = watch_then_write(door), watch_then_write(etcd)
    assert ours == theirs
    assert ours[1]["action"] == "expire"


def test_python_etcd_client(door: V2Server) -> None:
    etcd = pytest.importorskip("etcd")
    c = etcd.Client(host=door.host, port=door.port, allow_reconnect=True, read_timeout=5)
    assert c.machines == [door.url]
    assert c.version
    c.write("/k", "v1")
    assert c.read("/k").value == "v1"
    r = c.read("/k")
    r.value = "v2"
    c.update(r)
    assert c.get("/k").value == "v2"
    with pytest.raises(etcd.EtcdCompareFailed):
        c.test_and_set("/k", "v3", "not-v2")
    c.test_and_set("/k", "v3", "v2")
    with pytest.raises(etcd.EtcdAlreadyExist):
        c.write("/k", "x", prevExist=False)
    with pytest.raises(etcd.EtcdKeyNotFound):
        c.read("/missing")
    c.write("/dir", None, dir=True, ttl=30)
    refreshed = c.refresh("/dir", ttl=60)
    assert refreshed.dir and 55 <= refreshed.ttl <= 60
    with pytest.raises(etcd.EtcdWatchTimedOut):
        c.watch("/k", timeout=0.3)
    index = c.read("/k").modifiedIndex
    t = threading.Timer(0.2, lambda: c.write("/k", "v4"))
    t.start()
    assert c.watch("/k", index=index + 1, timeout=5).value == "v4"
    c.write("/e", "gone", ttl=1)
    assert c.watch("/e", timeout=5).action == "expire"
    c.delete("/dir", dir=True)
    assert not c.read("/").leaves or "/dir" not in [n.key for n in c.read("/").leaves]


def test_token_required_when_set(tmp_path: Path) -> None:
    door = start_door(tmp_path, "--token", "s3cret")
    try:
        status, _, body = call(door, "GET", "/v2/keys/")
        assert status == 401 and body["errorCode"] == 110, body
        import base64
        basic = base64.b64encode(b"root:s3cret").decode()
        status, _, _ = call(door, "GET", "/v2/keys/", headers={"Authorization": f"Basic {basic}"})
        assert status == 200
        status, _, _ = call(door, "PUT", "/v2/keys/a", {"value": "1"},
                            headers={"Authorization": "Bearer s3cret"})
        assert status == 201
        status, _, _ = call(door, "GET", "/v2/keys/a", headers={"Authorization": "Bearer wrong"})
        assert status == 401
    finally:
        assert door.stop() == 0


def test_limits_and_bad_input(door: V2Server) -> None:
    status, _, body = call(door, "PUT", "/v2/keys/big", {"value": "x" * (3 << 19 | 1)})
    assert status == 400 and body["errorCode"] == 209 and "limit" in body["cause"], body
    status, _, body = call(door, "PUT", "/v2/keys/" + "k" * 9000, {"value": "1"})
    assert status == 400 and body["errorCode"] == 209, body
    status, _, body = call(door, "PATCH", "/v2/keys/x")
    assert status == 405
    # Nothing was stored by the refused writes, and the server still answers.
    status, _, body = call(door, "GET", "/v2/keys/", {"recursive": "true"})
    assert status == 200 and "nodes" not in body["node"], body
