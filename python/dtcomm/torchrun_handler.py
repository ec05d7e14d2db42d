"""torchrun's rendezvous on dt-rdzv's native protocol: ``--rdzv-backend=dtcomm``.

::

    dt-rdzv serve                      # prints its fingerprint and token
    torchrun --nnodes=1:4 --nproc-per-node=8 --max-restarts=3 \\
        --rdzv-backend=dtcomm --rdzv-endpoint=HOST:29401 --rdzv-id=job7 \\
        --rdzv-conf=fingerprint=sha256:...,token_file=/etc/dtrdzv/token train.py

Each agent (node) is a member of the native job ``--rdzv-id``: the server forms rounds of
``--nnodes=MIN:MAX`` agents, assigns group ranks (stable for survivors), and detects a lost
agent from its heartbeats in seconds. A round change (a lost or new agent) shows as
``num_nodes_waiting() > 0``, so healthy agents restart their workers into the next round
without spending a restart.

``--rdzv-conf`` keys (each also read from the ``DTCOMM_RDZV_*`` variable of ``dtcomm._native``):
``fingerprint``, ``cacert``, ``token``, ``token_file``, ``store`` (accepted for older command
lines; the agents' store no longer lives on the server), ``last_call_timeout`` (seconds, default
3), ``join_timeout`` (default 600), ``max_restarts`` (rounds the server may start because an
agent was lost).

The store handed to the agents is hosted by group rank 0's agent for each round (an embedded
dt-rdzv store, as torch's c10d handler's host agent does); its address travels through the
native protocol (configuration entry ``dtcomm.torchrun.store`` = ``"<round> <host:port>"``), so
nothing of the job is on the server's TCPStore port and ``dt-rdzv serve --no-tcpstore`` works.
The workers' bootstrap store (``MASTER_ADDR``/``MASTER_PORT``) is hosted by group rank 0's
first worker, as with torch's own handlers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from torch.distributed import PrefixStore, Store, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    RendezvousTimeoutError,
)
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

from . import _dtcomm, _native, _relay

BACKEND = "dtcomm"
#: Configuration entry group rank 0's agent publishes for every round: ``"<round> <host:port>"``
#: of the store it hosts for the agents.
STORE_KEY = "dtcomm.torchrun.store"


class DtcommRendezvousHandler(RendezvousHandler):
    """A ``RendezvousHandler`` whose rounds come from ``dt-rdzv serve``'s native port."""

    def __init__(self, params: RendezvousParameters) -> None:
        env = dict(os.environ)
        for key, var in (("token_file", "DTCOMM_RDZV_TOKEN_FILE"), ("store", "DTCOMM_RDZV_STORE"),
                         ("max_restarts", "DTCOMM_RDZV_MAX_RESTARTS")):
            if params.get(key) is not None:
                env[var] = str(params.get(key))
        lc = params.get("last_call_timeout")
        jt = params.get("join_timeout")
        self._settings = _native.settings(
            env,
            endpoint=params.endpoint,
            job=params.run_id,
            members=(params.min_nodes, params.max_nodes),
            token=params.get("token"),
            fingerprint=params.get("fingerprint"),
            cacert=params.get("cacert"),
            last_call=float(lc) if lc is not None else None,
            join_timeout=float(jt) if jt is not None else None,
        )
        self._local_addr = params.local_addr
        self._member: _native.Member | None = None
        self._handed: int = 0  # the round the agent's workers run in
        self._hosted: _dtcomm.RdzvServer | None = None  # this round's store, on group rank 0
        self._closed = False
        self._relay: _relay.Relay | None = None  # the workers' summaries, to the server

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        # Workers bootstrap on group rank 0's own store (MASTER_ADDR/PORT), not the agents'.
        return False

    def get_run_id(self) -> str:
        return self._settings.job.value

    def _fail(self, e: BaseException) -> Exception:
        if isinstance(e, _dtcomm.RdzvJobEndedError):
            self._closed = True
            return RendezvousClosedError(str(e))
        if isinstance(e, _dtcomm.RdzvTimeoutError):
            return RendezvousTimeoutError(str(e))
        return RendezvousConnectionError(str(e))

    def next_rendezvous(self) -> RendezvousInfo:
        """Joins (first call) or moves to the next round: the one the server started after a
        loss or a join, or, after a local failure the server did not see, one this agent asks
        for once the server had twice its heartbeat timeout to notice a loss."""
        if self._closed:
            raise RendezvousClosedError(f"job {self.get_run_id()!r} is closed")
        try:
            while True:
                if self._member is None:
                    self._member = _native.Member.join(self._settings)
                    ask = None
                else:
                    hb = self._member.welcome.heartbeat_timeout if self._member.welcome else 2.0
                    ask = 2 * hb + 1.0
                w = self._member.next_welcome(ask_after=ask)
                self._stop_hosted()
                try:
                    if w.rank == 0:
                        # Group rank 0's agent hosts this round's store (as torch's c10d
                        # handler's host does); its address travels over the native protocol,
                        # so nothing of the job is on the server's TCPStore port.
                        self._hosted = _dtcomm.RdzvServer(_native.own_ip(w), 0)
                        endpoint = self._hosted.endpoint
                        self._member.publish_round_value(STORE_KEY, endpoint)
                    else:
                        endpoint = self._member.round_value(
                            STORE_KEY, self._settings.join_timeout.value, "agents' store")
                except _native.RoundChanged:
                    continue
                break
        except (_dtcomm.RdzvError, _native.ConfigError) as e:
            raise self._fail(e) from e
        host, port = _native.split_host_port(endpoint, 0)
        tcp = TCPStore(host, port, is_master=False,
                       timeout=timedelta(seconds=self._settings.join_timeout.value))
        store: Store = PrefixStore(f"torchrun.{w.job}/r{w.round}", tcp)
        self._handed = w.round
        # torchrun starts the workers with this process's environment: their links prove the
        # job token and round, not just access to the workers' store (docs/doors.md).
        secret = _dtcomm.store_link_secret(self._settings.token.value or "", w.job, w.round)
        if secret is not None:
            os.environ["DTCOMM_LINK_SECRET"] = secret
        else:
            os.environ.pop("DTCOMM_LINK_SECRET", None)
        boot = RendezvousStoreInfo.build(w.rank, store, self._local_addr)
        self._relay = _relay.Relay(self._member, _workers_store(boot),
                                   _agent_ranks(store, w.rank, w.world))
        return RendezvousInfo(store, w.rank, w.world, boot)

    def _stop_hosted(self) -> None:
        if self._hosted is not None:
            self._hosted.stop()
            self._hosted = None

    def is_closed(self) -> bool:
        if self._member is not None and not self._closed:
            try:
                self._member.poll()
            except _dtcomm.RdzvJobEndedError:
                self._closed = True
        return self._closed

    def set_closed(self) -> None:
        """Ends the job for every agent (``Finish``); later joins are refused."""
        self._closed = True
        if self._member is not None:
            try:
                self._member.finish()
            except _dtcomm.RdzvError:
                pass

    def num_nodes_waiting(self) -> int:
        """Agents waiting for the next round: the server's count of pending joiners, or 1 when
        the server ended this agent's round (so torchrun restarts its workers)."""
        if self._member is None:
            return 0
        try:
            changed = self._member.poll()
        except _dtcomm.RdzvJobEndedError:
            self._closed = True
            return 0
        if changed:
            return max(1, self._member.waiting)
        # torch's agent asks this every monitor interval while its workers run: their
        # summaries go to the server from here (once a second).
        if self._relay is not None:
            self._relay.step()
        return self._member.waiting

    def shutdown(self) -> bool:
        """Leaves the job (the other agents, if any, get a new round)."""
        if self._member is not None:
            self._member.leave()
            self._member = None
        self._stop_hosted()
        return True


def _workers_store(boot: RendezvousStoreInfo) -> Callable[[], _dtcomm.StoreClient | None]:
    """Opens the workers' store (rank 0's first worker hosts it at ``boot``'s address), or
    ``None`` while it is not up."""
    def open_store() -> _dtcomm.StoreClient | None:
        try:
            return _dtcomm.StoreClient(f"{boot.master_addr}:{boot.master_port}", 0.5)
        except _dtcomm.DtcommError:
            return None
    return open_store


def _agent_ranks(store: Store, group_rank: int, agents: int) -> Callable[[int], list[int]]:
    """The global ranks of this agent's workers in a world of ``world``: torch's agents give
    each agent's workers consecutive ranks in the order of the agents' group ranks, as many as
    each agent starts (``--nproc-per-node``, which may differ between nodes). Torch's agents
    write what they settled in the agents' store (``store``: ``torchelastic/role_info/<g>``,
    each agent's worker count, and ``torchelastic/assigned_ranks/<g>``, its first rank and the
    world, which rank 0's agent writes), and those are read once present; with
    ``TORCH_ELASTIC_WORKER_IDENTICAL=1`` torch writes neither, and every agent starts as many
    workers."""
    found: list[int] = []

    def settled(world: int) -> list[int] | None:
        info = f"torchelastic/role_info/{group_rank}"
        assigned = f"torchelastic/assigned_ranks/{group_rank}"
        try:
            if not store.check([info, assigned]):
                return None
            base, total = json.loads(store.get(assigned))[:2]
            local = json.loads(store.get(info))["local_world_size"]
        except Exception:  # noqa: BLE001 (a store that fails or a torch that wrote otherwise)
            return None
        if not (isinstance(base, int) and isinstance(local, int) and total == world):
            return None
        return list(range(base, base + local))

    def ranks(world: int) -> list[int]:
        if found:
            return found
        mine = settled(world)
        if mine is not None:
            found[:] = mine
            return found
        per = world // agents if agents > 0 and world % agents == 0 else 0
        return list(range(group_rank * per, (group_rank + 1) * per))
    return ranks


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """The creator torch's registry calls with the parsed ``--rdzv-*`` arguments."""
    return DtcommRendezvousHandler(params)


def get_handler() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The ``torchrun.handlers`` entry point: torch calls it and registers what it returns."""
    return create_handler


__all__: list[Any] = ["DtcommRendezvousHandler", "create_handler", "get_handler"]
