"""The node-level rendezvous of ``dtrun``: which node this is, and where the workers meet.

Single node: an embedded ``dt-rdzv`` server in this process (loopback, ephemeral port).
Native (``--rdzv-backend native``, or an endpoint on port 29401 or with
``DTCOMM_RDZV_FINGERPRINT``): each ``dtrun`` is a member of a job on ``dt-rdzv serve``'s native
port; the server forms rounds of nodes (``--nnodes MIN:MAX``), and a lost or new node starts a
new round, into which every ``dtrun`` restarts its workers (``native_round``). Node 0's agent
hosts the round's store for the workers (torch's env://), like torchrun's agents do.

The workers' links prove membership with ``DTCOMM_LINK_SECRET`` where this agent can hand them
one nobody else knows: derived from the job token and round on a native job with a token, drawn
at random on a single node (the agent starts every worker). Elsewhere (several nodes on a
``dt-rdzv`` TCPStore without tokens) rank 0 publishes the secret in the store, which proves
only that a connector could read that store (``docs/doors.md``).

Several nodes: every ``dtrun`` connects to a running ``dt-rdzv serve`` (``--rdzv-endpoint``)
and takes a node rank from a counter under the run id. The counter also numbers *generations*:
the n-th group of N nodes to join a run id is generation n, and every key of that job lives
under ``dtrun.<run id>/g<n>/``, so a rerun with the same id never reads an earlier run's keys.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass

from .. import _dtcomm, _native


@dataclass
class Rendezvous:
    """Where this node's workers meet, and which node this is."""

    endpoint: str
    host: str
    port: int
    node_rank: int
    namespace: str
    server: _dtcomm.RdzvServer | None
    store: _dtcomm.StoreClient
    #: ``DTCOMM_LINK_SECRET`` for this round's workers (hex), where this agent has one.
    link_secret: str | None = None

    def fail(self, rank: int, code: int) -> None:
        """Tells the other nodes that a worker failed (they stop theirs)."""
        try:
            self.store.set(f"{self.namespace}/failed", f"{rank} {code}".encode())
        except _dtcomm.DtcommError:
            pass

    def failed_elsewhere(self) -> str | None:
        try:
            if self.store.check([f"{self.namespace}/failed"]):
                return self.store.get(f"{self.namespace}/failed", 5.0).decode()
        except _dtcomm.DtcommError:
            return None
        return None

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def _split(endpoint: str) -> tuple[str, int]:
    """``host:port`` (the port is not optional here)."""
    try:
        host, port = _dtcomm.split_host_port(endpoint, 0)
    except ValueError as e:
        raise SystemExit(f"dtrun: --rdzv-endpoint: {e}") from None
    if port == 0:
        raise SystemExit(f"dtrun: --rdzv-endpoint {endpoint!r} is not host:port")
    return host, port


def setup(
    nnodes: int,
    endpoint: str | None,
    run_id: str,
    node_rank: int | None,
    host_rdzv: bool,
    timeout: float,
) -> Rendezvous:
    server: _dtcomm.RdzvServer | None = None
    if endpoint is None:
        if nnodes > 1:
            raise SystemExit(
                f"dtrun: --nnodes {nnodes} needs --rdzv-endpoint host:port of a running "
                "`dt-rdzv serve` (or add --rdzv-host on one node to host it there)"
            )
        server = _dtcomm.RdzvServer("127.0.0.1", 0)
        endpoint = server.endpoint
    elif host_rdzv:
        _, port = _split(endpoint)
        server = _dtcomm.RdzvServer("::", port)
    host, port = _split(endpoint)
    try:
        store = _dtcomm.StoreClient(endpoint, timeout)
    except _dtcomm.DtcommError as e:
        raise SystemExit(f"dtrun: cannot reach the rendezvous at {endpoint}: {e}") from None
    base = f"dtrun.{run_id}"
    if nnodes == 1 and server is not None:
        gen, me = 1, 0
    else:
        n = store.add(f"{base}/joined", 1) - 1
        gen, me = n // nnodes + 1, n % nnodes
        if node_rank is not None:
            me = node_rank
        ns = f"{base}/g{gen}"
        store.add(f"{ns}/nodes", 1)
        # every node of this generation has joined: wait (bounded) for the last one's count
        store.set(f"{ns}/node/{me}", b"1")
        missing = [f"{ns}/node/{k}" for k in range(nnodes)]
        try:
            store.wait(missing, timeout)
        except _dtcomm.DtcommError:
            gone = [k for k in range(nnodes) if not store.check([f"{ns}/node/{k}"])]
            raise SystemExit(
                f"dtrun: node {me}: nodes {gone} did not join run {run_id!r} at {endpoint} "
                f"within {timeout:.0f}s"
            ) from None
    ns = f"{base}/g{gen}"
    print(
        f"[dtrun] rendezvous {endpoint} ({'embedded' if server else 'joined'}), run {run_id!r} "
        f"generation {gen}, node {me} of {nnodes}",
        file=sys.stderr,
        flush=True,
    )
    # A single node's agent starts every worker: a secret of its own keeps the loopback
    # store's readers (any local user) out of the links.
    own = secrets.token_hex(32) if nnodes == 1 and server is not None else None
    return Rendezvous(endpoint, host, port, me, ns, server, store, own)


def native_settings(
    endpoint: str, run_id: str | None, nnodes: str | None, timeout: float | None
) -> _native.Settings:
    """The native job of this node's ``dtrun``: one member per node (``--nnodes N`` or
    ``MIN:MAX``, else ``DTCOMM_RDZV_MEMBERS`` or the OCI variables), the rest as
    ``dtcomm._native`` resolves it (``DTCOMM_RDZV_TOKEN``, ``DTCOMM_RDZV_FINGERPRINT``, ...)."""
    members = _native.parse_members(nnodes, "--nnodes") if nnodes is not None else None
    try:
        return _native.settings(endpoint=endpoint, job=run_id, members=members,
                                join_timeout=timeout)
    except _native.ConfigError as e:
        raise SystemExit(f"dtrun: {e}") from None


#: Configuration entry node 0's agent publishes for every round: ``"<round> <host:port>"`` of
#: the store it hosts for the round's workers.
STORE_KEY = "dtrun.store"
#: How long node 0 keeps its store up for the other nodes' workers after its own finished.
EXIT_BARRIER_S = 30.0


def native_round(member: _native.Member, ask_after: float | None) -> Rendezvous:
    """The next round of the native job, as a :class:`Rendezvous` for the workers: node rank
    and node count from the server's welcome; the workers' store is hosted by node 0's agent
    for this round (its address travels through the native protocol, so the server's TCPStore
    port is not used: ``dt-rdzv serve --no-tcpstore`` works)."""
    while True:
        w = member.next_welcome(ask_after=ask_after)
        server: _dtcomm.RdzvServer | None = None
        try:
            if w.rank == 0:
                server = _dtcomm.RdzvServer(_native.own_ip(w), 0)
                endpoint = server.endpoint
                member.publish_round_value(STORE_KEY, endpoint)
            else:
                endpoint = member.round_value(STORE_KEY, member.settings.join_timeout.value,
                                              "workers' store")
        except _native.RoundChanged:
            if server is not None:
                server.stop()
            continue
        break
    prefix = f"dtrun.{w.job}/r{w.round}"
    host, port = _native.split_host_port(endpoint, 0)
    try:
        store = _dtcomm.StoreClient(endpoint, 60.0)
    except _dtcomm.DtcommError as e:
        if server is not None:
            server.stop()
        raise SystemExit(f"dtrun: {member.who}: cannot reach node 0's store at {endpoint}: "
                         f"{e}") from None
    print(
        f"[dtrun] native rendezvous {member.settings.endpoint.value}: job {w.job!r} round "
        f"{w.round} ({w.cause}), node {w.rank} of {w.world}; workers' store {endpoint} "
        f"({'hosted here' if server else 'on node 0'}) prefix {prefix}",
        file=sys.stderr,
        flush=True,
    )
    secret = _dtcomm.store_link_secret(member.settings.token.value or "", w.job, w.round)
    return Rendezvous(endpoint, host, port, w.rank, prefix, server, store, secret)


def finish(rdzv: Rendezvous, nnodes: int, ok: bool) -> None:
    """Ends this node's part of a round: a node whose workers succeeded says so and waits until
    every node said so (at most :data:`EXIT_BARRIER_S`, torchelastic's exit barrier), so that a
    node finishing first does not leave the job while another's workers still run (its leaving
    would end the round there and restart those workers); node 0 keeps the store it hosts up
    until then, then stops it. A node whose workers failed leaves at once."""
    try:
        if ok:
            rdzv.store.set(f"{rdzv.namespace}/done/{rdzv.node_rank}", b"1")
        if ok and nnodes > 1:
            keys = [f"{rdzv.namespace}/done/{k}" for k in range(nnodes)]
            try:
                rdzv.store.wait(keys, EXIT_BARRIER_S)
            except _dtcomm.DtcommError:
                pass
    except _dtcomm.DtcommError:
        pass
    finally:
        rdzv.close()

