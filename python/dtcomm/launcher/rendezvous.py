"""The node-level rendezvous of ``dtrun``: which node this is, and where the workers meet.

Single node: an embedded ``dt-rdzv`` server in this process (loopback, ephemeral port).
Several nodes: every ``dtrun`` connects to a running ``dt-rdzv serve`` (``--rdzv-endpoint``)
and takes a node rank from a counter under the run id. The counter also numbers *generations*:
the n-th group of N nodes to join a run id is generation n, and every key of that job lives
under ``dtrun.<run id>/g<n>/``, so a rerun with the same id never reads an earlier run's keys.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .. import _dtcomm


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
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"dtrun: --rdzv-endpoint {endpoint!r} is not host:port")
    return host.strip("[]"), int(port)


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
    return Rendezvous(endpoint, host, port, me, ns, server, store)
