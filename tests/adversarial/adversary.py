"""Tools of the adversarial suite: a raw TCPStore speaker (what an attacker sends), a
well-behaved torch `TCPStore(is_master=False)` bystander doing set/get in a loop, and a
watcher of the server's resident memory (VmRSS in /proc/PID/status).

The bounds asserted here are the README's ("dt-rdzv serve: memory bounds")."""

from __future__ import annotations

import socket
import struct
import threading
import time
from datetime import timedelta
from types import TracebackType

import torch.distributed as dist

MiB = 1024 * 1024
#: torch's value limit (inclusive), and the server's.
VALUE_LIMIT = 8 * MiB
#: `--max-queued-reply-bytes`' default (2 x the value limit).
QUEUED_REPLY_BOUND = 2 * VALUE_LIMIT
#: What the debug server may hold before any attack (runtime, TLS, buffers), generously.
BASELINE_RSS = 96 * MiB

VALIDATE_MAGIC = 0x3C85F7CE
OP_VALIDATE, OP_SET, OP_GET, OP_APPEND, OP_MULTI_GET = 0, 1, 3, 9, 10


def _bytes(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def validate() -> bytes:
    return bytes([OP_VALIDATE]) + struct.pack("<I", VALIDATE_MAGIC)


def set_req(key: bytes, value: bytes) -> bytes:
    return bytes([OP_SET]) + _bytes(key) + _bytes(value)


def get_req(key: bytes) -> bytes:
    return bytes([OP_GET]) + _bytes(key)


def append_req(key: bytes, value: bytes) -> bytes:
    return bytes([OP_APPEND]) + _bytes(key) + _bytes(value)


def multi_get_req(keys: list[bytes]) -> bytes:
    return bytes([OP_MULTI_GET]) + struct.pack("<Q", len(keys)) + b"".join(map(_bytes, keys))


def discard(s: socket.socket, n: int) -> None:
    """Reads and drops ``n`` bytes."""
    buf = bytearray(4 * MiB)
    view = memoryview(buf)
    while n > 0:
        got = s.recv_into(view[: min(n, len(buf))])
        if not got:
            raise ConnectionError(f"closed with {n} bytes still owed")
        n -= got


def raw(host: str, port: int, timeout: float = 5.0) -> socket.socket:
    """A validated raw TCPStore connection."""
    s = socket.create_connection((host, port), timeout=timeout)
    s.sendall(validate())
    return s


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(min(n - len(out), 4 * MiB))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def get_value(s: socket.socket, key: bytes) -> bytes:
    s.sendall(get_req(key))
    (n,) = struct.unpack("<Q", recv_exact(s, 8))
    return recv_exact(s, n)


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    """Whether the server closes ``s`` within ``timeout`` (reading and dropping any bytes)."""
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not s.recv(1 << 16):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid``."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class RssWatch:
    """Samples a process's RSS every 20 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return

    def __enter__(self) -> RssWatch:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=5)
        self.peak = max(self.peak, rss_bytes(self.pid))


class Bystander:
    """A well-behaved torch client doing set/get in a loop beside the attack. ``worst`` is the
    longest single set or get (seconds); ``errors`` what went wrong; ``ops`` how many."""

    def __init__(self, host: str, port: int, name: str = "bystander") -> None:
        self.store = dist.TCPStore(host, port, is_master=False,
                                   timeout=timedelta(seconds=10))
        self.name = name
        self.worst = 0.0
        self.ops = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            key = f"{self.name}/k{i % 16}"
            value = f"v{i}".encode()
            try:
                t0 = time.monotonic()
                self.store.set(key, value)
                t1 = time.monotonic()
                got = self.store.get(key)
                t2 = time.monotonic()
            except Exception as e:  # noqa: BLE001 - any failure is what the test reports
                self.errors.append(f"op {i}: {e!r}")
                return
            if got != value:
                self.errors.append(f"op {i}: get {key} -> {got!r}, want {value!r}")
                return
            self.worst = max(self.worst, t1 - t0, t2 - t1)
            self.ops += 2
            i += 1
            time.sleep(0.005)

    def __enter__(self) -> Bystander:
        self._t.start()
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._t.join(timeout=15)

    def check(self) -> None:
        """Fails unless the bystander worked throughout without an error or a stall > 1 s."""
        assert not self._t.is_alive(), "bystander still running"
        assert not self.errors, f"bystander failed: {self.errors}"
        assert self.ops > 0, "bystander did nothing"
        assert self.worst < 1.0, f"bystander stalled {self.worst:.2f} s"
