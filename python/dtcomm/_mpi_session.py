"""Meeting under ``mpirun`` on one host with no rendezvous endpoint set.

Open MPI gives every rank of a job on one host the same session directory (Open MPI 4:
``OMPI_MCA_orte_jobfam_session_dir``; 5: ``PMIX_SERVER_TMPDIR``), private to that ``mpirun`` and
removed when it ends. Rank 0 hosts a store on loopback and leaves its address there in a file
(written whole, then renamed into place); the others read it, polling until the deadline. Each
process numbers its own ``init()`` calls, so the n-th ``init()`` of every rank reads the n-th
address, never a store an earlier ``init()`` already shut down.

Across hosts there is no shared directory: the job's PMIx server (the one beside every rank of
an Open MPI job) carries rank 0's address instead, and under MPICH's Hydra its PMI-1 socket
does (``meet_mpi``, the engine's ``dtcomm::launch::mpi_hosts``).
"""

from __future__ import annotations

import os

from . import _dtcomm

_inits = 0


def meet(session: str, rank: int, run_id: str,
         timeout: float) -> tuple[str, _dtcomm.RdzvServer | None]:
    """Returns the store's ``host:port``, and the server when this rank (0) hosts it. The file
    and the wait are the engine's (``dtcomm::launch::mpi_session``, what the C ABI uses)."""
    global _inits
    _inits += 1
    if rank == 0:
        server = _dtcomm.RdzvServer("127.0.0.1", 0)
        _dtcomm.mpi_session_meet(session, 0, run_id, _inits, server.endpoint, timeout)
        return server.endpoint, server
    return _dtcomm.mpi_session_meet(session, rank, run_id, _inits, None, timeout), None


def meet_mpi(endpoint: str, rank: int, run_id: str, timeout: float,
             socket_ifname: str | None) -> tuple[str, _dtcomm.RdzvServer | None]:
    """Through the MPI process manager ``endpoint`` names (Open MPI's PMIx server across hosts,
    Hydra's PMI-1 socket): rank 0 hosts a store on the address its data plane advertises and
    passes ``host:port``; returns it, and the server when this rank hosts it."""
    global _inits
    _inits += 1
    if rank != 0:
        return _dtcomm.mpi_meet(endpoint, rank, run_id, _inits, None, timeout), None
    ifname = socket_ifname or os.environ.get("DTCOMM_SOCKET_IFNAME")
    server = _dtcomm.RdzvServer(_dtcomm.advertised_ip(ifname), 0)
    return _dtcomm.mpi_meet(endpoint, 0, run_id, _inits, server.endpoint, timeout), server
