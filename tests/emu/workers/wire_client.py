"""Run by tests/emu/test_emu_wire.py on emulated host 0 (``emu_cluster.sh exec 0``): connects
to ``wire_echo.py`` on 10.77.0.2:29398, measures 20 one-byte round trips, echoes 2 MiB of
random bytes; prints ``<min round trip in us> <True if the echo was intact>``."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time

for _ in range(200):
    try:
        c = socket.create_connection(("10.77.0.2", 29398), timeout=10)
        break
    except OSError:
        time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(20):
    t = time.perf_counter()
    c.sendall(b"x")
    assert c.recv(1) == b"x"
    rtts.append(time.perf_counter() - t)
data = os.urandom(2 << 20)
got = bytearray()
threading.Thread(target=c.sendall, args=(data,), daemon=True).start()
while len(got) < len(data):
    b = c.recv(1 << 16)
    assert b, "connection closed early"
    got += b
print(min(rtts) * 1e6, hashlib.sha256(data).hexdigest() == hashlib.sha256(got).hexdigest())
