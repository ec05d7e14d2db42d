"""Run by tests/emu/test_emu_wire.py on emulated host 1 (``emu_cluster.sh exec 1``): a TCP
echo server on port 29398 for one connection (60 s to accept). Prints nothing."""

from __future__ import annotations

import socket

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 29398))
s.listen(1)
s.settimeout(60)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (b := c.recv(1 << 16)):
    c.sendall(b)
