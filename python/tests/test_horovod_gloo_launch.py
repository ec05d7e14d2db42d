"""``hvd.init()`` under ``horovodrun --gloo``: the workers get ``HOROVOD_RANK``/``_SIZE``/... and
``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT`` (horovodrun's HTTP key-value server) and nothing
else, and meet through that server. Real Horovod 0.28.1 does not build against torch 2.15, so
the launcher is played here: its key-value server as ``horovod/runner/http/http_server.py``
behaves (PUT stores, GET answers 404 while a key is absent, DELETE drops a key of a scope it
does not manage, a malformed path is a 400), and the variables horovodrun sets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dtgroup import WORKERS, base_env

pytest.importorskip("torch")


class KVServer:
    """Horovod's rendezvous key-value server, as its source behaves."""

    def __init__(self) -> None:
        self.store: dict[str, dict[str, bytes]] = {}
        self.lock = threading.Lock()
        self.bad_paths: list[str] = []
        kv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def _parts(self) -> tuple[str, str] | None:
                paths = self.path.split("/")
                if len(paths) != 3:
                    kv.bad_paths.append(self.path)
                    self.send_error(400)
                    return None
                return paths[1], paths[2]

            def do_PUT(self) -> None:  # noqa: N802
                p = self._parts()
                if p is None:
                    return
                n = int(self.headers["Content-Length"])
                body = self.rfile.read(n)
                with kv.lock:
                    kv.store.setdefault(p[0], {})[p[1]] = body
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                p = self._parts()
                if p is None:
                    return
                with kv.lock:
                    v = kv.store.get(p[0], {}).get(p[1])
                if v is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(v)))
                self.end_headers()
                self.wfile.write(v)

            def do_DELETE(self) -> None:  # noqa: N802
                p = self._parts()
                if p is None:
                    return
                with kv.lock:
                    kv.store.get(p[0], {}).pop(p[1], None)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_hvd_init_meets_through_horovodruns_rendezvous_server() -> None:
    kv = KVServer()
    try:
        script = WORKERS / "hvd_gloo_launch.py"
        procs = []
        for r in range(2):
            env = base_env({
                "HOROVOD_RANK": str(r), "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": str(r),
                "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
                "HOROVOD_HOSTNAME": "localhost", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                "HOROVOD_GLOO_RENDEZVOUS_PORT": str(kv.port), "HOROVOD_CONTROLLER": "gloo",
                "HOROVOD_CPU_OPERATIONS": "gloo", "DTCOMM_TIMEOUT": "60",
            })
            procs.append(subprocess.Popen([sys.executable, str(script)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        outs = [p.communicate(timeout=120)[0] for p in procs]
        for r, (p, out) in enumerate(zip(procs, outs)):
            assert p.returncode == 0, f"rank {r}:\n{out}"
            assert f"ok dtcomm.horovod.torch {r}" in out, out
        # Everything dtcomm wrote lives in a scope of its own, keys in one path segment.
        assert set(kv.store) == {"dtcomm"}, kv.store.keys()
        assert any(re.search(r"addr%2F[01]$", k) for k in kv.store["dtcomm"]), kv.store
        assert kv.bad_paths == []
    finally:
        kv.close()


def test_a_silent_rendezvous_server_is_named(tmp_path: Path) -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = base_env({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2",
                    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                    "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port), "DTCOMM_TIMEOUT": "5"})
    p = subprocess.run([sys.executable, "-c", "import dtcomm; dtcomm.init()"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert f"127.0.0.1:{port}" in p.stderr and "does not answer" in p.stderr, p.stderr
