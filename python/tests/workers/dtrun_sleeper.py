"""Run by python/tests/test_dtrun_lifecycle.py under ``dtrun``: prints ``WORKER UP <pid>`` and
sleeps for 120 s (the test stops its agent and checks that this worker goes too)."""

from __future__ import annotations

import os
import time

print("WORKER UP", os.getpid(), flush=True)
time.sleep(120)
