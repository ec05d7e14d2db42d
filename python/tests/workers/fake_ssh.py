"""A stand-in for ``ssh`` (python/tests/test_dtrun_hosts.py sets ``DTRUN_SSH`` to it):
``fake_ssh.py [-o OPTION | -FLAG]... HOST COMMAND`` appends ``HOST<TAB>COMMAND`` to the file
``FAKE_SSH_LOG`` names and runs COMMAND with ``sh -c`` on this machine, exiting its code.
Prints nothing of its own."""

from __future__ import annotations

import os
import subprocess
import sys

args = sys.argv[1:]
while args and args[0].startswith("-"):
    args = args[2:] if args[0] == "-o" else args[1:]
host, cmd = args[0], args[1]
with open(os.environ["FAKE_SSH_LOG"], "a") as f:
    f.write(host + "\t" + cmd + "\n")
sys.exit(subprocess.call(["sh", "-c", cmd]))
