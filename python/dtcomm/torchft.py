"""dtcomm as torchft's process group: :class:`ProcessGroupDtcomm`.

A torchft user changes one class: ``Manager(pg=ProcessGroupDtcomm(), ...)`` where they had
``ProcessGroupGloo()``. Each quorum change reconfigures it (torchft's ``ProcessGroupWrapper``
contract: the old group is aborted, a new dtcomm communicator is built through the quorum's
store); its calls are dtcomm's (CPU tensors over shared memory and TCP; CUDA tensors through
dtcomm's device path where built).

Two things beyond gloo's group:

* ``abort()`` ends every call in flight at once (within 20 ms), not at its timeout.
* With its Lighthouse served by ``dt-rdzv serve --torchft-port`` (``TORCHFT_LIGHTHOUSE``), a
  background thread long-polls the door's ``/v1/torchft/watch``: when the Lighthouse declares a
  member of this group's quorum lost (its heartbeats stopped: a killed or frozen replica), the
  communicator is aborted naming it, so the survivors' collective fails within a second and
  the step is not committed, instead of blocking for torchft's collective timeout. Against
  another Lighthouse (torchft's own) the watch finds no such door and stays off.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from typing import Any

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torchft.process_group import ProcessGroupWrapper  # type: ignore[import-untyped]

from .torch_backend import DtcommBackend

log = logging.getLogger("dtcomm.torchft")

#: How long one watch request may park at the door (it answers earlier on a loss).
WATCH_POLL = timedelta(seconds=20)


class LighthouseWatch:
    """Waits at a dt-rdzv Lighthouse door for a member of ``replica``'s quorum (``quorum_id``)
    to stop heartbeating, then calls ``on_lost(why)`` once; stops when a later quorum formed.
    One per communicator; ``stop()`` ends it (the parked request is abandoned: the thread is a
    daemon and aborts nothing after)."""

    def __init__(self, lighthouse: str, replica: str, quorum_id: int | None, job: str | None,
                 on_lost: Any) -> None:
        base = lighthouse if "://" in lighthouse else f"http://{lighthouse}"
        q = {"replica": replica, "timeout_ms": str(int(WATCH_POLL.total_seconds() * 1000))}
        if quorum_id is not None:
            q["quorum_id"] = str(quorum_id)
        if job:
            q["job"] = job
        self.url = f"{base.rstrip('/')}/v1/torchft/watch?{urllib.parse.urlencode(q)}"
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dtcomm-torchft-watch",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _lost(self, why: str) -> None:
        log.warning("dtcomm.torchft: %s", why)
        try:
            self._on_lost(why)
        except Exception as e:  # noqa: BLE001 - the communicator was shut down meanwhile
            log.debug("dtcomm.torchft: abort after a loss: %s", e)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=WATCH_POLL.total_seconds() + 5) as r:
                    body = json.loads(r.read() or b"{}")
                failures = 0
            except urllib.error.HTTPError as e:
                if e.code in (404, 405, 501):
                    log.info("dtcomm.torchft: %s has no dt-rdzv watch door (HTTP %s); "
                             "losses are heard at the collective timeout", self.url, e.code)
                    return
                body = {}
                failures += 1
            except Exception as e:  # noqa: BLE001 - the door away, a reset, a bad answer
                log.debug("dtcomm.torchft: watch %s: %s", self.url, e)
                body = {}
                failures += 1
            log.debug("dtcomm.torchft: watch %s -> %s", self.url, body)
            if self._stop.is_set():
                return
            if body.get("state") == "stale":
                log.debug("dtcomm.torchft: watch %s: a later quorum formed", self.url)
                return  # this group is about to be reconfigured
            lost = body.get("lost") or []
            if lost:
                why = body.get("why") or "heartbeats stopped"
                self._lost(f"replica {', '.join(map(str, lost))} of quorum "
                           f"{body.get('quorum_id', '?')} was declared lost by the "
                           f"Lighthouse: {why}")
                return
            if failures:
                # The door is away (a fail-over, a restart): try again shortly.
                self._stop.wait(min(0.2 * failures, 2.0))


class ProcessGroupDtcomm(ProcessGroupWrapper):
    """torchft's reconfigurable process group over dtcomm (see the module docs).

    Args:
        timeout: each collective's and the set-up's deadline (torchft's meaning).
        lighthouse: the Lighthouse to watch for lost members (default ``TORCHFT_LIGHTHOUSE``);
            ``""`` turns the watch off.
        job: the job key of a Lighthouse shared by several jobs (default
            ``DTCOMM_TORCHFT_JOB``).
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60),
                 lighthouse: str | None = None, job: str | None = None) -> None:
        super().__init__(timeout=timeout)
        self._backend: DtcommBackend | None = None
        self._watch: LighthouseWatch | None = None
        self._lighthouse = (os.environ.get("TORCHFT_LIGHTHOUSE", "")
                            if lighthouse is None else lighthouse)
        self._job = job if job is not None else os.environ.get("DTCOMM_TORCHFT_JOB")
        self._aborted_by_us = False

    def _create_pg(self, store: Any, rank: int, world_size: int) -> BaseProcessGroup:
        pg = BaseProcessGroup(store, rank, world_size)
        backend = DtcommBackend(store, rank, world_size, self._timeout)
        comm = backend.communicator
        comm.arm_abort()
        custom = BaseProcessGroup.BackendType.CUSTOM
        pg._set_default_backend(custom)
        pg._register_backend(torch.device("cpu"), custom, backend)
        if torch.cuda.is_available():
            pg._register_backend(torch.device("cuda"), custom, backend)
        self._backend = backend
        self._aborted_by_us = False
        if self._lighthouse and world_size > 1:
            replica = self._replica_id or ""
            if replica:
                self._watch = LighthouseWatch(
                    self._lighthouse, replica, self._uuid, self._job,
                    lambda why, c=comm: c.abort(f"rank {rank}: {why}"))
        return pg

    def abort(self, errored: bool = True) -> None:
        """Ends every call in flight at once and drops the group (torchft calls it before
        each reconfiguration, and on errors)."""
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        b, self._backend = self._backend, None
        if b is not None:
            self._aborted_by_us = not errored
            try:
                b.communicator.abort("aborted by torchft" + (" after an error" if errored
                                                              else " to reconfigure"))
            except Exception:  # noqa: BLE001 - already shut down
                pass
            b.shutdown()
        super().abort(errored=errored)

    def shutdown(self) -> None:
        self.abort(errored=False)
        super().shutdown()

    def errored(self) -> Exception | None:
        """The error that failed the current communicator (a lost peer, a timeout, a lost
        replica the Lighthouse named) as a RuntimeError saying the group aborted, or None."""
        b = self._backend
        if b is None:
            return None
        try:
            f = b.communicator.failure()
        except Exception as e:  # noqa: BLE001 - a shut-down communicator
            return e
        if not isinstance(f, Exception):
            return None
        err = RuntimeError(f"dtcomm process group aborted: {f}")
        err.__cause__ = f
        return err

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "torchft-dtcomm"
