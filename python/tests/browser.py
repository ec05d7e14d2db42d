"""Debian's chromium driven by Playwright (from PyPI, no browser download), for the tests of
the status page: one place that finds the binary and launches it headless."""

from __future__ import annotations

import shutil
import sys
import time
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (scripts/setup.sh installs it as root)")

#: Launches tried before a test fails: the browser itself has crashed at start-up (SIGSEGV
#: before its first page, with nothing of ours loaded yet) once in a CI run on a loaded VM.
TRIES = 3


def launch(pw: Any) -> Any:
    """A headless chromium; a browser that dies while starting is started again (each
    failure printed), up to ``TRIES`` times, so the test judges the page, not the start."""
    from playwright.sync_api import Error

    for attempt in range(1, TRIES + 1):
        try:
            return pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                      args=["--no-sandbox", "--disable-gpu"])
        except Error as e:
            if attempt == TRIES:
                raise
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"chromium failed to start (try {attempt} of {TRIES}): {first}",
                  file=sys.stderr, flush=True)
            time.sleep(1.0)
    raise AssertionError("unreachable")
