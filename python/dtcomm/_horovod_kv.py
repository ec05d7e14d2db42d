"""A store over the HTTP key-value server a real ``horovodrun --gloo`` starts for its workers
(``HOROVOD_GLOO_RENDEZVOUS_ADDR`` / ``_PORT``), so that ``dtcomm.init()`` (and ``hvd.init()``)
runs under it: ranks come from ``HOROVOD_RANK`` / ``HOROVOD_SIZE``, the addresses meet in the
launcher's server, in a scope of dtcomm's own.

Horovod's server (``horovod/runner/http/http_server.py``) stores ``PUT /<scope>/<key>`` bodies,
answers ``GET`` with the bytes or 404 while absent (clients poll), and ``DELETE`` drops one key
of a scope it does not manage. Keys are percent-encoded into one path segment. It has no atomic
increment: :meth:`HorovodKVStore.add` is a read and a write, which is enough for what dtcomm
adds there (counters each rank keeps under a key of its own).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from typing import Any

#: The scope dtcomm's keys live in (Horovod's own are ``global``, ``local_*``, ``cross_*``).
SCOPE = "dtcomm"
#: Between polls of an absent key (Horovod's clients poll every 10 ms).
POLL_S = 0.01


class HorovodKVStore:
    """The store interface ``Communicator.from_store`` calls, over Horovod's HTTP KV server."""

    def __init__(self, addr: str, port: int, timeout: float) -> None:
        host = f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr
        self.base = f"http://{host}:{port}/{SCOPE}/"
        self.timeout = timeout

    def _url(self, key: str) -> str:
        return self.base + urllib.parse.quote(key, safe="")

    def _request(self, method: str, key: str, body: bytes | None = None) -> bytes | None:
        """The answer's body, or None for a 404. Transport errors are retried 3 times, 500 ms
        apart, as Horovod's clients do."""
        req = urllib.request.Request(self._url(key), data=body, method=method)
        if body is not None:
            req.add_header("Content-Length", str(len(body)))
        last: Exception | None = None
        for attempt in range(4):
            try:
                with urllib.request.urlopen(req, timeout=max(1.0, min(self.timeout, 30.0))) as r:
                    return bytes(r.read())
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None
                raise RuntimeError(f"horovodrun's rendezvous server {self.base}: {method} "
                                   f"{key!r}: HTTP {e.code} {e.reason}") from None
            except OSError as e:
                last = e
                if attempt < 3:
                    time.sleep(0.5)
        raise RuntimeError(f"horovodrun's rendezvous server {self.base} does not answer "
                           f"({method} {key!r}): {last}")

    def set(self, key: str, value: bytes) -> None:
        self._request("PUT", key, bytes(value))

    def get(self, key: str) -> bytes:
        deadline = time.monotonic() + self.timeout
        while True:
            v = self._request("GET", key)
            if v is not None:
                return v
            if time.monotonic() >= deadline:
                raise TimeoutError(f"key {key!r} did not appear in horovodrun's rendezvous "
                                   f"server {self.base} within {self.timeout:.0f} s")
            time.sleep(POLL_S)

    def add(self, key: str, delta: int) -> int:
        cur = self._request("GET", key)
        n = int(cur.decode()) if cur else 0
        n += int(delta)
        self.set(key, str(n).encode())
        return n

    def check(self, keys: list[str]) -> bool:
        return all(self._request("GET", k) is not None for k in keys)

    def wait(self, keys: list[str], timeout: Any = None) -> None:
        t = timeout.total_seconds() if isinstance(timeout, timedelta) else self.timeout
        deadline = time.monotonic() + t
        missing = list(keys)
        while True:
            missing = [k for k in missing if self._request("GET", k) is None]
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"keys {missing} did not appear in horovodrun's rendezvous "
                                   f"server {self.base} within {t:.0f} s")
            time.sleep(POLL_S)

    def delete_key(self, key: str) -> bool:
        existed = self._request("GET", key) is not None
        self._request("DELETE", key)
        return existed

    def append(self, key: str, value: bytes) -> None:
        cur = self._request("GET", key) or b""
        self.set(key, cur + bytes(value))

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        raise NotImplementedError("horovodrun's rendezvous server has no compare-and-set")

    def num_keys(self) -> int:
        raise NotImplementedError("horovodrun's rendezvous server cannot count its keys")
