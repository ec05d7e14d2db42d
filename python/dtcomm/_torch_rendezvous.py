"""``init_process_group(backend, init_method="dtcomm://")``: torch's rendezvous by dtcomm's
launch rules, so a script needs no ``MASTER_ADDR`` under any launcher dtcomm knows.

torch's default ``env://`` needs ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``,
which torchrun sets and ``srun``, ``mpirun`` and OCI jobs do not. ``dtcomm://`` resolves rank and
world size as :func:`dtcomm.init` does (``dtcomm_launch``: ``DTCOMM_*``, torchrun, Horovod,
Open MPI / PMI, Slurm's ``SLURM_PROCID`` and node list, OCI), meets where those rules say (rank
0 of an ``srun`` step hosts a store on the first host of the step's node list, on a port every
task derives from the job and step ids; Open MPI's session directory; PMIx / PMI-1), and hands
torch a ``TCPStore`` client of that store. It works with any backend (``dtcomm``, ``gloo``,
``nccl``); the ``dtcomm`` backend's entry point registers it, so ``init_process_group("dtcomm",
init_method="dtcomm://")`` needs no ``import dtcomm``. Query arguments ``rank`` and
``world_size`` (torch adds them when passed to ``init_process_group``) win over the launcher.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

from . import _api, _config, _dtcomm

SCHEME = "dtcomm"

#: Stores this process hosts (rank 0's), kept for the process's life as torch's own are, by
#: the endpoint the launch rules gave: a later rendezvous at the same endpoint (a re-init after
#: ``destroy_process_group``) reuses it, and every rank meets there under its next generation.
_hosted: dict[str, _dtcomm.RdzvServer] = {}
#: Ports of the stores this process met at through ``dtcomm://``: they outlive a group, so the
#: torch backend's teardown does not wait for them to close.
met_ports: set[int] = set()


def handler(url: str, timeout: timedelta = timedelta(minutes=30),
            **kwargs: Any) -> Iterator[tuple[Any, int, int]]:
    """torch's rendezvous handler protocol: yields ``(store, rank, world_size)``."""
    from torch.distributed import PrefixStore, TCPStore

    query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    rank = int(query["rank"]) if "rank" in query else None
    world = int(query["world_size"]) if "world_size" in query else None
    cfg = _config.resolve(rank=rank if world is not None else None,
                          world_size=world if rank is not None else None)
    if cfg.native.value:
        raise _config.ConfigError(
            f"dtcomm:// with DTCOMM_RDZV_ENDPOINT on dt-rdzv's native port ({cfg.native.source}): "
            "the native rendezvous assigns ranks; use torchrun --rdzv-backend=dtcomm or "
            "dtcomm.init() instead")
    endpoint = cfg.endpoint.value
    if endpoint is not None and endpoint.startswith(_config.HOROVOD_KV):
        raise _config.ConfigError("dtcomm:// under horovodrun: use dtcomm.horovod's init()")
    wait = timeout.total_seconds()
    kept = _hosted.get(endpoint or "") if cfg.host_store.value else None
    if kept is not None:
        endpoint = endpoint or kept.endpoint
    else:
        asked = endpoint
        endpoint, server = _api.meet(cfg, wait)
        if server is not None:
            _hosted[asked or endpoint] = server
    host, port = _dtcomm.split_host_port(endpoint, _dtcomm.STORE_PORT)
    met_ports.add(port)
    store = TCPStore(host, port, is_master=False, timeout=timeout)
    base = f"{cfg.run_id.value}/torch"
    me = _api.rank_of(cfg, lambda key: store.add(key, 1), base)
    # The n-th rendezvous of every rank meets under generation n: an earlier process group's
    # keys (same run id, long-lived store) are never read.
    gen = store.add(f"{base}/gen/{me}", 1)
    _api._say(f"dtcomm:// rendezvous: {cfg.log_line()} store={endpoint} generation={gen}")
    yield PrefixStore(f"{base}/g{gen}", store), me, cfg.world_size.value
    raise RuntimeError("dtcomm:// does not support re-rendezvous (torch asked twice)")


def register() -> None:
    """Registers ``dtcomm://`` with torch (idempotent)."""
    from torch.distributed.rendezvous import register_rendezvous_handler

    try:
        register_rendezvous_handler(SCHEME, handler)
    except RuntimeError:
        pass  # registered already
