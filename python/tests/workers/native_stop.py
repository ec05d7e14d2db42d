"""Run by python/tests/test_native_rdzv.py as each member of a native-rendezvous job that
``dt-rdzv stop`` ends: prints ``JOINED <rank>``, then runs barriers until the job ends and
prints ``JOBENDED <how> <job> | <message>`` (or ``ROUNDENDED [removed] | <message>`` when the
barrier in flight fails first) and exits 3; ``NOT STOPPED`` after 90 s without."""

from __future__ import annotations

import sys
import time

import dtcomm

dtcomm.init()
print("JOINED", dtcomm.rank(), flush=True)
deadline = time.monotonic() + 90
try:
    while time.monotonic() < deadline:
        dtcomm.barrier()
        dtcomm._api._round_changed()      # raises RdzvJobEndedError once the job is stopped
        time.sleep(0.1)
except dtcomm.RdzvJobEndedError as e:
    print("JOBENDED", e.how, e.job, "|", e, flush=True)
    sys.exit(3)
except dtcomm.RoundEndedError as e:      # the barrier in flight, failed by the server's word
    print("ROUNDENDED removed" if e.removed else "ROUNDENDED", "|", e, flush=True)
    sys.exit(3)
print("NOT STOPPED", flush=True)
